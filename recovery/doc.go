// Package recovery takes over a journal when the supervisor starts: it opens
// the journal — wal.Open locks the directory first, so that no second
// process can own it, and then verifies the whole hash chain, cuts and keeps
// a torn tail, and refuses mid-log corruption — rebuilds the engine's state
// from every record, and finishes every saga a previous process left open —
// newest first, compensating in-doubt steps like applied ones — before the
// engine is handed to the caller. Nothing may serve commands before Open
// returns. Result.Close closes the engine, then the journal (which releases
// the lock).
package recovery

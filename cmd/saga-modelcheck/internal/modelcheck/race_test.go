//go:build race

package modelcheck

// The race detector slows the engine several times over: TestCheck takes a
// smaller bound under it (the full bound runs race-free in `make check`).
const raceEnabled = true

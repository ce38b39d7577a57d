package supervisor

import "time"

// FlushLanes journals and counts the refusals the lanes tallied so far,
// without waiting for the next interval (for external tests).
func FlushLanes(s *Supervisor) { s.lanes.Flush() }

// SetResetClock sets the clock of the HTTP reset rate limit (for external
// tests); call it before the first reset.
func SetResetClock(s *Supervisor, now func() time.Time) {
	s.resetLimit.mu.Lock()
	defer s.resetLimit.mu.Unlock()
	s.resetLimit.now = now
}

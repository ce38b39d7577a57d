package supervisor

// FlushLanes journals and counts the refusals the lanes tallied so far,
// without waiting for the next interval (for external tests).
func FlushLanes(s *Supervisor) { s.lanes.Flush() }

package serial

import "time"

// Freeze makes the link look as if its process had been stopped for d:
// the last valid frame from the MCU is moved d into the past, and nothing
// else runs meanwhile (the link's lock is held).
func (l *Link) Freeze(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastRx = l.lastRx.Add(-d)
}

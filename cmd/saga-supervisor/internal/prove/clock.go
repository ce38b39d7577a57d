package prove

import (
	"sync/atomic"
	"time"
)

// virtualClock is the time of one probe: it moves only when told, so limits
// measured over time (slew) and servo motion are the same on every run.
type virtualClock struct {
	base time.Time
	off  atomic.Int64
}

func (c *virtualClock) Now() time.Time          { return c.base.Add(time.Duration(c.off.Load())) }
func (c *virtualClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

package supervisor

import (
	"sync"
	"time"
)

// Failed HTTP resets (a wrong, missing or malformed token) are limited so
// that the operator token cannot be guessed at network speed. Within any
// ResetFailWindow, a client host may fail ResetFailsPerHost times and all
// hosts together ResetFailsTotal times; past that, every reset — even one
// with the right token, or the limit would not stop a guesser — is answered
// 429 with Retry-After until the oldest counted failure leaves the window.
// Successful resets and refusals for other reasons (a bad body, not ready)
// do not count, nor do the 429s themselves. Halt is never limited.
//
// The global limit bounds guessing from many addresses; it also means a
// flood of wrong tokens can keep a legitimate operator from resetting over
// HTTP for a while, which is the safe side: the robot stays halted.
const (
	ResetFailWindow   = time.Minute
	ResetFailsPerHost = 5
	ResetFailsTotal   = 30
)

// resetLimiter remembers the times of recent failed resets, per host and in
// total. Only failures inside the window are kept, and one is only recorded
// for an attempt that was admitted, so it holds at most ResetFailsTotal
// times however many hosts try.
type resetLimiter struct {
	mu     sync.Mutex
	now    func() time.Time
	total  []time.Time
	byHost map[string][]time.Time
}

func newResetLimiter() *resetLimiter {
	return &resetLimiter{now: time.Now, byHost: map[string][]time.Time{}}
}

// prune drops the failures that left the window.
func (l *resetLimiter) prune(now time.Time) {
	cut := now.Add(-ResetFailWindow)
	l.total = dropBefore(l.total, cut)
	for h, ts := range l.byHost {
		if ts = dropBefore(ts, cut); len(ts) == 0 {
			delete(l.byHost, h)
		} else {
			l.byHost[h] = ts
		}
	}
}

// dropBefore removes the leading times at or before cut (ts is in order).
func dropBefore(ts []time.Time, cut time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(cut) {
		i++
	}
	return ts[i:]
}

// begin admits a reset attempt from host, or refuses it while the host or
// everyone is over the limit, saying for how long (until enough of the
// failures that fill the limit leave the window). An admitted attempt is
// counted as a failure at once, so that concurrent guesses cannot all pass
// the check before any of them is recorded; refund takes it back when the
// attempt turns out not to be a failed authorisation.
func (l *resetLimiter) begin(host string) (at time.Time, ok bool, retry time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	var until time.Time
	if ts := l.byHost[host]; len(ts) >= ResetFailsPerHost {
		until = ts[len(ts)-ResetFailsPerHost].Add(ResetFailWindow)
	}
	if len(l.total) >= ResetFailsTotal {
		if u := l.total[len(l.total)-ResetFailsTotal].Add(ResetFailWindow); u.After(until) {
			until = u
		}
	}
	if !until.IsZero() {
		return time.Time{}, false, until.Sub(now)
	}
	l.total = append(l.total, now)
	l.byHost[host] = append(l.byHost[host], now)
	return now, true, 0
}

// refund removes the attempt begin counted at at: the reset succeeded or
// was refused for something other than its token.
func (l *resetLimiter) refund(host string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total = removeTime(l.total, at)
	if ts := removeTime(l.byHost[host], at); len(ts) == 0 {
		delete(l.byHost, host)
	} else {
		l.byHost[host] = ts
	}
}

// removeTime removes one occurrence of t from ts.
func removeTime(ts []time.Time, t time.Time) []time.Time {
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].Equal(t) {
			return append(ts[:i], ts[i+1:]...)
		}
	}
	return ts
}

// note counts a failed attempt that was not admitted by begin — a halt
// with a wrong bearer token, which is never refused for the limit (a halt
// is never limited) but must not be a free guess either: it tightens the
// limit for the resets, logins and reads that follow. Nothing is recorded
// while the host or everyone is already over the limit, so the lists stay
// bounded as begin keeps them.
func (l *resetLimiter) note(host string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.prune(now)
	if len(l.byHost[host]) >= ResetFailsPerHost || len(l.total) >= ResetFailsTotal {
		return
	}
	l.total = append(l.total, now)
	l.byHost[host] = append(l.byHost[host], now)
}

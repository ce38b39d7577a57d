// Package systemd speaks the sd_notify protocol for the daemon the way a
// supervisor of actuators must: the watchdog is fed only while the
// supervisor makes progress, so a hung one is restarted, and start-up is
// extended (EXTEND_TIMEOUT_USEC) only while recovery makes progress, so a
// long recovery is not killed half way and a stuck one is.
package systemd

import (
	"fmt"
	"log/slog"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
)

// Notify sends one sd_notify state line, such as "WATCHDOG=1".
type Notify func(state string) error

// Socket sends to $NOTIFY_SOCKET; outside systemd it does nothing.
func Socket(state string) error {
	_, err := sdnotify.SdNotify(false, state)
	return err
}

// States the daemon sends.
const (
	Ready    = sdnotify.SdNotifyReady
	Stopping = sdnotify.SdNotifyStopping
	Watchdog = sdnotify.SdNotifyWatchdog
)

// WatchdogInterval is the unit's WatchdogSec (0: none), from
// $WATCHDOG_USEC.
func WatchdogInterval() time.Duration {
	d, err := sdnotify.SdWatchdogEnabled(false)
	if err != nil {
		return 0
	}
	return d
}

// Feed sends WATCHDOG=1 every tick while alive returns nil. While it
// returns an error the watchdog is not fed, and systemd restarts the
// daemon once WatchdogSec passes; the error is logged when it starts and
// when it changes. Stop ends the feeding.
func Feed(notify Notify, tick time.Duration, alive func() error, lg *slog.Logger) (stop func()) {
	last := ""
	return every(tick, func() {
		if err := alive(); err != nil {
			if err.Error() != last {
				lg.Error("watchdog not fed: the supervisor is not making progress", "err", err)
				last = err.Error()
			}
			return
		}
		if last != "" {
			lg.Info("watchdog fed again: the supervisor is making progress")
			last = ""
		}
		notify(Watchdog)
	})
}

// Extend sends EXTEND_TIMEOUT_USEC=by every tick in which progress() has
// moved since the tick before: a recovery that reads and unwinds keeps
// start-up alive past TimeoutStartSec, one that stopped lets it expire.
// Stop ends the extending.
func Extend(notify Notify, tick, by time.Duration, progress func() uint64) (stop func()) {
	seen := progress()
	return every(tick, func() {
		if now := progress(); now != seen {
			seen = now
			notify(fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d", by.Microseconds()))
		}
	})
}

// every calls fn every tick on a goroutine of its own until stop, which
// returns once fn is no longer running.
func every(tick time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done); <-ended }
}

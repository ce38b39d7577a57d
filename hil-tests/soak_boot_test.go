//go:build !saga_lean

package hil

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The boot-time faults (issue 30): a part missing while the supervisor
// starts. The supervisor is killed (SIGKILL: a crash, the board's
// watchdog sends the outputs safe), the part is taken away, the
// supervisor is started without it and left so for a while, then the part
// comes back. Start-up may wait for the part (the broker: the HTTP server
// starts once the MQTT transport has), so while it is missing the soak
// asks for nothing but checks what must hold: the supervisor does not
// exit, and if HTTP answers it says not ready. Once the part is back the
// supervisor must be ready, or halted awaiting an operator, within
// settleBound (runFault), and every check after a fault runs: the board,
// the status, the journal and the retained state agree, nothing moved
// that the journal does not explain, a halt latched until the reset.

// bootOutage is how long a part stays missing after the supervisor was
// started without it.
func (s *soak) bootOutage() time.Duration { return s.between(2*time.Second, 12*time.Second) }

// brokerDownAtBoot: the broker goes (gracefully or killed) while the
// supervisor is down, and comes back while it starts.
func brokerDownAtBoot(s *soak, k *faultKind) time.Time {
	s.stopDaemon(k, syscall.SIGKILL, true)
	s.waitSessionEnd(k)
	how := "stopped"
	if s.rng.IntN(2) == 0 {
		s.r.mosq.stop()
	} else {
		how = "killed"
		s.r.mosq.crash()
	}
	out := s.bootOutage()
	s.startDaemon()
	s.logf("  the broker %s; the supervisor started without it, for %v", how, out.Round(100*time.Millisecond))
	s.whileMissing(k, "the broker", out)
	removed := time.Now()
	s.r.mosq.start()
	s.keep(s.r.mosq.p)
	return removed
}

// mcuAbsentAtBoot: the board's port is gone (its device node removed, as
// a USB serial adapter unplugged) and the board cut off (its watchdog
// keeps the outputs safe) while the supervisor is down; it starts without
// them; then the port comes back and the cable is replugged.
func mcuAbsentAtBoot(s *soak, k *faultKind) time.Time {
	ctx := context.Background()
	s.stopDaemon(k, syscall.SIGKILL, true)
	s.waitSessionEnd(k)
	port := filepath.Join(s.r.workDir, "ttyHost") // newSimRig's pty link
	away := port + ".absent"
	s.check(s.r.rb.Unplug(ctx))
	s.check(os.Rename(port, away))
	out := s.bootOutage()
	s.startDaemon()
	s.logf("  the port %s gone and the board cut off; the supervisor started without them, for %v", filepath.Base(port), out.Round(100*time.Millisecond))
	s.whileMissing(k, "the board's port", out)
	removed := time.Now()
	s.check(os.Rename(away, port))
	s.check(s.r.rb.Replug(ctx))
	return removed
}

// whileMissing watches the supervisor for d while part is missing: it must
// not exit, and whenever HTTP answers it must not say ready. A halt it
// reports must latch: haltedMissing makes runFault require the supervisor
// still halted once the part is back, until the soak's reset. It logs how
// HTTP answered: the full status, or the start-up handler's 503 while the
// journal is recovered.
func (s *soak) whileMissing(k *faultKind, part string, d time.Duration) {
	client := &http.Client{Timeout: time.Second}
	var answered, starting, asked int
	var last string
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s.r.sup.exited() {
			s.violate(k, "the supervisor exited while %s was missing: %v; its log: %s", part, s.r.sup.cmd.ProcessState, tail(s.r.sup.out.String(), 2000))
			return
		}
		asked++
		st, code := statusCode(client, "http://"+s.r.plan.HTTP+"/api/v1/status")
		if code == http.StatusServiceUnavailable && !st.Ready {
			starting++ // the start-up handler: recovering, the boards waited for
		}
		if code == http.StatusOK {
			answered++
			last = fmt.Sprintf("ready %v, halted %v, reasons %q", st.Ready, st.Halted, st.Reasons)
			if st.Ready {
				s.violate(k, "the status says ready while %s is missing: %s", part, last)
				return
			}
			if st.Halted {
				s.haltedMissing = st.HaltReason
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if answered == 0 {
		s.logf("  HTTP gave no full status while %s was missing (%d tries; %d answered by the start-up handler)", part, asked, starting)
	} else {
		s.logf("  HTTP answered %d of %d tries while %s was missing (and %d by the start-up handler); last: %s", answered, asked, part, starting, last)
	}
}

// statusWith reads the status with client; ok is false if it did not
// answer 200 with one.
func statusWith(client *http.Client, url string) (st supStatus, ok bool) {
	st, code := statusCode(client, url)
	return st, code == http.StatusOK
}

// statusCode reads the status with client: its HTTP code, 0 if it did not
// answer with one. While the journal is recovered (and the boards waited
// for) the start-up handler answers 503 with what it knows.
func statusCode(client *http.Client, url string) (st supStatus, code int) {
	resp, err := client.Get(url)
	if err != nil {
		return st, 0
	}
	defer resp.Body.Close()
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return st, 0
	}
	return st, resp.StatusCode
}

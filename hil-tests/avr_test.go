//go:build !saga_lean

package hil

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	avrrig "github.com/saga-supervisor/saga-supervisor/firmware/rig"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// The AVR scenarios: the faults a bench shows, on the firmware in simavr,
// checked at its pins (docs/HIL.md, "The emulated AVR rig"). They run only
// on the AVR profile (make hil-avr); `make hil` leaves them out. Each ends
// with the audit every scenario on the rig gets (avrAudit).

func avrOnly(t *testing.T) {
	t.Helper()
	if !avrMode {
		t.Skip("an AVR rig scenario: HIL_RIG=avr (make hil-avr) runs it")
	}
}

// avrChannelNamed is the pin map's channel of actuator name.
func (r *rig) avrChannelNamed(name string) avrChannel {
	r.t.Helper()
	for ch, n := range r.avr.names {
		if n == name {
			return avrPinMap[ch]
		}
	}
	r.t.Fatalf("no channel for %s", name)
	return avrChannel{}
}

// waitChannels waits until the pins show every named actuator (the
// digital ones too, which the plan does not test) at its value.
func (r *rig) waitChannels(what string, want map[string]float64) {
	r.t.Helper()
	var last string
	deadline := time.Now().Add(r.file.ReadBack.Settle)
	for {
		st, err := r.avr.state(context.Background())
		if err != nil {
			r.t.Fatal(err)
		}
		var bad []string
		for name, v := range want {
			c := r.avrChannelNamed(name)
			if o := st.Outputs[c.Channel]; math.Abs(o.Value-v) > c.Tolerance || o.Detached {
				bad = append(bad, fmt.Sprintf("%s %g (inert %v), want %g", name, o.Value, o.Detached, v))
			}
		}
		if last = strings.Join(bad, "; "); last == "" {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the pins did not settle within %v: %s", what, r.file.ReadBack.Settle, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// safeValues maps every actuator on the board to its safe value.
func (r *rig) safeValues() map[string]float64 {
	m := map[string]float64{}
	for _, name := range r.avr.names {
		m[name] = r.avr.cfg.Actuators[name].Safe.Value
	}
	return m
}

// avrReachedSafe returns, for every channel, the first event since cycle
// from that shows its safe value, and its cycle (0: none yet).
func (r *rig) avrReachedSafe(h avrrig.History, from uint64, hz float64) map[string]uint64 {
	at := map[string]uint64{}
	for _, c := range avrPinMap {
		name := r.avr.names[c.Channel]
		safe := r.avr.cfg.Actuators[name].Safe.Value
		for _, e := range avrEvents(h, c.Pin) {
			if v, inert, ok := c.eventValue(hz, e); ok && !inert && e.Cycle >= from && math.Abs(v-safe) <= c.Tolerance {
				at[name] = e.Cycle
				break
			}
		}
	}
	return at
}

// untilReady waits for the supervisor to come back ready; a halt in the
// way is reset with the operator token, as an operator would.
func (r *rig) untilReady(what string) {
	r.t.Helper()
	waitFor(r.t, what, 30*time.Second, func() bool {
		if ready, _ := r.readyz(); ready {
			return true
		}
		return r.status().Halted
	})
	if r.status().Halted {
		r.t.Logf("%s: halted (%s): resetting", what, r.status().HaltReason)
		r.resetUntilReady()
	}
	r.waitReady()
}

// The MCU is reset (its reset button, or a brown-out) mid-saga. It
// restarts with its outputs at their power-on (safe) values; the host sees
// RESET, starts a new session and adopts what the board holds (journaled
// as OBSERVED); the saga stays open, and aborting it drives the output
// back to the prior its step recorded.
func TestAVRResetMidSaga(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	a := r.plan.Actuators[0]
	r.setup()
	ctl := r.newAgent(r.agentName("reset"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	moved := r.poses(setupPose)
	moved[a.Name] = at(a.Move)
	r.waitOutputs("a saga holds "+a.Name+" moved", moved)

	since := r.avrPins().Cycle
	r.check(r.avr.rig.Reset(ctx, 0))
	r.waitOutputs("the reset puts every output at its power-on value", r.poses(safe))
	// Ready on what the pins show: /readyz is refreshed every poll (100
	// ms), so for a moment after the reset it may still say ready while the
	// supervisor adopts, one record at a time, what the board reports.
	if stale := r.waitTrueBelief("after the MCU's reset"); stale != "" {
		t.Logf("after the MCU's reset, /readyz said ready while the status and the pins differed for %s", stale)
	}
	if c, _ := r.status().commanded(a.Name); c != a.Safe.Value {
		t.Fatalf("after the MCU's reset: %s commanded %g, want its power-on value %g", a.Name, c, a.Safe.Value)
	}
	st := r.status()
	if len(st.OpenSagas) != 1 || st.OpenSagas[0] != saga {
		t.Fatalf("after the MCU's reset: open sagas %v, want [%d]", st.OpenSagas, saga)
	}
	h := r.avrHistory(since)
	if h.LastReset != "external" {
		t.Errorf("the rig's last reset: %q", h.LastReset)
	}
	r.checkBelief("after the MCU's reset")
	rep := ctl.must(map[string]any{"op": "abort", "saga": saga, "reason": "hil: the board restarted"})
	r.checkCleanReport("abort after the MCU's reset", rep.Report, saga, []string{a.Name})
	back := r.poses(safe)
	back[a.Name] = at(a.Setup)
	r.waitOutputs("the abort drives it back to its prior", back)
}

// The host goes silent (the supervisor stopped with SIGSTOP: its port
// stays open, nothing is sent). The firmware's watchdog must put every
// output at its safe value within its max_duration of the last valid frame
// it received — measured at the pins, for each output (a servo: at the
// first pulse of the safe width, up to one 20 ms frame later).
func TestAVRHostSilent(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	r.setup()
	ctl := r.newAgent(r.agentName("silent"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	moved := map[string]float64{}
	for _, a := range r.plan.Actuators {
		r.stepTo(ctl, saga, a, a.Move)
		moved[a.Name] = a.Move
	}
	for _, name := range []string{"lamp", "relay"} {
		if rep := ctl.step(saga, name, 1); !rep.OK {
			t.Fatalf("step %s=1: %s %s", name, rep.Code, rep.Message)
		}
		moved[name] = 1
	}
	r.waitChannels("every output moved", moved)

	since := r.avrPins().Cycle
	r.sup.cmd.Process.Signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			r.sup.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	r.waitChannels("the firmware's watchdog", r.safeValues())
	p := r.avrPins()
	h := r.avrHistory(since)
	last := p.Link.LastFrameToMCUCycle
	maxDur := 500 * time.Millisecond
	if p.Link.HelloAck != nil {
		maxDur = time.Duration(p.Link.HelloAck.MaxDurationMS) * time.Millisecond
	}
	var lines []string
	for name, c := range r.avrReachedSafe(h, last, float64(p.Hz)) {
		trip := time.Duration(float64(c-last) / float64(p.Hz) * 1e9)
		lines = append(lines, fmt.Sprintf("%s %.3f ms", name, float64(trip)/1e6))
		limit := maxDur + 2*time.Millisecond
		if r.avrChannelNamed(name).Kind == "servo" {
			limit += 20 * time.Millisecond // the next frame's pulse
		}
		if trip > limit {
			t.Errorf("%s reached its safe value %v after the last frame the MCU received; its watchdog is %v", name, trip, maxDur)
		}
	}
	slices.Sort(lines)
	t.Logf("host silent: the firmware's watchdog (max_duration %v) at the pins, from the last frame it received: %s", maxDur, strings.Join(lines, ", "))

	r.sup.cmd.Process.Signal(syscall.SIGCONT)
	stopped = false
	if stale := r.waitTrueBelief("after SIGCONT"); stale != "" {
		t.Logf("after SIGCONT the supervisor said ready on a belief the pins contradicted for %s", stale)
	}
	if slices.Contains(r.status().OpenSagas, saga) {
		ctl.must(map[string]any{"op": "abort", "saga": saga})
	}
}

// waitTrueBelief waits (10 s) until the supervisor is ready — a halt in
// the way reset, as an operator would — and its commanded values are what
// the pins show. It returns, if it was seen, how long /readyz said ready
// while the pins contradicted the status: the time the supervisor took to
// learn what the board did while it was away.
func (r *rig) waitTrueBelief(what string) (stale string) {
	r.t.Helper()
	var first, last time.Time
	var diff string
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready, _ := r.readyz()
		st := r.status()
		if !ready && st.Halted {
			r.t.Logf("%s: halted (%s): resetting", what, st.HaltReason)
			r.resetUntilReady()
			continue
		}
		if ready {
			ws := r.state()
			var bad []string
			for _, a := range r.plan.Actuators {
				c, _ := st.commanded(a.Name)
				if o := ws.Outputs[a.Output]; math.Abs(o.Value-c) > a.Tolerance {
					bad = append(bad, fmt.Sprintf("%s commanded %g, the pins %g", a.Name, c, o.Value))
				}
			}
			if len(bad) == 0 {
				if !first.IsZero() {
					stale = fmt.Sprintf("%v at least (%s)", last.Sub(first).Round(time.Millisecond), diff)
				}
				return stale
			}
			if first.IsZero() {
				first, diff = time.Now(), strings.Join(bad, "; ")
			}
			last = time.Now()
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the supervisor is not ready on what the pins show after 10 s (ready %v, halted %v %q)", what, ready, st.Halted, st.Reasons)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The supply as the firmware measures it: ADC0 through the 1:3 divider,
// 14.663 mV a count. The supervisor must report each voltage within two
// counts.
func TestAVRSupplyReading(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	s := r.plan.Supply
	ctx := context.Background()
	t.Cleanup(func() { r.rb.Volts(context.Background(), s.Index, 12) })
	for _, v := range []float64{12, 10.5, 13.9, 11.234, 12} {
		r.check(r.rb.Volts(ctx, s.Index, v))
		var got float64
		waitFor(t, fmt.Sprintf("the rail to read %g V", v), 5*time.Second, func() bool {
			got, _, _ = r.status().supply(s.Name)
			return math.Abs(got-v) <= 2*0.014663
		})
		t.Logf("rail at %g V: the supervisor reads %.4f V", v, got)
	}
}

// Bytes flipped on the line, both ways, during a saga: the protocol's CRC
// and retransmission cover them. Every step either succeeds — and the pins
// show it — or is reported in doubt; afterwards the journal, the status
// and the pins agree (the audit), whatever happened.
func TestAVRLineCorruption(t *testing.T) {
	avrOnly(t)
	if n, _ := strconv.Atoi(os.Getenv("HIL_AVR_NOISE_EVERY")); n > 0 {
		avrLineNoise(t, n)
		return
	}
	t.Run("light", func(t *testing.T) { avrLineNoise(t, 0) })
	// Heavy noise ends a step in doubt and halts the supervisor while its
	// safe moves cannot reach the board: the reset must wait until they
	// have taken (the journal records them), and the audit must find the
	// journal, the status and the pins agreeing.
	t.Run("heavy", func(t *testing.T) { avrLineNoise(t, 23) })
}

func avrLineNoise(t *testing.T, noise int) {
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	a := r.plan.Actuators[0]
	r.setup()
	ctl := r.newAgent(r.agentName("noise"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	t.Cleanup(func() { r.avr.rig.Corrupt(context.Background(), avrrig.Both, 0, 1, 1) })
	// Before each step one byte each way is flipped, a few bytes in: the
	// step's SET (or a heartbeat just before it) and the answer (or a
	// telemetry frame) fail their CRC and are sent again.
	// HIL_AVR_NOISE_EVERY=N instead flips one byte in every N, each way,
	// 40 of them: heavy enough (N=23) that steps end in doubt and the
	// supervisor halts while the board is hard to reach.
	if noise > 0 {
		r.check(r.avr.rig.Corrupt(ctx, avrrig.Both, 40, noise, 0x10))
	}
	outcomes := map[string]int{}
	for i := 0; i < 10; i++ {
		if noise <= 0 {
			r.check(r.avr.rig.Corrupt(ctx, avrrig.ToMCU, 1, 1+i%5, 0x10))
			r.check(r.avr.rig.Corrupt(ctx, avrrig.ToHost, 1, 1+i%7, 0x10))
		}
		v := a.Move
		if i%2 == 1 {
			v = a.Setup
		}
		rep := ctl.step(saga, a.Name, v)
		if rep.OK {
			outcomes["ok"]++
			want := r.poses(setupPose)
			want[a.Name] = at(v)
			r.waitOutputs("a step that succeeded through the noise", want)
			continue
		}
		outcomes[rep.Code]++
		if rep.Code != "STEP_IN_DOUBT" && rep.Code != "NOT_READY" && rep.Code != "SAGA_UNKNOWN" && rep.Code != "HALTED" {
			t.Fatalf("step %d through the noise: %s %s", i, rep.Code, rep.Message)
		}
		break // the saga is over (in doubt: unwound or halted)
	}
	if noise > 0 {
		time.Sleep(time.Second) // the rest of the noise, on heartbeats and telemetry
	}
	r.check(r.avr.rig.Corrupt(ctx, avrrig.Both, 0, 1, 1))
	l := r.avrPins().Link
	t.Logf("corrupted %d bytes to the MCU and %d to the host; the MCU saw %d bad frames, the tap on its line %d; steps: %v",
		l.CorruptedToMCU, l.CorruptedToHost, l.BadToMCU, l.BadToHost, outcomes)
	if l.CorruptedToMCU < 5 || l.CorruptedToHost < 5 {
		t.Errorf("the noise touched %d bytes to the MCU and %d to the host: the scenario proved nothing", l.CorruptedToMCU, l.CorruptedToHost)
	}
	r.waitTrueBelief("after the noise")
	if slices.Contains(r.status().OpenSagas, saga) {
		ctl.must(map[string]any{"op": "abort", "saga": saga})
	}
}

// The e-stop pressed while a step is on its way. The firmware puts every
// output safe at once (measured: from the pin's edge to each output at its
// safe value) and refuses SETs; the supervisor halts; a reset is refused
// while the button is down and taken once it is released.
func TestAVREStopMidStep(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	a, b := r.plan.Actuators[0], r.plan.Actuators[1]
	r.setup()
	ctl := r.newAgent(r.agentName("estop"))
	ctl.hello(60 * time.Second)
	saga := ctl.begin()
	r.stepTo(ctl, saga, a, a.Move)
	since := r.avrPins().Cycle
	t.Cleanup(func() { r.avr.rig.EStop(context.Background(), false) })
	done := make(chan api.Reply, 1)
	go func() { done <- ctl.step(saga, b.Name, b.Move) }()
	r.check(r.avr.rig.EStop(ctx, true))
	rep := <-done
	t.Logf("the step on its way as the e-stop was pressed: ok=%v %s", rep.OK, rep.Code)
	waitFor(t, "the supervisor to halt", 10*time.Second, func() bool { return r.status().Halted })
	r.waitOutputs("every output at its safe value", r.poses(safe))

	p := r.avrPins()
	h := r.avrHistory(since)
	var press uint64
	var pressNS int64
	for _, e := range avrEvents(h, avrEStopPin) {
		if e.Level == 1 {
			press, pressNS = e.Cycle, e.MonoNS
			break
		}
	}
	if press == 0 {
		t.Fatalf("no press of %s in the rig's history", avrEStopPin)
	}
	var lines []string
	for name, c := range r.avrReachedSafe(h, press, float64(p.Hz)) {
		d := time.Duration(float64(c-press) / float64(p.Hz) * 1e9)
		lines = append(lines, fmt.Sprintf("%s %.3f ms", name, float64(d)/1e6))
		if d > 25*time.Millisecond {
			t.Errorf("%s reached its safe value %v after the e-stop was pressed", name, d)
		}
	}
	slices.Sort(lines)
	t.Logf("e-stop pressed to safe, at the pins: %s", strings.Join(lines, ", "))
	// The host learns of the press from the board's next TELEMETRY (or
	// PONG): a NAK FAULT alone does not say why. Until then a reset would
	// be taken — the supervisor may have halted for another reason first
	// (here: the step's unwind, refused). Wait for it to know.
	waitFor(t, "the supervisor to learn of the e-stop", 5*time.Second, func() bool {
		_, why := r.readyz()
		return strings.Contains(why, "estop")
	})
	t.Logf("the supervisor's /readyz named the board's e-stop %.1f ms after the press (polled every 10 ms)",
		float64(avrrig.MonoNow()-pressNS)/1e6)
	if code, body := r.post("/api/v1/reset", r.plan.Token, ""); code != http.StatusConflict {
		t.Fatalf("reset while the e-stop is pressed: %d %s, want 409", code, body)
	}
	r.check(r.avr.rig.EStop(ctx, false))
	r.resetUntilReady()
	r.waitReady()
	r.checkBelief("after the e-stop reset")
}

// The relay on channel 4 is active low: OFF is its pin high. It must be
// OFF at power-on — never driven low, not for one cycle, from reset until
// the first command — and go OFF on the firmware's watchdog, on a halt
// and on a power cut.
func TestAVRRelayOff(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	relay := r.avrChannelNamed("relay")
	neverOn := func(what string, h avrrig.History) {
		t.Helper()
		for _, e := range avrEvents(h, relay.Pin) {
			if e.Driven && e.Level == 0 {
				t.Errorf("%s: the relay's pin %s driven low (ON) at cycle %d", what, relay.Pin, e.Cycle)
			}
		}
	}
	neverOn("from power-on to the first command", r.avrHistory(0))

	on := func(what string) {
		t.Helper()
		ctl := r.newAgent(r.agentName("relay"))
		ctl.hello(30 * time.Second)
		saga := ctl.begin()
		if rep := ctl.step(saga, "relay", 1); !rep.OK {
			t.Fatalf("%s: relay on: %s %s", what, rep.Code, rep.Message)
		}
		ctl.must(map[string]any{"op": "commit", "saga": saga})
		ctl.must(map[string]any{"op": "bye"})
		r.waitChannels(what+": the relay ON", map[string]float64{"relay": 1})
	}
	off := map[string]float64{"relay": 0}

	on("the watchdog")
	const learned = "the MCU's watchdog had fired"
	before := strings.Count(r.sup.out.String(), learned)
	r.sup.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { r.sup.cmd.Process.Signal(syscall.SIGCONT) })
	r.waitChannels("the firmware's watchdog turns the relay OFF", off)
	r.sup.cmd.Process.Signal(syscall.SIGCONT)
	// Resumed, the supervisor's readiness is its belief from before the
	// stop until its link notices the firmware's watchdog (a known gap:
	// /readyz says ready for tens of ms on that stale belief); the next
	// step in that window goes in doubt. Wait for it to have noticed.
	waitFor(t, "the supervisor to learn of the firmware's watchdog", 20*time.Second, func() bool {
		return strings.Count(r.sup.out.String(), learned) > before
	})
	r.untilReady("after the watchdog")

	on("the halt")
	if code, body := r.post("/api/v1/halt", "", `{"reason":"hil: relay off on halt"}`); code/100 != 2 {
		t.Fatalf("halt: %d %s", code, body)
	}
	r.waitChannels("the halt turns the relay OFF", off)
	r.resetUntilReady()
	r.waitReady()

	on("the power cut")
	since := r.avrPins().Cycle
	r.check(r.avr.rig.Reset(ctx, 300*time.Millisecond))
	r.waitChannels("the relay OFF after the power cut", off)
	time.Sleep(500 * time.Millisecond) // through the boot
	h := r.avrHistory(since)
	neverOn("through the power cut and the boot", h)
	r.untilReady("after the power cut")
}

// The audit catches a move the journal does not explain: a SET whose value
// changed on the wire with a valid CRC (as a CRC collision would make
// one). The firmware applies it, its SET_ACK reports what it applied, the
// host finds it outside the tolerance (in doubt) — and the pins went
// somewhere no record names, which the audit must say.
func TestAVRAuditCatchesAnUnjournaledMove(t *testing.T) {
	avrOnly(t)
	r := newRig(t, rigOptions{})
	ctx := context.Background()
	fan := r.avrChannelNamed("fan")
	var a PlannedActuator
	for _, x := range r.plan.Actuators {
		if x.Name == "fan" {
			a = x
		}
	}
	r.setup()
	ctl := r.newAgent(r.agentName("collision"))
	ctl.hello(30 * time.Second)
	saga := ctl.begin()
	const wrong = 0.777
	r.check(r.avr.rig.Rewrite(ctx, fan.Channel, int32(wrong*1000)))
	rep := ctl.step(saga, a.Name, a.Move)
	r.check(r.avr.rig.Refuse(ctx, -1))
	t.Logf("a SET rewritten on the wire: ok=%v %s %s", rep.OK, rep.Code, rep.Message)
	if rep.OK {
		t.Fatalf("the host accepted a SET_ACK of %g for a SET of %g", wrong, a.Move)
	}
	var bad []string
	waitFor(t, "the audit to find the unjournaled move", 10*time.Second, func() bool {
		bad = r.avrUnexplained()
		return len(bad) > 0
	})
	// The pin shows what the firmware made of 0.777: 8-bit PWM, within
	// the fan's read-back tolerance of it.
	found := false
	for _, b := range bad {
		var v float64
		if _, err := fmt.Sscanf(b, "fan (PD5): moved to %g ", &v); err == nil && math.Abs(v-wrong) <= fan.Tolerance {
			found = true
		}
	}
	if !found {
		t.Fatalf("the audit found %q, want the fan's move to %g (within %g)", bad, wrong, fan.Tolerance)
	}
	t.Logf("the audit: %s", bad)
	// What the audit found is what this scenario made: the cleanup's
	// audit would find it again.
	r.avrAudited = true
}

// TestAVRFigures measures the firmware on the rig without the supervisor,
// through the host's driver (firmware/rig: figures.go says how): SET to
// SET_ACK and SET to pin on the digital output and on a servo, and the
// watchdog trip at every pin. `make avr-figures` prints them.
func TestAVRFigures(t *testing.T) {
	avrOnly(t)
	avrCheck(t)
	dir := t.TempDir()
	ar, err := avrrig.Start(avrrig.Options{Binary: avrRigBin, ELF: avrELF, Link: filepath.Join(dir, "tty")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ar.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := serial.Open(ctx, serial.Config{Name: "avr", Port: ar.PTY})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	p0, _ := ar.Pins(bg)
	lamp, pan := avrPinMap[3], avrPinMap[0]
	ack, pin, err := avrrig.Latency(bg, ar.Client, l, avrrig.Probe{Channel: lamp.Channel, Pin: lamp.Pin, Values: [2]float64{1, 0},
		Shows: avrrig.LevelOf(lamp.ActiveLow), Settle: 5 * time.Millisecond}, 200)
	if err != nil {
		t.Fatal(err)
	}
	width := func(v float64) time.Duration {
		return time.Duration((pan.MinUS + (v-pan.MinDeg)/(pan.MaxDeg-pan.MinDeg)*(pan.MaxUS-pan.MinUS)) * 1e3)
	}
	sack, spin, err := avrrig.Latency(bg, ar.Client, l, avrrig.Probe{Channel: pan.Channel, Pin: pan.Pin, Values: [2]float64{45, 135},
		Shows: avrrig.PulseOf(float64(p0.Hz), width, time.Microsecond), Settle: 45 * time.Millisecond}, 60, serial.WithTolerance(pan.Tolerance))
	if err != nil {
		t.Fatal(err)
	}
	// Every output away from its safe value, then the host falls silent.
	for ch, v := range map[int]float64{0: 45, 1: 135, 2: 0.5, 3: 1, 4: 1} {
		c, _ := l.Channel(ch, serial.WithTolerance(avrPinMap[ch].Tolerance))
		if err := c.Set(bg, v); err != nil {
			t.Fatalf("ch %d = %g: %v", ch, v, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	// The safe values are the config's, which are the firmware's.
	cfg := (&rig{t: t, workDir: dir}).writeConfig("configs/avr.yaml", filepath.Join(dir, "tty"), rigOptions{})
	safeAt := map[string]func(avrrig.Event) bool{}
	for _, c := range avrPinMap {
		var want float64
		for _, name := range cfg.ActuatorNames() {
			if m, ok := cfg.Actuators[name].Section.(*wiring.MCUActuator); ok && m.Channel == c.Channel {
				want = cfg.Actuators[name].Safe.Value
			}
		}
		safeAt[c.Pin] = func(e avrrig.Event) bool {
			v, inert, ok := c.eventValue(float64(p0.Hz), e)
			return ok && !inert && math.Abs(v-want) <= c.Tolerance
		}
	}
	trips, err := avrrig.WatchdogTrip(bg, ar.Client, l, safeAt, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := ar.Pins(bg)
	t.Logf("the firmware %s on the rig, 115200 baud, through drivers/serial:", filepath.Base(avrELF))
	t.Logf("  SET to SET_ACK, digital ch3:  %v", ack)
	t.Logf("  SET to pin %s (ch3):        %v", lamp.Pin, pin)
	t.Logf("  SET to SET_ACK, servo ch0:    %v", sack)
	t.Logf("  SET to the end of the first new pulse on %s (ch0): %v", pan.Pin, spin)
	for _, tr := range trips {
		t.Logf("  watchdog at %s: %.3f ms after the last frame", tr.Pin, float64(tr.After)/1e6)
	}
	t.Logf("  the rig: behind the clock by %.3f ms at most, more than 2 ms %d times, %d slips; %.1f%% of a CPU",
		float64(p1.LagMaxNS)/1e6, p1.Late2ms, p1.Slips, 100*float64(p1.CPUNS-p0.CPUNS)/float64(p1.MonoNS-p0.MonoNS))
}

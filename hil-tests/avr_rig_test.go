//go:build !saga_lean

package hil

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	avrrig "github.com/saga-supervisor/saga-supervisor/firmware/rig"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// The AVR profile (HIL_RIG=avr, make hil-avr): the scenarios run on the
// saga firmware's ELF in simavr (saga-avr-rig, firmware/rig), and the
// read-back is the rig's measurement of the pins — pulse widths, duty,
// levels — never the firmware's telemetry. An adapter serves that
// measurement as /state, in each actuator's unit, with the sim board's
// control endpoints, so every scenario runs unchanged; the AVR scenarios
// (avr_test.go) add the faults a bench shows. After each scenario the
// journal, the status and the pins must agree, and every move the pins
// made must be one the journal, the firmware's watchdog, a reset or the
// e-stop explains (avrAudit).

// defaultAVRELF is where `make firmware` puts the firmware, under the
// repository.
const defaultAVRELF = "firmware/build/saga_mcu_atmega328p.elf"

var (
	avrMode   bool   // HIL_RIG=avr
	avrELF    string // the firmware
	avrRigBin string // saga-avr-rig
	avrWhy    string // why the profile cannot run here ("": it can)
)

// avrSetup finds the firmware and builds the rig (into dir) for the AVR
// profile. What is missing is reported by each scenario (avrCheck).
func avrSetup(dir string) {
	root, err := avrrig.Root()
	if err != nil {
		avrWhy = err.Error()
		return
	}
	avrELF = cmpOr(*avrELFFlag, cmpOr(os.Getenv("HIL_AVR_ELF"), filepath.Join(root, defaultAVRELF)))
	if missing := avrrig.Tools(); len(missing) > 0 {
		avrWhy = "the AVR rig needs " + strings.Join(missing, ", ")
		return
	}
	avrRigBin = filepath.Join(dir, "saga-avr-rig")
	t0 := time.Now()
	if err := avrrig.Build(root, avrRigBin); err != nil {
		avrWhy = err.Error()
		return
	}
	fmt.Fprintf(os.Stderr, "hil: built %s in %v; firmware %s\n", avrRigBin, time.Since(t0).Round(time.Millisecond), avrELF)
}

// avrCheck fails the scenario under CI, and skips it elsewhere, when the
// AVR profile cannot run: CI installs the rig's packages and builds the
// firmware, so there a missing part is a failure.
func avrCheck(t *testing.T) {
	t.Helper()
	why := avrWhy
	if why == "" {
		if _, err := os.Stat(avrELF); err != nil {
			why = fmt.Sprintf("no firmware ELF at %s (`make firmware` builds it; HIL_AVR_ELF or -hil.avr-elf name another)", avrELF)
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s, and CI is set: CI must build and run the AVR profile", why)
	}
	t.Skipf("%s; CI is unset, so this is a skip, not a failure", why)
}

// avrChannel is one output of the firmware's fixed pin map, and how its
// pin shows its value.
type avrChannel struct {
	Channel int
	Pin     string
	Kind    string // servo, pwm, digital
	// ActiveLow: 1 (on) is the pin driven low (the relay). A pin that is
	// not driven (an input, at reset) is off.
	ActiveLow bool
	// A servo's pulse: MinUS at MinDeg, MaxUS at MaxDeg (the firmware's
	// mapping).
	MinUS, MaxUS, MinDeg, MaxDeg float64
	// Tolerance of its read-back, in its unit: a servo's pulse is exact to
	// the cycle but the firmware steps 0.5 us (0.09 degrees); a duty cycle
	// in 256 steps.
	Tolerance float64
}

// avrPinMap is the firmware's pin map (docs/SERIAL.md's channels, at the
// pins of configs/avr.yaml's comment). The servo mapping and the safe
// values (configs/avr.yaml) are the firmware's: keep them in step.
var avrPinMap = []avrChannel{
	{Channel: 0, Pin: "PB1", Kind: "servo", MinUS: 1000, MaxUS: 2000, MinDeg: 0, MaxDeg: 180, Tolerance: 0.1},
	{Channel: 1, Pin: "PB2", Kind: "servo", MinUS: 1000, MaxUS: 2000, MinDeg: 0, MaxDeg: 180, Tolerance: 0.1},
	{Channel: 2, Pin: "PD5", Kind: "pwm", Tolerance: 0.005},
	{Channel: 3, Pin: "PD7", Kind: "digital", Tolerance: 0.001},
	{Channel: 4, Pin: "PB0", Kind: "digital", ActiveLow: true, Tolerance: 0.001},
}

const (
	avrEStopPin = "PD2"
	// avrSupplyDivider: ADC0 sees a third of the supply (1:3), with AVcc
	// (5 V) as the reference: 14.663 mV of supply a count.
	avrSupplyDivider = 3.0
)

func avrChannelOf(pin string) (avrChannel, bool) {
	for _, c := range avrPinMap {
		if c.Pin == pin {
			return c, true
		}
	}
	return avrChannel{}, false
}

// degrees is a servo pulse of us microseconds in the channel's unit.
func (c avrChannel) degrees(us float64) float64 {
	return c.MinDeg + (us-c.MinUS)/(c.MaxUS-c.MinUS)*(c.MaxDeg-c.MinDeg)
}

// pinValue is what a value of the channel looks like at its pin now: the
// value, and whether the output is inert (a servo without pulses).
func (c avrChannel) pinValue(p avrrig.Pins, pin avrrig.Pin) (float64, bool) {
	us := func(cycles uint64) float64 { return p.Micros(cycles) }
	switch c.Kind {
	case "servo":
		switch {
		case pin.Wave == "static" && pin.Level == 1:
			return math.Inf(-1), false // high for longer than any pulse: no position
		case pin.Wave == "static":
			return c.degrees(us(pin.WaveHigh)), true // no pulses: inert where the last one left it
		}
		return c.degrees(us(pin.WaveHigh)), false
	case "pwm":
		switch {
		case pin.Wave == "pulsing" && pin.WavePeriod > 0:
			return float64(pin.WaveHigh) / float64(pin.WavePeriod), false
		case pin.Wave != "static" && pin.PeriodCycles > 0:
			return float64(pin.HighCycles) / float64(pin.PeriodCycles), false
		case pin.Driven:
			return float64(pin.Level), false
		}
		return 0, false
	}
	on := pin.Driven && (pin.Level == 1) != c.ActiveLow
	if on {
		return 1, false
	}
	return 0, false
}

// eventValue is the channel's value after event e (ok: e says one).
func (c avrChannel) eventValue(hz float64, e avrrig.Event) (v float64, inert, ok bool) {
	switch c.Kind {
	case "servo":
		switch {
		case e.Kind == "pulse":
			return c.degrees(float64(e.High) / hz * 1e6), false, true
		case e.Kind == "level" && e.Level == 1:
			return math.Inf(-1), false, true
		case e.Kind == "level":
			return math.NaN(), true, true // pulses stopped: inert (its position: the last)
		}
	case "pwm":
		switch {
		case e.Kind == "pulse" && e.Period > 0:
			return float64(e.High) / float64(e.Period), false, true
		case e.Kind == "level":
			if !e.Driven {
				return 0, false, true
			}
			return float64(e.Level), false, true
		}
	case "digital":
		if e.Kind == "level" {
			if e.Driven && (e.Level == 1) != c.ActiveLow {
				return 1, false, true
			}
			return 0, false, true
		}
	}
	return 0, false, false
}

// avrBench is the AVR profile's bench: the rig, its adapter, and what the
// audit needs.
type avrBench struct {
	rig     *avrrig.Rig
	adapter *httptest.Server
	cfg     *config.Config
	start   avrrig.Pins // the pins before the supervisor started
	// actuators by channel, from the config
	names map[int]string
}

func newAVRRig(t *testing.T, opt rigOptions) *rig {
	t.Helper()
	avrCheck(t)
	dir := t.TempDir()
	r := &rig{t: t, sim: true, workDir: dir, http: &http.Client{Timeout: 10 * time.Second}}
	host := filepath.Join(dir, "ttyHost")
	var logMu sync.Mutex
	var log []byte
	ar, err := avrrig.Start(avrrig.Options{Binary: avrRigBin, ELF: avrELF, Link: host,
		Output: writerFunc(func(p []byte) (int, error) {
			logMu.Lock()
			defer logMu.Unlock()
			if len(log) < 1<<20 {
				log = append(log, p...)
			}
			return len(p), nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			// A rig the machine could not run in real time stalls the
			// MCU and its wire together: the host's 50 ms retransmissions
			// and 500 ms link timeout then fire at a board that is only
			// late. Say so beside the failure.
			if p, err := ar.Pins(context.Background()); err == nil {
				t.Logf("saga-avr-rig kept time within %.1f ms of the clock (more than 2 ms behind %d times, %d slips, nice %d)%s",
					float64(p.LagMaxNS)/1e6, p.Late2ms, p.Slips, p.Nice,
					map[bool]string{true: ": the machine was too busy to run it in real time; the failure may be the machine's", false: ""}[p.LagMaxNS > 100e6 || p.Slips > 0])
			}
		}
		ar.Stop()
		if t.Failed() {
			logMu.Lock()
			t.Logf("--- saga-avr-rig output:\n%s", tail(string(log), 6000))
			logMu.Unlock()
		}
	})
	cfg := r.writeConfig("configs/avr.yaml", host, opt)
	b := &avrBench{rig: ar, cfg: cfg, names: map[int]string{}}
	for _, name := range cfg.ActuatorNames() {
		if m, ok := cfg.Actuators[name].Section.(*wiring.MCUActuator); ok {
			b.names[m.Channel] = name
		}
	}
	for _, c := range avrPinMap {
		if b.names[c.Channel] == "" {
			t.Fatalf("configs/avr.yaml has no actuator on channel %d (%s)", c.Channel, c.Pin)
		}
	}
	b.start = b.waitPowerOn(t)
	b.adapter = httptest.NewServer(b.handler())
	t.Cleanup(b.adapter.Close)
	r.avr = b

	// The actuators under test are the servos and the PWM output: a
	// digital output has no pose between its setup and its move.
	tol := func(ch int) *float64 { v := avrPinMap[ch].Tolerance; return &v }
	r.file = &RigFile{Config: r.cfgPath, WorkDir: dir, dir: dir,
		ReadBack: ReadBackSpec{URL: b.adapter.URL, Settle: 10 * time.Second},
		Control:  ControlSpec{Inject: []Capability{CapNak, CapVolts, CapEStop, CapUnplug}},
		Actuators: map[string]ActuatorSpec{b.names[0]: {Tolerance: tol(0)}, b.names[1]: {Tolerance: tol(1)},
			b.names[2]: {Tolerance: tol(2)}}}
	if err := r.file.check(); err != nil {
		t.Fatal(err)
	}
	if r.plan, err = NewPlan(r.file, cfg); err != nil {
		t.Fatal(err)
	}
	r.rb = NewReadBack(r.file)
	return r
}

// waitPowerOn waits until the firmware, booted, shows every output at its
// safe value (what its power-on must do, docs/SERIAL.md §6), and returns
// the pins then: the scenario's moves are counted from there.
func (b *avrBench) waitPowerOn(t *testing.T) avrrig.Pins {
	t.Helper()
	var last string
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := b.rig.Pins(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var bad []string
		for _, c := range avrPinMap {
			pin, _ := p.Pin(c.Pin)
			v, inert := c.pinValue(p, pin)
			safe := b.cfg.Actuators[b.names[c.Channel]].Safe.Value
			if inert || pin.Wave == "pending" || math.Abs(v-safe) > c.Tolerance {
				bad = append(bad, fmt.Sprintf("%s %s: %g (inert %v, %s), safe %g", b.names[c.Channel], c.Pin, v, inert, pin.Wave, safe))
			}
		}
		if len(bad) == 0 {
			return p
		}
		last = strings.Join(bad, "; ")
		if time.Now().After(deadline) {
			t.Fatalf("the firmware's outputs are not at their safe values 10 s after power-on: %s", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// faultNames are docs/SERIAL.md's fault bits as the sim board names them.
var faultNames = []string{"watchdog", "reset", "supply", "output", "estop"}

// state is the read-back: each channel's value from its pin. The fault
// flags and the session come from the rig's tap on the MCU's line — the
// one thing here the firmware says rather than the pins show — and only
// when reported after the pins last changed: an older report does not
// describe what the pins show now.
func (b *avrBench) state(ctx context.Context) (State, error) {
	p, err := b.rig.Pins(ctx)
	if err != nil {
		return State{}, err
	}
	st := State{Outputs: make([]Output, len(avrPinMap))}
	var lastMove uint64
	for _, c := range avrPinMap {
		pin, ok := p.Pin(c.Pin)
		if !ok {
			return State{}, fmt.Errorf("the rig does not watch %s", c.Pin)
		}
		v, inert := c.pinValue(p, pin)
		if math.IsInf(v, 0) {
			v = -1e6 // no position: it matches nothing
		}
		st.Outputs[c.Channel] = Output{Value: v, Detached: inert}
		lastMove = max(lastMove, pin.LastEvent)
	}
	if l := p.Link; l.Faults >= 0 && l.LastTelemetryCycle > lastMove {
		var names []string
		for i, n := range faultNames {
			if l.Faults&(1<<i) != 0 {
				names = append(names, n)
			}
		}
		st.Faults = cmpOr(strings.Join(names, "|"), "none")
		in := l.Faults&3 == 0 // WATCHDOG and RESET: no session
		st.InSession = &in
	}
	return st, nil
}

// handler serves the sim board's /state and control endpoints on the rig.
func (b *avrBench) handler() http.Handler {
	mux := http.NewServeMux()
	fail := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusBadRequest) }
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		st, err := b.state(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("POST /volts", func(w http.ResponseWriter, r *http.Request) {
		v, err := strconv.ParseFloat(r.URL.Query().Get("v"), 64)
		if r.URL.Query().Get("supply") != "0" || err != nil || v < 0 || v > 20 {
			fail(w, errors.New("want supply=0&v=0..20 (volts)"))
			return
		}
		if err := b.rig.SetADC(r.Context(), 0, int(math.Round(v*1000/avrSupplyDivider))); err != nil {
			fail(w, err)
		}
	})
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("flag") != "estop" {
			fail(w, errors.New("the AVR rig injects only flag=estop (its input pin); the firmware raises the others"))
			return
		}
		if err := b.rig.EStop(r.Context(), r.URL.Query().Get("on") != "false"); err != nil {
			fail(w, err)
		}
	})
	mux.HandleFunc("POST /nak", func(w http.ResponseWriter, r *http.Request) {
		// The firmware refuses the channel's SETs itself: the rig makes
		// their value out of range on the wire, so the NAK is RANGE
		// whatever code is asked for.
		ch, err1 := strconv.Atoi(r.URL.Query().Get("channel"))
		code, err2 := strconv.Atoi(r.URL.Query().Get("code"))
		if errors.Join(err1, err2) != nil {
			fail(w, errors.New("want channel=C&code=N"))
			return
		}
		if code == 0 {
			ch = -1
		}
		if err := b.rig.Refuse(r.Context(), ch); err != nil {
			fail(w, err)
		}
	})
	for path, f := range map[string]func(context.Context) error{
		"POST /unplug": b.rig.Unplug, "POST /replug": b.rig.Replug,
		"POST /reset": func(ctx context.Context) error { return b.rig.Reset(ctx, 0) },
	} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			if err := f(r.Context()); err != nil {
				fail(w, err)
			}
		})
	}
	return mux
}

// ---- the audit --------------------------------------------------------------

// avrAudit runs after every scenario on the AVR rig: the journal, the
// status and the pins agree on every output, and nothing moved that the
// journal, the firmware's watchdog, a reset or the e-stop explains not.
func (r *rig) avrAudit() {
	t := r.t
	if t.Failed() || t.Skipped() || r.sup.exited() || r.avrAudited {
		return
	}
	var why string
	deadline := time.Now().Add(20 * time.Second)
	for {
		if why = r.avrDisagreement(); why == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after the scenario, the journal, the status and the pins disagree (for 20 s): %s", why)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if bad := r.avrUnexplained(); len(bad) > 0 {
		t.Errorf("the pins moved where nothing explains it:\n  %s", strings.Join(bad, "\n  "))
	}
}

// avrDisagreement says how the journal, the status and the pins differ,
// or "".
func (r *rig) avrDisagreement() string {
	code, body := r.get("/api/v1/status")
	if code != http.StatusOK {
		return fmt.Sprintf("/api/v1/status: %d %s", code, body)
	}
	var st supStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return err.Error()
	}
	// With the board's link down the supervisor cannot know what its
	// watchdog did; anything else (a broker away, a halt) leaves the
	// three comparable.
	for _, why := range st.Reasons {
		if strings.Contains(why, "mcu ") || strings.Contains(why, "link lost") {
			return fmt.Sprintf("the board's link is not up: %q", st.Reasons)
		}
	}
	j, err := readJournal(r.avr.cfg, r.journalDir)
	if err != nil {
		return "journal: " + err.Error()
	}
	ws, err := r.avr.state(context.Background())
	if err != nil {
		return err.Error()
	}
	var diffs []string
	for _, c := range avrPinMap {
		name := r.avr.names[c.Channel]
		commanded, _ := st.commanded(name)
		pin := ws.Outputs[c.Channel]
		if math.Abs(pin.Value-commanded) > c.Tolerance || j.commanded[name] != commanded || pin.Detached {
			diffs = append(diffs, fmt.Sprintf("%s: pins %g (inert %v), status %g, journal %g", name, pin.Value, pin.Detached, commanded, j.commanded[name]))
		}
	}
	return strings.Join(diffs, "; ")
}

// jrec is a journal record that moves an actuator, or explains a move.
type jrec struct {
	typ      rollback.RecordType
	actuator string
	target   float64
	unixNano int64
}

func journalRecords(cfg *config.Config, dir string) ([]jrec, error) {
	var out []jrec
	err := wal.Scan(dir, cfg.Journal.WALOptions(), 1, func(r wal.Record) error {
		rec, err := rollback.DecodeRecord(r.Type, r.Payload)
		if err != nil {
			return err
		}
		out = append(out, jrec{rec.Type, rec.Actuator, rec.Target, rec.UnixNano})
		return nil
	})
	return out, err
}

// avrUnexplained lists every move of the pins since the scenario began
// that nothing explains. A move of an actuator to v at time t is explained
// by a step or compensation the journal recorded (INTENT, COMP_INTENT) to
// v before t; a move to its safe value, by the firmware's watchdog (a
// silence of the host as long as its max_duration ended no earlier), a
// reset of the MCU (within 2 s before), the e-stop pressed, or a halt the
// journal recorded (HALT, SAFE); a servo's pulses stopping, by a reset
// only (its safe policy is a position, not detach).
func (r *rig) avrUnexplained() []string {
	ctx := context.Background()
	b := r.avr
	p, err := b.rig.Pins(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	h, err := b.rig.History(ctx, b.start.Cycle)
	if err != nil {
		return []string{err.Error()}
	}
	if h.Lost {
		return []string{"the rig's history since the scenario began was lost (too many events): nothing could be checked"}
	}
	recs, err := readRecords(b.cfg, r.journalDir)
	if err != nil {
		return []string{"journal: " + err.Error()}
	}
	hz := float64(p.Hz)
	slack := int64(100 * time.Millisecond)
	maxDur := uint64(500) // ms, until the firmware's HELLO_ACK says
	if p.Link.HelloAck != nil {
		maxDur = uint64(p.Link.HelloAck.MaxDurationMS)
	}
	silent := func(c uint64) bool {
		need := uint64(float64(maxDur) * 0.9 * hz / 1000)
		frame := uint64(hz / 40) // a servo's next frame: 25 ms
		for _, s := range p.Link.Silences {
			if s.ToCycle-s.FromCycle >= need && c >= s.FromCycle+need && c <= s.ToCycle+frame {
				return true
			}
		}
		last := p.Link.LastFrameToMCUCycle
		return c >= last+need
	}
	resetBefore := func(c uint64) bool {
		for _, e := range h.Events {
			if e.Kind == "reset" && e.Cycle <= c && c-e.Cycle <= uint64(2*hz) {
				return true
			}
		}
		return false
	}
	// cutByReset: a pulse that ended when the MCU was reset (its pin went
	// to an input mid-pulse): the reset explains the short pulse, on the
	// rig as on the silicon.
	cutByReset := func(e avrrig.Event) bool {
		end := e.Cycle + e.High
		for _, r := range h.Events {
			if r.Kind == "reset" && r.Cycle+16 >= end && r.Cycle <= end+16 {
				return true
			}
		}
		return false
	}
	pressedAt := func(c uint64) bool {
		pressed := b.start.EStop.Pressed
		for _, e := range h.Events {
			if e.Pin == avrEStopPin && e.Cycle <= c {
				pressed = e.Level == 1
			}
		}
		return pressed
	}
	halted := func(t int64) bool {
		for _, rec := range recs {
			if (rec.typ == rollback.RecHalt || rec.typ == rollback.RecSafe) && rec.unixNano <= t+slack {
				return true
			}
		}
		return false
	}
	commandedTo := func(name string, v, tol float64, t int64) bool {
		for _, rec := range recs {
			if (rec.typ == rollback.RecIntent || rec.typ == rollback.RecCompIntent) && rec.actuator == name &&
				math.Abs(rec.target-v) <= tol && rec.unixNano <= t+slack {
				return true
			}
		}
		return false
	}
	var bad []string
	for _, c := range avrPinMap {
		name := b.names[c.Channel]
		a := b.cfg.Actuators[name]
		pin0, _ := b.start.Pin(c.Pin)
		prev, prevInert := c.pinValue(b.start, pin0)
		events := avrEvents(h, c.Pin)
		for i, e := range events {
			v, inert, ok := c.eventValue(hz, e)
			if !ok {
				continue
			}
			// A PWM period cut short where its output is switched on or
			// off moves nothing a 1 kHz load notices: a value that lasts
			// less than three periods is no move. (A servo's runt pulse
			// is one: the servo goes there.)
			if c.Kind == "pwm" && i+1 < len(events) {
				period := e.Period
				if period == 0 {
					period = uint64(hz / 200) // 5 ms
				}
				if events[i+1].Cycle-e.Cycle < 3*period {
					continue
				}
			}
			if inert {
				if !prevInert && !resetBefore(e.Cycle) {
					bad = append(bad, fmt.Sprintf("%s (%s): its pulses stopped at cycle %d with no reset", name, c.Pin, e.Cycle))
				}
				prevInert = true
				continue
			}
			if !prevInert && math.Abs(v-prev) <= c.Tolerance {
				continue
			}
			prev, prevInert = v, false
			switch {
			case e.Kind == "pulse" && cutByReset(e):
				prev = math.NaN() // whatever comes next is a move
			case commandedTo(name, v, c.Tolerance, e.RealNS):
			case math.Abs(v-a.Safe.Value) <= c.Tolerance &&
				(silent(e.Cycle) || resetBefore(e.Cycle) || pressedAt(e.Cycle) || halted(e.RealNS)):
			default:
				what := strconv.FormatFloat(v, 'g', 6, 64)
				if math.IsInf(v, 0) {
					what = "high for longer than a pulse"
				}
				bad = append(bad, fmt.Sprintf("%s (%s): moved to %s at cycle %d (%s), which no journal record, watchdog, reset or e-stop explains",
					name, c.Pin, what, e.Cycle, time.Unix(0, e.RealNS).Format("15:04:05.000")))
			}
		}
	}
	return bad
}

// readRecords reads the journal's records, retrying for a moment when the
// supervisor's write in progress makes a torn read.
func readRecords(cfg *config.Config, dir string) ([]jrec, error) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		recs, err := journalRecords(cfg, dir)
		if err == nil || !strings.Contains(err.Error(), "zero-filled or torn") || time.Now().After(deadline) {
			return recs, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// avrHistory returns what the pins did since cycle.
func (r *rig) avrHistory(since uint64) avrrig.History {
	r.t.Helper()
	h, err := r.avr.rig.History(context.Background(), since)
	if err != nil {
		r.t.Fatal(err)
	}
	if h.Lost {
		r.t.Fatalf("the rig's history since cycle %d was lost", since)
	}
	return h
}

// avrPins reads the rig's pins.
func (r *rig) avrPins() avrrig.Pins {
	r.t.Helper()
	p, err := r.avr.rig.Pins(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// avrEvents are the events of pin in h, in order.
func avrEvents(h avrrig.History, pin string) []avrrig.Event {
	return slices.DeleteFunc(slices.Clone(h.Events), func(e avrrig.Event) bool { return e.Pin != pin })
}

// configs/avr.yaml and avrPinMap describe the same board: an actuator on
// every channel, of the channel's kind, a servo over the mapping's range,
// the relay off when safe — in every mode, so an edit to one that forgets
// the other fails before any rig runs.
func TestPinMapOfTheAVRProfile(t *testing.T) {
	r := &rig{t: t, workDir: t.TempDir()}
	cfg := r.writeConfig("configs/avr.yaml", filepath.Join(r.workDir, "tty"), rigOptions{})
	seen := map[int]bool{}
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		m, ok := a.Section.(*wiring.MCUActuator)
		if !ok {
			continue
		}
		if m.Channel >= len(avrPinMap) {
			t.Errorf("%s: channel %d is not on the pin map", name, m.Channel)
			continue
		}
		c := avrPinMap[m.Channel]
		seen[c.Channel] = true
		if string(a.Kind) != c.Kind {
			t.Errorf("%s: kind %s, the pin map's channel %d (%s) is a %s", name, a.Kind, c.Channel, c.Pin, c.Kind)
		}
		if c.Kind == "servo" && (a.Min != c.MinDeg || a.Max != c.MaxDeg) {
			t.Errorf("%s: limits %g..%g, the firmware's range %g..%g", name, a.Min, a.Max, c.MinDeg, c.MaxDeg)
		}
		if m.Tolerance > c.Tolerance {
			t.Errorf("%s: mcu.tolerance %g is wider than the read-back's %g", name, m.Tolerance, c.Tolerance)
		}
		if c.ActiveLow && (a.Safe.Value != 0 || a.Initial != 0) {
			t.Errorf("%s: the active-low relay must be safe and initially off (0)", name)
		}
	}
	for _, c := range avrPinMap {
		if !seen[c.Channel] {
			t.Errorf("the pin map's channel %d (%s) has no actuator in configs/avr.yaml", c.Channel, c.Pin)
		}
	}
	if s, ok := cfg.Supplies["rail"]; !ok || s.Driver != "mcu" {
		t.Errorf("configs/avr.yaml: no rail on the board's supply 0")
	}
}

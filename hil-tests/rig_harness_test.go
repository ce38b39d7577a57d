//go:build !saga_lean

package hil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// simToken is the operator token of the sim rigs.
const simToken = "hil-operator-token-0123456789abcdef"

// rigOptions shape a sim rig; a real rig is what its file says.
type rigOptions struct {
	// mosquitto: the supervisor and the agents use a mosquitto of the
	// rig's own, which the test can stop, kill and start (the broker
	// scenarios).
	mosquitto bool
	// action is the rail's trip action (default unwind).
	action string
	// journal is the journal's directory (default DIR/journal) and
	// segment its segment size (default 16MiB): the soak puts its journal
	// on a file system it fills and fails, in small segments.
	journal, segment string
}

// rig is one scenario's rig: the supervisor process, the read-back and
// control endpoints, and what the plan says about the actuators.
type rig struct {
	t       *testing.T
	sim     bool
	file    *RigFile
	plan    *Plan
	rb      *ReadBack
	cfgPath string
	workDir string
	sup     *proc
	starts  int
	mosq    *mosquitto // sim, with rigOptions.mosquitto
	board   *proc      // sim: the sim-mcu process
	avr     *avrBench  // the AVR profile: the firmware on saga-avr-rig
	// avrAudited: the scenario audited itself (it made an unexplained
	// move on purpose): the cleanup's audit is not run.
	avrAudited bool
	// journalDir is the supervisor's journal (sim and AVR rigs).
	journalDir string
	http       *http.Client
	agents     atomic.Int64
}

// newRig builds the scenario's rig and starts the supervisor on it, ready.
// In sim mode each scenario has a rig of its own and runs in parallel; in
// rig mode they take turns on the one real rig.
func newRig(t *testing.T, opt rigOptions) *rig {
	t.Helper()
	sayFailureLast(t)
	var r *rig
	switch {
	case rigFile != nil:
		r = newRealRig(t)
	case avrMode:
		t.Parallel()
		r = newAVRRig(t, opt)
	default:
		t.Parallel()
		r = newSimRig(t, opt)
	}
	r.startSupervisor()
	r.waitReady()
	return r
}

// need skips the scenario in rig mode when the rig cannot make injection
// c. A sim rig can make every injection: nothing is skipped there.
func (r *rig) need(c Capability) {
	r.t.Helper()
	if !r.sim && !r.file.Has(c) {
		r.t.Skipf("rig %s lacks capability %q (docs/HIL.md): this scenario needs it", *rigFlag, c)
	}
}

func newSimRig(t *testing.T, opt rigOptions) *rig {
	t.Helper()
	socat := needTool(t, "socat", "socat")
	dir := t.TempDir()
	r := &rig{t: t, sim: true, workDir: dir, http: &http.Client{Timeout: 10 * time.Second}}

	// The cable: a pty pair; the supervisor opens one end, the board the other.
	host, board := filepath.Join(dir, "ttyHost"), filepath.Join(dir, "ttyMCU")
	cable := startProc(t, "socat", "", nil, nil, socat, "-d", "-d",
		"pty,raw,echo=0,link="+host, "pty,raw,echo=0,link="+board)
	waitFor(t, "socat's ptys", 10*time.Second, func() bool {
		if cable.exited() {
			t.Fatalf("socat exited:\n%s", cable.out.String())
		}
		_, e1 := os.Stat(host)
		_, e2 := os.Stat(board)
		return e1 == nil && e2 == nil
	})

	cfg := r.writeConfig("configs/sim.yaml", host, opt)
	// The board, with the safe values the config gives its channels.
	channels, supplies := simBoardArgs(cfg)
	mcu := startProc(t, "sim-mcu", dir, nil, nil, binary, "sim-mcu", "--port", board,
		"--channels", channels, "--supplies", supplies, "--control", "127.0.0.1:0")
	ctl := mcu.waitOutput("sim-mcu control on ", 10*time.Second)
	r.board = mcu

	r.file = &RigFile{Config: r.cfgPath, WorkDir: dir, dir: dir,
		ReadBack: ReadBackSpec{URL: ctl, Settle: 10 * time.Second},
		Control:  ControlSpec{Inject: []Capability{CapNak, CapVolts, CapEStop, CapUnplug}}}
	if err := r.file.check(); err != nil {
		t.Fatal(err)
	}
	var err error
	if r.plan, err = NewPlan(r.file, cfg); err != nil {
		t.Fatal(err)
	}
	r.rb = NewReadBack(r.file)
	return r
}

// writeConfig writes the scenario's supervisor config from the template
// tmpl (its placeholders: configs/sim.yaml's comment) for the board on the
// pty host, and the operator token, into the rig's directory, starts the
// rig's own mosquitto if opt asks for one, and loads the config.
func (r *rig) writeConfig(tmpl, host string, opt rigOptions) *config.Config {
	t, dir := r.t, r.workDir
	vars := map[string]string{"DIR": dir, "TTY": host, "ACTION": "unwind",
		"JOURNAL": filepath.Join(dir, "journal"), "SEGMENT": "16MiB",
		"HTTP": fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))}
	for k, v := range map[string]string{"ACTION": opt.action, "JOURNAL": opt.journal, "SEGMENT": opt.segment} {
		if v != "" {
			vars[k] = v
		}
	}
	r.journalDir = vars["JOURNAL"]
	if opt.mosquitto {
		r.mosq = startMosquitto(t, dir)
		vars["BROKER"], vars["LISTEN"] = r.mosq.URL(), ""
	} else {
		vars["BROKER"], vars["LISTEN"] = "embedded", fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	}
	text, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	expanded := os.Expand(string(text), func(k string) string {
		v, ok := vars[k]
		if !ok {
			t.Fatalf("%s: unknown placeholder ${%s}", tmpl, k)
		}
		return v
	})
	r.cfgPath = filepath.Join(dir, filepath.Base(tmpl))
	if err := os.WriteFile(r.cfgPath, []byte(expanded), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "operator-token"), []byte(simToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(r.cfgPath)
	if err != nil {
		t.Fatalf("%s: %v", tmpl, err)
	}
	return cfg
}

// simBoardArgs are sim-mcu's --channels and --supplies for cfg's board:
// each channel's safe value is its actuator's (detach, a value, or for
// hold its initial value), each supply starts mid-band.
func simBoardArgs(cfg *config.Config) (channels, supplies string) {
	ch := map[int]string{}
	maxCh := -1
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		if a.Driver != "mcu" {
			continue
		}
		v := strconv.FormatFloat(a.Initial, 'f', -1, 64)
		switch a.Safe.Mode {
		case actuators.SafeDetach:
			v = "detach"
		case actuators.SafeValue:
			v = strconv.FormatFloat(a.Safe.Value, 'f', -1, 64)
		}
		out := a.Section.(*wiring.MCUActuator).Channel
		ch[out] = v
		maxCh = max(maxCh, out)
	}
	sup := map[int]string{}
	maxSup := 0
	for _, name := range cfg.SupplyNames() {
		s := cfg.Supplies[name]
		if s.Driver == "mcu" {
			i := mcuSupplyIndex(s)
			sup[i] = strconv.FormatFloat((s.MinVolts+s.MaxVolts)/2, 'f', -1, 64)
			maxSup = max(maxSup, i)
		}
	}
	var cs, ss []string
	for i := 0; i <= maxCh; i++ {
		cs = append(cs, cmpOr(ch[i], "0"))
	}
	for i := 0; i <= maxSup; i++ {
		ss = append(ss, cmpOr(sup[i], "12"))
	}
	return strings.Join(cs, ","), strings.Join(ss, ",")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newRealRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, file: rigFile, cfgPath: rigFile.Config, workDir: rigFile.WorkDir, http: &http.Client{Timeout: 10 * time.Second}}
	// The config's relative paths (secret files) are relative to the
	// supervisor's working directory; read it from there.
	t.Chdir(r.workDir)
	cfg, err := config.Load(r.cfgPath)
	if err != nil {
		t.Fatalf("rig config: %v", err)
	}
	if r.plan, err = NewPlan(r.file, cfg); err != nil {
		t.Fatal(err)
	}
	r.rb = NewReadBack(r.file)
	// Whatever an earlier scenario left injected, clear it.
	ctx := context.Background()
	if r.file.Has(CapUnplug) {
		r.check(r.rb.Replug(ctx))
	}
	if r.file.Has(CapEStop) {
		r.check(r.rb.EStop(ctx, false))
	}
	if r.file.Has(CapNak) {
		for _, a := range r.plan.Actuators {
			r.check(r.rb.Nak(ctx, a.Output, 0))
		}
	}
	return r
}

// check fails the test on a harness error.
func (r *rig) check(err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
}

// startSupervisor starts `saga-supervisor run` on the rig's config. It does
// not wait for anything.
func (r *rig) startSupervisor() {
	r.t.Helper()
	r.starts++
	r.sup = startProc(r.t, fmt.Sprintf("saga-supervisor (start %d)", r.starts), r.workDir, nil, nil,
		binary, "run", "--config", r.cfgPath)
	sup := r.sup
	r.t.Cleanup(func() {
		// On the AVR rig, the last supervisor's cleanup (the first to
		// run) audits the scenario while it still runs.
		if r.avr != nil && sup == r.sup {
			r.avrAudit()
		}
		sup.kill(syscall.SIGTERM) // runs before startProc's SIGKILL
	})
}

// get fetches a path of the supervisor's HTTP interface.
func (r *rig) get(path string) (int, string) {
	resp, err := r.http.Get("http://" + r.plan.HTTP + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post posts to the supervisor's HTTP interface, with the operator token if
// token is not "".
func (r *rig) post(path, token, body string) (int, string) {
	req, err := http.NewRequest(http.MethodPost, "http://"+r.plan.HTTP+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	// The supervisor refuses a POST without it (a cross-site form post).
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitReady waits for /readyz to answer 200. A halt an earlier scenario
// left latched on a real rig is reset first.
func (r *rig) waitReady() {
	r.t.Helper()
	reset, told := false, false
	var lastCode int
	var lastBody string
	ready := waitUntil(30*time.Second, func() bool {
		if r.sup.exited() {
			fatalf(r.t, "the supervisor exited: %v", r.sup.cmd.ProcessState)
		}
		code, body := r.get("/readyz")
		lastCode, lastBody = code, body
		if code == http.StatusOK {
			return true
		}
		if !r.sim && !reset && strings.HasPrefix(body, "halted") {
			if !told {
				r.t.Logf("the rig starts halted (%s): resetting", strings.TrimSpace(body))
				told = true
			}
			// Asked again while refused: HTTP answers before the
			// broker link is up, and a reset needs it.
			rc, _ := r.post("/api/v1/reset", r.plan.Token, "")
			reset = rc == http.StatusOK
		}
		return false
	})
	if !ready {
		fatalf(r.t, "timed out after 30s waiting for the supervisor to be ready: /readyz last answered %d %q", lastCode, strings.TrimSpace(lastBody))
	}
}

// supStatus is the part of /api/v1/status the scenarios read.
type supStatus struct {
	Ready      bool     `json:"ready"`
	Reasons    []string `json:"reasons"`
	Halted     bool     `json:"halted"`
	HaltReason string   `json:"halt_reason"`
	Supplies   []struct {
		Name    string  `json:"name"`
		Volts   float64 `json:"volts"`
		Known   bool    `json:"known"`
		Stale   bool    `json:"stale"`
		Tripped bool    `json:"tripped"`
		Code    string  `json:"code"`
	} `json:"supplies"`
	Actuators []struct {
		Name      string   `json:"name"`
		Commanded float64  `json:"commanded"`
		ReadBack  *float64 `json:"read_back"`
		Error     string   `json:"error"`
	} `json:"actuators"`
	Leases []struct {
		Agent string `json:"agent"`
		Lease string `json:"lease"`
	} `json:"leases"`
	OpenSagas []uint64 `json:"open_sagas"`
	Journal   struct {
		LastSeq uint64 `json:"last_seq"`
		Durable uint64 `json:"durable_seq"`
		Error   string `json:"error"`
	} `json:"journal"`
}

func (r *rig) status() supStatus {
	r.t.Helper()
	code, body := r.get("/api/v1/status")
	var st supStatus
	if code != http.StatusOK {
		r.t.Fatalf("/api/v1/status: %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		r.t.Fatalf("/api/v1/status %q: %v", body, err)
	}
	return st
}

// commanded is what the supervisor says it commanded an actuator to.
func (st supStatus) commanded(name string) (float64, bool) {
	for _, a := range st.Actuators {
		if a.Name == name {
			return a.Commanded, true
		}
	}
	return 0, false
}

func (st supStatus) supply(name string) (volts float64, tripped, ok bool) {
	for _, s := range st.Supplies {
		if s.Name == name {
			return s.Volts, s.Tripped, true
		}
	}
	return 0, false, false
}

func (st supStatus) hasLease(agent string) bool {
	for _, l := range st.Leases {
		if l.Agent == agent {
			return true
		}
	}
	return false
}

// readyz returns /readyz's code and reasons.
func (r *rig) readyz() (bool, string) {
	code, body := r.get("/readyz")
	return code == http.StatusOK, strings.TrimSpace(body)
}

// state reads the outputs back.
func (r *rig) state() State {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := r.rb.State(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// expect is what one output should read back as.
type expect struct {
	value    float64
	detached bool // the output is inert; its value is not checked
	any      bool // no expectation (a hold safe policy: wherever it was)
}

func at(v float64) expect { return expect{value: v} }

// safe is what an actuator's safe policy leaves at the read-back.
func safe(a PlannedActuator) expect {
	switch a.Safe.Mode {
	case actuators.SafeValue:
		return at(a.Safe.Value)
	case actuators.SafeDetach:
		return expect{detached: true}
	}
	return expect{any: true}
}

func (e expect) String() string {
	switch {
	case e.any:
		return "anything"
	case e.detached:
		return "detached"
	}
	return strconv.FormatFloat(e.value, 'g', -1, 64)
}

// mismatch says how the read-back differs from want, or "".
func (r *rig) mismatch(st State, want map[string]expect) string {
	var bad []string
	for _, a := range r.plan.Actuators {
		e, ok := want[a.Name]
		if !ok || e.any {
			continue
		}
		if a.Output >= len(st.Outputs) {
			bad = append(bad, fmt.Sprintf("%s: output %d not in the read-back", a.Name, a.Output))
			continue
		}
		o := st.Outputs[a.Output]
		switch {
		case e.detached && !o.Detached:
			bad = append(bad, fmt.Sprintf("%s: %g, want detached", a.Name, o.Value))
		case !e.detached && o.Detached:
			bad = append(bad, fmt.Sprintf("%s: detached, want %g", a.Name, e.value))
		case !e.detached && math.Abs(o.Value-e.value) > a.Tolerance:
			bad = append(bad, fmt.Sprintf("%s: %g, want %g", a.Name, o.Value, e.value))
		}
	}
	return strings.Join(bad, "; ")
}

// waitOutputs waits until every output in want reads back as expected.
func (r *rig) waitOutputs(what string, want map[string]expect) {
	r.t.Helper()
	var last string
	deadline := time.Now().Add(r.file.ReadBack.Settle)
	for {
		st := r.state()
		if last = r.mismatch(st, want); last == "" {
			return
		}
		if time.Now().After(deadline) {
			fatalf(r.t, "%s: the read-back did not settle within %v: %s (read back: %v)", what, r.file.ReadBack.Settle, last, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertOutputs checks the read-back now, without waiting.
func (r *rig) assertOutputs(what string, want map[string]expect) {
	r.t.Helper()
	st := r.state()
	if m := r.mismatch(st, want); m != "" {
		fatalf(r.t, "%s: %s (read back: %v)", what, m, st)
	}
}

// poses maps every actuator under test to one of its values.
func (r *rig) poses(f func(PlannedActuator) expect) map[string]expect {
	m := map[string]expect{}
	for _, a := range r.plan.Actuators {
		m[a.Name] = f(a)
	}
	return m
}

func setupPose(a PlannedActuator) expect { return at(a.Setup) }

// agentName returns an agent name for the scenario: made up in sim mode,
// the rig file's next broker login on a rig (enough of them that no name
// is used twice in one scenario).
func (r *rig) agentName(role string) string {
	n := r.agents.Add(1)
	if len(r.plan.Agents) > 0 {
		return r.plan.Agents[int(n-1)%len(r.plan.Agents)]
	}
	return fmt.Sprintf("hil-%s-%d-%d", role, os.Getpid(), n)
}

// stepTo drives an actuator to v within a saga, walking in steps no larger
// than its max_step and pacing them no faster than its max_rate, from the
// value the supervisor says it commanded. It fails the test on a refusal.
func (r *rig) stepTo(a *agent, saga uint64, act PlannedActuator, v float64) {
	r.t.Helper()
	from, _ := r.status().commanded(act.Name)
	for _, x := range walk(from, v, act.MaxStep) {
		pace(act, from, x)
		if rep := a.step(saga, act.Name, x); !rep.OK {
			r.t.Fatalf("%s: step %s %v→%v: %s %s", a.name, act.Name, from, x, rep.Code, rep.Message)
		}
		from = x
	}
}

// pace waits as long as the actuator's max_rate asks between a command to
// from and one to to (a limit, not a guess at timing).
func pace(act PlannedActuator, from, to float64) {
	if act.MaxRate > 0 {
		time.Sleep(time.Duration(math.Abs(to-from) / act.MaxRate * 1.2 * float64(time.Second)))
	}
}

// setup commits every actuator under test to its setup pose and waits for
// the read-back to show it. Scenarios start from here, so priors differ
// from initial and safe values.
func (r *rig) setup() {
	r.t.Helper()
	a := r.newAgent(r.agentName("setup"))
	defer a.close()
	a.hello(30 * time.Second)
	saga := a.begin()
	for _, act := range r.plan.Actuators {
		r.stepTo(a, saga, act, act.Setup)
	}
	a.must(map[string]any{"op": "commit", "saga": saga})
	a.must(map[string]any{"op": "bye"})
	r.waitOutputs("setup pose", r.poses(setupPose))
}

// walk returns the values from `from` to `to` in steps no larger than
// maxStep (0: one step).
func walk(from, to, maxStep float64) []float64 {
	if maxStep <= 0 || math.Abs(to-from) <= maxStep {
		return []float64{to}
	}
	var vs []float64
	dir := math.Copysign(maxStep, to-from)
	for v := from + dir; math.Abs(to-v) > maxStep; v += dir {
		vs = append(vs, v)
	}
	return append(vs, to)
}

// checkBelief compares what the supervisor says it commanded with what the
// read-back shows. They must agree whenever the supervisor is ready: the
// commanded value is the prior the next saga's unwind restores. A difference
// fails the scenario (docs/HIL.md, "The supervisor's beliefs").
func (r *rig) checkBelief(what string) {
	r.t.Helper()
	st, rb := r.status(), r.state()
	var bad []string
	for _, a := range r.plan.Actuators {
		c, ok := st.commanded(a.Name)
		if !ok || a.Output >= len(rb.Outputs) {
			r.t.Fatalf("%s: %s missing from the status or the read-back", what, a.Name)
		}
		if o := rb.Outputs[a.Output]; math.Abs(o.Value-c) > a.Tolerance {
			bad = append(bad, fmt.Sprintf("%s commanded %g, reads back %g", a.Name, c, o.Value))
		}
	}
	if len(bad) > 0 {
		r.t.Errorf("%s: the supervisor is ready but believes what is not so: %s", what, strings.Join(bad, "; "))
	}
}

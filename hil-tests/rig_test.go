//go:build !saga_lean

package hil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The rig file and the plan are what a real rig is run by: these tests
// check them without any process.

const minimalRig = "config: sup.yaml\nreadback: {url: http://127.0.0.1:8090}\n"

func TestParseRigDefaults(t *testing.T) {
	r, err := ParseRig([]byte(minimalRig), "/rigs/a/rig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Config != "/rigs/a/sup.yaml" || r.WorkDir != "/rigs/a" {
		t.Errorf("paths: config %q workdir %q, want them relative to the rig file", r.Config, r.WorkDir)
	}
	if r.ReadBack.Tolerance != DefaultTolerance || r.ReadBack.Settle != DefaultSettle || r.Control.URL != r.ReadBack.URL {
		t.Errorf("defaults: %+v %+v", r.ReadBack, r.Control)
	}
	for _, c := range Capabilities {
		if r.Has(c) {
			t.Errorf("a rig file listing no injections has %q", c)
		}
	}
}

func TestParseRigExample(t *testing.T) {
	r, err := LoadRig("../examples/rig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Capabilities {
		if !r.Has(c) {
			t.Errorf("examples/rig.yaml lacks %q: it is meant to show every capability", c)
		}
	}
	if got := len(r.Agents.Names); got < MinAgentLogins {
		t.Errorf("examples/rig.yaml: %d agent logins", got)
	}
}

// The example rig file plans on the example robot config it describes.
func TestPlanExampleRig(t *testing.T) {
	r, err := LoadRig("../examples/rig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secret := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r.Agents.PasswordFile = secret("agents", "agent-pw")
	b, err := os.ReadFile("../configs/raspberry-pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The example keeps its secrets under state_dir: the supervisor's MQTT
	// password where mosquitto-config writes it, the operator token where
	// the first start generates it.
	for name, v := range map[string]string{"mqtt/credentials/saga-supervisor": "sup-pw", "saga-data/operator-token": "op-token-0123456789abcdef-0123456789"} {
		os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700)
		secret(name, v)
	}
	const state = "\nstate_dir: /var/lib/saga-supervisor\n"
	if !strings.Contains(string(b), state) {
		t.Fatal("the example no longer has its state_dir")
	}
	text := strings.Replace(string(b), state, "\nstate_dir: "+dir+"\n", 1)
	cfg, err := config.Parse([]byte(text), "raspberry-pi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Token != "op-token-0123456789abcdef-0123456789" || p.AgentPassword != "agent-pw" || p.Broker != "tcp://127.0.0.1:1883" || p.HTTP != "127.0.0.1:8080" {
		t.Errorf("plan: token %q password %q broker %q http %q", p.Token, p.AgentPassword, p.Broker, p.HTTP)
	}
	if len(p.Actuators) != 2 || p.Actuators[0].Name != "left_wheel" || p.Actuators[1].Name != "right_wheel" {
		t.Fatalf("actuators under test: %+v", p.Actuators)
	}
	if p.Supply == nil || p.Supply.Name != "battery" || p.Supply.Index != 0 || p.Supply.Action != limits.Unwind {
		t.Errorf("supply under test: %+v", p.Supply)
	}
}

// simConfig is configs/sim.yaml with its placeholders filled.
func simConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "operator-token"), []byte("tok-0123456789abcdef-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("configs/sim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"DIR": dir, "JOURNAL": filepath.Join(dir, "journal"), "SEGMENT": "16MiB",
		"TTY": "/dev/null", "BROKER": "embedded", "LISTEN": "127.0.0.1:1", "HTTP": "127.0.0.1:2", "ACTION": "halt"}
	cfg, err := config.Parse([]byte(os.Expand(string(b), func(k string) string { return vars[k] })), "sim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPlanSim(t *testing.T) {
	cfg := simConfig(t)
	r, err := ParseRig([]byte(minimalRig), "/x/rig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name        string
		out         int
		setup, move float64
	}{{"shoulder", 0, 30, 60}, {"elbow", 1, 34, 68}, {"gripper", 2, 15, 30}}
	if len(p.Actuators) != len(want) {
		t.Fatalf("actuators: %+v", p.Actuators)
	}
	for i, w := range want {
		a := p.Actuators[i]
		if a.Name != w.name || a.Output != w.out || a.Setup != w.setup || a.Move != w.move {
			t.Errorf("actuator %d: %s out %d setup %v move %v, want %+v", i, a.Name, a.Output, a.Setup, a.Move, w)
		}
	}
	if p.Token != "tok-0123456789abcdef-0123456789abcdef" || p.Broker != "tcp://127.0.0.1:1" {
		t.Errorf("token %q broker %q", p.Token, p.Broker)
	}
	// The sim board's safe values follow the config.
	ch, sup := simBoardArgs(cfg)
	if ch != "10,45,detach" || sup != "12" {
		t.Errorf("sim-mcu --channels %q --supplies %q", ch, sup)
	}
}

func TestPlanRefusals(t *testing.T) {
	cfg := simConfig(t)
	for _, c := range []struct{ name, rig, want string }{
		{"unknown actuator", "actuators: {wrist: {}}", "actuators.wrist: no such actuator"},
		{"one actuator", "actuators: {elbow: {}}", "need at least two"},
		{"setup outside", "actuators: {elbow: {setup: 500}, shoulder: {}}", "setup 500: outside [0, 135]"},
		{"setup at safe", "actuators: {elbow: {setup: 45}, shoulder: {}}", "could not be told apart"},
		{"shared output", "actuators: {elbow: {output: 0}, shoulder: {}}", "output 0 is also"},
		{"unknown supply", "supply: {name: mains}", `no supply "mains"`},
		{"no token", "token_file: /nonexistent/token", "token_file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := ParseRig([]byte(minimalRig+c.rig+"\n"), "/x/rig.yaml")
			if err != nil {
				t.Fatal(err)
			}
			_, err = NewPlan(r, cfg)
			if err == nil || CodeOf(err) != CodeRigConfig || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %s containing %q", err, CodeRigConfig, c.want)
			}
		})
	}
}

func TestParseRigRefusals(t *testing.T) {
	for _, c := range []struct{ name, text, want string }{
		{"empty", "", "empty"},
		{"not yaml", "config: [", "yaml"},
		{"unknown key", minimalRig + "colour: red\n", "colour"},
		{"two documents", minimalRig + "---\nconfig: b\n", "one YAML document"},
		{"no config", "readback: {url: http://h:1}\n", "config: required"},
		{"no readback", "config: a\n", "readback.url: required"},
		{"readback not http", "config: a\nreadback: {url: ftp://h/}\n", "want http://host:port"},
		{"key twice", minimalRig + "readback: {url: http://h:2}\n", "already defined"},
		{"negative tolerance", "config: a\nreadback: {url: http://h:1, tolerance: -1}\n", "readback.tolerance: -1"},
		{"bare settle", "config: a\nreadback: {url: http://h:1, settle: 10}\n", "into time.Duration"},
		{"long settle", "config: a\nreadback: {url: http://h:1, settle: 1h}\n", "readback.settle"},
		{"unknown injection", minimalRig + "control: {inject: [flood]}\n", `unknown capability "flood"`},
		{"broker via control", minimalRig + "control: {inject: [broker-crash]}\n", "comes from broker_control"},
		{"twice", minimalRig + "control: {inject: [nak, nak]}\n", "listed twice"},
		{"stop without start", minimalRig + "broker_control: {stop: [true]}\n", "start goes with stop or kill"},
		{"empty program", minimalRig + "broker_control: {stop: [''], start: [true]}\n", "program) is empty"},
		{"few agents", minimalRig + "agents: {names: [a, b], password_file: pw}\n", "need at least 6"},
		{"agents without password", minimalRig + "agents: {names: [a, b, c, d, e, f]}\n", "password_file: required"},
		{"bad agent name", minimalRig + "agents: {names: [a, b, c, d, e, 'f/g'], password_file: pw}\n", "not an agent name"},
		{"same poses", minimalRig + "actuators: {elbow: {setup: 1, move: 1}}\n", "setup and move are both 1"},
		{"negative output", minimalRig + "actuators: {elbow: {output: -1}}\n", "output: -1"},
		{"bad broker", minimalRig + "broker: nowhere\n", "not a broker URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRig([]byte(c.text), "/x/rig.yaml")
			if err == nil || CodeOf(err) != CodeRigFile || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %s containing %q", err, CodeRigFile, c.want)
			}
		})
	}
}

func TestDecodeState(t *testing.T) {
	st, err := DecodeState([]byte(`{"outputs":[{"value":10,"detached":false},{"value":0,"detached":true}],"faults":"watchdog|estop","in_session":false,"stats":{"Sets":3,"Pings":9},"volts":[12]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Outputs) != 2 || st.Outputs[0].Value != 10 || !st.Outputs[1].Detached {
		t.Errorf("outputs %+v", st.Outputs)
	}
	if !st.HasFault("estop") || !st.HasFault("watchdog") || st.HasFault("reset") {
		t.Errorf("faults %q", st.Faults)
	}
	if st.InSession == nil || *st.InSession || st.Stats == nil || st.Stats.Sets != 3 {
		t.Errorf("session %v stats %+v", st.InSession, st.Stats)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{}`, `{"outputs":null}`, `{"outputs":[{"value":"1"}]}`,
		`{"outputs":[]} {"outputs":[]}`, `{"outputs":[{"value":1e400}]}`,
		`{"outputs":[` + strings.Repeat(`{"value":0},`, MaxOutputs) + `{"value":0}]}`,
	} {
		if _, err := DecodeState([]byte(bad)); err == nil || CodeOf(err) != CodeState {
			t.Errorf("DecodeState(%.40q): %v, want a %s error", bad, err, CodeState)
		}
	}
}

func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"outputs":[{"value":10,"detached":false}],"faults":"none","in_session":true,"stats":{"Sets":1}}`))
	f.Add([]byte(`{"outputs":[]}`))
	f.Add([]byte(`{"outputs":[{"value":-1e308,"detached":true}],"faults":"watchdog|0x0040"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeState(b)
		if err != nil {
			if CodeOf(err) != CodeState {
				t.Fatalf("error without its code: %v", err)
			}
			return
		}
		if st.Outputs == nil || len(st.Outputs) > MaxOutputs {
			t.Fatalf("accepted %d outputs", len(st.Outputs))
		}
		_ = st.String()
		st.HasFault("estop")
	})
}

func FuzzParseRig(f *testing.F) {
	f.Add([]byte(minimalRig))
	if b, err := os.ReadFile("../examples/rig.yaml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(minimalRig + "control: {inject: [nak]}\nbroker_control: {kill: [k], start: [s]}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRig(b, "/fuzz/rig.yaml")
		if err != nil {
			if CodeOf(err) != CodeRigFile {
				t.Fatalf("error without its code: %v", err)
			}
			return
		}
		if r.Config == "" || r.ReadBack.URL == "" || r.Control.URL == "" || r.ReadBack.Tolerance <= 0 || r.ReadBack.Settle <= 0 {
			t.Fatalf("accepted a rig file without its essentials: %+v", r)
		}
		if !filepath.IsAbs(r.Config) || !filepath.IsAbs(r.WorkDir) {
			t.Fatalf("relative paths left relative: %q %q", r.Config, r.WorkDir)
		}
	})
}

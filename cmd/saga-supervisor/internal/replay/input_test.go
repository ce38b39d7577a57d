package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// --write-expect makes a fixture that --expect matches (exit 0, even
// though the replay differs from the journal: the fixture records that);
// the fixture edited, --expect exits 1 and names what differs.
func TestFixtureRoundTrip(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	incident(t, w)
	_, tight := armConfig(t, 60, armRate)
	fixture := filepath.Join(t.TempDir(), "incident.json")

	code, out, err := run(t, "--wal", w.dir, "--config", tight, "--write-expect", fixture)
	if code != 0 {
		t.Fatalf("--write-expect: exit %d (%v)\n%s", code, err, out)
	}
	b, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), w.dir) || strings.Contains(string(b), tight) {
		t.Errorf("the fixture names the paths of its inputs:\n%s", b)
	}
	if code, out, err := run(t, "--wal", w.dir, "--config", tight, "--expect", fixture); code != 0 {
		t.Fatalf("--expect on the fixture just written: exit %d (%v)\n%s", code, err, out)
	}
	// Written twice, it is the same file: nothing in it changes run to run.
	again := filepath.Join(t.TempDir(), "again.json")
	run(t, "--wal", w.dir, "--config", tight, "--write-expect", again)
	if b2, _ := os.ReadFile(again); string(b2) != string(b) {
		t.Errorf("two fixtures of the same replay differ:\n%s\n%s", b, b2)
	}

	// Edit the fixture: one refused command's code, and one gone.
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	refused := doc["refused_now"].([]any)
	if len(refused) < 2 {
		t.Fatalf("the fixture has %d refused commands: the test needs two", len(refused))
	}
	first := refused[0].(map[string]any)
	first["now"].(map[string]any)["code"] = "LIMIT_STEP"
	lost := refused[len(refused)-1].(map[string]any)["seq"]
	doc["refused_now"] = refused[:len(refused)-1]
	edited, _ := json.MarshalIndent(doc, "", "  ")
	if err := os.WriteFile(fixture, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, err = run(t, "--wal", w.dir, "--config", tight, "--expect", fixture)
	if code != 1 {
		t.Fatalf("--expect on an edited fixture: exit %d (%v), want 1\n%s", code, err, out)
	}
	for _, want := range []string{
		"refused_now[seq " + jsonText(first["seq"]) + "].now.code: fixture \"LIMIT_STEP\", now \"LIMIT_MAX\"",
		"refused_now[seq " + jsonText(lost) + "]: only now",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the diff does not say %q:\n%s", want, out)
		}
	}
	// With --json the document stays alone on stdout; the diff is the error.
	code, out, err = run(t, "--wal", w.dir, "--config", tight, "--expect", fixture, "--json")
	if code != 1 || err == nil || !strings.Contains(err.Error(), "LIMIT_STEP") || json.Unmarshal([]byte(out), &doc) != nil {
		t.Errorf("--json --expect: exit %d, error %v, stdout a JSON document: %v", code, err, json.Unmarshal([]byte(out), &doc))
	}

	// A fixture that is not one is bad input, as is asking for both.
	os.WriteFile(fixture, []byte(`{"format":"something else"}`), 0o600)
	if code, _, _ := run(t, "--wal", w.dir, "--expect", fixture); code != 2 {
		t.Errorf("--expect on a foreign document: exit %d, want 2", code)
	}
	if code, _, _ := run(t, "--wal", w.dir, "--expect", fixture, "--write-expect", again); code != 2 {
		t.Errorf("--expect with --write-expect: exit %d, want 2", code)
	}
	// The replay writes nothing into the journal's directory.
	before := tree(t, w.dir)
	if code, _, _ := run(t, "--wal", w.dir, "--write-expect", filepath.Join(w.dir, "f.json")); code != 2 {
		t.Errorf("--write-expect into the journal: exit %d, want 2", code)
	}
	if tree(t, w.dir) != before {
		t.Error("--write-expect wrote into the journal directory")
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// No journal is exit 2, and nothing is created: not the directory, not a
// fixture.
func TestMissingJournal(t *testing.T) {
	base := t.TempDir()
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o700)
	notes := filepath.Join(base, "notes")
	os.Mkdir(notes, 0o700)
	os.WriteFile(filepath.Join(notes, "README"), []byte("not a journal"), 0o600)
	for _, dir := range []string{filepath.Join(base, "typo"), empty, notes, filepath.Join(notes, "README")} {
		before := tree(t, base)
		code, out, err := run(t, "--wal", dir, "--write-expect", filepath.Join(base, "fixture.json"))
		if code != 2 || err == nil || !strings.Contains(err.Error(), "no journal") {
			t.Errorf("--wal %s: exit %d (%v), want 2 naming the missing journal\n%s", dir, code, err, out)
		}
		if after := tree(t, base); after != before {
			t.Errorf("--wal %s created files:\nbefore %s\nafter  %s", dir, before, after)
		}
	}
	if code, _, _ := run(t); code != 2 {
		t.Errorf("no --wal: exit %d, want 2", code)
	}
}

// A directory of garbage — segment-named files of random bytes, a valid
// journal whose records are not the engine's, or the engine's records in
// an order no engine wrote — is a coded error (exit 2), never a panic.
func TestGarbageJournal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	cases := map[string]func(dir string){
		"random segment": func(dir string) {
			os.WriteFile(filepath.Join(dir, "0000000000000001.wal"), random(8192), 0o600)
		},
		"two random segments": func(dir string) {
			os.WriteFile(filepath.Join(dir, "0000000000000001.wal"), random(600), 0o600)
			os.WriteFile(filepath.Join(dir, "0000000000000009.wal"), random(900), 0o600)
		},
		"not engine records": func(dir string) {
			appendRaw(t, dir, func(l *wal.Log) {
				for i := range 20 {
					l.Append(uint8(1+i%16), random(1+rng.IntN(40)))
				}
			})
		},
		"engine records out of order": func(dir string) {
			appendRaw(t, dir, func(l *wal.Log) {
				for _, r := range []rollback.Record{
					{Type: rollback.RecIntent, Saga: 7, Step: 1, Actuator: "shoulder", Target: 5},
					{Type: rollback.RecApplied, Saga: 7, Step: 1},
				} {
					l.Append(uint8(r.Type), r.AppendEncode(nil))
				}
			})
		},
	}
	for name, make := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "journal")
			os.Mkdir(dir, 0o700)
			make(dir)
			before := tree(t, dir)
			code, out, err := run(t, "--wal", dir)
			if code != 2 || err == nil {
				t.Fatalf("exit %d (%v), want 2\n%s", code, err, out)
			}
			if tree(t, dir) != before {
				t.Error("the replay changed the directory")
			}
			t.Log(err)
		})
	}
}

// appendRaw writes a journal with fill and closes it.
func appendRaw(t *testing.T, dir string, fill func(*wal.Log)) {
	t.Helper()
	l, err := wal.Open(dir, walOptions)
	if err != nil {
		t.Fatal(err)
	}
	fill(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// A config that does not parse is exit 2, before anything is replayed.
func TestBadConfig(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	w := newWriter(t, cfg)
	elbowRun(t, w)
	dir := t.TempDir()
	for name, text := range map[string]string{
		"not yaml":         "device: [",
		"unknown key":      "device: x\nactuators:\n  a: {kind: servo, driver: sim, min: 0, max: 1}\nwheels: 4\n",
		"min above max":    "device: x\nactuators:\n  a: {kind: servo, driver: sim, min: 5, max: 1}\n",
		"no such file":     "",
		"larger than 1MiB": strings.Repeat("#", maxConfig+1),
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if text != "" {
			os.WriteFile(path, []byte(text), 0o600)
		}
		code, out, err := run(t, "--wal", w.dir, "--config", path)
		if code != 2 || err == nil || !strings.Contains(err.Error(), "bad config") {
			t.Errorf("%s: exit %d (%v), want 2 (bad config)\n%s", name, code, err, out)
		}
	}
}

// A fixture round-trips through its own encoding, and any other bytes are
// refused with an error, never a panic.
func FuzzDecodeFixture(f *testing.F) {
	res := &Result{Format: Format, RefusedNow: []Command{{Seq: 3, Requested: 150, Then: Verdict{Served: true, Target: num(150)},
		Now: Verdict{Code: "LIMIT_MAX", Reason: "shoulder: 150 is above max 60"}}},
		Final: []Position{{Actuator: "shoulder", Journal: 150, Replay: 30, Differs: true}}}
	res.normalize()
	res.summarize()
	good, err := res.Fixture()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":"saga-supervisor replay 1","final":[{"actuator":"a","journal":"NaN","replay":"+Inf"}]}`))
	f.Add([]byte(`{"format":"saga-supervisor replay 1"} {}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeFixture(b)
		if err != nil {
			return
		}
		enc, err := r.Fixture()
		if err != nil {
			t.Fatalf("a decoded fixture does not encode: %v", err)
		}
		r2, err := DecodeFixture(enc)
		if err != nil {
			t.Fatalf("a fixture's own encoding does not decode: %v\n%s", err, enc)
		}
		if d := Compare(r, r2); len(d) != 0 {
			t.Fatalf("a fixture changed through its encoding: %v", d)
		}
	})
}

// Journals of engine records, mostly in an order an engine could write
// and sometimes not, with random values (non-finite ones too), replay or
// are refused — exit 0, 1 or 2 — and never panic, hang or print something
// that is not a result.
func TestRandomJournals(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	acts := []string{"base", "shoulder", "elbow", "gripper", "wrist"}
	values := []float64{0, 10, 45, 90, -5, 1e300, math.NaN(), math.Inf(1)}
	codes := []string{"LIMIT_MAX", "LIMIT_SLEW", "SUPPLY_LOW", "DEADLINE_PASSED", "NOT_FINITE", "SAGA_BUSY", "HALTED",
		"SAGA_UNKNOWN", "APPROVALS_FULL", "LEASE_EXPIRED", "FORBIDDEN"}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	value := func() float64 { return values[rng.IntN(len(values))] }
	exits := map[int]int{}
	for i := range 60 {
		var recs []rollback.Record
		next := uint64(1)
		steps := map[uint64]uint32{} // open sagas and their steps
		failed := map[uint64]bool{}  // a step of the saga failed: it cannot commit
		open := func() (uint64, bool) {
			for id := range steps {
				return id, true
			}
			return 0, false
		}
		add := func(r rollback.Record) {
			r.UnixNano = int64(1.7e18) + int64(len(recs))*int64(1+rng.IntN(1e8))
			recs = append(recs, r)
		}
		for range 10 + rng.IntN(40) {
			s, ok := open()
			if rng.IntN(25) == 0 { // now and then, something no engine writes
				s = uint64(rng.IntN(int(next) + 1))
			}
			switch k := rng.IntN(12); {
			case k < 2 || !ok:
				add(rollback.Record{Type: rollback.RecBegin, Saga: next, Agent: "a", Lease: "l", Epoch: 1})
				steps[next] = 0
				next++
			case k < 6:
				steps[s]++
				add(rollback.Record{Type: rollback.RecIntent, Saga: s, Step: steps[s], Actuator: pick(acts), CmdID: fmt.Sprint(len(recs)),
					Requested: value(), Target: value()})
				if rng.IntN(3) > 0 {
					add(rollback.Record{Type: rollback.RecApplied, Saga: s, Step: steps[s]})
				} else {
					add(rollback.Record{Type: rollback.RecFailed, Saga: s, Step: steps[s], Code: "FAILED", Flags: uint8(rng.IntN(2))})
					failed[s] = true
				}
			case k < 8:
				add(rollback.Record{Type: rollback.RecRefused, Saga: s, Actuator: pick(acts), Requested: value(), Code: pick(codes),
					CmdID: "r" + fmt.Sprint(len(recs)), Agent: "a", Lease: "l", Epoch: 1})
			case k < 9 && !failed[s]:
				add(rollback.Record{Type: rollback.RecCommit, Saga: s})
				delete(steps, s)
			case k < 10:
				// An unwind as the engine journals one: every step
				// settled, last first (a failed attempt now and then),
				// and the verdict its buckets make.
				add(rollback.Record{Type: rollback.RecAbort, Saga: s, Message: "why"})
				verdict := "clean"
				for n := steps[s]; n > 0; n-- {
					add(rollback.Record{Type: rollback.RecCompIntent, Saga: s, Step: n, Actuator: pick(acts), Target: value(), Attempt: 1})
					if rng.IntN(4) == 0 {
						add(rollback.Record{Type: rollback.RecCompDone, Saga: s, Step: n, Actuator: pick(acts), Attempt: 1})
					}
					bucket := []string{"compensated", "fallback_safe"}[rng.IntN(2)]
					if bucket != "compensated" {
						verdict = "partial"
					}
					add(rollback.Record{Type: rollback.RecCompDone, Saga: s, Step: n, Actuator: pick(acts), Attempt: 1, Code: bucket})
				}
				add(rollback.Record{Type: rollback.RecEnd, Saga: s, Code: verdict})
				delete(steps, s)
			case k < 11:
				add(rollback.Record{Type: []rollback.RecordType{rollback.RecHalt, rollback.RecReset, rollback.RecRecovery, rollback.RecLease}[rng.IntN(4)],
					Message: pick([]string{"m", recoveryFinished}), Agent: "a", Lease: "l", Epoch: 1})
			default:
				add(rollback.Record{Type: []rollback.RecordType{rollback.RecSafe, rollback.RecObserved}[rng.IntN(2)], Actuator: pick(acts),
					Target: value(), Code: pick([]string{"value", "detach"})})
			}
		}
		dir := filepath.Join(t.TempDir(), "journal")
		appendRaw(t, dir, func(l *wal.Log) {
			for _, r := range recs {
				if _, err := l.Append(uint8(r.Type), r.AppendEncode(nil)); err != nil {
					t.Fatal(err)
				}
			}
		})
		code, out, err := run(t, "--wal", dir, "--json")
		exits[code]++
		switch {
		case code == 2:
		case code <= 1:
			var res Result
			if jerr := json.Unmarshal([]byte(out), &res); jerr != nil {
				t.Errorf("journal %d: exit %d (%v) but no JSON result: %v\n%s", i, code, err, jerr, out)
			}
		default:
			t.Errorf("journal %d: exit %d (%v)", i, code, err)
		}
	}
	t.Logf("exits: %v", exits)
	// The generator must reach the replay itself, not only the checks
	// before it.
	if exits[0]+exits[1] < 10 {
		t.Errorf("only %d of the journals were replayed (exits %v): the test exercises too little", exits[0]+exits[1], exits)
	}
}

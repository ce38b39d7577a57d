package replay

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// shortened is a journal that retention has shortened, written by the
// daemon's own pieces (recovery.Open, the checkpointer, wal retention),
// and what the test knows of it.
type shortened struct {
	w    *writer
	long saga   // open across ckpt, steps before and after it; its BEGIN is gone
	ckpt uint64 // the older kept checkpoint: the one the replay starts from
	// newest is the newer kept checkpoint (0 if the test wrote none).
	newest uint64
}

// pushOut commits sagas on the elbow, a checkpoint after each, until
// retention has deleted the journal up to and including seq.
func pushOut(t *testing.T, w *writer, seq uint64) {
	t.Helper()
	for i := 0; firstSeq(t, w.dir) <= seq; i++ {
		if i == 500 {
			t.Fatalf("retention kept the journal from seq %d after %d checkpoints", firstSeq(t, w.dir), i)
		}
		s := w.begin("planner")
		w.mustStep(s, 20*time.Millisecond, "elbow", float64(30+i%4*15))
		w.mustStep(s, 20*time.Millisecond, "elbow", float64(40+i%3*10))
		w.commit(s)
		w.flush()
		w.checkpoint()
	}
}

// shortenedStart writes: the gripper set once and never again; a saga
// (long) on the shoulder, with a step above 60, left open while pushOut
// pushes its BEGIN out of the journal; then a shoulder step of long and a
// checkpoint taken while that step's outcome is not yet durable.
func shortenedStart(t *testing.T, cfg *config.Config) *shortened {
	t.Helper()
	ms := time.Millisecond
	w := newRetainingWriter(t, cfg)
	grip := w.begin("planner")
	w.mustStep(grip, 20*ms, "gripper", 35)
	w.commit(grip)

	long := w.begin("controller")
	w.mustStep(long, 20*ms, "shoulder", 100) // above 60, before the checkpoint: not replayed
	w.mustStep(long, 20*ms, "shoulder", 50)
	w.flush()
	var longBegin uint64
	for _, r := range records(t, w.dir) {
		if r.Type == rollback.RecBegin && r.Saga == long.id {
			longBegin = r.seq
		}
	}
	pushOut(t, w, longBegin)

	w.mustStep(long, 20*ms, "shoulder", 90)
	ckpt := w.checkpoint()
	if rs := records(t, w.dir); rs[len(rs)-1].seq != ckpt || rs[len(rs)-1].Type != rollback.RecIntent || rs[len(rs)-1].Saga != long.id {
		t.Fatalf("the checkpoint at seq %d is not at the long saga's step in flight: %+v", ckpt, rs[len(rs)-1])
	}
	return &shortened{w: w, long: long, ckpt: ckpt}
}

// shortenedJournal goes on from shortenedStart: a saga on the elbow, more
// of long — a step above 60 — and its commit, a checkpoint (newest), and a
// last saga on the shoulder, with a step above 60.
func shortenedJournal(t *testing.T, cfg *config.Config) *shortened {
	t.Helper()
	ms := time.Millisecond
	j := shortenedStart(t, cfg)
	w := j.w
	w.tick(time.Second) // the elbow's first step from the checkpoint is not slew-checked: let the rate not bind
	s := w.begin("planner")
	w.mustStep(s, 20*ms, "elbow", 70)
	w.commit(s)
	w.mustStep(j.long, 20*ms, "shoulder", 110) // above 60, after the checkpoint
	w.mustStep(j.long, 20*ms, "shoulder", 40)
	w.commit(j.long)
	w.flush()
	j.newest = w.checkpoint()

	last := w.begin("planner")
	w.mustStep(last, 20*ms, "shoulder", 80)
	w.mustStep(last, 20*ms, "shoulder", 30)
	w.commit(last)
	w.flush()
	j.checkKept(t)
	return j
}

// checkKept checks that the two kept checkpoints are j's, and that the
// journal begins after the long saga's BEGIN and at or before ckpt.
func (j *shortened) checkKept(t *testing.T) {
	t.Helper()
	good, bad, err := wal.Checkpoints(j.w.dir, wal.Options{})
	if err != nil || len(bad) != 0 || len(good) != 2 || good[0].At.Seq != j.newest || good[1].At.Seq != j.ckpt {
		t.Fatalf("checkpoints kept: %+v %+v %v; want seqs %d and %d", good, bad, err, j.newest, j.ckpt)
	}
	if first := firstSeq(t, j.w.dir); first == 1 || first > j.ckpt {
		t.Fatalf("the journal begins at seq %d: want after seq 1, at or before the checkpoint (%d)", first, j.ckpt)
	}
	for _, r := range records(t, j.w.dir) {
		if r.Type == rollback.RecBegin && r.Saga == j.long.id {
			t.Fatalf("the long saga's BEGIN (seq %d) is still in the journal", r.seq)
		}
	}
}

func ckptFile(seq uint64) string { return fmt.Sprintf("%016x.ckpt", seq) }

func hasNote(res *Result, part string) bool {
	return slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, part) })
}

// A journal retention has shortened, replayed under the config it was
// written with, gives no difference: the replay starts from the older
// kept checkpoint, the saga open across it is replayed (not skipped as an
// orphan), and every actuator starts where the journal's records left it
// (the gripper, last moved before the journal's first record, included).
func TestShortenedJournalSameConfig(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	j := shortenedJournal(t, cfg)
	before := tree(t, j.w.dir)

	code, res := replayJSON(t, "--wal", j.w.dir, "--config", path)
	if code != 0 || res.Summary.Differs {
		t.Errorf("exit %d, want 0: %s", code, res.Summary.Line)
	}
	if c := res.Window.Checkpoint; c == nil || c.Seq != j.ckpt || c.File != ckptFile(j.ckpt) {
		t.Errorf("started from %+v, want checkpoint %s (seq %d)", c, ckptFile(j.ckpt), j.ckpt)
	}
	if res.Window.FirstSeq <= 1 || res.Window.StartSeq != j.ckpt+1 {
		t.Errorf("window %+v: want the journal from after seq 1, driving from seq %d", res.Window, j.ckpt+1)
	}
	if len(res.Skipped) != 0 {
		t.Errorf("sagas skipped: %+v", res.Skipped)
	}
	want := []OpenSaga{{Saga: j.long.id, Agent: "controller", FromCheckpoint: true}}
	if !slices.Equal(res.Window.OpenAtStart, want) {
		t.Errorf("open at the start: %+v, want %+v", res.Window.OpenAtStart, want)
	}
	for _, p := range res.Final {
		want, _ := j.w.e.Commanded(p.Actuator)
		if float64(p.Journal) != want || float64(p.Replay) != want {
			t.Errorf("%s at the end: journal %v, replay %v; the daemon commanded %v", p.Actuator, p.Journal, p.Replay, want)
		}
	}
	if s := res.Summary; s.Steps != 5 || s.Commits != 3 || s.Begins != 2 {
		t.Errorf("replayed %d steps, %d commits, %d begins; want the 5 steps, 3 commits and 2 begins after the checkpoint", s.Steps, s.Commits, s.Begins)
	}
	if !hasNote(res, "starts from checkpoint "+ckptFile(j.ckpt)) || !hasNote(res, "inherited: 1 record ") {
		t.Errorf("the notes do not say where the replay started, or that the long saga's step outcome was taken: %q", res.Notes)
	}
	if after := tree(t, j.w.dir); after != before {
		t.Errorf("the replay changed the journal directory:\nbefore %s\nafter  %s", before, after)
	}
	_, text, _ := run(t, "--wal", j.w.dir, "--config", path)
	for _, line := range []string{
		fmt.Sprintf("started from checkpoint %s (seq %d)", ckptFile(j.ckpt), j.ckpt),
		fmt.Sprintf("saga %d (controller) was open at checkpoint seq %d", j.long.id, j.ckpt),
	} {
		if !strings.Contains(text, line) {
			t.Errorf("the report does not say %q:\n%s", line, text)
		}
	}
}

// Under a tighter shoulder limit exactly the shoulder commands after the
// checkpoint above it are refused now — the long saga's among them — and
// none before it, though the long saga's earlier steps were above it too.
func TestShortenedJournalTighterLimit(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	j := shortenedJournal(t, cfg)
	const tighter = 60
	_, tight := armConfig(t, tighter, armRate)
	var want []uint64
	var longAfter bool
	for _, r := range records(t, j.w.dir) {
		if r.Type == rollback.RecIntent && r.Actuator == "shoulder" && r.Requested > tighter && r.seq > j.ckpt {
			want = append(want, r.seq)
			longAfter = longAfter || r.Saga == j.long.id
		}
	}
	if len(want) < 2 || !longAfter {
		t.Fatalf("shoulder commands above %d after the checkpoint: %v; the test needs the long saga's and another", tighter, want)
	}
	code, res := replayJSON(t, "--wal", j.w.dir, "--config", tight)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var got []uint64
	for _, c := range res.RefusedNow {
		got = append(got, c.Seq)
		if c.Now.Code != string(limits.LimitMax) || !c.Then.Served || c.BeforeWindow {
			t.Errorf("seq %d: %+v", c.Seq, c)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("refused now at %v, want %v (the commands after checkpoint seq %d above %d)", got, want, j.ckpt, tighter)
	}
	if len(res.ServedNow)+len(res.RefusedDifferently)+len(res.ClampedDifferently)+len(res.Sagas)+len(res.Skipped) != 0 {
		t.Errorf("other differences: %+v %+v %+v %+v %+v", res.ServedNow, res.RefusedDifferently, res.ClampedDifferently, res.Sagas, res.Skipped)
	}
	if c := res.Window.Checkpoint; c == nil || c.Seq != j.ckpt {
		t.Errorf("started from %+v, want seq %d", c, j.ckpt)
	}
}

// copyJournal copies a journal directory, for a test to damage.
func copyJournal(t *testing.T, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "journal")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, n.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// rewriteCheckpoint rewrites a checkpoint file with edit applied to its
// header and payload, sealed again (length, CRC, SHA-256) as the journal
// seals it (docs/JOURNAL.md), so that the file still decodes.
func rewriteCheckpoint(t *testing.T, path string, edit func(hdr, payload []byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hdr := append([]byte(nil), b[:80]...)
	payload := edit(hdr, append([]byte(nil), b[80:len(b)-32]...))
	binary.LittleEndian.PutUint32(hdr[64:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(hdr[68:], crc32.Checksum(hdr[:68], crc32.MakeTable(crc32.Castagnoli)))
	body := append(hdr, payload...)
	sum := sha256.Sum256(body)
	if err := os.WriteFile(path, append(body, sum[:]...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// With every checkpoint file gone, the replay does as before: actuators
// from the config's initial values, the saga whose BEGIN is gone skipped,
// and a note that no checkpoint covers the missing records.
func TestShortenedJournalWithoutCheckpoints(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	j := shortenedJournal(t, cfg)
	dir := copyJournal(t, j.w.dir)
	for _, seq := range []uint64{j.ckpt, j.newest} {
		if err := os.Remove(filepath.Join(dir, ckptFile(seq))); err != nil {
			t.Fatal(err)
		}
	}
	code, res := replayJSON(t, "--wal", dir, "--config", path)
	if code == 2 {
		t.Fatalf("exit 2: %s", res.Summary.Line)
	}
	if res.Window.Checkpoint != nil || res.Window.StartSeq != res.Window.FirstSeq {
		t.Errorf("window %+v: want no checkpoint, driving from the journal's first record", res.Window)
	}
	if !slices.ContainsFunc(res.Skipped, func(s SkippedSaga) bool { return s.Saga == j.long.id }) {
		t.Errorf("the long saga, whose BEGIN is gone, is not skipped: %+v", res.Skipped)
	}
	if !hasNote(res, "no checkpoint covers the missing records") || !hasNote(res, "the journal directory holds none") {
		t.Errorf("notes %q", res.Notes)
	}
	for _, p := range res.Final {
		if p.Actuator == "gripper" && p.Journal != Num(cfg.Actuators["gripper"].Initial) {
			t.Errorf("gripper in the journal's view: %v, want its initial value: nothing says otherwise", p.Journal)
		}
	}
}

// A damaged older checkpoint, or one whose record the journal holds with
// another hash, is passed over for the newer one, and the notes say so; a
// checkpoint whose snapshot does not restore is bad input (exit 2, the
// journal untouched); a snapshot taken under other actuators than the
// config's is restored for the actuators both have, and noted.
func TestShortenedJournalCheckpointProblems(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	j := shortenedJournal(t, cfg)

	for _, c := range []struct {
		name string
		edit func(path string)
		note string
	}{
		{"damaged", func(p string) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x40
			os.WriteFile(p, b, 0o600)
		}, "is damaged and not used"},
		{"another journal's", func(p string) {
			rewriteCheckpoint(t, p, func(hdr, payload []byte) []byte { hdr[30] ^= 1; return payload })
		}, "has another hash"},
	} {
		dir := copyJournal(t, j.w.dir)
		c.edit(filepath.Join(dir, ckptFile(j.ckpt)))
		code, res := replayJSON(t, "--wal", dir, "--config", path)
		if code != 0 || res.Window.Checkpoint == nil || res.Window.Checkpoint.Seq != j.newest {
			t.Errorf("%s older checkpoint: exit %d, started from %+v; want 0, from the newer one (seq %d): %s",
				c.name, code, res.Window.Checkpoint, j.newest, res.Summary.Line)
		}
		if !hasNote(res, ckptFile(j.ckpt)) || !hasNote(res, c.note) {
			t.Errorf("%s older checkpoint: the notes do not say it was passed over: %q", c.name, res.Notes)
		}
	}

	dir := copyJournal(t, j.w.dir)
	rewriteCheckpoint(t, filepath.Join(dir, ckptFile(j.ckpt)), func(_, payload []byte) []byte { return payload[:len(payload)-3] })
	before := tree(t, dir)
	code, out, err := run(t, "--wal", dir, "--config", path)
	if code != 2 || err == nil || !strings.Contains(err.Error(), ckptFile(j.ckpt)) || !strings.Contains(err.Error(), "bad snapshot") {
		t.Errorf("a snapshot that does not restore: exit %d (%v), want 2 naming the checkpoint\n%s", code, err, out)
	}
	if after := tree(t, dir); after != before {
		t.Errorf("the refused replay changed the journal directory")
	}

	// The config with one more actuator: the snapshot knows nothing of it.
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	more := filepath.Join(t.TempDir(), "arm-wrist.yaml")
	wrist := "  wrist:\n    kind: servo\n    driver: sim\n    sim: {slew: 0}\n    min: 0\n    max: 90\n    initial: 5\n"
	if err := os.WriteFile(more, append(text, wrist...), 0o600); err != nil {
		t.Fatal(err)
	}
	code, res := replayJSON(t, "--wal", j.w.dir, "--config", more)
	if code != 0 || res.Window.Checkpoint == nil || res.Window.Checkpoint.Seq != j.ckpt {
		t.Errorf("with a wrist: exit %d, from %+v: %s", code, res.Window.Checkpoint, res.Summary.Line)
	}
	if !hasNote(res, "taken under other actuators") || !hasNote(res, "actuator wrist was not configured when the snapshot was taken") {
		t.Errorf("with a wrist: notes %q", res.Notes)
	}
}

// A window that starts after the checkpoint while the long saga is still
// open drives from the checkpoint on (the saga's commands before the
// window are reported, marked); one that starts before the checkpoint
// cannot replay the records the snapshot covers, and says so; one that
// ends before it is replayed as a journal without a usable checkpoint.
func TestShortenedJournalWindows(t *testing.T) {
	cfg, _ := armConfig(t, armMax, armRate)
	j := shortenedJournal(t, cfg)
	_, tight := armConfig(t, 60, armRate)
	recs := records(t, j.w.dir)
	var longHigh, longCommit uint64 // the long saga's step above 60 after the checkpoint; its COMMIT
	for _, r := range recs {
		switch {
		case r.seq > j.ckpt && r.Saga == j.long.id && r.Type == rollback.RecIntent && r.Requested > 60:
			longHigh = r.seq
		case r.Saga == j.long.id && r.Type == rollback.RecCommit:
			longCommit = r.seq
		}
	}
	from := longHigh + 2 // after its step above 60, before its COMMIT
	if from >= longCommit {
		t.Fatalf("no room between seq %d and the COMMIT at %d", longHigh, longCommit)
	}
	code, res := replayJSON(t, "--wal", j.w.dir, "--config", tight, "--from", strconv.FormatUint(from, 10))
	if code != 1 || res.Window.StartSeq != j.ckpt+1 || res.Window.Checkpoint == nil {
		t.Fatalf("--from %d: exit %d, window %+v; want driving from seq %d", from, code, res.Window, j.ckpt+1)
	}
	if want := []OpenSaga{{Saga: j.long.id, Agent: "controller", FromCheckpoint: true}}; !slices.Equal(res.Window.OpenAtStart, want) {
		t.Errorf("--from %d: open at the start %+v, want %+v", from, res.Window.OpenAtStart, want)
	}
	if len(res.RefusedNow) == 0 || res.RefusedNow[0].Seq != longHigh || !res.RefusedNow[0].BeforeWindow {
		t.Errorf("--from %d: refused now %+v; want the long saga's seq %d first, before the window", from, res.RefusedNow, longHigh)
	}

	from = j.ckpt - 3
	if from < res.Window.FirstSeq {
		t.Fatalf("the checkpoint is too near the journal's start (%d) for this test", res.Window.FirstSeq)
	}
	_, res = replayJSON(t, "--wal", j.w.dir, "--config", tight, "--from", strconv.FormatUint(from, 10))
	if res.Window.Checkpoint == nil || res.Window.FromSeq != from || res.Window.StartSeq != j.ckpt+1 ||
		!hasNote(res, fmt.Sprintf("its records from seq %d to %d are in the checkpoint's snapshot", from, j.ckpt)) {
		t.Errorf("--from %d: window %+v, notes %q", from, res.Window, res.Notes)
	}

	to := j.ckpt
	_, res = replayJSON(t, "--wal", j.w.dir, "--config", tight, "--to", strconv.FormatUint(to, 10))
	if res.Window.Checkpoint != nil || !hasNote(res, "no checkpoint covers the missing records") ||
		!hasNote(res, "at or after the window's end") {
		t.Errorf("--to %d: started from %+v, notes %q", to, res.Window.Checkpoint, res.Notes)
	}
}

// A restart after the checkpoint (a RECOVERY record: the daemon crashed
// with the long saga open, and the next process unwound it) is replayed
// as a new engine restored from the checkpoint's snapshot plus what the
// replay journaled since: it finds the long saga open and unwinds it as
// the daemon did.
func TestShortenedJournalRestart(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	j := shortenedStart(t, cfg)
	w := j.w
	w.crash() // the close writes a checkpoint of everything: it and ckpt are kept
	w.tick(2 * time.Second)
	w.restart()
	s := w.begin("planner")
	w.mustStep(s, 20*time.Millisecond, "shoulder", 70)
	w.commit(s)
	w.flush()
	good, _, err := wal.Checkpoints(w.dir, wal.Options{})
	if err != nil || len(good) != 2 || good[1].At.Seq != j.ckpt {
		t.Fatalf("checkpoints %+v %v; want the older at seq %d", good, err, j.ckpt)
	}
	j.newest = good[0].At.Seq
	j.checkKept(t)

	code, res := replayJSON(t, "--wal", w.dir, "--config", path)
	if code != 0 || res.Summary.Restarts != 1 {
		t.Errorf("exit %d, %d restarts; want 0 and 1: %s", code, res.Summary.Restarts, res.Summary.Line)
	}
	if c := res.Window.Checkpoint; c == nil || c.Seq != j.ckpt {
		t.Errorf("started from %+v, want seq %d", c, j.ckpt)
	}
	for _, p := range res.Final {
		want, _ := w.e.Commanded(p.Actuator)
		if float64(p.Journal) != want || float64(p.Replay) != want {
			t.Errorf("%s at the end: journal %v, replay %v; the daemon commanded %v", p.Actuator, p.Journal, p.Replay, want)
		}
	}
	if len(res.Sagas) != 0 || len(res.Skipped) != 0 {
		t.Errorf("sagas differ %+v, skipped %+v", res.Sagas, res.Skipped)
	}
	if !hasNote(res, "rebuilt from the checkpoint's snapshot and the replay's own journal") {
		t.Errorf("notes %q", res.Notes)
	}
}

// A checkpoint taken inside a halt — the HALT durable, a step's effect
// still in flight, the safe moves not yet journaled — leaves the replay's
// engine halted with nothing of its own to do: the step's outcome and the
// SAFE records that follow are taken from the journal, so the replay
// agrees with the journal there and after the reset.
func TestShortenedJournalCheckpointInsideAHalt(t *testing.T) {
	cfg, path := armConfig(t, armMax, armRate)
	w := newRetainingWriter(t, cfg)
	pushOut(t, w, 1)

	h := w.begin("planner")
	w.mustStep(h, 20*time.Millisecond, "elbow", 25)
	entered, release := make(chan struct{}), make(chan struct{})
	w.servos["shoulder"].FailWhen(func(v float64) bool {
		if v == 77 {
			close(entered)
			<-release
		}
		return false
	})
	w.tick(20 * time.Millisecond)
	stepErr := make(chan error, 1)
	go func() {
		_, err := w.e.Step(h.id, h.owner, rollback.Command{ID: "h1", Actuator: "shoulder", Value: 77})
		stepErr <- err
	}()
	<-entered // the INTENT is durable, the effect in flight
	intent := w.log.DurableSeq()
	halted := make(chan struct{})
	go func() {
		w.e.Halt("operator pressed stop")
		close(halted)
	}()
	for deadline := time.Now().Add(10 * time.Second); w.log.DurableSeq() == intent; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the HALT never became durable")
		}
	}
	ckpt := w.checkpoint()
	close(release)
	if err := <-stepErr; rollback.CodeOf(err) != rollback.CodeHalted {
		t.Fatalf("the step in flight at the halt: %v", err)
	}
	<-halted
	w.servos["shoulder"].Clear()
	if rs := records(t, w.dir); !slices.ContainsFunc(rs, func(r seqRecord) bool { return r.seq == ckpt && r.Type == rollback.RecHalt }) ||
		!slices.ContainsFunc(rs, func(r seqRecord) bool { return r.seq > ckpt && r.Type == rollback.RecSafe }) {
		t.Fatalf("the checkpoint at seq %d is not at the HALT with SAFE records after it", ckpt)
	}

	w.tick(time.Second)
	if err := w.e.Reset("operator", w.e.HaltGen()); err != nil {
		t.Fatal(err)
	}
	s := w.begin("planner")
	w.mustStep(s, 20*time.Millisecond, "gripper", 15)
	w.commit(s)
	w.flush()
	newest := w.checkpoint()
	s = w.begin("planner")
	w.mustStep(s, 20*time.Millisecond, "gripper", 25)
	w.commit(s)
	w.flush()
	(&shortened{w: w, long: saga{id: 0}, ckpt: ckpt, newest: newest}).checkKept(t)

	code, res := replayJSON(t, "--wal", w.dir, "--config", path)
	if code != 0 {
		t.Errorf("exit %d, want 0: %s\ndivergence %+v\nsagas %+v", code, res.Summary.Line, res.Divergence, res.Sagas)
	}
	if c := res.Window.Checkpoint; c == nil || c.Seq != ckpt {
		t.Errorf("started from %+v, want seq %d", c, ckpt)
	}
	var hBegin uint64
	for _, r := range records(t, w.dir) {
		if r.Type == rollback.RecBegin && r.Saga == h.id {
			hBegin = r.seq
		}
	}
	if want := []OpenSaga{{Saga: h.id, Agent: "planner", BeginSeq: hBegin, FromCheckpoint: true}}; hBegin == 0 || !slices.Equal(res.Window.OpenAtStart, want) {
		t.Errorf("open at the start %+v, want %+v", res.Window.OpenAtStart, want)
	}
	// The step's APPLIED, then a SAFE record for each of shoulder, elbow
	// and gripper (none holds).
	if !hasNote(res, "inherited: 4 records") {
		t.Errorf("notes %q", res.Notes)
	}
	for _, p := range res.Final {
		want, _ := w.e.Commanded(p.Actuator)
		if float64(p.Journal) != want || float64(p.Replay) != want {
			t.Errorf("%s at the end: journal %v, replay %v; the daemon commanded %v", p.Actuator, p.Journal, p.Replay, want)
		}
	}
}

// A checkpoint taken inside an unwind — the saga aborted, a compensation
// attempt in flight — leaves the rest of that unwind to the journal: the
// attempt's failure, the next attempts and their failures, the fallback
// to the safe value the daemon reached after every attempt failed, the
// elbow's compensation after it and the END are taken from it. The
// replay's engine, which did not begin the unwind, makes no attempts of
// its own: knowing one failure fewer than the daemon, it would try once
// more, the scripted failures would have run out, and the shoulder would
// end compensated instead of at its safe value.
func TestShortenedJournalCheckpointInsideAnUnwind(t *testing.T) {
	text := fmt.Sprintf(armYAML, float64(armMax), float64(armRate)) + "unwind:\n  on_compensation_failure: continue\n"
	cfg, err := config.ParseLayout([]byte(text), "arm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "arm.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newRetainingWriter(t, cfg)
	pushOut(t, w, 1)
	ms := time.Millisecond
	s := w.begin("planner")
	w.mustStep(s, 20*ms, "shoulder", 50)
	w.commit(s)

	u := w.begin("planner")
	w.mustStep(u, 20*ms, "elbow", 25)
	w.mustStep(u, 20*ms, "shoulder", 80)
	w.flush()
	entered, release := make(chan struct{}), make(chan struct{})
	var attempts int
	w.servos["shoulder"].FailWhen(func(v float64) bool {
		if v != 50 {
			return false
		}
		if attempts++; attempts == 1 {
			close(entered)
			<-release
		}
		return true // every compensation back to 50 fails
	})
	w.tick(5 * ms)
	unwound := make(chan *rollback.Report, 1)
	go func() {
		rep, _ := w.e.Abort(u.id, u.owner, "the agent changed its mind")
		unwound <- rep
	}()
	<-entered // the first compensation of the shoulder is durable and in flight
	ckpt := w.checkpoint()
	close(release)
	rep := <-unwound
	w.e.WaitHalts()
	w.servos["shoulder"].Clear()
	if rep == nil || len(rep.Steps) != 2 || rep.Steps[0].Bucket != rollback.FallbackSafe || rep.Steps[1].Bucket != rollback.Compensated || attempts != 3 {
		t.Fatalf("the unwind: %+v after %d attempts; want the shoulder's fallback after 3, the elbow compensated", rep, attempts)
	}
	if rs := records(t, w.dir); !slices.ContainsFunc(rs, func(r seqRecord) bool {
		return r.seq == ckpt && r.Type == rollback.RecCompIntent && r.Actuator == "shoulder" && r.Attempt == 1
	}) {
		t.Fatalf("the checkpoint at seq %d is not at the shoulder's first compensation", ckpt)
	}
	s = w.begin("planner")
	w.mustStep(s, 20*ms, "gripper", 15)
	w.commit(s)
	w.flush()
	newest := w.checkpoint()
	s = w.begin("planner")
	w.mustStep(s, 20*ms, "gripper", 25)
	w.commit(s)
	w.flush()
	(&shortened{w: w, ckpt: ckpt, newest: newest}).checkKept(t)

	code, res := replayJSON(t, "--wal", w.dir, "--config", path)
	if code != 0 {
		t.Errorf("exit %d, want 0: %s\ndivergence %+v\nsagas %+v", code, res.Summary.Line, res.Divergence, res.Sagas)
	}
	if c := res.Window.Checkpoint; c == nil || c.Seq != ckpt {
		t.Errorf("started from %+v, want seq %d", c, ckpt)
	}
	if !slices.ContainsFunc(res.Window.OpenAtStart, func(o OpenSaga) bool { return o.Saga == u.id && o.FromCheckpoint }) {
		t.Errorf("open at the start %+v, want saga %d from the checkpoint", res.Window.OpenAtStart, u.id)
	}
	for _, p := range res.Final {
		want, _ := w.e.Commanded(p.Actuator)
		if float64(p.Journal) != want || float64(p.Replay) != want {
			t.Errorf("%s at the end: journal %v, replay %v; the daemon commanded %v", p.Actuator, p.Journal, p.Replay, want)
		}
	}
	// The attempt's COMP_DONE, two more attempts (COMP_INTENT, COMP_DONE
	// each), the fallback's COMP_DONE, the elbow's COMP_INTENT and
	// COMP_DONE, and the END.
	if !hasNote(res, "inherited: 9 records") {
		t.Errorf("notes %q", res.Notes)
	}
}

// An attempt taken from the journal is dropped from the fault script, so
// the next attempt the replay makes itself on that saga and actuator (its
// own recovery, after a restart in the middle of the unwind) fails or not
// as the daemon's next attempt did, not as the one taken.
func TestFaultScriptDropsTakenAttempts(t *testing.T) {
	k := compKey{saga: 7, actuator: "shoulder"}
	f := newFaults(map[compKey][]compAttempt{k: {{seq: 10, failed: true, message: "taken"}, {seq: 12}}})
	f.origOf[3] = 7
	f.drop(k)
	f.journaled(&rollback.Record{Type: rollback.RecCompIntent, Saga: 3, Actuator: "shoulder"})
	if err := f.take("shoulder"); err != nil {
		t.Errorf("the attempt after the one taken succeeded then, and fails now: %v", err)
	}
	f.drop(k) // nothing left: no panic, nothing scripted
	f.journaled(&rollback.Record{Type: rollback.RecCompIntent, Saga: 3, Actuator: "shoulder"})
	if err := f.take("shoulder"); err != nil || f.injected != 0 {
		t.Errorf("an attempt past the script: %v, %d injected", err, f.injected)
	}
}

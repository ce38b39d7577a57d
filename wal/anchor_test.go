package wal_test

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// segFiles lists the segment files of /j, oldest first.
func segFiles(t *testing.T, fsys *crashfs.FS) []string {
	t.Helper()
	names, err := fsys.ReadDir("/j")
	if err != nil {
		t.Fatal(err)
	}
	var segs []string
	for _, n := range names {
		if strings.HasSuffix(n, ".wal") {
			segs = append(segs, "/j/"+n)
		}
	}
	return segs
}

// refusedAsLost checks that Open refuses the journal with a *LossError and
// Verify reports the same loss; it returns the loss.
func refusedAsLost(t *testing.T, fsys *crashfs.FS, opt wal.Options) *wal.LossError {
	t.Helper()
	opt.FS = fsys
	_, err := wal.Open("/j", opt)
	var le *wal.LossError
	if !errors.As(err, &le) || !errors.Is(err, wal.ErrLost) {
		t.Fatalf("Open: %v, want a *LossError", err)
	}
	vr, verr := wal.Verify("/j", opt)
	if verr != nil || vr.OK() || vr.Lost == nil || *vr.Lost != *le {
		t.Fatalf("Verify: %+v %v, want the loss Open found: %v", vr, verr, le)
	}
	return le
}

// Losing the newest segments, or all of them, or putting an older copy of
// the segments (or another journal's) in place, is refused by Open and
// reported by Verify: the anchor names a record the segments no longer
// hold. Without the anchor each of these journals verifies clean, and
// Open carries on with durable records gone.
func TestAnchorDetectsLoss(t *testing.T) {
	opt := wal.Options{SegmentSize: 1024}
	build := func(n int) (*crashfs.FS, *model) {
		fsys := crashfs.New()
		m := newModel()
		o := opt
		o.FS = fsys
		l := mustOpen(t, "/j", o)
		appendN(t, l, m, n, 100)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		return fsys, m
	}

	t.Run("newest segment deleted", func(t *testing.T) {
		fsys, _ := build(60)
		segs := segFiles(t, fsys)
		if err := fsys.Remove(segs[len(segs)-1]); err != nil {
			t.Fatal(err)
		}
		if le := refusedAsLost(t, fsys, opt); le.AnchorSeq != 60 || le.LastSeq >= 60 {
			t.Errorf("loss %+v: want the anchor at 60 and the journal ending before it", le)
		}
	})
	t.Run("newest three segments deleted", func(t *testing.T) {
		fsys, _ := build(60)
		segs := segFiles(t, fsys)
		for _, s := range segs[len(segs)-3:] {
			fsys.Remove(s)
		}
		refusedAsLost(t, fsys, opt)
	})
	t.Run("every segment deleted", func(t *testing.T) {
		fsys, _ := build(60)
		for _, s := range segFiles(t, fsys) {
			fsys.Remove(s)
		}
		if le := refusedAsLost(t, fsys, opt); le.LastSeq != 0 {
			t.Errorf("loss %+v: the journal holds nothing", le)
		}
	})
	t.Run("an older copy swapped in", func(t *testing.T) {
		fsys, m := build(30)
		old := map[string][]byte{}
		for _, s := range segFiles(t, fsys) {
			b, _ := fsys.ReadFile(s)
			old[s] = b
		}
		o := opt
		o.FS = fsys
		l := mustOpen(t, "/j", o)
		appendN(t, l, m, 30, 100)
		l.Close()
		for _, s := range segFiles(t, fsys) {
			fsys.Remove(s)
		}
		for s, b := range old {
			fsys.WriteFile(s, b)
		}
		refusedAsLost(t, fsys, opt)
	})
	t.Run("another journal swapped in", func(t *testing.T) {
		fsys, _ := build(30)
		// Another robot's journal: other records, so another chain, and
		// longer than the anchor's seq.
		other := crashfs.New()
		o := opt
		o.FS = other
		l := mustOpen(t, "/j", o)
		for range 40 {
			if _, err := l.Append(7, []byte("another robot's record, long enough to fill segments")); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		for _, s := range segFiles(t, fsys) {
			fsys.Remove(s)
		}
		for _, s := range segFiles(t, other) {
			b, _ := other.ReadFile(s)
			fsys.WriteFile(s, b)
		}
		le := refusedAsLost(t, fsys, opt)
		if !strings.Contains(le.Reason, "hash differs") {
			t.Errorf("loss %+v: want the hash mismatch named", le)
		}
	})
	t.Run("the anchor damaged", func(t *testing.T) {
		for off := int64(0); off < 64; off++ {
			fsys, _ := build(10)
			after := fsys.Crash(crashfs.FlipBitAt("/j/ANCHOR", off, uint(off%8)))
			if le := refusedAsLost(t, after, opt); !strings.Contains(le.Reason, "anchor file is damaged") {
				t.Fatalf("byte %d: %+v", off, le)
			}
		}
		fsys, _ := build(10)
		fsys.WriteFile("/j/ANCHOR", []byte("short"))
		refusedAsLost(t, fsys, opt)
	})
	t.Run("a middle segment deleted is corruption", func(t *testing.T) {
		fsys, _ := build(60)
		segs := segFiles(t, fsys)
		fsys.Remove(segs[1])
		o := opt
		o.FS = fsys
		if _, err := wal.Open("/j", o); !errors.Is(err, wal.ErrCorrupt) {
			t.Fatalf("Open: %v, want corruption (the chain breaks)", err)
		}
	})
}

// An older anchor (behind the segments) is no loss: records written after
// it are simply not covered yet.
func TestAnchorBehindIsFine(t *testing.T) {
	fsys := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, FS: fsys}
	l := mustOpen(t, "/j", opt)
	appendN(t, l, m, 10, 100)
	l.Close()
	old, _ := fsys.ReadFile("/j/ANCHOR")
	l = mustOpen(t, "/j", opt)
	appendN(t, l, m, 10, 100)
	l.Close()
	fsys.WriteFile("/j/ANCHOR", old)
	checkRecovery(t, fsys, "/j", opt, m).log.Close()
}

// With AcceptLoss (the operator's decision) Open goes on past the loss,
// reports it for the caller to journal, and moves the anchor back: the next
// Open finds no loss.
func TestAcceptLoss(t *testing.T) {
	fsys := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, FS: fsys}
	l := mustOpen(t, "/j", opt)
	appendN(t, l, m, 60, 100)
	l.Close()
	segs := segFiles(t, fsys)
	fsys.Remove(segs[len(segs)-1])
	refusedAsLost(t, fsys, opt)

	accept := opt
	accept.AcceptLoss = true
	l, err := wal.Open("/j", accept)
	if err != nil {
		t.Fatal(err)
	}
	rep := l.OpenReport()
	if rep.LossAccepted == nil || rep.LossAccepted.AnchorSeq != 60 || rep.LossAccepted.LastSeq != rep.LastSeq {
		t.Fatalf("report %+v: want the accepted loss", rep)
	}
	if _, err := l.Append(1, []byte("after the loss")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = mustOpen(t, "/j", opt)
	if rep := l.OpenReport(); rep.LossAccepted != nil {
		t.Errorf("second Open: %+v", rep)
	}
	l.Close()
}

// While records are written the anchor follows them every AnchorEvery, off
// the append path: without any Close, a power cut followed by the loss of
// the newest segment is noticed.
func TestAnchorFollowsWrites(t *testing.T) {
	fsys := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1 << 20, FS: fsys, AnchorEvery: 5 * time.Millisecond}
	l := mustOpen(t, "/j", opt)
	defer l.Close()
	appendN(t, l, m, 20, 100)
	// Wait until a power cut would find the anchor at record 20: the live
	// file shows it as soon as it is renamed, before the directory's fsync
	// makes the rename durable, so the test looks at crash images.
	var img *crashfs.FS
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		img = fsys.Crash(crashfs.DropUnsynced()) // the power is cut, the Log still open
		b, _ := img.ReadFile("/j/ANCHOR")
		if len(b) == 80 && binary.LittleEndian.Uint64(b[16:]) == 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no crash image has the anchor at record 20: % x", b)
		}
	}
	for _, s := range segFiles(t, img) {
		img.Remove(s)
	}
	refusedAsLost(t, img, wal.Options{SegmentSize: 1 << 20})
}

// A power cut at any file-system call of an anchor write (at a rollover,
// at Close) leaves a journal that opens with every acknowledged record:
// the anchor never names a record that is not durable, and a half-written
// ANCHOR.tmp is removed.
func TestCrashDuringAnchorWrite(t *testing.T) {
	base := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, FS: base, AnchorEvery: -1}
	l := mustOpen(t, "/j", opt)
	appendN(t, l, m, 5, 100)
	l.Close()
	anchorCuts := 0
	for k := 1; ; k++ {
		fsys := base.Crash(crashfs.DropUnsynced())
		o := wal.Options{SegmentSize: 1024, FS: fsys, AnchorEvery: -1}
		l := mustOpen(t, "/j", o)
		mk := &model{recs: map[uint64]modelRec{}}
		for s, r := range m.recs {
			mk.recs[s] = r
		}
		mk.acked = m.acked
		fsys.CutPowerAt(fsys.Ops()+k, crashfs.KeepRandomPrefix(newRand(uint64(k))))
		for range 20 { // rollovers, each moving the anchor
			seq := l.LastSeq() + 1
			p := []byte(strings.Repeat("r", 100))
			mk.wrote(seq, 3, p)
			if _, err := l.Append(3, p); err != nil {
				break
			}
			mk.ack(seq)
		}
		l.Close()
		after := fsys.AfterCrash()
		if after == nil {
			if k < 20 {
				t.Fatalf("only %d power cuts: the appends made fewer file-system calls than expected", k-1)
			}
			t.Logf("%d power cuts, one before each file-system call", k-1)
			break
		}
		if op, _, ok := fsys.CutOp(); ok && strings.Contains(op.Path, "ANCHOR") {
			anchorCuts++
		}
		o.FS = after
		checkRecovery(t, after, "/j", o, mk).log.Close()
	}
	if anchorCuts == 0 {
		t.Fatal("no power cut fell inside an anchor write")
	}
}

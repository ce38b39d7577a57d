package wal_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// payloadAt is the test's stand-in for a snapshot: it names the record it
// covers, so a test can tell which checkpoint a journal started from.
func payloadAt(seq uint64) []byte { return []byte(fmt.Sprintf("state after record %d", seq)) }

// checkpointNow catches up with the durable journal from *pos and writes a
// checkpoint there.
func checkpointNow(t testing.TB, l *wal.Log, pos *wal.Position) wal.RetentionReport {
	t.Helper()
	p, err := l.Follow(*pos, func(wal.Record) error { return nil })
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	*pos = p
	ret, err := l.WriteCheckpoint(p, payloadAt(p.Seq))
	if err != nil {
		t.Fatalf("WriteCheckpoint at %d: %v", p.Seq, err)
	}
	return ret
}

// ckptFiles lists /j's checkpoint files, oldest first.
func ckptFiles(t *testing.T, fsys *crashfs.FS) []string {
	t.Helper()
	names, err := fsys.ReadDir("/j")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".ckpt") {
			out = append(out, "/j/"+n)
		}
	}
	slices.Sort(out)
	return out
}

// checkpointed builds /j: 60 records of 100 bytes in 1 KiB segments, with
// checkpoints after records 20 and 40 (the two kept), and closes it.
func checkpointed(t *testing.T) (*crashfs.FS, *model) {
	t.Helper()
	fsys := crashfs.New()
	m := newModel()
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys, AnchorEvery: -1})
	var pos wal.Position
	for range 3 {
		appendN(t, l, m, 20, 100)
		if l.LastSeq() < 60 {
			checkpointNow(t, l, &pos)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fsys, m
}

// Open starts from the newest checkpoint and walks only the records after
// it; the records and the payload are the ones written.
func TestOpenStartsFromTheNewestCheckpoint(t *testing.T) {
	fsys, _ := checkpointed(t)
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys})
	defer l.Close()
	rep := l.OpenReport()
	if rep.Checkpoint == nil || rep.Checkpoint.At.Seq != 40 || !bytes.Equal(rep.Checkpoint.Payload, payloadAt(40)) {
		t.Fatalf("started from %+v, want the checkpoint at 40", rep.Checkpoint)
	}
	if rep.LastSeq != 60 || rep.Records != 21 {
		t.Fatalf("LastSeq %d, Records %d: want 60, and 21 walked (the checkpoint's record and the 20 after)", rep.LastSeq, rep.Records)
	}
	var got []uint64
	pos, err := l.Follow(rep.Checkpoint.At, func(r wal.Record) error { got = append(got, r.Seq); return nil })
	if err != nil || len(got) != 20 || got[0] != 41 || pos.Seq != 60 {
		t.Fatalf("Follow from the checkpoint: %v %v, at %d", got, err, pos.Seq)
	}
	if vr, err := wal.Verify("/j", wal.Options{FS: fsys}); err != nil || !vr.OK() || vr.Records != 60 || vr.Checkpoint.At.Seq != 40 {
		t.Fatalf("Verify: %+v %v", vr, err)
	}
}

// The damage table for checkpoints. Every case gets a verdict; none opens
// with a durable record silently gone.
func TestCheckpointDamage(t *testing.T) {
	opt := wal.Options{SegmentSize: 1024}
	newest := func(fsys *crashfs.FS) string { c := ckptFiles(t, fsys); return c[len(c)-1] }
	opens := func(t *testing.T, fsys *crashfs.FS, wantFrom uint64) wal.OpenReport {
		t.Helper()
		o := opt
		o.FS = fsys
		l, err := wal.Open("/j", o)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()
		rep := l.OpenReport()
		var from uint64
		if rep.Checkpoint != nil {
			from = rep.Checkpoint.At.Seq
		}
		if from != wantFrom || rep.LastSeq != 60 {
			t.Fatalf("started from checkpoint %d (want %d), LastSeq %d", from, wantFrom, rep.LastSeq)
		}
		return rep
	}

	t.Run("every byte of the newest checkpoint flipped: passed over, the older one used", func(t *testing.T) {
		fsys, _ := checkpointed(t)
		name := newest(fsys)
		orig, _ := fsys.ReadFile(name)
		for i := range orig {
			b := slices.Clone(orig)
			b[i] ^= 0x40
			fsys.WriteFile(name, b)
			o := opt
			o.FS = fsys
			vr, err := wal.Verify("/j", o)
			if err != nil || vr.OK() || len(vr.CheckpointsDamaged) != 1 || vr.Lost != nil {
				t.Fatalf("byte %d: Verify %+v %v: want the damaged checkpoint named, nothing lost", i, vr, err)
			}
			rep := opens(t, fsys, 20)
			if len(rep.CheckpointsDamaged) != 1 || !strings.HasSuffix(name, rep.CheckpointsDamaged[0].Name) {
				t.Fatalf("byte %d: OpenReport.CheckpointsDamaged %v", i, rep.CheckpointsDamaged)
			}
		}
		fsys.WriteFile(name, orig)
		opens(t, fsys, 40)
	})
	t.Run("truncated, or both damaged: the journal's start stands in", func(t *testing.T) {
		fsys, _ := checkpointed(t)
		for _, c := range ckptFiles(t, fsys) {
			b, _ := fsys.ReadFile(c)
			fsys.WriteFile(c, b[:len(b)-1])
		}
		rep := opens(t, fsys, 0)
		if len(rep.CheckpointsDamaged) != 2 || rep.Records != 60 {
			t.Fatalf("damaged %v, records %d", rep.CheckpointsDamaged, rep.Records)
		}
	})
	t.Run("behind: only the older checkpoint left", func(t *testing.T) {
		fsys, _ := checkpointed(t)
		fsys.Remove(newest(fsys))
		opens(t, fsys, 20)
	})
	t.Run("ahead of the segments: the newest segments deleted, the anchor too", func(t *testing.T) {
		fsys, _ := checkpointed(t)
		fsys.Remove("/j/ANCHOR")
		segs := segFiles(t, fsys)
		for _, s := range segs[len(segs)-4:] { // records 41..60 and more
			fsys.Remove(s)
		}
		le := refusedAsLost(t, fsys, opt)
		if !strings.Contains(le.Reason, "checkpoint") {
			t.Fatalf("loss %q does not name the checkpoint", le.Reason)
		}
	})
	t.Run("its chain does not match: a checkpoint of another journal", func(t *testing.T) {
		fsys, _ := checkpointed(t)
		other := crashfs.New()
		m := newModel()
		l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: other, AnchorEvery: -1})
		appendN(t, l, m, 40, 90) // other payloads: other hashes and offsets
		var pos wal.Position
		checkpointNow(t, l, &pos)
		l.Close()
		b, _ := other.ReadFile(newest(other))
		fsys.WriteFile(newest(fsys), b) // same name: it covers record 40 too
		le := refusedAsLost(t, fsys, opt)
		if !strings.Contains(le.Reason, "another") {
			t.Fatalf("loss %q", le.Reason)
		}
		// Accepted: the mismatching checkpoint is set aside, the older
		// one used, and the next Open is clean.
		o := opt
		o.FS, o.AcceptLoss = fsys, true
		l2, err := wal.Open("/j", o)
		if err != nil || l2.OpenReport().Checkpoint.At.Seq != 20 {
			t.Fatalf("AcceptLoss: %v", err)
		}
		l2.Close()
		opens(t, fsys, 20)
	})
	t.Run("an older copy of the whole directory put back", func(t *testing.T) {
		fsys := crashfs.New()
		m := newModel()
		l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys})
		var pos wal.Position
		appendN(t, l, m, 30, 100)
		checkpointNow(t, l, &pos)
		l.Close()
		saved := map[string][]byte{}
		for _, f := range fsys.Files() {
			saved[f], _ = fsys.ReadFile(f)
		}
		l = mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys})
		appendN(t, l, m, 30, 100)
		checkpointNow(t, l, &pos)
		l.Close()
		for _, f := range fsys.Files() {
			if _, ok := saved[f]; !ok {
				fsys.Remove(f)
			}
		}
		for f, b := range saved {
			if !strings.HasSuffix(f, "ANCHOR") { // the copy's segments and checkpoints, today's anchor
				fsys.WriteFile(f, b)
			}
		}
		refusedAsLost(t, fsys, opt)
	})
}

// refusedOrBehind checks a journal damaged in one segment (seg): Open
// refuses it (corruption or a loss) — or, when seg lies wholly behind the
// checkpoint Open starts from, which by design does not read it, opens it
// with nothing lost in the state it rebuilds; Verify, which reads every
// record, reports the damage either way.
func refusedOrBehind(t *testing.T, img *crashfs.FS, seg, what string) (behind bool) {
	t.Helper()
	l, err := wal.Open("/j", wal.Options{SegmentSize: 1024, FS: img})
	switch {
	case err == nil:
		ck := l.OpenReport().Checkpoint
		l.Close()
		var first uint64
		fmt.Sscanf(filepath.Base(seg), "%x", &first)
		if ck == nil || first > ck.At.Seq {
			t.Fatalf("%s: Open accepted it, and it is not behind the checkpoint it started from (%+v)", what, ck)
		}
		behind = true
	case !errors.Is(err, wal.ErrLost) && !errors.Is(err, wal.ErrCorrupt):
		t.Fatalf("%s: Open %v", what, err)
	}
	if vr, err := wal.Verify("/j", wal.Options{FS: img}); err != nil || vr.OK() || vr.Broken == nil && vr.Lost == nil {
		t.Fatalf("%s: Verify says %+v %v", what, vr, err)
	}
	return behind
}

// Deleting any one segment, or the newest ones, of a checkpointed journal
// gets a verdict: Open refuses it as a loss (the first, the last ones) or
// as corruption (one in the middle after the checkpoint), and Verify
// names it even where the segment lay behind the checkpoint Open started
// from. Never a journal that verifies clean with records missing.
func TestDeletingAnySegmentIsRefused(t *testing.T) {
	fsys, _ := checkpointed(t)
	segs := segFiles(t, fsys)
	behind := 0
	for i, s := range segs {
		img := fsys.Crash(crashfs.KeepAll())
		img.Remove(s)
		if refusedOrBehind(t, img, s, fmt.Sprintf("segment %d of %d (%s) deleted", i+1, len(segs), s)) {
			behind++
		}
	}
	for n := 1; n <= 3; n++ {
		img := fsys.Crash(crashfs.KeepAll())
		for _, s := range segs[len(segs)-n:] {
			img.Remove(s)
		}
		refusedAsLost(t, img, wal.Options{SegmentSize: 1024})
	}
	if behind == 0 || behind == len(segs) {
		t.Fatalf("%d of %d deletions behind the checkpoint: the table should have both kinds", behind, len(segs))
	}
}

// A byte flipped at any offset of any segment's 64-byte header is refused
// by Open (corruption, or a loss where the flip hides the newest segment),
// or, behind the checkpoint Open starts from, reported by Verify.
func TestSegmentHeaderByteFlipsAreRefused(t *testing.T) {
	fsys, _ := checkpointed(t)
	segs := segFiles(t, fsys)
	for _, s := range []string{segs[0], segs[len(segs)/2], segs[len(segs)-1]} {
		for off := range 64 {
			img := fsys.Crash(crashfs.KeepAll())
			b, _ := img.ReadFile(s)
			b[off] ^= 0x01
			img.WriteFile(s, b)
			refusedOrBehind(t, img, s, fmt.Sprintf("%s byte %d flipped", s, off))
		}
	}
}

// Retention keeps the journal under its bound once checkpoints move: the
// segments behind the oldest kept checkpoint go, oldest first; the journal
// then opens from its checkpoint, verifies, and scans from its first
// record. Deleting its first segment by hand afterwards is still a loss.
func TestRetentionBoundsTheJournal(t *testing.T) {
	fsys := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, FS: fsys, AnchorEvery: -1, Retention: wal.Retention{MaxBytes: 6 * 1024}}
	l := mustOpen(t, "/j", opt)
	var pos wal.Position
	deleted := 0
	for range 40 {
		appendN(t, l, m, 10, 100)
		ret := checkpointNow(t, l, &pos)
		deleted += len(ret.Deleted)
		if st := l.Stats(); st.SegmentFiles != len(segFiles(t, fsys)) {
			t.Fatalf("Stats.SegmentFiles %d, %d on disk", st.SegmentFiles, len(segFiles(t, fsys)))
		}
	}
	st := l.Stats()
	l.Close()
	segs := segFiles(t, fsys)
	if deleted == 0 || uint64(deleted) != st.SegmentsDeleted || len(ckptFiles(t, fsys)) != wal.KeepCheckpoints {
		t.Fatalf("deleted %d (stats %d), %d checkpoints kept", deleted, st.SegmentsDeleted, len(ckptFiles(t, fsys)))
	}
	// At most the bound, plus what the older kept checkpoint still needs:
	// the segments from it on (10 records ≈ 1 segment between checkpoints).
	if len(segs) > 6+3 {
		t.Fatalf("%d segments left: retention did not bound the journal", len(segs))
	}
	o := opt
	l = mustOpen(t, "/j", o)
	rep := l.OpenReport()
	l.Close()
	if rep.Checkpoint == nil || rep.LastSeq != 400 {
		t.Fatalf("reopened: %+v", rep)
	}
	vr, err := wal.Verify("/j", o)
	if err != nil || !vr.OK() || vr.FirstSeq <= 1 || vr.LastSeq != 400 {
		t.Fatalf("Verify: %+v %v", vr, err)
	}
	var first, n uint64
	err = wal.Scan("/j", o, 1, func(r wal.Record) error {
		if first == 0 {
			first = r.Seq
		}
		n++
		if w := m.recs[r.Seq]; !bytes.Equal(w.payload, r.Payload) {
			t.Fatalf("record %d differs", r.Seq)
		}
		return nil
	})
	if err != nil || first != vr.FirstSeq || first+n-1 != 400 {
		t.Fatalf("Scan from 1: first %d, %d records, %v", first, n, err)
	}
	fsys.Remove(segs[0])
	le := refusedAsLost(t, fsys, wal.Options{SegmentSize: 1024})
	if !strings.Contains(le.Reason, "retention kept records from") {
		t.Fatalf("loss %q", le.Reason)
	}
}

// With an archive directory, each segment retention deletes is kept there
// gzip-compressed, byte for byte.
func TestRetentionArchives(t *testing.T) {
	fsys := crashfs.New()
	m := newModel()
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys, AnchorEvery: -1,
		Retention: wal.Retention{MaxBytes: 4 * 1024, ArchiveDir: "/archive"}})
	var pos wal.Position
	saved := map[string][]byte{}
	var deleted []string
	for range 10 {
		appendN(t, l, m, 10, 100)
		for _, s := range segFiles(t, fsys) {
			saved[filepath.Base(s)], _ = fsys.ReadFile(s)
		}
		deleted = append(deleted, checkpointNow(t, l, &pos).Deleted...)
	}
	l.Close()
	if len(deleted) == 0 {
		t.Fatal("nothing deleted")
	}
	for _, name := range deleted {
		gz, err := fsys.ReadFile("/archive/" + name + ".gz")
		if err != nil {
			t.Fatalf("%s not archived: %v", name, err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(b, saved[name]) {
			t.Fatalf("%s: the archive does not hold the segment (%v)", name, err)
		}
	}
}

// MaxAge deletes segments whose last write is older, on the real file
// system (crashfs has no modification times).
func TestRetentionByAge(t *testing.T) {
	dir := t.TempDir()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, AnchorEvery: -1, Retention: wal.Retention{MaxAge: time.Hour}}
	l := mustOpen(t, dir, opt)
	defer l.Close()
	var pos wal.Position
	appendN(t, l, m, 30, 100)
	if ret := checkpointNow(t, l, &pos); len(ret.Deleted) != 0 {
		t.Fatalf("young segments deleted: %v", ret.Deleted)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	old := time.Now().Add(-2 * time.Hour)
	for _, n := range names[:2] {
		os.Chtimes(n, old, old)
	}
	appendN(t, l, m, 10, 100)
	ret := checkpointNow(t, l, &pos)
	if len(ret.Deleted) != 2 || ret.Deleted[0] != filepath.Base(names[0]) || ret.Deleted[1] != filepath.Base(names[1]) {
		t.Fatalf("deleted %v, want the two old segments %v", ret.Deleted, names[:2])
	}
}

// TruncateAt before a checkpoint sets the checkpoint aside (a .broken
// copy), so the cut journal opens from the older one instead of reading
// as a loss.
func TestTruncateAtSetsAsideCheckpointsPastTheCut(t *testing.T) {
	fsys, _ := checkpointed(t)
	if err := wal.TruncateAt("/j", wal.Options{SegmentSize: 1024, FS: fsys}, 35); err != nil {
		t.Fatal(err)
	}
	if c := ckptFiles(t, fsys); len(c) != 1 || !strings.HasSuffix(c[0], "14.ckpt") {
		t.Fatalf("checkpoints after the cut: %v", c)
	}
	if _, err := fsys.ReadFile("/j/0000000000000028.ckpt.broken"); err != nil {
		t.Fatalf("the checkpoint past the cut was not kept: %v", err)
	}
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 1024, FS: fsys})
	defer l.Close()
	if rep := l.OpenReport(); rep.LastSeq != 34 || rep.Checkpoint.At.Seq != 20 {
		t.Fatalf("after the cut: %+v", rep)
	}
}

// A power cut before any file-system call of checkpoint writes and the
// retention passes after them leaves a journal that opens, without a
// loss, with every acknowledged record it should still hold, from a
// checkpoint whose payload is the one written for it.
func TestCrashDuringCheckpointAndRetention(t *testing.T) {
	base := crashfs.New()
	m := newModel()
	opt := wal.Options{SegmentSize: 1024, FS: base, AnchorEvery: -1, Retention: wal.Retention{MaxBytes: 4 * 1024}}
	l := mustOpen(t, "/j", opt)
	var pos wal.Position
	appendN(t, l, m, 30, 100)
	checkpointNow(t, l, &pos)
	l.Close()
	cuts := map[string]int{}
	for k := 1; ; k++ {
		fsys := base.Crash(crashfs.DropUnsynced())
		o := opt
		o.FS = fsys
		l := mustOpen(t, "/j", o)
		pos := l.OpenReport().Checkpoint.At
		acked := m.acked
		fsys.CutPowerAt(fsys.Ops()+k, crashfs.KeepRandomPrefix(newRand(uint64(k))))
		func() {
			for range 6 {
				for range 10 {
					if _, err := l.Append(3, []byte(strings.Repeat("r", 100))); err != nil {
						return
					}
					acked++
				}
				p, err := l.Follow(pos, func(wal.Record) error { return nil })
				if err != nil {
					return
				}
				pos = p
				if _, err := l.WriteCheckpoint(p, payloadAt(p.Seq)); err != nil {
					return
				}
			}
		}()
		l.Close()
		after := fsys.AfterCrash()
		if after == nil {
			t.Logf("%d power cuts, one before each file-system call; cuts by file kind: %v", k-1, cuts)
			break
		}
		if op, _, ok := fsys.CutOp(); ok {
			switch {
			case strings.Contains(op.Path, ".ckpt"):
				cuts["checkpoint"]++
			case op.Kind == crashfs.OpRemove:
				cuts["retention delete"]++
			}
		}
		o.FS = after
		l2, err := wal.Open("/j", o)
		if err != nil {
			t.Fatalf("cut %d: Open: %v\n%s", k, err, after)
		}
		rep := l2.OpenReport()
		l2.Close()
		if rep.LastSeq < acked {
			t.Fatalf("cut %d: %d acknowledged, the journal ends at %d", k, acked, rep.LastSeq)
		}
		if c := rep.Checkpoint; c == nil || !bytes.Equal(c.Payload, payloadAt(c.At.Seq)) {
			t.Fatalf("cut %d: checkpoint %+v", k, c)
		}
		if vr, err := wal.Verify("/j", o); err != nil || !vr.OK() {
			t.Fatalf("cut %d: Verify %+v %v", k, vr, err)
		}
	}
	if cuts["checkpoint"] == 0 || cuts["retention delete"] == 0 {
		t.Fatalf("cuts by kind %v: none fell inside a checkpoint write or a retention delete", cuts)
	}
}

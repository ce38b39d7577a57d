package wal_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// brokenFiles returns the .broken files in dir with their contents.
func brokenFiles(t *testing.T, fsys *crashfs.FS, dir string) map[string][]byte {
	t.Helper()
	names, err := fsys.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, n := range names {
		if strings.Contains(n, ".broken") {
			out[n], _ = fsys.ReadFile(filepath.Join(dir, n))
		}
	}
	return out
}

func TestTruncateAt(t *testing.T) {
	const n = 100
	fsys, locs, m := buildLog(t, 1024, n, 100)
	opt := wal.Options{SegmentSize: 1024, FS: fsys}
	orig := fsys.Crash(crashfs.DropUnsynced()) // untouched copy for later cases

	// Cut in the middle of a segment.
	cut := uint64(60)
	for locs[cut].off == 64 { // make sure 60 is not first in its segment
		cut++
	}
	seg60, _ := fsys.ReadFile(locs[cut].seg)
	if err := wal.TruncateAt("/j", opt, cut); err != nil {
		t.Fatal(err)
	}
	vr, err := wal.Verify("/j", opt)
	if err != nil || !vr.OK() || vr.LastSeq != cut-1 {
		t.Fatalf("after TruncateAt(%d): %+v %v", cut, vr, err)
	}
	broken := brokenFiles(t, fsys, "/j")
	partial := broken[filepath.Base(locs[cut].seg)+".broken"]
	if !bytes.HasPrefix(partial, seg60[locs[cut].off:locs[cut].off+locs[cut].n]) {
		t.Fatal("the cut part of the segment is not kept")
	}
	// Every later segment is kept whole.
	for seq := cut + 1; seq <= n; seq++ {
		if locs[seq].off == 64 {
			if _, ok := broken[filepath.Base(locs[seq].seg)+".broken"]; !ok {
				t.Fatalf("segment %s not kept: %v", locs[seq].seg, broken)
			}
		}
	}
	// The log continues at cut with a valid chain.
	l := mustOpen(t, "/j", opt)
	if l.OpenReport().TailCut != nil {
		t.Fatal("TruncateAt left a tail to cut")
	}
	appendN(t, l, nil, 30, 100)
	l.Close()
	if vr, err := wal.Verify("/j", opt); err != nil || !vr.OK() || vr.LastSeq != cut-1+30 {
		t.Fatalf("continued: %+v %v", vr, err)
	}

	// Bounds.
	if err := wal.TruncateAt("/j", opt, 0); err == nil {
		t.Fatal("TruncateAt(0) accepted")
	}
	if err := wal.TruncateAt("/j", opt, cut+30); err != nil {
		t.Fatalf("TruncateAt(LastSeq+1) should be a no-op: %v", err)
	}
	if err := wal.TruncateAt("/j", opt, cut+31); err == nil {
		t.Fatal("TruncateAt past the end accepted")
	}

	t.Run("at segment start", func(t *testing.T) {
		fsys := orig.Crash(crashfs.DropUnsynced())
		opt := wal.Options{SegmentSize: 1024, FS: fsys}
		var first uint64
		for seq := uint64(30); seq < n; seq++ {
			if locs[seq].off == 64 {
				first = seq
				break
			}
		}
		if err := wal.TruncateAt("/j", opt, first); err != nil {
			t.Fatal(err)
		}
		checkRecovery(t, fsys, "/j", opt, &model{recs: m.recs, acked: first - 1}).log.Close()
		if vr, _ := wal.Verify("/j", opt); vr.LastSeq != first-1 {
			t.Fatalf("LastSeq %d", vr.LastSeq)
		}
	})

	t.Run("everything", func(t *testing.T) {
		fsys := orig.Crash(crashfs.DropUnsynced())
		opt := wal.Options{SegmentSize: 1024, FS: fsys}
		if err := wal.TruncateAt("/j", opt, 1); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, "/j", opt)
		defer l.Close()
		if l.LastSeq() != 0 {
			t.Fatal(l.LastSeq())
		}
		appendN(t, l, nil, 3, 10)
	})

	t.Run("repairs corruption", func(t *testing.T) {
		fsys := orig.Crash(crashfs.FlipBitAt(locs[40].seg, locs[40].off+20, 1))
		opt := wal.Options{SegmentSize: 1024, FS: fsys}
		_, err := wal.Open("/j", opt)
		if ce := asCorruption(t, err); ce.Seq != 40 {
			t.Fatal(ce)
		}
		// Cutting after the damage is refused: it would keep it.
		if err := wal.TruncateAt("/j", opt, 41); asCorruption(t, err).Seq != 40 {
			t.Fatal(err)
		}
		if err := wal.TruncateAt("/j", opt, 40); err != nil {
			t.Fatal(err)
		}
		checkRecovery(t, fsys, "/j", opt, &model{recs: m.recs, acked: 39}).log.Close()
	})

	t.Run("bad first header", func(t *testing.T) {
		fsys := orig.Crash(crashfs.FlipBitAt("/j/0000000000000001.wal", 3, 0))
		opt := wal.Options{SegmentSize: 1024, FS: fsys}
		if err := wal.TruncateAt("/j", opt, 2); err == nil {
			t.Fatal("TruncateAt(2) with a bad first header accepted")
		}
		if err := wal.TruncateAt("/j", opt, 1); err != nil {
			t.Fatal(err)
		}
		l := mustOpen(t, "/j", opt)
		l.Close()
	})

	// A crash at any point of TruncateAt leaves a journal that opens, with
	// a valid prefix of at least cut-1 records; running it again finishes.
	t.Run("crash during", func(t *testing.T) {
		for k := 1; ; k++ {
			fsys := orig.Crash(crashfs.DropUnsynced())
			opt := wal.Options{SegmentSize: 1024, FS: fsys}
			fsys.CutPowerAt(k, crashfs.KeepRandomPrefix(newRand(uint64(k))))
			err := wal.TruncateAt("/j", opt, cut)
			after := fsys.AfterCrash()
			if after == nil {
				if err != nil {
					t.Fatal(err)
				}
				break // TruncateAt finished before the k-th call
			}
			opt.FS = after
			rec := checkRecovery(t, after, "/j", opt, &model{recs: m.recs, acked: cut - 1})
			rec.log.Close()
			if err := wal.TruncateAt("/j", opt, cut); err != nil {
				t.Fatalf("k=%d: rerun: %v", k, err)
			}
			if vr, _ := wal.Verify("/j", opt); !vr.OK() || vr.LastSeq != cut-1 {
				t.Fatalf("k=%d: after rerun %+v", k, vr)
			}
		}
	})
}

// TruncateAt on the real file system.
func TestTruncateAtOS(t *testing.T) {
	dir := t.TempDir()
	opt := wal.Options{SegmentSize: 4096}
	l := mustOpen(t, dir, opt)
	appendN(t, l, nil, 80, 100)
	l.Close()
	if err := wal.TruncateAt(dir, opt, 50); err != nil {
		t.Fatal(err)
	}
	vr, err := wal.Verify(dir, opt)
	if err != nil || !vr.OK() || vr.LastSeq != 49 {
		t.Fatalf("%+v %v", vr, err)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.broken*"))
	if len(matches) == 0 {
		t.Fatal("no .broken file kept")
	}
}

package wal_test

import (
	"bytes"
	"maps"
	"path/filepath"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// snapshot is every file's content.
func snapshot(t *testing.T, fsys *crashfs.FS) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range fsys.Files() {
		b, err := fsys.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = b
	}
	return out
}

// hashes maps every record's seq to its hash.
func hashes(t *testing.T, dir string, opt wal.Options) map[uint64][32]byte {
	t.Helper()
	out := map[uint64][32]byte{}
	wal.Scan(dir, opt, 1, func(r wal.Record) error { out[r.Seq] = r.Hash; return nil })
	return out
}

// Repair cuts a damaged journal at its first bad record, the plan says
// beforehand exactly what goes (segment, offset, bytes, the records after
// the damage that still check) and changes nothing, the .broken copies hold
// the cut bytes with notes naming the record before the cut, the journal
// then opens, and a second Repair finds nothing to do.
func TestRepair(t *testing.T) {
	const n = 100
	orig, locs, _ := buildLog(t, 1024, n, 100)
	var laterSeg uint64 // the first record of a segment well after the start
	for seq := uint64(50); seq < n; seq++ {
		if locs[seq].off == 64 {
			laterSeg = seq
			break
		}
	}
	mid := uint64(40)
	for locs[mid].off == 64 || locs[mid+1].off == 64 {
		mid++ // a record with another after it in its segment
	}
	last := locs[n]
	cases := []struct {
		name    string
		damage  func(*crashfs.FS) *crashfs.FS
		cutAt   uint64 // 0: nothing to cut
		records int    // records after the damage that check on their own
		lost    bool
	}{
		{"a bit flipped mid-log", func(f *crashfs.FS) *crashfs.FS {
			return f.Crash(crashfs.FlipBitAt(locs[mid].seg, locs[mid].off+20, 1))
		}, mid, n - int(mid), false},
		{"a later segment's header damaged", func(f *crashfs.FS) *crashfs.FS {
			return f.Crash(crashfs.FlipBitAt(locs[laterSeg].seg, 20, 3))
		}, laterSeg, n - int(laterSeg) + 1, false},
		{"the first segment's header damaged", func(f *crashfs.FS) *crashfs.FS {
			return f.Crash(crashfs.FlipBitAt(locs[1].seg, 3, 0))
		}, 1, n, false},
		{"a torn tail", func(f *crashfs.FS) *crashfs.FS {
			img := f.Crash(crashfs.KeepAll())
			b, _ := img.ReadFile(last.seg)
			copy(b[last.off+last.n:], b[last.off:last.off+last.n/2])
			img.WriteFile(last.seg, b)
			return img
		}, n + 1, 0, false},
		{"the last record damaged, which the anchor vouches for", func(f *crashfs.FS) *crashfs.FS {
			return f.Crash(crashfs.FlipBitAt(last.seg, last.off+20, 2))
		}, 0, 0, true},
		{"the last record damaged in a journal without an anchor", func(f *crashfs.FS) *crashfs.FS {
			img := f.Crash(crashfs.FlipBitAt(last.seg, last.off+20, 2))
			img.Remove("/j/ANCHOR")
			return img
		}, n, 0, false},
		{"an intact journal", func(f *crashfs.FS) *crashfs.FS { return f.Crash(crashfs.KeepAll()) }, 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fsys := tc.damage(orig)
			opt := wal.Options{SegmentSize: 1024, FS: fsys}
			before := snapshot(t, fsys)
			plan, err := wal.PlanRepair("/j", opt)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(before, snapshot(t, fsys), bytes.Equal) {
				t.Fatal("PlanRepair changed the journal")
			}
			if plan.CutAt != tc.cutAt || (plan.Report.Lost != nil) != tc.lost {
				t.Fatalf("plan: cut at %d (lost %v), want %d (lost %v): %+v", plan.CutAt, plan.Report.Lost, tc.cutAt, tc.lost, plan.Report)
			}
			if _, aerr := fsys.ReadFile("/j/ANCHOR"); (plan.AnchorSeq == n) != (aerr == nil) {
				t.Errorf("the plan names record %d as the anchor's (anchor file: %v), want %d", plan.AnchorSeq, aerr, n)
			}
			records, gone := 0, map[string]wal.SegmentCut{}
			for _, c := range plan.Cuts {
				records += c.Records
				gone[filepath.Base(c.Segment)] = c
			}
			if records != tc.records {
				t.Errorf("the plan counts %d records that check after the damage, want %d: %+v", records, tc.records, plan.Cuts)
			}
			if tc.cutAt == 0 {
				if len(plan.Cuts) != 0 {
					t.Fatalf("nothing to cut, but the plan cuts %+v", plan.Cuts)
				}
				done, err := wal.Repair("/j", opt)
				if err != nil || done.CutAt != 0 || len(done.BrokenFiles) != 0 {
					t.Fatalf("Repair: %+v %v", done, err)
				}
				if !maps.EqualFunc(before, snapshot(t, fsys), bytes.Equal) {
					t.Fatal("Repair changed a journal it had nothing to cut from")
				}
				return
			}
			if tc.cutAt <= n && locs[tc.cutAt].off != 64 {
				if c := plan.Cuts[0]; c.Whole || c.Offset != locs[tc.cutAt].off {
					t.Errorf("the first cut is %+v, want at the damaged record's offset %d", c, locs[tc.cutAt].off)
				}
			}
			hs := hashes(t, "/j", opt)
			done, err := wal.Repair("/j", opt)
			if err != nil {
				t.Fatal(err)
			}
			if done.CutAt != plan.CutAt || len(done.BrokenFiles) != len(plan.Cuts) {
				t.Fatalf("Repair cut %+v, the plan said %+v", done, plan)
			}
			// Every cut is kept: the .broken file holds the bytes the plan
			// named, and its note says where they came from.
			kept, err := wal.Cuts("/j", opt)
			if err != nil || len(kept) != len(plan.Cuts) {
				t.Fatalf("Cuts: %+v %v", kept, err)
			}
			for _, k := range kept {
				c, ok := gone[k.Segment]
				if !ok {
					t.Fatalf("kept a cut of %s, which the plan did not name", k.Segment)
				}
				seg := before["/j/"+k.Segment]
				b, _ := fsys.ReadFile("/j/" + k.BrokenFile)
				if want := seg[c.Offset : c.Offset+c.Bytes]; !bytes.Equal(b, want) {
					t.Errorf("%s holds %d bytes, want the %d cut from %s at %d", k.BrokenFile, len(b), len(want), k.Segment, c.Offset)
				}
				if !k.Noted || k.SegmentCut != c {
					t.Errorf("the note of %s says %+v, the plan %+v", k.BrokenFile, k, c)
				}
				if !k.LastKnown || k.LastSeq != tc.cutAt-1 || (k.LastSeq > 0 && k.LastHash != hs[k.LastSeq]) {
					t.Errorf("the note of %s names record %d as the last kept (known %v), want %d and its hash", k.BrokenFile, k.LastSeq, k.LastKnown, tc.cutAt-1)
				}
			}
			if vr, err := wal.Verify("/j", opt); err != nil || !vr.OK() || vr.LastSeq != tc.cutAt-1 {
				t.Fatalf("after Repair: %+v %v", vr, err)
			}
			again, err := wal.Repair("/j", opt)
			if err != nil || again.CutAt != 0 || len(again.BrokenFiles) != 0 {
				t.Fatalf("a second Repair: %+v %v", again, err)
			}
			l := mustOpen(t, "/j", opt)
			appendN(t, l, nil, 3, 100)
			l.Close()
			if vr, _ := wal.Verify("/j", opt); !vr.OK() || vr.LastSeq != tc.cutAt+2 {
				t.Fatalf("continued after Repair: %+v", vr)
			}
		})
	}
}

// A crash at any point of Repair leaves a journal that a second Repair
// finishes, losing nothing more than the first would have cut.
func TestRepairCrashDuring(t *testing.T) {
	const n = 60
	orig, locs, _ := buildLog(t, 1024, n, 100)
	damaged := orig.Crash(crashfs.FlipBitAt(locs[20].seg, locs[20].off+30, 5))
	for k := 1; ; k++ {
		fsys := damaged.Crash(crashfs.KeepAll())
		opt := wal.Options{SegmentSize: 1024, FS: fsys}
		fsys.CutPowerAt(k, crashfs.KeepRandomPrefix(newRand(uint64(k))))
		_, err := wal.Repair("/j", opt)
		after := fsys.AfterCrash()
		if after == nil {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		opt.FS = after
		if _, err := wal.Repair("/j", opt); err != nil {
			t.Fatalf("k=%d: Repair after a crash in Repair: %v", k, err)
		}
		if vr, err := wal.Verify("/j", opt); err != nil || !vr.OK() || vr.LastSeq != 19 {
			t.Fatalf("k=%d: after the second Repair: %+v %v", k, vr, err)
		}
	}
}

// The torn tail Open cuts is noted: segment, offset, bytes and the record
// before it, although new records are written where it was.
func TestOpenNotesTheTornTailItCuts(t *testing.T) {
	const n = 30
	orig, locs, _ := buildLog(t, 4096, n, 50)
	fsys := orig.Crash(crashfs.KeepAll())
	opt := wal.Options{SegmentSize: 4096, FS: fsys}
	last := locs[n]
	b, _ := fsys.ReadFile(last.seg)
	torn := last.n / 2
	copy(b[last.off+last.n:], b[last.off:last.off+torn])
	fsys.WriteFile(last.seg, b)
	for b[last.off+last.n+torn-1] == 0 {
		torn-- // a cut keeps the bytes up to the last non-zero one
	}
	hs := hashes(t, "/j", opt)
	l := mustOpen(t, "/j", opt)
	cut := l.OpenReport().TailCut
	if cut == nil {
		t.Fatal("no tail cut")
	}
	appendN(t, l, nil, 5, 50) // written where the torn tail was
	l.Close()
	kept, err := wal.Cuts("/j", opt)
	if err != nil || len(kept) != 1 {
		t.Fatalf("Cuts: %+v %v", kept, err)
	}
	k := kept[0]
	want := wal.SegmentCut{Segment: filepath.Base(last.seg), Offset: last.off + last.n, Bytes: torn}
	if !k.Noted || k.SegmentCut != want || k.BrokenFile != cut.BrokenFile {
		t.Errorf("kept %+v, want %+v in %s", k, want, cut.BrokenFile)
	}
	if !k.LastKnown || k.LastSeq != n || k.LastHash != hs[n] {
		t.Errorf("the note names record %d (known %v) as the last before the cut, want %d and its hash", k.LastSeq, k.LastKnown, n)
	}

	// A .broken file without its note (kept before notes existed) is
	// still listed, with what cannot be known said so.
	fsys.Remove("/j/" + cut.BrokenFile + ".cut")
	kept, err = wal.Cuts("/j", opt)
	if err != nil || len(kept) != 1 || kept[0].Noted || kept[0].Offset != -1 || kept[0].Bytes != torn {
		t.Fatalf("without its note: %+v %v", kept, err)
	}
}

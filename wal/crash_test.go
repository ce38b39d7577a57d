package wal_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/wal"
	"github.com/saga-supervisor/saga-supervisor/wal/crashfs"
)

// crashRun runs a random workload on a fresh crash-modelling FS, cuts the
// power at mutating call cutAt (or after the workload if it is never
// reached), and returns the crash image and what was written.
func crashRun(t *testing.T, rng *rand.Rand, opt wal.Options, inj crashfs.Injector, ops, cutAt, goroutines int) (*crashfs.FS, *model) {
	t.Helper()
	fsys := crashfs.New()
	opt.FS = fsys
	m := newModel()
	l := mustOpen(t, "/j", opt)
	fsys.CutPowerAt(cutAt, inj)
	maxPay := int(opt.SegmentSize) - 64 - 49
	if goroutines <= 1 {
		checkWorkloadErr(t, workload(l, m, rng, ops, maxPay))
	} else {
		var wg sync.WaitGroup
		for g := range goroutines {
			grng := rand.New(rand.NewPCG(rng.Uint64(), uint64(g)))
			wg.Go(func() { checkWorkloadErr(t, workload(l, m, grng, ops/goroutines, maxPay)) })
		}
		wg.Wait()
	}
	_ = l.Close() // fails after the cut; the image is already taken
	after := fsys.AfterCrash()
	if after == nil {
		after = fsys.CutPower(inj)
	}
	return after, m
}

// checkWorkloadErr accepts only the errors a power cut causes.
func checkWorkloadErr(t *testing.T, err error) {
	if err != nil && !errors.Is(err, crashfs.ErrPowerCut) {
		t.Errorf("workload: %v", err)
	}
	if err != nil && !errors.Is(err, wal.ErrFatal) {
		t.Errorf("power cut not reported as fatal: %v", err)
	}
}

// For every crash injector, at many crash points, including a second crash
// after recovering from the first: acknowledged records survive intact.
func TestCrashInjectorTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	// Injectors run on whichever goroutine hits the power cut: they get
	// their own generator (rand.Rand is not safe for concurrent use).
	for _, inj := range crashfs.Standard(rand.New(rand.NewPCG(7, 8))) {
		t.Run(inj.Name(), func(t *testing.T) {
			opt := wal.Options{SegmentSize: 2048}
			for cut := 1; cut < 400; cut += 7 {
				after, m := crashRun(t, rng, opt, inj, 120, cut, 1)
				rec := checkRecovery(t, after, "/j", opt, m)
				// Recover, keep writing, crash again.
				m.acked = rec.count // what the recovered log holds is now the truth
				m.last = rec.count
				after.CutPowerAt(1+rng.IntN(100), inj)
				checkWorkloadErr(t, workload(rec.log, m, rng, 60, int(opt.SegmentSize)-113))
				rec.log.Close()
				again := after.AfterCrash()
				if again == nil {
					again = after.CutPower(inj)
				}
				checkRecovery(t, again, "/j", opt, m).log.Close()
			}
		})
	}
}

var crashSeeds = flag.Int("wal.seeds", 200, "number of seeded random crash runs (TestCrashRandomSeeds)")

// Seeded random runs: random segment sizes, record sizes, mixes of
// Append/Enqueue/Sync, one or several goroutines, random crash points and
// injectors, including media bit flips.
func TestCrashRandomSeeds(t *testing.T) {
	seeds := *crashSeeds
	if testing.Short() {
		seeds = min(seeds, 40)
	}
	var stats outcomes
	defer func() {
		t.Logf("outcomes: %+v", stats)
		if !testing.Short() && (stats.TailCuts == 0 || stats.Refused == 0 || stats.Clean == 0) {
			t.Errorf("the random runs did not reach every outcome: %+v", stats)
		}
	}()
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x5a6a))
		irng := rand.New(rand.NewPCG(uint64(seed), 0x1a1a)) // used by the injector only
		opt := wal.Options{SegmentSize: int64(512 * (1 + rng.IntN(16)))}
		injs := crashfs.Standard(irng)
		var inj crashfs.Injector = injs[rng.IntN(len(injs))]
		var flip *crashfs.BitFlip
		if rng.IntN(4) == 0 {
			flip = crashfs.FlipBit(irng)
			inj = flip
		}
		ops := 10 + rng.IntN(200)
		goroutines := 1
		if rng.IntN(4) == 0 {
			goroutines = 2 + rng.IntN(6)
		}
		cut := 1 + rng.IntN(4*ops)
		name := fmt.Sprintf("seed%d/seg%d/%s/ops%d/g%d/cut%d", seed, opt.SegmentSize, inj.Name(), ops, goroutines, cut)
		ok := t.Run(name, func(t *testing.T) {
			after, m := crashRun(t, rng, opt, inj, ops, cut, goroutines)
			if flip != nil {
				checkNoSilentAcceptance(t, after, opt, m, flip, &stats)
				return
			}
			rec := checkRecovery(t, after, "/j", opt, m)
			rec.log.Close()
			stats.count(rec.report)
		})
		if !ok {
			return
		}
	}
}

// outcomes counts what the random runs led to, to show they exercise
// every path.
type outcomes struct {
	Clean, TailCuts, Refused, Lost int
}

func (o *outcomes) count(r wal.OpenReport) {
	if r.TailCut != nil {
		o.TailCuts++
	} else {
		o.Clean++
	}
}

// checkNoSilentAcceptance is the contract after media corruption: Open
// refuses (and Verify agrees on where), or everything Open keeps is exactly
// what was written and acknowledged records go missing only through a
// reported tail cut.
func checkNoSilentAcceptance(t *testing.T, after *crashfs.FS, opt wal.Options, m *model, flip *crashfs.BitFlip, stats *outcomes) {
	t.Helper()
	opt.FS = after
	vr, err := wal.Verify("/j", opt)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	l, err := wal.Open("/j", opt)
	if err != nil {
		var le *wal.LossError
		if errors.As(err, &le) {
			// The flip hit the anchor, or a record it vouches for.
			if vr.Lost == nil || *vr.Lost != *le {
				t.Fatalf("Open refused with %v, Verify reported %v", le, vr.Lost)
			}
			stats.Refused++
			return
		}
		ce := asCorruption(t, err)
		if vr.Broken == nil || *vr.Broken != *ce {
			t.Fatalf("Open refused with %v, Verify reported %v", ce, vr.Broken)
		}
		stats.Refused++
		return
	}
	defer l.Close()
	rep := l.OpenReport()
	stats.count(rep)
	if vr.Broken != nil || vr.Lost != nil {
		t.Fatalf("Verify reported %v %v but Open accepted", vr.Broken, vr.Lost)
	}
	if (vr.TornTail == nil) != (rep.TailCut == nil) {
		t.Fatalf("Verify torn tail %v, Open tail cut %v", vr.TornTail, rep.TailCut)
	}
	var n uint64
	err = wal.Scan("/j", opt, 1, func(r wal.Record) error {
		n++
		w, ok := m.recs[r.Seq]
		if !ok || w.typ != r.Type || !bytes.Equal(w.payload, r.Payload) {
			t.Fatalf("flip %s: seq %d accepted with wrong bytes", flip.Name(), r.Seq)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < m.acked {
		if rep.TailCut == nil {
			t.Fatalf("flip %s: %d acknowledged, %d present, no tail cut reported", flip.Name(), m.acked, n)
		}
		stats.Lost++
	}
}

// buildLog writes n records of size bytes with small segments and returns
// the FS (everything synced) and the record locations.
func buildLog(t *testing.T, segSize int64, n, size int) (*crashfs.FS, map[uint64]frameLoc, *model) {
	t.Helper()
	fsys := crashfs.New()
	m := newModel()
	l := mustOpen(t, "/j", wal.Options{SegmentSize: segSize, FS: fsys})
	appendN(t, l, m, n, size)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fsys, locate(t, fsys, "/j"), m
}

// A flipped bit in any durable record before the last one — in any field —
// makes Open refuse, naming that record's segment, offset and seq; Verify
// reports the same.
func TestFlipBitMidLogRefused(t *testing.T) {
	const n = 60
	fsys, locs, _ := buildLog(t, 2048, n, 100)
	segOf := map[string]bool{}
	for _, l := range locs {
		segOf[l.seg] = true
	}
	if len(segOf) < 3 {
		t.Fatalf("want several segments, got %d", len(segOf))
	}
	var targets []uint64
	for seq := uint64(1); seq < n; seq++ {
		if seq < 4 || seq > n-4 || locs[seq].off == 64 || locs[seq+1].off == 64 || seq%9 == 0 {
			targets = append(targets, seq) // edges, segment starts and ends, a sample
		}
	}
	fields := []struct {
		name string
		pos  func(frameLoc) int64
	}{
		{"crc", func(frameLoc) int64 { return 1 }},
		{"length", func(frameLoc) int64 { return 4 }},
		{"length-high", func(frameLoc) int64 { return 6 }},
		{"seq", func(frameLoc) int64 { return 8 }},
		{"type", func(frameLoc) int64 { return 16 }},
		{"payload", func(l frameLoc) int64 { return 17 + (l.n-49)/2 }},
		{"hash", func(l frameLoc) int64 { return l.n - 1 }},
	}
	for _, seq := range targets {
		for _, f := range fields {
			for _, bit := range []uint{0, 7} {
				loc := locs[seq]
				after := fsys.Crash(crashfs.FlipBitAt(loc.seg, loc.off+f.pos(loc), bit))
				opt := wal.Options{SegmentSize: 4096, FS: after}
				vr, err := wal.Verify("/j", opt)
				if err != nil {
					t.Fatal(err)
				}
				_, err = wal.Open("/j", opt)
				ce := asCorruption(t, err)
				want := wal.CorruptionError{Segment: filepath.Base(loc.seg), Offset: loc.off, Seq: seq}
				if ce.Segment != want.Segment || ce.Offset != want.Offset || ce.Seq != want.Seq {
					t.Fatalf("seq %d %s bit %d: got %v, want segment %s offset %d seq %d",
						seq, f.name, bit, ce, want.Segment, want.Offset, want.Seq)
				}
				if vr.Broken == nil || *vr.Broken != *ce || vr.LastSeq != seq-1 {
					t.Fatalf("Verify %+v disagrees with Open %v", vr, ce)
				}
				// Scan stops there with the same error.
				var last uint64
				err = wal.Scan("/j", opt, 1, func(r wal.Record) error { last = r.Seq; return nil })
				if sc := asCorruption(t, err); *sc != *ce || last != seq-1 {
					t.Fatalf("Scan: %v after %d", sc, last)
				}
			}
		}
	}
}

// A flipped bit in the last record cannot be told from a torn write by the
// segments alone: without an anchor naming it (a journal from before
// anchors, or a record newer than the last anchor), Open may cut it
// (reporting the cut and keeping the bytes) or refuse, but never return
// the wrong bytes. With the anchor naming it — here, as after any Close —
// the record was durable, and Open refuses: the damage is reported, never
// cut away as a torn tail (which would lose a durable record without a
// word, from certify too).
func TestFlipBitLastRecord(t *testing.T) {
	const n = 30
	fsys, locs, m := buildLog(t, 2048, n, 100)
	loc := locs[n]
	m.acked = n - 1 // the one record a tail cut may take, and it must say so
	for pos := int64(0); pos < loc.n; pos += 5 {
		after := fsys.Crash(crashfs.FlipBitAt(loc.seg, loc.off+pos, uint(pos%8)))
		opt := wal.Options{SegmentSize: 4096, FS: after}
		if _, err := wal.Open("/j", opt); !errors.Is(err, wal.ErrLost) && !errors.Is(err, wal.ErrCorrupt) {
			t.Fatalf("pos %d: the anchor names record %d; Open: %v, want it refused", pos, n, err)
		}
		if vr, err := wal.Verify("/j", opt); err != nil || vr.OK() {
			t.Fatalf("pos %d: Verify %+v %v, want it not OK", pos, vr, err)
		}
		if err := after.Remove("/j/ANCHOR"); err != nil {
			t.Fatal(err)
		}
		l, err := wal.Open("/j", opt)
		if err != nil {
			asCorruption(t, err)
			continue
		}
		rep := l.OpenReport()
		l.Close()
		if rep.TailCut == nil || rep.LastSeq != n-1 || rep.TailCut.Offset != loc.off || rep.TailCut.Bytes != loc.n {
			t.Fatalf("pos %d: %+v %v", pos, rep, rep.TailCut)
		}
		checkRecovery(t, after, "/j", wal.Options{SegmentSize: 4096}, m).log.Close()
	}
}

// Segment headers: a flipped bit anywhere in one is corruption at offset 0
// of that segment, for the seq it should start with.
func TestFlipBitSegmentHeader(t *testing.T) {
	fsys, locs, _ := buildLog(t, 1024, 40, 100)
	firsts := map[string]uint64{}
	for seq, l := range locs {
		if l.off == 64 {
			firsts[l.seg] = seq
		}
	}
	for seg, first := range firsts {
		for _, pos := range []int64{0, 9, 17, 30, 57} {
			after := fsys.Crash(crashfs.FlipBitAt(seg, pos, 3))
			_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
			ce := asCorruption(t, err)
			if ce.Segment != filepath.Base(seg) || ce.Offset != 0 || ce.Seq != first {
				t.Fatalf("%s byte %d: %v", seg, pos, ce)
			}
		}
	}
}

// Garbage after the last record with nothing valid after it is a torn tail:
// cut, kept byte for byte in .broken, reported once, zeroed in the segment.
func TestTornTailCutAndKept(t *testing.T) {
	const n = 12
	fsys, locs, m := buildLog(t, 8192, n, 100)
	last := locs[n]
	end := last.off + last.n
	// A torn copy of a real frame (its first 100 bytes) then some noise.
	orig, _ := fsys.ReadFile(last.seg)
	torn := append(bytes.Clone(orig[last.off:last.off+100]), 0, 0, 0x55)
	img := bytes.Clone(orig)
	copy(img[end:], torn)
	if err := fsys.WriteFile(last.seg, img); err != nil {
		t.Fatal(err)
	}
	vr, err := wal.Verify("/j", wal.Options{SegmentSize: 4096, FS: fsys})
	if err != nil || vr.Broken != nil || vr.TornTail == nil || vr.TornTail.Offset != end ||
		vr.TornTail.Bytes != int64(len(torn)) || vr.TornTail.BrokenFile != "" {
		t.Fatalf("Verify: %+v %v", vr, vr.TornTail)
	}
	rec := checkRecovery(t, fsys, "/j", wal.Options{SegmentSize: 4096}, m)
	tc := rec.report.TailCut
	if tc == nil || tc.Offset != end || tc.Bytes != int64(len(torn)) || tc.Segment != filepath.Base(last.seg) ||
		tc.BrokenFile != filepath.Base(last.seg)+".broken" {
		t.Fatalf("tail cut %v", tc)
	}
	kept, _ := fsys.ReadFile("/j/" + tc.BrokenFile)
	if !bytes.Equal(kept, torn) {
		t.Fatal(".broken does not hold the cut bytes")
	}
	seg, _ := fsys.ReadFile(last.seg)
	if !bytes.Equal(seg[:end], orig[:end]) || bytes.ContainsFunc(seg[end:], func(r rune) bool { return r != 0 }) {
		t.Fatal("segment not intact up to the cut and zero after it")
	}
	// The log continues from the cut, and the cut is not reported again.
	appendN(t, rec.log, m, 3, 100)
	rec.log.Close()
	again := checkRecovery(t, fsys.Crash(crashfs.DropUnsynced()), "/j", wal.Options{SegmentSize: 4096}, m)
	defer again.log.Close()
	if again.report.TailCut != nil || again.report.LastSeq != n+3 {
		t.Fatalf("reopen: %+v", again.report)
	}
	// A second cut of the same segment does not overwrite the first .broken.
	seg, _ = fsys.ReadFile(last.seg)
	locs = locate(t, fsys, "/j")
	end2 := locs[n+3].off + locs[n+3].n
	seg[end2+10] = 0x77
	fsys.WriteFile(last.seg, seg)
	l := mustOpen(t, "/j", wal.Options{SegmentSize: 4096, FS: fsys})
	defer l.Close()
	if tc2 := l.OpenReport().TailCut; tc2 == nil || tc2.BrokenFile != filepath.Base(last.seg)+".broken.1" || tc2.Bytes != 11 {
		t.Fatalf("second cut %v", tc2)
	}
}

// Damage with valid data after it is never taken for a torn tail.
func TestStructuralCorruption(t *testing.T) {
	fsys, locs, _ := buildLog(t, 1024, 40, 100)
	segs := map[uint64]string{}
	var order []uint64
	for seq, l := range locs {
		if l.off == 64 {
			segs[seq] = l.seg
		}
	}
	for seq := uint64(1); seq <= 40; seq++ {
		if _, ok := segs[seq]; ok {
			order = append(order, seq)
		}
	}
	if len(order) < 4 {
		t.Fatalf("segments: %v", order)
	}

	t.Run("missing middle segment", func(t *testing.T) {
		after := fsys.Crash(crashfs.DropUnsynced())
		after.Remove(segs[order[1]])
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		ce := asCorruption(t, err)
		if ce.Segment != filepath.Base(segs[order[2]]) || ce.Offset != 0 || ce.Seq != order[1] {
			t.Fatal(ce)
		}
	})
	t.Run("missing first segment", func(t *testing.T) {
		after := fsys.Crash(crashfs.DropUnsynced())
		after.Remove(segs[1])
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		if ce := asCorruption(t, err); ce.Segment != filepath.Base(segs[order[1]]) || ce.Seq != 1 {
			t.Fatal(ce)
		}
	})
	t.Run("missing last records of a segment", func(t *testing.T) {
		after := fsys.Crash(crashfs.DropUnsynced())
		last := order[1] - 1 // last record of the first segment
		b, _ := after.ReadFile(segs[1])
		clear(b[locs[last].off:])
		after.WriteFile(segs[1], b)
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		if ce := asCorruption(t, err); ce.Segment != filepath.Base(segs[order[1]]) || ce.Seq != last {
			t.Fatal(ce)
		}
	})
	t.Run("garbage in the zero tail of a full segment", func(t *testing.T) {
		after := fsys.Crash(crashfs.DropUnsynced())
		b, _ := after.ReadFile(segs[1])
		b[len(b)-1] = 1
		after.WriteFile(segs[1], b)
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		if ce := asCorruption(t, err); ce.Segment != filepath.Base(segs[1]) || ce.Seq != order[1] {
			t.Fatal(ce)
		}
	})
	t.Run("spliced record", func(t *testing.T) {
		// A self-consistent frame (valid CRC) from elsewhere in the log,
		// copied over another: only the chain can tell.
		after := fsys.Crash(crashfs.DropUnsynced())
		a, b := locs[5], locs[6]
		if a.seg != b.seg || a.n != b.n {
			t.Fatal("the fixture changed: records 5 and 6 are no longer alike, so the splice tests nothing")
		}
		img, _ := after.ReadFile(a.seg)
		copy(img[b.off:b.off+b.n], img[a.off:a.off+a.n])
		after.WriteFile(a.seg, img)
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		if ce := asCorruption(t, err); ce.Offset != b.off || ce.Seq != 6 {
			t.Fatal(ce)
		}
	})
	t.Run("segment renamed", func(t *testing.T) {
		after := fsys.Crash(crashfs.DropUnsynced())
		last := segs[order[len(order)-1]]
		after.Rename(last, "/j/00000000000000ff.wal")
		_, err := wal.Open("/j", wal.Options{SegmentSize: 4096, FS: after})
		if ce := asCorruption(t, err); ce.Segment != "00000000000000ff.wal" || ce.Offset != 0 {
			t.Fatal(ce)
		}
	})
}

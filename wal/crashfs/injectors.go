package crashfs

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// FileImage is what an Injector sees of one file at the crash. Injectors
// must not modify Durable or Current.
type FileImage struct {
	Path    string
	Durable []byte // content as of the file's last Sync (nil if never synced)
	Current []byte // content at the crash, unsynced writes included
}

// Injector decides what each file contains after a crash. Crash runs with
// the FS locked, on whichever goroutine made the call that cut the power;
// an injector holding a *rand.Rand must therefore have one of its own.
type Injector interface {
	// Name identifies the injector in test tables and failure messages.
	Name() string
	// Crash returns the post-crash content of each file, in order.
	Crash(files []FileImage) [][]byte
}

// Dirty returns the range [lo, hi) where current differs from durable
// (a size change counts as different up to the larger size); lo == hi when
// the file has no unsynced change.
func (f FileImage) Dirty() (lo, hi int) {
	d, c := f.Durable, f.Current
	m := min(len(d), len(c))
	for lo < m && d[lo] == c[lo] {
		lo++
	}
	if lo == m && len(d) == len(c) {
		return 0, 0
	}
	hi = max(len(d), len(c))
	if len(d) == len(c) {
		for hi > lo && d[hi-1] == c[hi-1] {
			hi--
		}
	}
	return lo, hi
}

// MergeAt returns the content when unsynced changes before offset p reached
// the disk and those from p on did not.
func (f FileImage) MergeAt(p int) []byte {
	d, c := f.Durable, f.Current
	if p >= len(c) {
		return slices.Clone(c)
	}
	p = max(p, 0)
	r := make([]byte, max(p, len(d)))
	copy(r, c[:p])
	if len(d) > p {
		copy(r[p:], d[p:])
	}
	return r
}

type perFile struct {
	name string
	fn   func(FileImage) []byte
}

func (p perFile) Name() string { return p.name }

func (p perFile) Crash(files []FileImage) [][]byte {
	out := make([][]byte, len(files))
	for i, f := range files {
		out[i] = p.fn(f)
	}
	return out
}

// PerFile makes an Injector that decides each file independently with fn.
func PerFile(name string, fn func(FileImage) []byte) Injector { return perFile{name, fn} }

// DropUnsynced keeps only what was synced: the classic clean power cut.
func DropUnsynced() Injector {
	return PerFile("DropUnsynced", func(f FileImage) []byte { return slices.Clone(f.Durable) })
}

// KeepAll keeps every unsynced byte, as if the cache had been written back
// just before the cut.
func KeepAll() Injector {
	return PerFile("KeepAll", func(f FileImage) []byte { return slices.Clone(f.Current) })
}

// KeepRandomPrefix keeps, in each file, a random prefix of the unsynced
// range and loses the rest: the write reached the disk part way.
func KeepRandomPrefix(rng *rand.Rand) Injector {
	return PerFile("KeepRandomPrefix", func(f FileImage) []byte {
		lo, hi := f.Dirty()
		if lo == hi {
			return slices.Clone(f.Durable)
		}
		return f.MergeAt(lo + rng.IntN(hi-lo+1))
	})
}

// TearAt keeps the unsynced bytes up to the last multiple of block (512 for
// a sector, 4096 for a page) inside the unsynced range, and loses the
// partial block after it: a write torn at a device block boundary.
func TearAt(block int) Injector {
	if block <= 0 {
		panic("crashfs: TearAt block must be positive")
	}
	return PerFile(fmt.Sprintf("TearAt(%d)", block), func(f FileImage) []byte {
		lo, hi := f.Dirty()
		if lo == hi {
			return slices.Clone(f.Durable)
		}
		return f.MergeAt(hi / block * block)
	})
}

// ZeroExtend makes the unsynced range read as zeros, sized as the current
// file: metadata (the size) reached the disk but the data did not, as with
// ext4 data=writeback.
func ZeroExtend() Injector {
	return PerFile("ZeroExtend", func(f FileImage) []byte {
		lo, hi := f.Dirty()
		r := make([]byte, len(f.Current))
		copy(r, f.Durable)
		if lo < hi {
			clear(r[lo:min(hi, len(r))])
		}
		return r
	})
}

// BitFlip flips one bit in one file after dropping unsynced data: media
// corruption, which may hit synced bytes. After Crash, Path, Offset and Bit
// say where it struck (Path is empty if there was no non-empty file).
type BitFlip struct {
	rng    *rand.Rand
	Path   string
	Offset int64
	Bit    uint
}

// FlipBit flips a random bit of a random non-empty file (files chosen
// uniformly, then the byte and the bit).
func FlipBit(rng *rand.Rand) *BitFlip { return &BitFlip{rng: rng} }

// FlipBitAt flips bit (0-7) of byte off of the file at path.
func FlipBitAt(path string, off int64, bit uint) *BitFlip {
	return &BitFlip{Path: clean(path), Offset: off, Bit: bit % 8}
}

// Name describes the flip.
func (b *BitFlip) Name() string {
	if b.rng != nil && b.Path == "" {
		return "FlipBit"
	}
	return fmt.Sprintf("FlipBit(%s@%d.%d)", b.Path, b.Offset, b.Bit)
}

// Crash drops unsynced data and flips the bit.
func (b *BitFlip) Crash(files []FileImage) [][]byte {
	out := DropUnsynced().Crash(files)
	if b.rng != nil {
		var cand []int
		for i, c := range out {
			if len(c) > 0 {
				cand = append(cand, i)
			}
		}
		if len(cand) == 0 {
			b.Path = ""
			return out
		}
		i := cand[b.rng.IntN(len(cand))]
		b.Path = files[i].Path
		b.Offset = b.rng.Int64N(int64(len(out[i])))
		b.Bit = uint(b.rng.IntN(8))
	}
	for i, f := range files {
		if f.Path == b.Path && b.Offset < int64(len(out[i])) {
			out[i][b.Offset] ^= 1 << b.Bit
		}
	}
	return out
}

type then struct{ a, b Injector }

func (t then) Name() string { return t.a.Name() + "+" + t.b.Name() }

func (t then) Crash(files []FileImage) [][]byte {
	mid := t.a.Crash(files)
	next := make([]FileImage, len(files))
	for i, f := range files {
		next[i] = FileImage{Path: f.Path, Durable: mid[i], Current: mid[i]}
	}
	return t.b.Crash(next)
}

// Then applies a, then b to a's result (taken as fully durable): for
// example Then(KeepRandomPrefix(rng), FlipBitAt(...)).
func Then(a, b Injector) Injector { return then{a, b} }

// Standard returns the crash injectors that model power loss without media
// damage, for table-driven tests: every acknowledged (synced) byte must
// survive each of them.
func Standard(rng *rand.Rand) []Injector {
	return []Injector{
		DropUnsynced(),
		KeepAll(),
		KeepRandomPrefix(rng),
		TearAt(512),
		TearAt(4096),
		ZeroExtend(),
	}
}

package wal

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// A cut note is a small text file beside each .broken file, named like it
// with ".cut" added (0000000000000001.wal.broken.cut), that says where the
// kept bytes came from: the segment, the offset, how many bytes, the last
// record kept before them (seq and hash) and how many records that checked
// on their own they held. The .broken file alone cannot say: once a torn
// tail is cut, new records are written where it was. A cut writes the note
// first (atomically), then the .broken copy, then cuts. Format, one field
// a line:
//
//	saga-supervisor journal cut v1
//	segment 0000000000000001.wal
//	offset 4096
//	bytes 1200
//	whole false
//	last-seq 57
//	last-hash <64 hex digits>     (absent when unknown)
//	records 2 59 60               (count, first seq, last seq)
//	reason <text to the end of the line>
const (
	cutNoteExt   = ".cut"
	cutNoteMagic = "saga-supervisor journal cut v1"
)

// cutNote is what a cut note holds.
type cutNote struct {
	segment   string
	offset    int64
	bytes     int64
	whole     bool
	last      anchor // the last record kept before the cut
	lastKnown bool
	count     SegmentCut // Records, FirstRecord, LastRecord
	reason    string
}

func (n cutNote) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintln(&b, cutNoteMagic)
	fmt.Fprintf(&b, "segment %s\noffset %d\nbytes %d\nwhole %t\n", n.segment, n.offset, n.bytes, n.whole)
	if n.lastKnown {
		fmt.Fprintf(&b, "last-seq %d\nlast-hash %x\n", n.last.seq, n.last.hash)
	}
	fmt.Fprintf(&b, "records %d %d %d\n", n.count.Records, n.count.FirstRecord, n.count.LastRecord)
	fmt.Fprintf(&b, "reason %s\n", strings.ReplaceAll(n.reason, "\n", " "))
	return b.Bytes()
}

func decodeCutNote(b []byte) (cutNote, error) {
	var n cutNote
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || sc.Text() != cutNoteMagic {
		return n, errors.New("not a cut note")
	}
	seen := map[string]bool{}
	var hashOK bool
	for sc.Scan() {
		key, val, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch key {
		case "segment":
			n.segment = val
		case "offset":
			n.offset, err = strconv.ParseInt(val, 10, 64)
		case "bytes":
			n.bytes, err = strconv.ParseInt(val, 10, 64)
		case "whole":
			n.whole, err = strconv.ParseBool(val)
		case "last-seq":
			n.last.seq, err = strconv.ParseUint(val, 10, 64)
		case "last-hash":
			var h []byte
			if h, err = hex.DecodeString(val); err == nil && len(h) != len(n.last.hash) {
				err = errors.New("wrong length")
			}
			copy(n.last.hash[:], h)
			hashOK = err == nil
		case "records":
			_, err = fmt.Sscanf(val, "%d %d %d", &n.count.Records, &n.count.FirstRecord, &n.count.LastRecord)
		case "reason":
			n.reason = val
		default:
			continue // a later version's field
		}
		if err != nil {
			return n, fmt.Errorf("field %s: %w", key, err)
		}
		seen[key] = true
	}
	for _, k := range []string{"segment", "offset", "bytes", "whole", "records"} {
		if !seen[k] {
			return n, fmt.Errorf("no %s", k)
		}
	}
	n.lastKnown = seen["last-seq"] && hashOK
	return n, sc.Err()
}

// writeCutNote writes the note of the .broken file broken, atomically.
func writeCutNote(fsys FS, dir, broken string, n cutNote) error {
	err := writeAtomic(fsys, dir, broken+cutNoteExt, func(f File) error {
		_, err := f.WriteAt(n.encode(), 0)
		return err
	})
	if err != nil {
		return fmt.Errorf("wal: writing the cut note of %s: %w", broken, err)
	}
	return nil
}

// KeptCut is bytes cut from the journal and kept in a .broken file: a torn
// tail Open cut, or what TruncateAt or Repair cut.
type KeptCut struct {
	BrokenFile string // the .broken file, in the journal's directory
	// SegmentCut says what was cut. Segment and Bytes (the .broken file's
	// size) are always known; the rest only if Noted.
	SegmentCut
	// Noted: the cut note was found. Without it (a cut made before notes
	// existed, or a damaged note) the offset and the record before the
	// cut are unknown.
	Noted bool
	// LastKnown: the last record kept before the cut, LastSeq and
	// LastHash, is known.
	LastKnown bool
	LastSeq   uint64
	LastHash  [32]byte
	Reason    string // why it was cut (the frame error, or who cut)
	NoteError string // why the note could not be read, if it exists and does not decode
}

// Cuts lists every cut kept in dir's .broken files, in name order. It only
// reads.
func Cuts(dir string, opt Options) ([]KeptCut, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	fsys := opt.FS
	names, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []KeptCut
	for _, name := range names {
		seg, ok := brokenSegment(name)
		if !ok {
			continue
		}
		k := KeptCut{BrokenFile: name, SegmentCut: SegmentCut{Segment: seg, Offset: -1}}
		if k.Bytes, err = fileSize(fsys, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
		b, err := readWhole(fsys, filepath.Join(dir, name+cutNoteExt), maxCutNote)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			n, derr := decodeCutNote(b)
			if derr != nil {
				k.NoteError = derr.Error()
				break
			}
			k.Noted, k.Reason = true, n.reason
			k.Offset, k.Whole = n.offset, n.whole
			k.Records, k.FirstRecord, k.LastRecord = n.count.Records, n.count.FirstRecord, n.count.LastRecord
			k.LastKnown, k.LastSeq, k.LastHash = n.lastKnown, n.last.seq, n.last.hash
		}
		out = append(out, k)
	}
	return out, nil
}

// brokenSegment tells whether name is a .broken file (seg.broken or
// seg.broken.N) and of which segment.
func brokenSegment(name string) (string, bool) {
	seg, rest, ok := strings.Cut(name, brokenExt)
	if !ok {
		return "", false
	}
	if _, isSeg := parseSegName(seg); !isSeg {
		return "", false
	}
	if rest == "" {
		return seg, true
	}
	n, isNum := strings.CutPrefix(rest, ".")
	if _, err := strconv.ParseUint(n, 10, 32); !isNum || err != nil {
		return "", false
	}
	return seg, true
}

// maxCutNote bounds what is read of a cut note (one is a few hundred
// bytes).
const maxCutNote = 64 << 10

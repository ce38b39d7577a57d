package wal

import "errors"

// VerifyReport is what Verify found.
type VerifyReport struct {
	Records  uint64   // valid records (all of them, from seq 1)
	Segments int      // segment files examined
	LastSeq  uint64   // seq of the last valid record, 0 if none
	LastHash [32]byte // its hash (GenesisHash() if none)
	// Broken is set when the journal is corrupt (Open would refuse it).
	Broken *CorruptionError
	// TornTail is set when the journal ends in a torn tail (Open would cut
	// it). BrokenFile is empty: Verify writes nothing.
	TornTail *TailCut
	// Lost is set when records the anchor vouches for are missing or
	// differ, or the anchor is damaged (Open would refuse the journal
	// unless told to accept the loss).
	Lost *LossError
	// FirstSeq is the first record the segments hold (1 unless retention
	// deleted segments behind a checkpoint).
	FirstSeq uint64
	// Checkpoint is the newest checkpoint that matches the journal, the
	// one Open would start from; nil if none.
	Checkpoint *Checkpoint
	// CheckpointsDamaged are checkpoint files that do not decode (Open
	// passes over them to an older one or the journal's start).
	CheckpointsDamaged []CheckpointDamage
}

// OK reports whether the journal is clean: no corruption, no torn tail,
// nothing lost and no damaged checkpoint.
func (r VerifyReport) OK() bool {
	return r.Broken == nil && r.TornTail == nil && r.Lost == nil && len(r.CheckpointsDamaged) == 0
}

// Verify checks the whole journal in dir without changing anything: every
// segment header, frame CRC, sequence number and hash link. Damage is
// reported in the VerifyReport; the error is non-nil only if the journal
// cannot be read at all (missing directory, permissions, I/O errors).
func Verify(dir string, opt Options) (VerifyReport, error) {
	return verify(dir, opt, false, 0)
}

// VerifyTo is Verify for a journal that is being written: it checks the
// records up to seq, which must be durable (Log.DurableSeq read before the
// call), or up to the anchor's record if that is further (the anchor only
// names durable records), and reads nothing after them. Past the durable
// end a frame may be half-written as the pass reads it, and a record read
// as zeros before the next one is read whole would look like damage in the
// middle of the journal.
func VerifyTo(dir string, opt Options, seq uint64) (VerifyReport, error) {
	return verify(dir, opt, true, seq)
}

func verify(dir string, opt Options, bounded bool, upTo uint64) (VerifyReport, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return VerifyReport{}, err
	}
	anc, aerr := readAnchor(opt.FS, dir)
	var dmg *anchorDamage
	if aerr != nil && !errors.As(aerr, &dmg) {
		return VerifyReport{}, aerr
	}
	sp, err := findStart(opt.FS, dir)
	if err != nil {
		return VerifyReport{}, err
	}
	// Every record there is, from the first segment: one retention left
	// starting after seq 1 is anchored by its header when a checkpoint
	// matching the journal stands in for what went before.
	wo := walkOpts{from: 1, trustFirst: sp.ckpt != nil}
	if anc != nil {
		wo.hashAt = anc.seq
	}
	if bounded {
		if anc != nil {
			upTo = max(upTo, anc.seq)
		}
		wo.stopBefore = upTo + 1
	}
	res, err := walk(opt.FS, dir, wo)
	if err != nil {
		return VerifyReport{}, err
	}
	rep := VerifyReport{
		Records:            res.records,
		Segments:           res.segments,
		LastSeq:            res.lastSeq,
		LastHash:           res.lastHash,
		Broken:             res.corrupt,
		TornTail:           res.torn,
		Checkpoint:         sp.ckpt,
		CheckpointsDamaged: sp.damaged,
	}
	if len(sp.segs) > 0 {
		rep.FirstSeq = sp.segs[0].first
	}
	if res.corrupt == nil {
		rep.Lost = sp.loss(res.lastSeq)
		if rep.Lost == nil {
			rep.Lost = checkAnchor(anc, aerr, res, res.hashAt)
		}
	}
	return rep, nil
}

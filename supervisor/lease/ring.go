package lease

// endedIDs remembers the ids of the most recently ended leases, and why each
// ended, so that a late command carrying one is answered LEASE_EXPIRED with
// the reason even when it carries no usable epoch. It is a fixed ring: the
// oldest id is forgotten first, and beyond it the epoch rule answers. It
// grows as leases end, up to max: allocated whole at start, its map alone
// kept some 300 KiB resident on a robot whose leases end a few times a day.
type endedIDs struct {
	ring   []endedID
	max    int
	next   int
	reason map[string]string
}

type endedID struct{ id, reason string }

func newEndedIDs(n int) *endedIDs {
	return &endedIDs{max: n, reason: map[string]string{}}
}

// add remembers id. Lease ids are never reused (each embeds its epoch), so
// an id is added at most once and evicting it from the map is always right.
func (r *endedIDs) add(id, reason string) {
	if len(r.ring) < r.max {
		r.ring = append(r.ring, endedID{id, reason})
	} else {
		delete(r.reason, r.ring[r.next].id)
		r.ring[r.next] = endedID{id, reason}
		r.next = (r.next + 1) % len(r.ring)
	}
	r.reason[id] = reason
}

func (r *endedIDs) lookup(id string) (reason string, ok bool) {
	reason, ok = r.reason[id]
	return reason, ok
}

// seenIDs remembers the last n command ids of one lease. Ids are kept as
// 64-bit seeded hashes, so memory per lease is fixed however long the ids
// an agent sends. A collision can only make one of the lease holder's own
// fresh commands look like a replay (refused, nothing moves); the seed is
// random per manager, so an agent cannot aim for one.
type seenIDs struct {
	ring []uint64
	next int
	set  map[uint64]struct{}
}

// record reports whether h was seen, and remembers it if not.
func (s *seenIDs) record(h uint64, n int) bool {
	if _, dup := s.set[h]; dup {
		return true
	}
	if s.set == nil {
		// Allocated on first use: most leases carry few commands.
		s.set = make(map[uint64]struct{})
	}
	if len(s.ring) < n {
		s.ring = append(s.ring, h)
	} else {
		delete(s.set, s.ring[s.next])
		s.ring[s.next] = h
		s.next = (s.next + 1) % len(s.ring)
	}
	s.set[h] = struct{}{}
	return false
}

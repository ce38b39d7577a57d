package ingress

import (
	"encoding/json"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// replyCache remembers the replies to an agent's most recent requests, by
// id, so that a replayed request gets the first reply and is not served
// twice. Ids are de-duplicated within a lease: a request is known by its
// lease and id (requests that carry no lease — hello, status, reset — by
// their id alone). It is a ring of at most max replies: the oldest reply is
// forgotten first, and a hello that grants a new lease forgets the old
// lease's replies. It grows as replies are stored: allocated whole, the
// ring and map of every agent that ever sent a request held some 100 KiB
// each, however few replies there were to remember.
type replyCache struct {
	ring  []cached
	max   int
	next  int
	byID  map[string]int // index in ring, by key
	lease string         // the lease the cached replies belong to
}

type cached struct {
	req api.Request
	rep api.Reply
}

func newReplyCache(n int) replyCache {
	return replyCache{max: n, byID: map[string]int{}}
}

// lookup returns the reply to an earlier request with req's id. Only an
// identical request is a replay; one reusing the id for anything else is
// refused DUPLICATE_ID, since the id no longer names one request (and
// answering it with the first reply would tell the agent that what it asked
// now was done).
func (c *replyCache) lookup(req api.Request) (api.Reply, seen) {
	i, ok := c.byID[key(req)]
	if !ok {
		return api.Reply{}, unseen
	}
	e := c.ring[i]
	if e.req != req {
		return api.ErrorReply(req.ID, &api.Error{Code: codeDuplicateID,
			Message: "id " + req.ID + " was already used for another " + string(e.req.Op) + " request under this lease; use a new id for every request"}), reused
	}
	return e.rep, replayed
}

// seen is what the cache knows of a request id.
type seen uint8

const (
	unseen   seen = iota
	replayed      // the same request again: its first reply
	reused        // the id of another request: DUPLICATE_ID
)

// codeDuplicateID is the engine's code for a reused command id (the api
// package lists it; it is not redeclared there).
const codeDuplicateID = "DUPLICATE_ID"

// cachedReplyBytes bounds a remembered reply: a larger one (the report of
// a long unwind) is remembered summarised, as api.EncodeReplyMax would send
// it at this size, so that 256 remembered aborts cannot hold hundreds of
// megabytes of reports.
const cachedReplyBytes = 4096

func (c *replyCache) store(req api.Request, rep api.Reply) {
	if req.ID == "" || c.max == 0 || req.Op == api.OpStatus {
		// A status is read-only: a replay is answered afresh, and its
		// (large) body is not kept.
		return
	}
	if rep.Report != nil && len(rep.Report.Steps) > 16 {
		var small api.Reply
		if json.Unmarshal(api.EncodeReplyMax(rep, cachedReplyBytes), &small) == nil {
			rep = small
		}
	}
	if req.Op == api.OpHello && rep.OK && rep.Lease != c.lease {
		c.ring, c.next = c.ring[:0], 0
		clear(c.byID)
		c.lease = rep.Lease
	}
	k := key(req)
	if _, ok := c.byID[k]; ok {
		return
	}
	e := cached{req: req, rep: rep}
	if len(c.ring) < c.max {
		c.byID[k] = len(c.ring)
		c.ring = append(c.ring, e)
		return
	}
	delete(c.byID, key(c.ring[c.next].req))
	c.ring[c.next] = e
	c.byID[k] = c.next
	c.next = (c.next + 1) % len(c.ring)
}

// key names a request for de-duplication: its lease and its id.
func key(req api.Request) string { return req.Lease + "\x00" + req.ID }

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Update is one message on the supervisor's status, events or state
// topics. Exactly one of Status, Event and State is set when the payload
// decodes; Payload is always the message as received.
type Update struct {
	Topic    string
	Payload  []byte
	Retained bool // a retained message: the last one published before Watch subscribed

	Status *api.Status // <prefix>/<device>/status
	Event  *api.Event  // <prefix>/<device>/events (ignore kinds you do not know)
	State  *State      // <prefix>/<device>/state/<actuator>
}

// State is the retained commanded state of one actuator.
type State struct {
	Actuator  string  `json:"actuator"`
	Commanded float64 `json:"commanded"`
}

// watchBuffer is how many updates a watcher may fall behind before its
// Watch ends with an error (a watch that dropped messages silently would
// lie about the robot).
const watchBuffer = 4096

type watcher struct {
	ch   chan Update
	over chan struct{}
	once sync.Once
}

// Watch calls fn with the supervisor's status, events and actuator states
// until ctx ends (it then returns nil) or the connection does. The current
// status and every actuator's retained state come first. fn runs on
// Watch's goroutine, one update at a time, in arrival order; if it falls
// more than a few thousand updates behind, Watch returns an error rather
// than skip any. Watch needs no lease.
func (c *Client) Watch(ctx context.Context, fn func(Update)) error {
	w := &watcher{ch: make(chan Update, watchBuffer), over: make(chan struct{})}
	c.watchMu.Lock()
	c.wmu.Lock()
	if c.watchers == nil {
		c.watchers = map[*watcher]struct{}{}
	}
	c.watchers[w] = struct{}{}
	// What the subscription already delivered, once, in a stable order.
	if c.lastStatus != nil {
		w.ch <- *c.lastStatus
	}
	for _, topic := range slices.Sorted(maps.Keys(c.lastState)) {
		w.ch <- c.lastState[topic]
	}
	c.wmu.Unlock()
	defer func() {
		c.wmu.Lock()
		delete(c.watchers, w)
		c.wmu.Unlock()
	}()
	if !c.subbed {
		subs := map[string]byte{c.topics.Status(): 1, c.topics.Events(): 1, c.topics.State("+"): 1}
		sctx, cancel := c.bound(ctx)
		err := wait(sctx, c.mc.SubscribeMultiple(subs, c.onWatch))
		cancel()
		if err != nil {
			c.watchMu.Unlock()
			if gerr := c.gone0(); gerr != nil {
				return gerr
			}
			return fmt.Errorf("client: watch: subscribe: %w", err)
		}
		c.subbed = true // kept for the client's life: the caches stay current
	}
	c.watchMu.Unlock()
	for {
		// Deliver what is queued before noticing the end.
		select {
		case u := <-w.ch:
			fn(u)
			continue
		default:
		}
		select {
		case u := <-w.ch:
			fn(u)
		case <-w.over:
			return fmt.Errorf("client: watch fell %d updates behind: stopped rather than skip any", watchBuffer)
		case <-ctx.Done():
			return nil
		case <-c.gone:
			err := c.gone0()
			if errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
	}
}

// onWatch is paho's handler for the watched topics. It must not block.
func (c *Client) onWatch(_ paho.Client, m paho.Message) {
	u := Update{Topic: m.Topic(), Payload: m.Payload(), Retained: m.Retained()}
	statePrefix := strings.TrimSuffix(c.topics.State("+"), "+")
	switch {
	case u.Topic == c.topics.Status():
		var s api.Status
		if json.Unmarshal(u.Payload, &s) == nil {
			u.Status = &s
		}
	case u.Topic == c.topics.Events():
		var e api.Event
		if json.Unmarshal(u.Payload, &e) == nil {
			u.Event = &e
		}
	case strings.HasPrefix(u.Topic, statePrefix):
		var s State
		if json.Unmarshal(u.Payload, &s) == nil {
			u.State = &s
		}
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch {
	case u.Topic == c.topics.Status():
		c.lastStatus = &u
	case strings.HasPrefix(u.Topic, statePrefix):
		if c.lastState == nil {
			c.lastState = map[string]Update{}
		}
		c.lastState[u.Topic] = u
	}
	for w := range c.watchers {
		select {
		case w.ch <- u:
		default:
			w.once.Do(func() { close(w.over) })
		}
	}
}

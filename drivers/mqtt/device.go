// Package mqtt drives MQTT-attached actuators: a Device is an actuators.Driver for a device —
// an ESP32 relay board, a motor controller's bridge — that takes a
// setpoint over MQTT and acknowledges it. docs/API.md ("MQTT-attached
// actuators") is the device author's documentation of the same format.
//
// Wire format (all QoS 1; JSON objects of one line):
//
//	Set(v)   → SetTopic, not retained:  {"seq":N,"value":V}
//	Halt()   → SetTopic, not retained:  {"seq":N,"halt":true}
//	device   → AckTopic, not retained:  {"seq":N,"ok":true}
//	                                    {"seq":N,"ok":false,"error":"why"}
//	device   → StateTopic, retained:    {"value":V}   (optional; an empty
//	                                    retained payload clears it)
//
// seq is a per-device counter, strictly increasing, that starts at a random
// value in [0, 2^32) each time the supervisor process starts, so a device
// can tell a restart (and replayed old messages) from new commands. It
// stays below 2^53 and so is exact in any JSON parser.
//
// What Set returns, and what it promises (actuators.Driver):
//
//   - ack with ok:true for its seq: nil — the device applied the value.
//   - ack with ok:false: an error wrapping actuators.ErrNotApplied — the
//     device promises it did not move, so the engine has nothing to undo.
//     So does a value that is not finite, or a ctx already done: nothing is
//     published.
//   - no ack before ctx is done: an error wrapping context.DeadlineExceeded —
//     in doubt (the device may have moved).
//   - link down when Set is called, or lost while waiting: an error wrapping
//     actuators.ErrLinkLost — in doubt. (Nothing is published while the link
//     is down, but the error stays the in-doubt one: the engine undoes an
//     in-doubt step, which costs one idempotent absolute set.)
//
// Acks are decoded strictly: at most MaxAckBytes, exactly one JSON object
// with the keys seq (a non-negative integer), ok (a boolean) and, only with
// ok:false, error (a string); an unknown, duplicate or mistyped key makes the
// whole ack malformed. A malformed ack is logged and ignored, and so is an
// ack for a seq nobody waits for (an old, duplicated or foreign one): the
// Set it might have belonged to then times out in doubt, which is the safe
// reading. Unknown keys are refused rather than skipped so that a device
// speaking another dialect fails loudly (every step in doubt) instead of
// half-understood. State payloads are decoded the same way: {"value":V} with
// V a finite number.
//
// Connections: a DeviceLink is one paho connection to one broker, shared by
// every Device made from it (the supervisor makes one link for all of its
// MQTT actuators). DialDevice is the shorthand for a device with a link of
// its own. The link connects and reconnects in the background
// (ConnectRetry, AutoReconnect), subscribes every device's ack and state
// topic again on each connect, and uses a clean session: an ack published
// while the link was down is lost, and the Set waiting for it ends in doubt.
// paho's handlers never block: they decode a bounded payload and hand the
// result to a buffered channel, or drop it.
package mqtt

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/saga-supervisor/saga-supervisor/internal/mqtttopic"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/internal/nodelay"
)

// MaxAckBytes bounds an ack or state payload; a longer one is malformed.
const MaxAckBytes = 1024

// MaxTopicBytes is MQTT's bound on a topic name.
const MaxTopicBytes = mqtttopic.MaxBytes

// DefaultHaltTimeout bounds how long Halt waits for the device's ack.
const DefaultHaltTimeout = 500 * time.Millisecond

// LinkOptions configures a DeviceLink's connection.
type LinkOptions struct {
	Broker   string // URL: tcp://host:1883, ssl://host:8883, ws://...
	ClientID string // must differ from every other client on the broker (the supervisor's own included)
	Username string
	Password string
	TLS      *tls.Config // nil: none
	// ConnectWait is how long DialDeviceLink waits for the first connection
	// (0: not at all). Either way the link keeps trying in the background,
	// and Set returns ErrLinkLost until it is up.
	ConnectWait time.Duration
	// After, if set, holds the first connection back until it is closed
	// (the embedded broker listening on its address: never dial a
	// stranger's broker holding that port). ConnectWait then starts from
	// there, and DialDeviceLink does not wait for it.
	After  <-chan struct{}
	Logger *slog.Logger // nil: discard
}

// DeviceOptions configures one MQTT-attached actuator.
type DeviceOptions struct {
	// LinkOptions is used by DialDevice only; DeviceLink.Device ignores it.
	LinkOptions
	Name       string // the actuator's name, for errors and logs
	SetTopic   string // required: where Set and Halt publish
	AckTopic   string // required: where the device acknowledges
	StateTopic string // optional: the device's retained {"value":V}
	// HaltTimeout bounds Halt's wait for its ack (default DefaultHaltTimeout).
	HaltTimeout time.Duration
	// Logger overrides the link's logger for this device (nil: the link's).
	Logger *slog.Logger
}

// DeviceLink is one MQTT connection shared by devices.
type DeviceLink struct {
	opt    LinkOptions
	log    *slog.Logger
	client paho.Client

	mu         sync.Mutex
	subscribed bool               // every registered topic is subscribed on the current connection
	acks       map[string]*Device // ack topic → device
	states     map[string]*Device // state topic → device
	sets       map[string]bool    // set topics in use
	closed     bool
	stop       chan struct{} // ends the wait for LinkOptions.After (nil: none)
}

// DialDeviceLink starts a link to opt.Broker. It returns once connected or
// after opt.ConnectWait, whichever is first; the connection is retried in
// the background, so a broker that is not up yet (the embedded one, started
// after the actuators are built) is not an error.
func DialDeviceLink(opt LinkOptions) (*DeviceLink, error) {
	if opt.Broker == "" || opt.ClientID == "" {
		return nil, errors.New("mqtt device link: broker and client id are required")
	}
	lg := opt.Logger
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	l := &DeviceLink{opt: opt, log: lg, acks: map[string]*Device{}, states: map[string]*Device{}, sets: map[string]bool{}}
	co := paho.NewClientOptions().
		SetDialer(nodelay.Dialer(30 * time.Second)). // a setpoint and its ack wait for each other
		AddBroker(opt.Broker).
		SetClientID(opt.ClientID).
		// A clean session: nothing stale is delivered after a reconnect; a
		// Set whose ack was lost ends in doubt.
		SetCleanSession(true).
		SetOrderMatters(false).
		SetAutoReconnect(true).
		SetConnectRetry(true).
		SetConnectRetryInterval(500 * time.Millisecond).
		SetMaxReconnectInterval(2 * time.Second).
		SetKeepAlive(10 * time.Second).
		SetOnConnectHandler(l.onConnect).
		SetConnectionLostHandler(l.onLost)
	if opt.Username != "" {
		co.SetUsername(opt.Username).SetPassword(opt.Password)
	}
	if opt.TLS != nil {
		co.SetTLSConfig(opt.TLS)
	}
	l.client = paho.NewClient(co)
	if opt.After != nil {
		select {
		case <-opt.After:
		default:
			// Not yet: connect once it is, unless closed before.
			l.stop = make(chan struct{})
			go func() {
				select {
				case <-opt.After:
				case <-l.stop:
					return
				}
				l.mu.Lock()
				if !l.closed {
					l.client.Connect()
				}
				l.mu.Unlock()
			}()
			return l, nil
		}
	}
	tok := l.client.Connect()
	if opt.ConnectWait > 0 {
		tok.WaitTimeout(opt.ConnectWait)
		if err := tok.Error(); err != nil {
			l.client.Disconnect(0)
			return nil, fmt.Errorf("mqtt device link: connect %s: %w", opt.Broker, err)
		}
		// Wait for onConnect's subscriptions too, within the same bound.
		deadline := time.Now().Add(opt.ConnectWait)
		for !l.up() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return l, nil
}

// up reports whether the link is connected and subscribed.
func (l *DeviceLink) up() bool {
	l.mu.Lock()
	sub := l.subscribed && !l.closed
	l.mu.Unlock()
	return sub && l.client.IsConnectionOpen()
}

func (l *DeviceLink) topics() map[string]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	subs := make(map[string]byte, len(l.acks)+len(l.states))
	for t := range l.acks {
		subs[t] = 1
	}
	for t := range l.states {
		subs[t] = 1
	}
	return subs
}

// onConnect subscribes every registered topic (again, after a reconnect).
// paho runs it on its own goroutine, so it may wait.
func (l *DeviceLink) onConnect(c paho.Client) {
	l.log.Info("mqtt device link connected", "broker", l.opt.Broker)
	l.forgetStates()
	if subs := l.topics(); len(subs) > 0 {
		tok := c.SubscribeMultiple(subs, l.onMessage)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			l.log.Error("mqtt device link: subscribe failed; devices stay unreachable until the next connect", "err", tok.Error())
			return
		}
	}
	l.mu.Lock()
	l.subscribed = true
	l.mu.Unlock()
}

func (l *DeviceLink) onLost(c paho.Client, err error) {
	l.log.Warn("mqtt device link lost", "broker", l.opt.Broker, "err", err)
	l.mu.Lock()
	// paho runs this and onConnect on goroutines of their own: a late
	// "lost" must not mark a newer connection unsubscribed.
	if !c.IsConnectionOpen() {
		l.subscribed = false
	}
	l.failPendingUnlock("lost")
	l.forgetStates()
}

// failPendingUnlock ends every Set waiting for an ack with ErrLinkLost,
// the link having been lost or closed (how). Call it with l.mu held: it
// unlocks before failing them.
func (l *DeviceLink) failPendingUnlock(how string) {
	devs := make([]*Device, 0, len(l.acks))
	for _, d := range l.acks {
		devs = append(devs, d)
	}
	l.mu.Unlock()
	for _, d := range devs {
		d.failPending(fmt.Errorf("mqtt device %s: link %s while waiting for the ack: %w", d.name, how, actuators.ErrLinkLost))
	}
}

// forgetStates drops every device's read-back: after a reconnect the
// broker delivers the retained state afresh (or none, if it was cleared).
func (l *DeviceLink) forgetStates() {
	l.mu.Lock()
	devs := make([]*Device, 0, len(l.states))
	for _, d := range l.states {
		devs = append(devs, d)
	}
	l.mu.Unlock()
	for _, d := range devs {
		d.setState(0, errNoState)
	}
}

// onMessage is paho's handler for every device topic. It never blocks:
// decoding is bounded by MaxAckBytes and results go to buffered channels.
func (l *DeviceLink) onMessage(_ paho.Client, m paho.Message) {
	l.mu.Lock()
	ack, state := l.acks[m.Topic()], l.states[m.Topic()]
	l.mu.Unlock()
	if ack != nil {
		ack.onAck(m.Payload())
	}
	if state != nil {
		state.onState(m.Payload())
	}
}

// Device registers an actuator on this link and subscribes its topics.
// Topics are exact topic names (no wildcards); no two devices on a link may
// share a set, ack or state topic.
func (l *DeviceLink) Device(opt DeviceOptions) (*Device, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	lg := opt.Logger
	if lg == nil {
		lg = l.log
	}
	d := &Device{link: l, name: opt.Name, opt: opt, log: lg.With("actuator", opt.Name),
		pending: map[uint64]chan ackResult{}, stateErr: errNoState}
	d.seq.Store(randomSeq())
	if d.opt.HaltTimeout <= 0 {
		d.opt.HaltTimeout = DefaultHaltTimeout
	}
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return nil, errors.New("mqtt device link: closed")
	case l.sets[opt.SetTopic] || l.acks[opt.SetTopic] != nil || l.states[opt.SetTopic] != nil:
		l.mu.Unlock()
		return nil, fmt.Errorf("mqtt device %s: set topic %q is already used by another device", opt.Name, opt.SetTopic)
	case l.sets[opt.AckTopic] || l.acks[opt.AckTopic] != nil || l.states[opt.AckTopic] != nil:
		l.mu.Unlock()
		return nil, fmt.Errorf("mqtt device %s: ack topic %q is already used by another device", opt.Name, opt.AckTopic)
	case opt.StateTopic != "" && (l.sets[opt.StateTopic] || l.acks[opt.StateTopic] != nil || l.states[opt.StateTopic] != nil):
		l.mu.Unlock()
		return nil, fmt.Errorf("mqtt device %s: state topic %q is already used by another device", opt.Name, opt.StateTopic)
	}
	l.sets[opt.SetTopic] = true
	l.acks[opt.AckTopic] = d
	subs := map[string]byte{opt.AckTopic: 1}
	if opt.StateTopic != "" {
		l.states[opt.StateTopic] = d
		subs[opt.StateTopic] = 1
	}
	l.mu.Unlock()
	// Registered before this check: if the link is not open yet, its
	// onConnect comes later and subscribes these topics with the rest.
	if l.client.IsConnectionOpen() {
		tok := l.client.SubscribeMultiple(subs, l.onMessage)
		if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			l.log.Warn("mqtt device link: subscribe failed; retried on the next connect", "actuator", opt.Name, "err", tok.Error())
		}
	}
	return d, nil
}

// Close disconnects. Sets waiting for an ack end with ErrLinkLost.
func (l *DeviceLink) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.stop != nil {
		close(l.stop)
	}
	l.failPendingUnlock("closed")
	l.client.Disconnect(250)
	return nil
}

// Device is an MQTT-attached actuator: an actuators.Driver and
// actuators.ReadBacker. See the top of this file for the wire format.
type Device struct {
	link *DeviceLink
	name string
	opt  DeviceOptions
	log  *slog.Logger
	own  bool // DialDevice: Close closes the link
	seq  atomic.Uint64

	mu       sync.Mutex
	pending  map[uint64]chan ackResult
	state    float64
	stateErr error // nil: state holds the device's last retained value
}

var (
	_ actuators.Driver     = (*Device)(nil)
	_ actuators.ReadBacker = (*Device)(nil)
)

var errNoState = errors.New("no state received yet")

type ackResult struct {
	ok  bool
	err error // the device's reason (ok false), or a link error
}

// DialDevice makes a device with a link (a connection) of its own, which
// Close closes. Several devices on one broker should share a DeviceLink.
func DialDevice(opt DeviceOptions) (*Device, error) {
	if err := opt.validate(); err != nil {
		return nil, err
	}
	lo := opt.LinkOptions
	if lo.Logger == nil {
		lo.Logger = opt.Logger
	}
	l, err := DialDeviceLink(lo)
	if err != nil {
		return nil, err
	}
	d, err := l.Device(opt)
	if err != nil {
		l.Close()
		return nil, err
	}
	d.own = true
	return d, nil
}

// Close closes the device's own link (DialDevice); on a shared link it
// does nothing: close the DeviceLink.
func (d *Device) Close() error {
	if d.own {
		return d.link.Close()
	}
	return nil
}

// Driver returns the device as the supervisor should see it: itself when it
// has a state topic, otherwise a Driver without ReadBack — a read-back that
// can never succeed would keep the supervisor from ever being ready.
func (d *Device) Driver() actuators.Driver {
	if d.opt.StateTopic != "" {
		return d
	}
	return noReadBack{d}
}

type noReadBack struct{ d *Device }

func (n noReadBack) Set(ctx context.Context, v float64) error { return n.d.Set(ctx, v) }
func (n noReadBack) Halt() error                              { return n.d.Halt() }

// Set publishes {"seq":N,"value":V} and waits for the ack of that seq until
// ctx is done.
func (d *Device) Set(ctx context.Context, value float64) error {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return fmt.Errorf("mqtt device %s: value %v is not finite: %w", d.name, value, actuators.ErrNotApplied)
	}
	if err := ctx.Err(); err != nil {
		// Nothing was sent: the output did not change.
		return fmt.Errorf("mqtt device %s: not sent (%v): %w", d.name, err, actuators.ErrNotApplied)
	}
	seq := d.seq.Add(1)
	payload := []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `,"value":` + strconv.FormatFloat(value, 'g', -1, 64) + `}`)
	res, err := d.exchange(ctx, seq, payload)
	if err != nil {
		return err
	}
	if !res.ok {
		// The device's promise: it did not move.
		return fmt.Errorf("mqtt device %s: refused %g (seq %d): %w: %w", d.name, value, seq, res.err, actuators.ErrNotApplied)
	}
	return nil
}

// Halt publishes {"seq":N,"halt":true} and waits up to HaltTimeout for its
// ack. It is best effort: without the ack it returns an error.
func (d *Device) Halt() error {
	ctx, cancel := context.WithTimeout(context.Background(), d.opt.HaltTimeout)
	defer cancel()
	seq := d.seq.Add(1)
	res, err := d.exchange(ctx, seq, []byte(`{"seq":`+strconv.FormatUint(seq, 10)+`,"halt":true}`))
	if err != nil {
		return fmt.Errorf("halt: %w", err)
	}
	if !res.ok {
		return fmt.Errorf("mqtt device %s: refused halt (seq %d): %w", d.name, seq, res.err)
	}
	return nil
}

// exchange publishes payload for seq and waits for its ack. A non-nil error
// is always in doubt (ErrLinkLost or context.DeadlineExceeded).
func (d *Device) exchange(ctx context.Context, seq uint64, payload []byte) (ackResult, error) {
	if !d.link.up() {
		return ackResult{}, fmt.Errorf("mqtt device %s: not connected to %s: %w", d.name, d.link.opt.Broker, actuators.ErrLinkLost)
	}
	ch := make(chan ackResult, 1)
	d.mu.Lock()
	d.pending[seq] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.pending, seq)
		d.mu.Unlock()
	}()
	// Not waited for: the device's ack is the confirmation that counts.
	d.link.client.Publish(d.opt.SetTopic, 1, false, payload)
	select {
	case res := <-ch:
		if res.err != nil && errors.Is(res.err, actuators.ErrLinkLost) {
			return ackResult{}, res.err
		}
		return res, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return ackResult{}, fmt.Errorf("mqtt device %s: no ack for seq %d: %w", d.name, seq, ctx.Err())
		}
		// Cancelled rather than timed out: still in doubt, and said so in
		// the terms the engine reads.
		return ackResult{}, fmt.Errorf("mqtt device %s: no ack for seq %d (%v): %w", d.name, seq, ctx.Err(), context.DeadlineExceeded)
	}
}

func (d *Device) failPending(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.pending {
		select {
		case ch <- ackResult{err: err}:
		default:
		}
	}
}

func (d *Device) onAck(payload []byte) {
	seq, ok, reason, err := decodeAck(payload)
	if err != nil {
		d.log.Warn("mqtt device: malformed ack ignored", "topic", d.opt.AckTopic, "err", err, "bytes", len(payload))
		return
	}
	d.mu.Lock()
	ch := d.pending[seq]
	d.mu.Unlock()
	if ch == nil {
		d.log.Debug("mqtt device: ack for a seq nobody waits for, ignored", "seq", seq)
		return
	}
	res := ackResult{ok: ok}
	if !ok {
		res.err = errors.New(reason)
		if reason == "" {
			res.err = errors.New("the device gave no reason")
		}
	}
	select {
	case ch <- res:
	default: // a duplicate ack: the first one counts
	}
}

func (d *Device) onState(payload []byte) {
	if len(payload) == 0 {
		// An empty retained message deletes the retained state (a device's
		// last will can do this): the read-back is unknown again.
		d.setState(0, errNoState)
		return
	}
	v, err := decodeState(payload)
	if err != nil {
		d.log.Warn("mqtt device: malformed state", "topic", d.opt.StateTopic, "err", err, "bytes", len(payload))
		d.setState(0, fmt.Errorf("malformed state: %w", err))
		return
	}
	d.setState(v, nil)
}

func (d *Device) setState(v float64, err error) {
	d.mu.Lock()
	d.state, d.stateErr = v, err
	d.mu.Unlock()
}

// ReadBack returns the value of the device's last retained state message.
func (d *Device) ReadBack(ctx context.Context) (float64, error) {
	if d.opt.StateTopic == "" {
		return 0, fmt.Errorf("mqtt device %s: no state topic configured", d.name)
	}
	if !d.link.up() {
		return 0, fmt.Errorf("mqtt device %s: not connected to %s: %w", d.name, d.link.opt.Broker, actuators.ErrLinkLost)
	}
	d.mu.Lock()
	v, err := d.state, d.stateErr
	d.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("mqtt device %s: %s: %w", d.name, d.opt.StateTopic, err)
	}
	return v, nil
}

// randomSeq is where a device's seq starts: random in [0, 2^32).
func randomSeq() uint64 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) & math.MaxUint32
	}
	return uint64(binary.BigEndian.Uint32(b[:]))
}

func (o DeviceOptions) validate() error {
	if o.Name == "" {
		return errors.New("mqtt device: a name is required")
	}
	for _, t := range []struct{ key, topic string }{{"set topic", o.SetTopic}, {"ack topic", o.AckTopic}} {
		if err := ValidPublishTopic(t.topic); err != nil {
			return fmt.Errorf("mqtt device %s: %s: %w", o.Name, t.key, err)
		}
	}
	if o.StateTopic != "" {
		if err := ValidPublishTopic(o.StateTopic); err != nil {
			return fmt.Errorf("mqtt device %s: state topic: %w", o.Name, err)
		}
	}
	if o.SetTopic == o.AckTopic || o.StateTopic != "" && (o.StateTopic == o.SetTopic || o.StateTopic == o.AckTopic) {
		return fmt.Errorf("mqtt device %s: set, ack and state topics must differ", o.Name)
	}
	return nil
}

// ValidPublishTopic checks a topic name a client may publish to (see
// mqtttopic.CheckPublish, which the configuration applies too).
func ValidPublishTopic(t string) error { return mqtttopic.CheckPublish(t) }

// decodeAck decodes {"seq":N,"ok":B} or {"seq":N,"ok":false,"error":"..."}.
func decodeAck(payload []byte) (seq uint64, ok bool, reason string, err error) {
	vals, err := scanFlat(payload, map[string]byte{"seq": 'n', "ok": 'b', "error": 's'})
	if err != nil {
		return 0, false, "", err
	}
	s, hasSeq := vals["seq"]
	o, hasOK := vals["ok"]
	if !hasSeq || !hasOK {
		return 0, false, "", errors.New(`an ack needs "seq" and "ok"`)
	}
	seq, err = strconv.ParseUint(string(s.(json.Number)), 10, 64)
	if err != nil {
		return 0, false, "", fmt.Errorf(`"seq" %s is not a non-negative integer`, s)
	}
	ok = o.(bool)
	if e, has := vals["error"]; has {
		if ok {
			return 0, false, "", errors.New(`"error" goes only with "ok":false`)
		}
		reason = e.(string)
	}
	return seq, ok, reason, nil
}

// decodeState decodes {"value":V} with V finite.
func decodeState(payload []byte) (float64, error) {
	vals, err := scanFlat(payload, map[string]byte{"value": 'n'})
	if err != nil {
		return 0, err
	}
	n, has := vals["value"]
	if !has {
		return 0, errors.New(`a state needs "value"`)
	}
	v, err := strconv.ParseFloat(string(n.(json.Number)), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf(`"value" %s is not a finite number`, n)
	}
	return v, nil
}

// scanFlat reads exactly one JSON object of scalar values, at most
// MaxAckBytes long, whose keys are all in want (each at most once) with the
// type want gives: 'n' number, 'b' boolean, 's' string.
func scanFlat(payload []byte, want map[string]byte) (map[string]any, error) {
	if len(payload) > MaxAckBytes {
		return nil, fmt.Errorf("%d bytes, over %d", len(payload), MaxAckBytes)
	}
	if !utf8.Valid(payload) {
		return nil, errors.New("not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	vals := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
		key, _ := tok.(string)
		typ, known := want[key]
		if !known {
			return nil, fmt.Errorf("unknown key %.40q", key)
		}
		if _, dup := vals[key]; dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		v, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
		var good bool
		switch typ {
		case 'n':
			_, good = v.(json.Number)
		case 'b':
			_, good = v.(bool)
		case 's':
			_, good = v.(string)
		}
		if !good {
			return nil, fmt.Errorf("%q has the wrong type", key)
		}
		vals[key] = v
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, fmt.Errorf("bad JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the object")
	}
	return vals, nil
}

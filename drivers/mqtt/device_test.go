package mqtt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/saga-supervisor/saga-supervisor/daemon"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	mqttdev "github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/embedded"
)

// setMsg is what a device receives on its set topic.
type setMsg struct {
	Seq   uint64   `json:"seq"`
	Value *float64 `json:"value"`
	Halt  bool     `json:"halt"`
}

// fakeDevice is a device on the broker: it takes set messages and answers
// on the ack topic as respond says (by default {"seq":N,"ok":true}, then the
// retained state if it has a state topic).
type fakeDevice struct {
	t                   *testing.T
	c                   paho.Client
	set, ack, stateT    string
	mu                  sync.Mutex
	got                 []setMsg
	respond             func(m setMsg) []string // payloads for the ack topic; nil: none
	publishStateOnApply bool
}

func newFakeDevice(t *testing.T, broker *embedded.Broker, id, set, ack, state string) *fakeDevice {
	t.Helper()
	f := &fakeDevice{t: t, set: set, ack: ack, stateT: state}
	f.respond = func(m setMsg) []string { return []string{fmt.Sprintf(`{"seq":%d,"ok":true}`, m.Seq)} }
	f.c = paho.NewClient(paho.NewClientOptions().AddBroker(broker.URL()).SetClientID(id).SetOrderMatters(false))
	if tok := f.c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("fake device connect: %v", tok.Error())
	}
	tok := f.c.Subscribe(set, 1, func(_ paho.Client, m paho.Message) {
		var msg setMsg
		if err := json.Unmarshal(m.Payload(), &msg); err != nil {
			t.Errorf("device got a bad set message %q: %v", m.Payload(), err)
			return
		}
		f.mu.Lock()
		f.got = append(f.got, msg)
		respond := f.respond
		f.mu.Unlock()
		replies := respond(msg)
		// The applied value's state goes out before the ack. Handlers run
		// on goroutines of their own (SetOrderMatters(false)), so a state
		// published after the ack could be overtaken by the next set's
		// (under load the state of a Set(100) can arrive sets later, and
		// the read-back then says 100 after Set(-100)). Before the ack, it
		// is on the wire before the driver can send the next set.
		if f.publishStateOnApply && msg.Value != nil && len(replies) > 0 && strings.Contains(replies[len(replies)-1], `"ok":true`) {
			f.c.Publish(state, 1, true, fmt.Sprintf(`{"value":%g}`, *msg.Value))
		}
		for _, r := range replies {
			f.c.Publish(ack, 1, false, r)
		}
	})
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("fake device subscribe: %v", tok.Error())
	}
	t.Cleanup(func() { f.c.Disconnect(50) })
	return f
}

func (f *fakeDevice) setRespond(r func(m setMsg) []string) {
	f.mu.Lock()
	f.respond = r
	f.mu.Unlock()
}

func (f *fakeDevice) received() []setMsg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]setMsg(nil), f.got...)
}

func (f *fakeDevice) publishState(payload string) {
	if tok := f.c.Publish(f.stateT, 1, true, payload); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		f.t.Fatalf("publish state: %v", tok.Error())
	}
}

func startBroker(t *testing.T) *embedded.Broker {
	b, _ := startStoppableBroker(t)
	return b
}

// startStoppableBroker also returns a stop that may be called more than
// once (mochi's Close may not).
func startStoppableBroker(t *testing.T) (*embedded.Broker, func()) {
	t.Helper()
	b, err := embedded.Start("127.0.0.1:0", 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() { once.Do(func() { b.Close() }) }
	t.Cleanup(stop)
	return b, stop
}

func dialTestDevice(t *testing.T, broker *embedded.Broker, opt mqttdev.DeviceOptions) *mqttdev.Device {
	t.Helper()
	if opt.Name == "" {
		opt.Name = "pump"
	}
	// One client id per connection: a second connection with the same id
	// would take the first one's session over.
	opt.LinkOptions = mqttdev.LinkOptions{Broker: broker.URL(), ClientID: "sup-devices-" + t.Name() + "-" + opt.Name, ConnectWait: 5 * time.Second}
	if opt.SetTopic == "" {
		opt.SetTopic, opt.AckTopic = "dev/pump/set", "dev/pump/ack"
	}
	d, err := mqttdev.DialDevice(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestDeviceSetAcked(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{})
	for _, v := range []float64{42, -3.25, 0} {
		if err := d.Set(ctxFor(t, 2*time.Second), v); err != nil {
			t.Fatalf("Set(%g): %v", v, err)
		}
	}
	if err := d.Halt(); err != nil {
		t.Fatalf("Halt: %v", err)
	}
	got := f.received()
	if len(got) != 4 {
		t.Fatalf("device got %+v", got)
	}
	for i, want := range []float64{42, -3.25, 0} {
		if got[i].Value == nil || *got[i].Value != want || got[i].Halt {
			t.Errorf("message %d: %+v, want value %g", i, got[i], want)
		}
	}
	if !got[3].Halt || got[3].Value != nil {
		t.Errorf("halt message %+v", got[3])
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Errorf("seq not strictly increasing by one: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	if got[0].Seq > 1<<32 {
		t.Errorf("first seq %d is not a 32-bit start", got[0].Seq)
	}
	// Another process (another device value) starts elsewhere: a device can
	// tell a restart. Two random 32-bit starts colliding is a 2^-32 event.
	d2 := dialTestDevice(t, b, mqttdev.DeviceOptions{Name: "pump2", SetTopic: "dev/pump/set", AckTopic: "dev/pump/ack2"})
	// Acked on the other ack topic: it times out; only the seq matters.
	if err := d2.Set(ctxFor(t, 200*time.Millisecond), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set on the second device: %v", err)
	}
	daemontest.WaitFor(t, "the second device's message", 5*time.Second, func() bool { return len(f.received()) == 5 })
	if s := f.received()[4].Seq; s == got[3].Seq+1 {
		t.Errorf("a new device continued the old seq %d", s)
	}
}

func TestDeviceRefusedIsNotInDoubt(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	f.setRespond(func(m setMsg) []string {
		return []string{fmt.Sprintf(`{"seq":%d,"ok":false,"error":"motor jammed"}`, m.Seq)}
	})
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{})
	err := d.Set(ctxFor(t, 2*time.Second), 5)
	if err == nil || !strings.Contains(err.Error(), "motor jammed") {
		t.Fatalf("Set: %v, want the device's refusal", err)
	}
	if !errors.Is(err, actuators.ErrNotApplied) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("a refusal reads as in doubt: %v", err)
	}
	if err := d.Halt(); err == nil || !strings.Contains(err.Error(), "motor jammed") {
		t.Fatalf("refused Halt: %v", err)
	}
}

// TestDeviceNotApplied checks which failed Sets promise that the device did
// not move (actuators.ErrNotApplied): a refusal, and a Set that published
// nothing. Anything else the device answers, or does not, is in doubt.
func TestDeviceNotApplied(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{})
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tt := range []struct {
		name       string
		ack        string // the device's answer, %d the seq; "" none
		ctx        context.Context
		value      float64
		published  bool
		notApplied bool
	}{
		{name: "ok:false with a reason", ack: `{"seq":%d,"ok":false,"error":"out of range"}`, value: 5, published: true, notApplied: true},
		{name: "ok:false without a reason", ack: `{"seq":%d,"ok":false}`, value: 5, published: true, notApplied: true},
		{name: "not finite", value: math.Inf(1), notApplied: true},
		{name: "NaN", value: math.NaN(), notApplied: true},
		{name: "context done before sending", ctx: expired, value: 5, notApplied: true},
		{name: "no ack", value: 5, published: true},
		{name: "only a malformed ack", ack: `{"seq":%d,"ok":false,"why":"x"}`, value: 5, published: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f.setRespond(func(m setMsg) []string {
				if tt.ack == "" {
					return nil
				}
				return []string{fmt.Sprintf(tt.ack, m.Seq)}
			})
			ctx := tt.ctx
			if ctx == nil {
				ctx = ctxFor(t, 300*time.Millisecond)
			}
			before := len(f.received())
			err := d.Set(ctx, tt.value)
			if err == nil {
				t.Fatal("Set succeeded")
			}
			if got := errors.Is(err, actuators.ErrNotApplied); got != tt.notApplied {
				t.Errorf("Set = %v: wraps ErrNotApplied %v, want %v", err, got, tt.notApplied)
			}
			// A Set the device acks follows: the messages since before are
			// this case's (if it published) and that one, in order.
			f.setRespond(func(m setMsg) []string { return []string{fmt.Sprintf(`{"seq":%d,"ok":true}`, m.Seq)} })
			if err := d.Set(ctxFor(t, 2*time.Second), 99); err != nil {
				t.Fatalf("the Set after: %v", err)
			}
			want := 1
			if tt.published {
				want = 2
			}
			got := f.received()[before:]
			if len(got) != want || got[len(got)-1].Value == nil || *got[len(got)-1].Value != 99 {
				t.Errorf("published %+v; want %d message(s), the last the Set after", got, want)
			}
		})
	}
}

func TestDeviceNoAckIsInDoubt(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	f.setRespond(func(setMsg) []string { return nil })
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{HaltTimeout: 100 * time.Millisecond})
	start := time.Now()
	err := d.Set(ctxFor(t, 150*time.Millisecond), 5)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set without an ack: %v, want in doubt (DeadlineExceeded)", err)
	}
	if took < 140*time.Millisecond || took > time.Second {
		t.Errorf("Set returned after %v, want about the 150ms deadline", took)
	}
	if len(f.received()) != 1 {
		t.Errorf("device got %+v", f.received())
	}
	// A cancelled context is in doubt too, in the engine's terms.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if err := d.Set(ctx, 6); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("cancelled Set: %v", err)
	}
	// Before anything is sent, an expired context promises nothing moved.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := d.Set(done, 7); !errors.Is(err, actuators.ErrNotApplied) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set on a dead context: %v", err)
	}
	if err := d.Halt(); err == nil {
		t.Fatal("Halt without an ack returned nil")
	}
}

func TestDeviceIgnoresStaleUnknownAndMalformedAcks(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	f.setRespond(func(m setMsg) []string {
		n := m.Seq
		// Each of these, if it were taken, would fail the Set; only the
		// last one is a valid ack of this seq.
		return []string{
			fmt.Sprintf(`{"seq":%d,"ok":false,"error":"old"}`, n-1),
			fmt.Sprintf(`{"seq":%d,"ok":false,"error":"future"}`, n+1000),
			fmt.Sprintf(`{"seq":%d,"ok":false,"error":"x","extra":1}`, n),
			fmt.Sprintf(`{"seq":%d,"ok":true,"ok":false}`, n),
			fmt.Sprintf(`{"seq":%d,"ok":"false"}`, n),
			fmt.Sprintf(`{"seq":%d.5,"ok":false}`, n),
			fmt.Sprintf(`{"seq":-%d,"ok":false}`, n),
			fmt.Sprintf(`{"seq":%d}`, n),
			fmt.Sprintf(`{"seq":%d,"ok":false}{"seq":%d,"ok":false}`, n, n),
			fmt.Sprintf(`[{"seq":%d,"ok":false}]`, n),
			fmt.Sprintf(`{"seq":%d,"ok":false,"error":"%s"}`, n, strings.Repeat("x", 2000)),
			`not json`,
			``,
			fmt.Sprintf(`{"seq":%d,"ok":true}`, n),
		}
	})
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{})
	if err := d.Set(ctxFor(t, 3*time.Second), 5); err != nil {
		t.Fatalf("Set: %v (a stale, unknown or malformed ack was taken)", err)
	}
}

func TestDeviceLinkLost(t *testing.T) {
	b, stop := startStoppableBroker(t)
	newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{StateTopic: "dev/pump/state"})
	if err := d.Set(ctxFor(t, 2*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	stop()
	daemontest.WaitFor(t, "the link to be seen lost", 5*time.Second, func() bool {
		_, err := d.ReadBack(context.Background())
		return errors.Is(err, actuators.ErrLinkLost)
	})
	err := d.Set(ctxFor(t, time.Second), 2)
	if !errors.Is(err, actuators.ErrLinkLost) || errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set with the broker gone: %v, want ErrLinkLost, in doubt", err)
	}
	if err := d.Halt(); !errors.Is(err, actuators.ErrLinkLost) {
		t.Fatalf("Halt with the broker gone: %v", err)
	}
}

// A Set waiting for its ack when the link drops ends at once, in doubt.
func TestDeviceLinkLostWhileWaiting(t *testing.T) {
	b, stop := startStoppableBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "")
	f.setRespond(func(setMsg) []string { go stop(); return nil })
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{})
	start := time.Now()
	err := d.Set(ctxFor(t, 10*time.Second), 1)
	if !errors.Is(err, actuators.ErrLinkLost) || errors.Is(err, actuators.ErrNotApplied) {
		t.Fatalf("Set: %v, want ErrLinkLost, in doubt", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v: waited for the deadline instead of the lost link", time.Since(start))
	}
}

func TestDeviceReadBack(t *testing.T) {
	b := startBroker(t)
	f := newFakeDevice(t, b, "esp32", "dev/pump/set", "dev/pump/ack", "dev/pump/state")
	// Retained before the supervisor connects: delivered on subscribe.
	f.publishState(`{"value":12.5}`)
	d := dialTestDevice(t, b, mqttdev.DeviceOptions{StateTopic: "dev/pump/state"})
	readIs := func(want float64) func() bool {
		return func() bool { v, err := d.ReadBack(context.Background()); return err == nil && v == want }
	}
	daemontest.WaitFor(t, "read-back 12.5", 5*time.Second, readIs(12.5))
	f.publishState(`{"value":-4}`)
	daemontest.WaitFor(t, "read-back -4", 5*time.Second, readIs(-4))

	unknown := func() bool {
		_, err := d.ReadBack(context.Background())
		return err != nil && !errors.Is(err, actuators.ErrLinkLost)
	}
	for _, bad := range []string{`{"value":"3"}`, `{"value":3,"at":1}`, `{"value":1e400}`, `{}`, `{"value":3,"value":4}`} {
		f.publishState(bad)
		daemontest.WaitFor(t, "malformed state "+bad+" to make the read-back unknown", 5*time.Second, unknown)
		f.publishState(`{"value":7}`)
		daemontest.WaitFor(t, "read-back 7", 5*time.Second, readIs(7))
	}
	// An empty retained message (a device's last will can send it) clears it.
	f.publishState(``)
	daemontest.WaitFor(t, "a cleared state to make the read-back unknown", 5*time.Second, unknown)

	// Without a state topic, the supervisor gets a Driver that is no
	// ReadBacker (a read-back that can never succeed would keep it unready).
	plain := dialTestDevice(t, b, mqttdev.DeviceOptions{Name: "relay", SetTopic: "dev/relay/set", AckTopic: "dev/relay/ack"})
	if _, ok := plain.Driver().(actuators.ReadBacker); ok {
		t.Error("a device without a state topic reads back")
	}
	if _, ok := d.Driver().(actuators.ReadBacker); !ok {
		t.Error("a device with a state topic does not read back")
	}
}

func TestDeviceLinkShared(t *testing.T) {
	b := startBroker(t)
	fa := newFakeDevice(t, b, "esp-a", "dev/a/set", "dev/a/ack", "")
	fb := newFakeDevice(t, b, "esp-b", "dev/b/set", "dev/b/ack", "")
	l, err := mqttdev.DialDeviceLink(mqttdev.LinkOptions{Broker: b.URL(), ClientID: "sup-devices", ConnectWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	da, err := l.Device(mqttdev.DeviceOptions{Name: "a", SetTopic: "dev/a/set", AckTopic: "dev/a/ack"})
	if err != nil {
		t.Fatal(err)
	}
	db, err := l.Device(mqttdev.DeviceOptions{Name: "b", SetTopic: "dev/b/set", AckTopic: "dev/b/ack"})
	if err != nil {
		t.Fatal(err)
	}
	if err := da.Set(ctxFor(t, 2*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(ctxFor(t, 2*time.Second), 2); err != nil {
		t.Fatal(err)
	}
	if len(fa.received()) != 1 || len(fb.received()) != 1 || *fb.received()[0].Value != 2 {
		t.Fatalf("a got %+v, b got %+v", fa.received(), fb.received())
	}
	for _, opt := range []mqttdev.DeviceOptions{
		{Name: "c", SetTopic: "dev/c/set", AckTopic: "dev/a/ack"},                             // ack topic taken
		{Name: "c", SetTopic: "dev/a/set", AckTopic: "dev/c/ack"},                             // set topic taken
		{Name: "c", SetTopic: "dev/c/set", AckTopic: "dev/c/set"},                             // set = ack
		{Name: "c", SetTopic: "dev/+/set", AckTopic: "dev/c/ack"},                             // wildcard
		{Name: "c", SetTopic: "dev/c/set", AckTopic: "dev/c/ack", StateTopic: "dev/b/ack"},    // state topic taken
		{Name: "", SetTopic: "dev/c/set", AckTopic: "dev/c/ack"},                              // no name
		{Name: "c", SetTopic: "dev/c/set", AckTopic: "dev/c/ack", StateTopic: "$SYS/c/state"}, // broker's own
	} {
		if _, err := l.Device(opt); err == nil {
			t.Errorf("%+v accepted", opt)
		}
	}
}

func TestValidPublishTopic(t *testing.T) {
	for _, ok := range []string{"a", "robots/arm1/pump/set", "/leading", "trailing/", "sp ace", "ümlaut", strings.Repeat("x", mqttdev.MaxTopicBytes)} {
		if err := mqttdev.ValidPublishTopic(ok); err != nil {
			t.Errorf("%.40q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/+/b", "a/#", "#", "$SYS/x", "a\x00b", "a\nb", "\xff", strings.Repeat("x", mqttdev.MaxTopicBytes+1)} {
		if err := mqttdev.ValidPublishTopic(bad); err == nil {
			t.Errorf("%.40q accepted", bad)
		}
	}
}

// TestSupervisorDrivesMQTTDevice runs a supervisor built from a config with
// one mqtt-driven setpoint: a step is acked by the device and applied; when
// the device stops acking, the step is in doubt and the saga unwinds,
// sending the compensations to the device too.
func TestSupervisorDrivesMQTTDevice(t *testing.T) {
	broker := startBroker(t)
	const set, ack, state = "robots/arm1/pump/set", "robots/arm1/pump/ack", "robots/arm1/pump/state"
	f := newFakeDevice(t, broker, "esp32-pump", set, ack, state)
	f.publishStateOnApply = true
	f.publishState(`{"value":10}`)

	dir := t.TempDir()
	text := fmt.Sprintf(`device: arm1
mqtt: {broker: %q}
http: {listen: ""}
journal: {dir: %q}
sim: {world: %q}
actuators:
  pump:
    kind: setpoint
    driver: mqtt
    mqtt: {set_topic: %s, ack_topic: %s, state_topic: %s}
    min: 0
    max: 100
    initial: 10
    timeout: 300ms
`, broker.URL(), filepath.Join(dir, "journal"), filepath.Join(dir, "world"), set, ack, state)
	cfg, err := config.Parse([]byte(text), "pump.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// As `run` composes it (package daemon), on the external broker.
	d, err := daemon.Start(daemon.Options{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	sup := d.Sup
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	daemontest.WaitFor(t, "the supervisor to be ready (device read back)", 5*time.Second, func() bool { return sup.Status().Ready })

	ag := daemontest.NewAgent(t, broker.URL(), topics, "planner")
	ag.Hello(60 * time.Second)
	saga := ag.Must(map[string]any{"op": "begin"}).Saga
	r := ag.Must(map[string]any{"op": "step", "saga": saga, "actuator": "pump", "value": 40})
	if *r.Prior != 10 || *r.Value != 40 {
		t.Fatalf("step reply %+v", r)
	}
	if got := f.received(); len(got) != 1 || *got[0].Value != 40 {
		t.Fatalf("device got %+v", got)
	}
	daemontest.WaitFor(t, "status to read back 40", 5*time.Second, func() bool {
		for _, a := range sup.Status().Actuators {
			if a.Name == "pump" && a.ReadBack != nil && *a.ReadBack == 40 {
				return true
			}
		}
		return false
	})

	// The device stops acking: it drops the next set (it may have moved),
	// then acks again, so the compensations get through.
	var dropped sync.Once
	f.setRespond(func(m setMsg) []string {
		first := false
		dropped.Do(func() { first = true })
		if first {
			return nil
		}
		return []string{fmt.Sprintf(`{"seq":%d,"ok":true}`, m.Seq)}
	})
	r = ag.Send(map[string]any{"op": "step", "saga": saga, "actuator": "pump", "value": 70})
	if r.OK || r.Code != "STEP_IN_DOUBT" {
		t.Fatalf("unacked step: %+v", r)
	}
	if r.Report == nil || r.Report.Verdict != "clean" || len(r.Report.Steps) != 2 {
		t.Fatalf("report %+v", r.Report)
	}
	if s := r.Report.Steps[0]; s.Step != 2 || s.Outcome != "in_doubt" || s.Bucket != "compensated" || *s.Prior != 40 {
		t.Errorf("in-doubt step %+v", s)
	}
	if s := r.Report.Steps[1]; s.Step != 1 || s.Bucket != "compensated" || *s.Prior != 10 {
		t.Errorf("first step %+v", s)
	}
	var values []float64
	for _, m := range f.received() {
		values = append(values, *m.Value)
	}
	if fmt.Sprint(values) != "[40 70 40 10]" {
		t.Errorf("device got %v, want the step, the unacked step, and both compensations", values)
	}
	if v, _ := sup.Engine().Commanded("pump"); v != 10 {
		t.Errorf("commanded %g after the unwind, want 10", v)
	}
}

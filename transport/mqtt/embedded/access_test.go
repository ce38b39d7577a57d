package embedded

import (
	"fmt"
	"github.com/mochi-mqtt/server/v2/packets"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt/access"
)

const (
	sup  = "saga-supervisor-arm1"
	base = "saga/v1/arm1/"
)

var passwords = map[string]string{sup: "sup-pw", sup + "-estop": "estop-pw", sup + "-devices": "dev-pw", "a": "a-pw", "b": "b-pw", "grip": "grip-pw", "mallory": "m-pw"}

// lockedBroker starts a broker locked by a password file (WritePasswords,
// LoadPasswords) and a policy with agents a and b and one device.
func lockedBroker(t *testing.T, maxRetained int) *Broker {
	t.Helper()
	path := t.TempDir() + "/passwd"
	if err := access.WritePasswords(path, passwords); err != nil {
		t.Fatal(err)
	}
	pw, err := access.LoadPasswords(path)
	if err != nil {
		t.Fatal(err)
	}
	pol := &access.Policy{
		Topics: mqtt.Topics{Device: "arm1"}, Supervisor: sup, Agents: []string{"a", "b"},
		Devices: []access.Device{{User: "grip", SetTopic: "dev/grip/set", AckTopic: "dev/grip/ack", StateTopic: "dev/grip/state"}},
	}
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", MaxPacket: 1 << 16, Passwords: pw, Policy: pol, MaxRetained: maxRetained})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func dialAs(b *Broker, user, password, clientID string, will string) (paho.Client, error) {
	o := paho.NewClientOptions().AddBroker(b.URL()).SetClientID(clientID).SetProtocolVersion(4).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
	if user != "" {
		o.SetUsername(user).SetPassword(password)
	}
	if will != "" {
		o.SetWill(will, "gone", 1, false)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5 * time.Second) {
		return nil, fmt.Errorf("connect %s: timeout", user)
	}
	if err := tok.Error(); err != nil {
		return nil, err
	}
	return c, nil
}

func connect(t *testing.T, b *Broker, user string) paho.Client {
	t.Helper()
	c, err := dialAs(b, user, passwords[user], user, "")
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

func ok(t *testing.T, tok paho.Token, what string) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// suback returns the granted QoS (0x80: refused) of a one-filter subscribe.
func suback(t *testing.T, c paho.Client, filter string, h paho.MessageHandler) byte {
	t.Helper()
	tok := c.Subscribe(filter, 1, h)
	ok(t, tok, "subscribe "+filter)
	res := tok.(*paho.SubscribeToken).Result() // paho keys "$share/g/f" as "f"
	if len(res) != 1 {
		t.Fatalf("subscribe %s: results %v", filter, res)
	}
	for _, code := range res {
		return code
	}
	return 0
}

type inbox struct {
	mu   sync.Mutex
	msgs []string // topic=payload (retained marked with a leading R)
	got  chan string
}

func newInbox() *inbox { return &inbox{got: make(chan string, 256)} }

func (b *inbox) handler(_ paho.Client, m paho.Message) {
	s := m.Topic() + "=" + string(m.Payload())
	if m.Retained() {
		s = "R" + s
	}
	b.mu.Lock()
	b.msgs = append(b.msgs, s)
	b.mu.Unlock()
	select {
	case b.got <- m.Topic():
	default:
	}
}

func (b *inbox) until(t *testing.T, topic string) []string {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-b.got:
			if got == topic {
				time.Sleep(50 * time.Millisecond)
				b.mu.Lock()
				defer b.mu.Unlock()
				return append([]string(nil), b.msgs...)
			}
		case <-timeout:
			t.Fatalf("%s never arrived", topic)
		}
	}
}

func contains(msgs []string, sub string) bool {
	for _, m := range msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

func TestLockedConnect(t *testing.T) {
	b := lockedBroker(t, 0)
	for _, c := range []struct {
		name, user, pw, id, will string
		ok                       bool
	}{
		{"supervisor", sup, "sup-pw", sup, base + "status", true},
		{"agent", "a", "a-pw", "a", base + "will/a", true},
		{"device", "grip", "grip-pw", "grip", "", true},
		{"wrong password", "a", "b-pw", "a", "", false},
		{"no password", "a", "", "a", "", false},
		{"anonymous", "", "", "anon", "", false},
		{"unknown user", "eve", "a-pw", "eve", "", false},
		{"valid password, not in policy", "mallory", "m-pw", "mallory", "", false},
		{"client id is not the username", "a", "a-pw", "a-2", "", false},
		{"agent takes the supervisor's client id", "a", "a-pw", sup, "", false},
		{"will on another agent's topic", "a", "a-pw", "a", base + "will/b", false},
		{"will on the status", "a", "a-pw", "a", base + "status", false},
	} {
		cl, err := dialAs(b, c.user, c.pw, c.id, c.will)
		if (err == nil) != c.ok {
			t.Errorf("%s: connect error %v, want ok %v", c.name, err, c.ok)
		}
		if cl != nil {
			cl.Disconnect(0)
		}
	}
	if s := b.Stats(); s.RefusedConnects != 9 {
		t.Errorf("refused connects counted %d, want 9", s.RefusedConnects)
	}
}

// The supervisor's session survives an attempt to take its client id.
func TestNoTakeover(t *testing.T) {
	b := lockedBroker(t, 0)
	s := connect(t, b, sup)
	if c, err := dialAs(b, "a", "a-pw", sup, ""); err == nil {
		c.Disconnect(0)
		t.Fatal("agent a connected with the supervisor's client id")
	}
	if c, err := dialAs(b, sup+"-estop", "estop-pw", sup, ""); err == nil {
		c.Disconnect(0)
		t.Fatal("the e-stop user connected with the supervisor's client id")
	}
	time.Sleep(50 * time.Millisecond)
	if !s.IsConnectionOpen() {
		t.Fatal("the supervisor was disconnected by a refused takeover")
	}
	in := newInbox()
	ok(t, s.Subscribe(base+"cmd/+", 1, in.handler), "subscribe")
	a := connect(t, b, "a")
	ok(t, a.Publish(base+"cmd/a", 1, false, "{}"), "publish")
	in.until(t, base+"cmd/a")
}

func TestLockedSubscribe(t *testing.T) {
	b := lockedBroker(t, 0)
	a := connect(t, b, "a")
	in := newInbox()
	for filter, want := range map[string]byte{
		base + "reply/a":              1,
		base + "status":               1,
		base + "state/+":              1,
		base + "events":               1,
		base + "reply/b":              0x80,
		base + "reply/+":              0x80,
		"saga/v1/+/reply/a":           0x80,
		"saga/v1/#":                   0x80,
		"#":                           0x80,
		"$SYS/#":                      0x80,
		base + "cmd/+":                0x80,
		"dev/grip/set":                0x80,
		base + "state/#":              0x80,
		"$share/g/" + base + "status": 0x80,
	} {
		if got := suback(t, a, filter, in.handler); got != want {
			t.Errorf("agent a subscribing %q: SUBACK %#x, want %#x", filter, got, want)
		}
	}
	if !a.IsConnectionOpen() {
		t.Fatal("a refused subscribe disconnected the agent")
	}
	// Deliveries: a gets its reply and not b's.
	s := connect(t, b, sup)
	ok(t, s.Publish(base+"reply/b", 1, false, "for b"), "reply b")
	ok(t, s.Publish(base+"reply/a", 1, false, "for a"), "reply a")
	if got := in.until(t, base+"reply/a"); contains(got, "reply/b") {
		t.Errorf("agent a received b's reply: %v", got)
	}
	if st := b.Stats(); st.RefusedSubscribes < 10 {
		t.Errorf("refused subscribes counted %d", st.RefusedSubscribes)
	}
}

func TestLockedPublish(t *testing.T) {
	b := lockedBroker(t, 0)
	s := connect(t, b, sup)
	a := connect(t, b, "a")
	in := newInbox()
	ok(t, s.Subscribe(base+"cmd/+", 1, in.handler), "subscribe cmd/+")
	ok(t, s.Subscribe(base+"cmd", 1, in.handler), "subscribe cmd")
	ok(t, s.Subscribe(base+"will/+", 1, in.handler), "subscribe will/+")
	// Refused QoS 1 publishes are acknowledged and dropped; the client
	// stays connected (mochi would disconnect an MQTT 3 client otherwise).
	ok(t, a.Publish(base+"cmd/b", 1, false, "x"), "cmd/b")
	ok(t, a.Publish(base+"cmd", 1, false, "x"), "cmd")
	ok(t, a.Publish(base+"will/b", 1, false, "x"), "will/b")
	ok(t, a.Publish(base+"cmd/a", 1, true, "retained"), "retained cmd/a")
	ok(t, a.Publish(base+"cmd/a", 1, false, "ok"), "cmd/a")
	got := in.until(t, base+"cmd/a")
	if contains(got, "cmd/b") || contains(got, base+"cmd=") || contains(got, "will/b") || contains(got, "retained") {
		t.Errorf("refused publishes delivered: %v", got)
	}
	if !a.IsConnectionOpen() {
		t.Fatal("refused publishes disconnected the agent")
	}
	// The supervisor too stays connected after a refused publish.
	ok(t, s.Publish(base+"cmd/a", 1, false, "forged"), "supervisor forges")
	ok(t, s.Publish(base+"events", 1, true, "retained event"), "supervisor retains an event")
	time.Sleep(50 * time.Millisecond)
	if !s.IsConnectionOpen() {
		t.Fatal("a refused publish disconnected the supervisor")
	}
	if st := b.Stats(); st.RefusedPublishes != 6 {
		t.Errorf("refused publishes counted %d, want 6", st.RefusedPublishes)
	}
}

// Only the supervisor's (and devices') retained messages are kept: a later
// subscriber gets the supervisor's status, and nothing an agent retained.
func TestLockedRetain(t *testing.T) {
	b := lockedBroker(t, 0)
	s := connect(t, b, sup)
	a := connect(t, b, "a")
	g := connect(t, b, "grip")
	ok(t, s.Publish(base+"status", 1, true, "online"), "status")
	ok(t, s.Publish(base+"state/j1", 1, true, "j1"), "state")
	ok(t, a.Publish(base+"cmd/a", 1, true, "agent-retained"), "agent retains")
	ok(t, a.Publish(base+"will/a", 1, true, "agent-retained-will"), "agent retains will")
	ok(t, g.Publish("dev/grip/state", 1, true, "open"), "device state")
	ok(t, g.Publish("dev/grip/ack", 1, true, "ack-retained"), "device retains ack")

	// The supervisor reads cmd/+ and will/+: nothing retained there.
	s2, err := dialAs(b, sup, "sup-pw", sup, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Disconnect(0)
	in := newInbox()
	ok(t, s2.Subscribe(base+"cmd/+", 1, in.handler), "subscribe cmd/+")
	ok(t, s2.Subscribe(base+"will/+", 1, in.handler), "subscribe will/+")
	d := connect(t, b, sup+"-devices")
	ok(t, d.Subscribe("dev/grip/ack", 1, in.handler), "subscribe ack")
	ok(t, d.Subscribe("dev/grip/state", 1, in.handler), "subscribe device state")
	ok(t, a.Subscribe(base+"status", 1, in.handler), "subscribe status")
	ok(t, a.Subscribe(base+"state/+", 1, in.handler), "subscribe state")
	got := in.until(t, base+"state/j1")
	for _, want := range []string{"R" + base + "status=online", "Rdev/grip/state=open"} {
		if !contains(got, want) {
			t.Errorf("retained %s missing: %v", want, got)
		}
	}
	if contains(got, "agent-retained") || contains(got, "ack-retained") {
		t.Errorf("a refused retained publish was kept: %v", got)
	}
}

func TestRetainedCap(t *testing.T) {
	const max = 40 // mochi keeps a few $SYS topics retained too, outside the cap
	b := lockedBroker(t, max)
	s := connect(t, b, sup)
	for i := range 2 * max {
		ok(t, s.Publish(fmt.Sprintf("%sstate/j%d", base, i), 1, true, "x"), "retain")
	}
	n := clientRetained(b) // mochi's own $SYS topics come and go on their own: not counted
	if n != max {
		t.Fatalf("%d retained messages of clients, want the cap of %d", n, max)
	}
	if b.Stats().RefusedRetained == 0 {
		t.Fatal("no retained publish refused")
	}
	// An update of an existing retained topic, and a removal, still pass.
	ok(t, s.Publish(base+"state/j0", 1, true, "y"), "update")
	ok(t, s.Publish(base+"state/j1", 1, true, ""), "remove")
	if got := clientRetained(b); got != n-1 {
		t.Errorf("after update and removal: %d retained, want %d", got, n-1)
	}
	if pk, _ := b.srv.Topics.Retained.Get(base + "state/j0"); string(pk.Payload) != "y" {
		t.Errorf("update refused: %q", pk.Payload)
	}
	ok(t, s.Publish(base+"status", 1, true, "online"), "status")
	if _, ok := b.srv.Topics.Retained.Get(base + "status"); !ok {
		t.Error("a new retained topic refused after a removal made room")
	}
}

// sysRetained counts mochi's own retained $SYS topics, which it stores
// without a publish the cap could refuse.
func sysRetained(b *Broker) int {
	n := 0
	for topic := range b.srv.Topics.Retained.GetAll() {
		if strings.HasPrefix(topic, "$") {
			n++
		}
	}
	return n
}

func clientRetained(b *Broker) int { return countClientRetained(b.srv.Topics.Retained.GetAll()) }

// The retained cap holds in anonymous mode too.
func TestRetainedCapAnonymous(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", MaxRetained: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := dialAs(b, "", "", "anon", "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(0)
	for i := range 100 {
		ok(t, c.Publish(fmt.Sprintf("junk/%d", i), 1, true, "x"), "retain")
	}
	if n := clientRetained(b); n > 30 || n < 30-sysRetained(b) {
		t.Fatalf("%d retained, want at most 30 (and at least 30 less mochi's $SYS topics)", n)
	}
}

// The cap holds while mochi adds $SYS topics of its own at the same time:
// the count of what clients stored is taken from one copy of the store.
// Were the total read first and the $SYS topics counted after it, a $SYS
// topic added in between would let a client store one message past the
// cap.
func TestRetainedCapWhileSysTopicsAppear(t *testing.T) {
	for round := range 20 {
		b, err := StartOptions(Options{Addr: "127.0.0.1:0", MaxRetained: 30})
		if err != nil {
			t.Fatal(err)
		}
		c, err := dialAs(b, "", "", "anon", "")
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // mochi's own $SYS topics, appearing throughout
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// 40 topics, stored and cleared in turn (an empty
				// payload clears): the store stays small.
				var payload []byte
				if (i/40)%2 == 0 {
					payload = []byte("s")
				}
				b.srv.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("$SYS/test/%d", i%40), Payload: payload,
					FixedHeader: packets.FixedHeader{Type: packets.Publish, Retain: true}})
			}
		}()
		for i := range 60 {
			ok(t, c.Publish(fmt.Sprintf("junk/%d", i), 1, true, "x"), "retain")
		}
		close(stop)
		<-done
		n := clientRetained(b)
		c.Disconnect(0)
		b.Close()
		if n > 30 {
			t.Fatalf("round %d: %d retained by clients, cap 30", round, n)
		}
	}
}

func TestStartRefusesExposure(t *testing.T) {
	pw, _ := access.ParsePasswords(strings.NewReader(""))
	pol := &access.Policy{Topics: mqtt.Topics{Device: "arm1"}, Supervisor: sup}
	for _, c := range []struct {
		name string
		opt  Options
		want string
	}{
		{"anonymous on all interfaces", Options{Addr: ":0"}, "beyond loopback"},
		{"anonymous on 0.0.0.0", Options{Addr: "0.0.0.0:0"}, "beyond loopback"},
		{"anonymous on ::", Options{Addr: "[::]:0"}, "beyond loopback"},
		{"passwords without TLS", Options{Addr: "0.0.0.0:0", Passwords: pw, Policy: pol}, "TLS"},
		{"passwords without policy", Options{Addr: "127.0.0.1:0", Passwords: pw}, "go together"},
		{"policy without passwords", Options{Addr: "127.0.0.1:0", Policy: pol}, "go together"},
		{"invalid policy", Options{Addr: "127.0.0.1:0", Passwords: pw, Policy: &access.Policy{Supervisor: sup}}, "device"},
		{"bad address", Options{Addr: "nonsense"}, "listen address"},
	} {
		b, err := StartOptions(c.opt)
		if err == nil {
			b.Close()
			t.Errorf("%s: started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q lacks %q", c.name, err, c.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "127.0.0.2:0"} {
		if loop, err := IsLoopback(addr); err != nil || !loop {
			t.Errorf("IsLoopback(%q) = %v, %v", addr, loop, err)
		}
	}
	for _, addr := range []string{":1883", "0.0.0.0:1883", "[::]:1883", "192.168.1.5:1883", "8.8.8.8:1"} {
		if loop, err := IsLoopback(addr); err != nil || loop {
			t.Errorf("IsLoopback(%q) = %v, %v", addr, loop, err)
		}
	}
}

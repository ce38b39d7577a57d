package embedded

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// testDoor is a door in front of one consumer: shut until opened, and it
// counts what it was asked about.
type testDoor struct {
	mu     sync.Mutex
	room   chan struct{} // nil: open
	asked  map[string]int
	passed atomic.Int64
}

func (d *testDoor) enter(topic string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked[topic]++
	if d.room != nil {
		return d.room
	}
	d.passed.Add(1)
	return nil
}

func (d *testDoor) open() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.room != nil {
		close(d.room)
		d.room = nil
	}
}

// A publish on a paced topic is held at the door, unread behind it the
// client's next packets, until the door opens, then delivered. A halt
// (urgent) from another client is not asked about and overtakes it, and
// the door is never asked about the e-stop topics (not paced) or a
// retained publish. Without the door a command is delivered at once; with
// a halt asked about, it waits behind the shut door.
func TestDoorHoldsUntilRoomButNeverAHalt(t *testing.T) {
	const cmdA, cmdB, estop = "saga/v1/arm1/cmd/a01", "saga/v1/arm1/cmd/a02", "saga/v1/arm1/estop/a01"
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter},
		Urgent:   func(p []byte) bool { return string(p) == "halt" },
		PaceWait: time.Hour}) // nothing goes ahead for the wait running out
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	door := &testDoor{room: make(chan struct{}), asked: map[string]int{}}
	b.SetDoor(door.enter)
	defer door.open() // before Close: a client held at the door would hold it up

	got := make(chan string, 16)
	sup := dial(t, b, "sup")
	for _, f := range []string{paceFilter, "saga/v1/arm1/estop/+"} {
		if tok := sup.Subscribe(f, 1, func(_ paho.Client, m paho.Message) { got <- m.Topic() + " " + string(m.Payload()) }); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
			t.Fatalf("subscribe: %v", tok.Error())
		}
	}
	flooder, halter := dial(t, b, "a01"), dial(t, b, "a02")
	step := flooder.Publish(cmdA, 1, false, "step")
	next := flooder.Publish(cmdA, 1, false, "step 2") // unread behind the held one
	for deadline := time.Now().Add(testtool.Slow(5 * time.Second)); b.Stats().DoorWaits == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the step was never held at the shut door (%+v)", b.Stats())
		}
	}
	halter.Publish(cmdB, 1, false, "halt")
	halter.Publish(estop, 1, false, "1")
	want := []string{cmdB + " halt", estop + " 1"}
	for _, w := range want {
		select {
		case m := <-got:
			if m != w {
				t.Fatalf("delivered %q while the step was held, want %q", m, w)
			}
		case <-time.After(testtool.Slow(10 * time.Second)):
			t.Fatalf("%q was not delivered while the door held a step: a halt waited at the door (%+v)", w, b.Stats())
		}
	}
	if step.WaitTimeout(0) {
		t.Fatal("the held step was acknowledged before the door opened")
	}
	door.mu.Lock()
	askedB, askedE := door.asked[cmdB], door.asked[estop]
	door.mu.Unlock()
	if askedB != 0 || askedE != 0 {
		t.Errorf("the door was asked about the halt %d times and the e-stop %d times, want never", askedB, askedE)
	}

	door.open()
	for _, w := range []string{cmdA + " step", cmdA + " step 2"} {
		select {
		case m := <-got:
			if m != w {
				t.Fatalf("delivered %q, want %q", m, w)
			}
		case <-time.After(testtool.Slow(10 * time.Second)):
			t.Fatalf("%q was not delivered once the door opened (%+v)", w, b.Stats())
		}
	}
	for _, tok := range []paho.Token{step, next} {
		if !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	if n := door.passed.Load(); n != 2 {
		t.Errorf("the door let %d publishes through, want 2 (the steps)", n)
	}
	st := b.Stats()
	if st.DoorWaits != 1 || st.PaceTimeouts != 0 {
		t.Errorf("door waits %d, timeouts %d: want 1 and 0 (%+v)", st.DoorWaits, st.PaceTimeouts, st)
	}
}

// A door that never opens holds a publish for PaceWait at most; it then
// goes ahead as it would unpaced, counted as a timeout.
func TestDoorWaitIsBounded(t *testing.T) {
	b, err := StartOptions(Options{Addr: "127.0.0.1:0", Paced: []string{paceFilter}, PaceWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	door := &testDoor{room: make(chan struct{}), asked: map[string]int{}}
	b.SetDoor(door.enter)
	defer door.open()
	got := make(chan string, 1)
	sup := dial(t, b, "sup")
	if tok := sup.Subscribe(paceFilter, 1, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) }); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	dial(t, b, "a01").Publish("saga/v1/arm1/cmd/a01", 1, false, "step")
	select {
	case <-got:
	case <-time.After(testtool.Slow(10 * time.Second)):
		t.Fatalf("a publish held by a door that never opens was never delivered (%+v)", b.Stats())
	}
	if st := b.Stats(); st.DoorWaits != 1 || st.PaceTimeouts != 1 {
		t.Errorf("door waits %d, timeouts %d: want 1 and 1", st.DoorWaits, st.PaceTimeouts)
	}
}

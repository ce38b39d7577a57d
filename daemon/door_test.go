package daemon

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
	"github.com/saga-supervisor/saga-supervisor/wal"
)

// gatedFS is the operating system's file system whose fsyncs, once armed,
// wait until the gate opens: a journal stuck on its disk.
type gatedFS struct {
	wal.OSFS
	armed   atomic.Bool
	waiting atomic.Int64
	gate    chan struct{}
	once    sync.Once
}

func (f *gatedFS) open() { f.once.Do(func() { close(f.gate) }) }

func (f *gatedFS) OpenFile(name string, flag int, perm fs.FileMode) (wal.File, error) {
	w, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return gatedFile{w, f}, nil
}

type gatedFile struct {
	wal.File
	fs *gatedFS
}

func (g gatedFile) Sync() error {
	if g.fs.armed.Load() {
		g.fs.waiting.Add(1)
		<-g.fs.gate
	}
	return g.File.Sync()
}

// An agent that pipelines more requests than its lane holds, while the
// lane is stuck (its begin waits for the journal's disk), is held at the
// embedded broker's door rather than refused: every request is served, in
// order, once the disk answers, none BUSY, and the broker counts the
// hold. Meanwhile another agent's halt is not held: it latches while the
// door holds the flooder. Without the door the requests past the queue
// are read, decoded and refused BUSY.
func TestBrokerHoldsAnAgentWhoseLaneIsFull(t *testing.T) {
	cfg := testConfig(t)
	cfg.Agents.Allow["operator"] = cfg.Agents.Allow["planner"]
	jfs := &gatedFS{gate: make(chan struct{})}
	d, err := Start(Options{Config: cfg, NoHTTP: true, JournalFS: jfs})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer jfs.open() // before Close
	topics := mqtt.Topics{Prefix: cfg.MQTT.Prefix, Device: cfg.Device}
	connect := func(name string) paho.Client {
		pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, name))
		if err != nil {
			t.Fatal(err)
		}
		c := paho.NewClient(paho.NewClientOptions().AddBroker(d.BrokerURL).SetClientID(name).
			SetUsername(name).SetPassword(strings.TrimSpace(string(pw))))
		if tok := c.Connect(); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
			t.Fatalf("%s: connect: %v", name, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(50) })
		return c
	}
	c := connect("planner")
	replies := make(chan api.Reply, 256)
	if tok := c.Subscribe(topics.Reply("planner"), 1, func(_ paho.Client, m paho.Message) {
		var rep api.Reply
		if err := json.Unmarshal(m.Payload(), &rep); err == nil {
			replies <- rep
		}
	}); !tok.WaitTimeout(testtool.Slow(5*time.Second)) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	next := func() api.Reply {
		t.Helper()
		select {
		case rep := <-replies:
			return rep
		case <-time.After(testtool.Slow(10 * time.Second)):
			t.Fatalf("no reply (broker %+v)", d.Broker.Broker.Stats())
			return api.Reply{}
		}
	}
	c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"hello","agent":"planner","op":"hello","ttl_ms":60000}`)
	hello := next()
	if !hello.OK {
		t.Fatalf("hello refused: %+v", hello)
	}
	lease, _ := json.Marshal(hello.Lease)

	jfs.armed.Store(true)
	c.Publish(topics.AgentCmd("planner"), 1, false,
		`{"id":"begin","agent":"planner","op":"begin","lease":`+string(lease)+`,"epoch":`+strconv.FormatUint(hello.Epoch, 10)+`}`)
	deadline := time.Now().Add(testtool.Slow(10 * time.Second))
	for jfs.waiting.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the begin never reached the journal's disk")
		}
		time.Sleep(time.Millisecond)
	}
	queue := cfg.Agents.Queue
	n := queue + 16
	for i := range n {
		c.Publish(topics.AgentCmd("planner"), 1, false, `{"id":"s`+strconv.Itoa(i)+`","agent":"planner","op":"status"}`)
	}
	for d.Broker.Broker.Stats().DoorWaits == 0 {
		if time.Now().After(deadline) {
			t.Errorf("%d requests behind a stuck lane of %d places: none held at the door (broker %+v)", n, queue, d.Broker.Broker.Stats())
			break
		}
		time.Sleep(time.Millisecond)
	}

	// Another agent's halt, on its e-stop topic, while planner is held.
	connect("operator").Publish(topics.EstopAgent("operator"), 1, false, "1")
	deadline = time.Now().Add(testtool.Slow(10 * time.Second))
	for halted, _ := d.Sup.Engine().Halted(); !halted; halted, _ = d.Sup.Engine().Halted() {
		if time.Now().After(deadline) {
			t.Fatal("a halt did not latch while the door held another agent")
		}
		time.Sleep(time.Millisecond)
	}

	jfs.open()
	next() // the begin: HALTED or OK, whichever won
	for i := range n {
		rep := next()
		if rep.ID != "s"+strconv.Itoa(i) || rep.Code == api.CodeBusy {
			t.Fatalf("reply %d of %d: %+v, want s%d served (broker %+v)", i+1, n, rep, i, d.Broker.Broker.Stats())
		}
	}
}

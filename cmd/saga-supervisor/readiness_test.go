package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/internal/daemontest"
	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// retainedStatus connects a fresh client, reads the retained status and
// disconnects: what a controller that starts now would be told.
func retainedStatus(t *testing.T, broker string) (api.Status, bool) {
	t.Helper()
	got := make(chan api.Status, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(broker).SetClientID(fmt.Sprintf("readiness-probe-%d", time.Now().UnixNano())).SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(3*time.Second) || tok.Error() != nil {
		return api.Status{}, false
	}
	defer c.Disconnect(0)
	c.Subscribe(arm1.Status(), 1, func(_ paho.Client, m paho.Message) {
		var s api.Status
		if json.Unmarshal(m.Payload(), &s) == nil {
			select {
			case got <- s:
			default:
			}
		}
	})
	select {
	case s := <-got:
		return s, true
	case <-time.After(2 * time.Second):
		return api.Status{}, false
	}
}

// TestReadinessFollowsTheBroker: with an external broker that goes away,
// the daemon is not ready within 2 s (/readyz and the status say why); once
// the broker is back it is ready again, and the retained status a new
// controller finds says so, with a sequence number above every status
// published before.
func TestReadinessFollowsTheBroker(t *testing.T) {
	dir := t.TempDir()
	port := testtool.FreePort(t)
	conf := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)), 0o600)
	broker, mosq := runMosquittoConf(t, conf, port)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", testtool.FreePort(t))
	d := &daemonProc{t: t, cfgPath: writeDaemonConfig(t, dir, broker, httpAddr), http: httpAddr}
	d.start()
	t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	d.waitReady()
	// The retained status follows /readyz by one publish.
	var before api.Status
	daemontest.WaitFor(t, "the retained status to say ready", 5*time.Second, func() bool {
		s, ok := retainedStatus(t, broker)
		before = s
		return ok && s.Ready
	})
	if before.Seq == 0 {
		t.Fatalf("retained status with the broker up has no seq: %+v", before)
	}

	// The broker dies.
	mosq.Process.Signal(syscall.SIGKILL)
	mosq.Wait()
	down := time.Now()
	for {
		code, _ := d.get("/readyz")
		if code == 503 {
			break
		}
		if time.Since(down) > 2*time.Second {
			t.Fatalf("/readyz still %d 2 s after the broker died", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("not ready %v after the broker died", time.Since(down).Round(time.Millisecond))
	st := d.status()
	reasons := fmt.Sprint(st["reasons"])
	if st["ready"] != false || !strings.Contains(reasons, "input mqtt: ") {
		t.Errorf("status with the broker down: ready %v, reasons %s", st["ready"], reasons)
	}

	// The broker comes back (on the same port, with nothing retained).
	broker2, _ := runMosquittoConf(t, conf, port)
	if broker2 != broker {
		t.Fatalf("broker came back at %s, not %s", broker2, broker)
	}
	d.waitReady()
	var after api.Status
	daemontest.WaitFor(t, "the retained status to say ready again", 5*time.Second, func() bool {
		s, ok := retainedStatus(t, broker)
		after = s
		return ok && s.Ready
	})
	if after.Seq <= before.Seq {
		t.Errorf("status after the reconnect has seq %d, not above %d from before", after.Seq, before.Seq)
	}
}

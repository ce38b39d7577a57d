package access

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/internal/testtool"
)

// needBinary finds each of names (package testtool): interop with the
// real mosquitto is never skipped in CI.
func needBinary(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		testtool.Need(t, "mosquitto mosquitto-clients", n)
	}
}

// A file written by the real mosquitto_passwd, in both of its formats, is
// accepted by Check.
func TestMosquittoPasswdFileAccepted(t *testing.T) {
	needBinary(t, "mosquitto_passwd")
	dir := t.TempDir()
	for _, algo := range []string{"sha512-pbkdf2", "sha512"} {
		path := filepath.Join(dir, algo)
		out, err := exec.Command("mosquitto_passwd", "-H", algo, "-b", "-c", path, "robot-agent", "s3cret:with$odd chars").CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_passwd: %v: %s", err, out)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParsePasswords(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", algo, err)
		}
		if !p.Check("robot-agent", "s3cret:with$odd chars") {
			t.Errorf("%s: the password mosquitto_passwd hashed is refused", algo)
		}
		if p.Check("robot-agent", "s3cret") || p.Check("other", "s3cret:with$odd chars") {
			t.Errorf("%s: a wrong password or user is accepted", algo)
		}
	}
}

// mosquittoBroker runs the real mosquitto with password_file and acl_file
// on a free loopback port and returns its URL.
func mosquittoBroker(t *testing.T, passwd, acl string) string {
	t.Helper()
	needBinary(t, "mosquitto")
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf(`# "user root" keeps a root test run from dropping to the mosquitto user,
# which could not read the test's files; mosquitto ignores it when not root.
user root
listener %d 127.0.0.1
allow_anonymous false
password_file %s
use_username_as_clientid true
persistence false
log_dest stderr
log_type all
`, port, passwd)
	if acl != "" {
		aclPath := filepath.Join(dir, "acl")
		if err := os.WriteFile(aclPath, []byte(acl), 0o600); err != nil {
			t.Fatal(err)
		}
		conf += "acl_file " + aclPath + "\n"
	}
	confPath := filepath.Join(dir, "mosquitto.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "mosquitto", "-c", confPath)
	var log bytes.Buffer
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return log.Write(b) })
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("mosquitto log:\n%s", log.String())
			mu.Unlock()
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mosquitto did not listen on %s", addr)
		}
	}
	return "tcp://" + addr
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func dial(url, user, password string) (paho.Client, error) {
	o := paho.NewClientOptions().AddBroker(url).SetClientID(user).SetUsername(user).SetPassword(password).
		SetAutoReconnect(false).SetConnectRetry(false).SetConnectTimeout(5 * time.Second)
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

func mustDial(t *testing.T, url, user, password string) paho.Client {
	t.Helper()
	c, err := dial(url, user, password)
	if err != nil {
		t.Fatalf("%s: %v", user, err)
	}
	t.Cleanup(func() { c.Disconnect(0) })
	return c
}

func wait(t *testing.T, tok paho.Token, what string) {
	t.Helper()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("%s: %v", what, tok.Error())
	}
}

// inbox collects the topics a client receives.
type inbox struct {
	mu     sync.Mutex
	topics []string
	got    chan string
}

func newInbox() *inbox { return &inbox{got: make(chan string, 64)} }

func (b *inbox) handler(_ paho.Client, m paho.Message) {
	b.mu.Lock()
	b.topics = append(b.topics, m.Topic())
	b.mu.Unlock()
	select {
	case b.got <- m.Topic():
	default:
	}
}

// until waits for topic to arrive (a marker published after what must not
// arrive: one publisher's QoS 1 messages arrive in order), then returns
// every topic received.
func (b *inbox) until(t *testing.T, topic string) []string {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case got := <-b.got:
			if got == topic {
				time.Sleep(50 * time.Millisecond) // let duplicates of overlapping subscriptions land
				b.mu.Lock()
				defer b.mu.Unlock()
				return append([]string(nil), b.topics...)
			}
		case <-timeout:
			t.Fatalf("%s never arrived", topic)
		}
	}
}

func has(topics []string, topic string) bool {
	for _, x := range topics {
		if x == topic {
			return true
		}
	}
	return false
}

// A password file from WritePasswords and the ACL from MosquittoACL, run
// in the real mosquitto: right passwords connect, wrong ones do not, and
// the ACL holds agents to their own topics end to end.
func TestRealMosquittoEnforcesPolicy(t *testing.T) {
	for _, listed := range []bool{true, false} {
		t.Run(fmt.Sprintf("agents listed %v", listed), func(t *testing.T) {
			p := testPolicy()
			if !listed {
				p.Agents = nil
			}
			dir := t.TempDir()
			pw := map[string]string{sup: "sup-pw", sup + "-estop": "estop-pw", "a": "a-pw", "b": "b-pw", "grip": "grip-pw"}
			passwd := filepath.Join(dir, "passwd")
			if err := WritePasswords(passwd, pw); err != nil {
				t.Fatal(err)
			}
			url := mosquittoBroker(t, passwd, p.MosquittoACL())

			if c, err := dial(url, "a", "wrong"); err == nil {
				c.Disconnect(0)
				t.Error("mosquitto accepted a wrong password for a WritePasswords user")
			}
			if c, err := dial(url, "nobody", "a-pw"); err == nil {
				c.Disconnect(0)
				t.Error("mosquitto accepted a user not in the file")
			}
			s := mustDial(t, url, sup, "sup-pw")
			a := mustDial(t, url, "a", "a-pw")
			b := mustDial(t, url, "b", "b-pw")

			// a cannot read b's replies, by name or by wildcard.
			ain := newInbox()
			for _, f := range []string{base + "reply/b", base + "reply/+", "#", base + "#", base + "reply/a"} {
				tok := a.Subscribe(f, 1, ain.handler)
				tok.WaitTimeout(5 * time.Second)
			}
			wait(t, s.Publish(base+"reply/b", 1, false, "for b"), "publish reply/b")
			wait(t, s.Publish(base+"reply/a", 1, false, "for a"), "publish reply/a")
			if got := ain.until(t, base+"reply/a"); has(got, base+"reply/b") {
				t.Errorf("agent a read agent b's reply: %v", got)
			}

			// a can write its own command topic, not b's nor the shared one.
			sin := newInbox()
			wait(t, s.Subscribe(base+"cmd/+", 1, sin.handler), "supervisor subscribe")
			wait(t, s.Subscribe(base+"cmd", 1, sin.handler), "supervisor subscribe")
			wait(t, a.Publish(base+"cmd/b", 1, false, "{}"), "a publishes cmd/b")
			wait(t, a.Publish(base+"cmd", 1, false, "{}"), "a publishes cmd")
			wait(t, a.Publish(base+"cmd/a", 1, false, "{}"), "a publishes cmd/a")
			if got := sin.until(t, base+"cmd/a"); has(got, base+"cmd/b") || has(got, base+"cmd") {
				t.Errorf("agent a wrote another's or the shared command topic: %v", got)
			}
			// b can write its own.
			wait(t, b.Publish(base+"cmd/b", 1, false, "{}"), "b publishes cmd/b")
			sin.until(t, base+"cmd/b")

			// a cannot write the status the supervisor owns.
			bin := newInbox()
			wait(t, b.Subscribe(base+"status", 1, bin.handler), "b subscribes status")
			wait(t, b.Subscribe(base+"events", 1, bin.handler), "b subscribes events")
			wait(t, a.Publish(base+"status", 1, false, "forged"), "a publishes status")
			wait(t, s.Publish(base+"events", 1, false, "{}"), "supervisor publishes events")
			if got := bin.until(t, base+"events"); has(got, base+"status") {
				t.Errorf("agent a forged the status: %v", got)
			}
		})
	}
}

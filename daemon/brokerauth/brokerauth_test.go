package brokerauth

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "mqtt", "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "mqtt", "credentials")
	return cfg
}

func connect(url, user, password string) error {
	o := paho.NewClientOptions().AddBroker(url).SetClientID(user).SetConnectTimeout(3 * time.Second)
	if user != "" {
		o.SetUsername(user).SetPassword(password)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		return tok.Error()
	}
	c.Disconnect(0)
	return nil
}

// The embedded default, started locked: the logins the config needs are
// created (the supervisor's three, planner and ctl), cfg is given the
// supervisor's own login, the agents log in with their generated
// passwords, and nobody else gets in.
func TestStartEmbeddedLocked(t *testing.T) {
	cfg := testConfig(t)
	st, err := StartEmbedded(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Broker.Close()
	want := []string{"saga-supervisor-arm1", "saga-supervisor-arm1-estop", "saga-supervisor-arm1-devices", "ctl", "planner"}
	if !slices.Equal(st.Added, want) {
		t.Errorf("added %v, want %v", st.Added, want)
	}
	if cfg.MQTT.Username != "saga-supervisor-arm1" || cfg.MQTT.Password == "" {
		t.Fatalf("the supervisor's login was not put into the config: %q", cfg.MQTT.Username)
	}
	url := LocalURL(st.Broker)
	for _, u := range []string{"saga-supervisor-arm1", "saga-supervisor-arm1-estop", "saga-supervisor-arm1-devices"} {
		if err := connect(url, u, cfg.MQTT.Password.Reveal()); err != nil {
			t.Errorf("supervisor login %s: %v", u, err)
		}
	}
	pw, err := os.ReadFile(filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner"))
	if err != nil {
		t.Fatal(err)
	}
	if err := connect(url, "planner", string(pw[:len(pw)-1])); err != nil {
		t.Errorf("planner with its generated password: %v", err)
	}
	for _, c := range []struct{ user, pw string }{{"", ""}, {"planner", "guess"}, {"mallory", "x"}} {
		if err := connect(url, c.user, c.pw); err == nil {
			t.Errorf("user %q with password %q got in", c.user, c.pw)
		}
	}
	// A second start adds nothing and keeps every password.
	st.Broker.Close()
	cfg2 := testConfig(t)
	cfg2.MQTT.Auth = cfg.MQTT.Auth
	st2, err := StartEmbedded(cfg2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Broker.Close()
	if len(st2.Added) != 0 || cfg2.MQTT.Password != cfg.MQTT.Password {
		t.Errorf("second start added %v or changed the supervisor's password", st2.Added)
	}
}

// Anonymous only on loopback; an exposed listener needs TLS.
func TestStartEmbeddedExposure(t *testing.T) {
	cfg := testConfig(t)
	cfg.MQTT.Auth.Anonymous = true
	st, err := StartEmbedded(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := connect(LocalURL(st.Broker), "", ""); err != nil {
		t.Errorf("anonymous broker refused an anonymous client: %v", err)
	}
	st.Broker.Close()
	for _, anon := range []bool{true, false} {
		cfg := testConfig(t)
		cfg.MQTT.Listen = "0.0.0.0:0"
		cfg.MQTT.Auth.Anonymous = anon
		if st, err := StartEmbedded(cfg, nil); err == nil {
			st.Broker.Close()
			t.Errorf("anonymous=%v on 0.0.0.0 without TLS started", anon)
		}
	}
}

// The policy follows the config: agents.allow, device users of MQTT
// actuators, the supervisor's username on an external broker.
func TestPolicyFromConfig(t *testing.T) {
	cfg := config.Default()
	p := Policy(cfg)
	if p.Supervisor != "saga-supervisor-arm1" || !slices.Equal(p.Agents, []string{"ctl", "planner"}) || len(p.Devices) != 0 {
		t.Errorf("policy %+v", p)
	}
	a := cfg.Actuators["base"]
	a.Driver = "mqtt"
	a.Section = &config.MQTTActuator{SetTopic: "dev/base/set", AckTopic: "dev/base/ack", User: "board"}
	cfg.Actuators["base"] = a
	cfg.MQTT.Broker, cfg.MQTT.Username = "tcp://127.0.0.1:1883", "sup"
	p = Policy(cfg)
	if p.Supervisor != "sup" || len(p.Devices) != 1 || p.Devices[0].User != "board" {
		t.Errorf("policy %+v", p)
	}
	var names []string
	for _, l := range Logins(cfg) {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"sup", "ctl", "planner", "board"}) {
		t.Errorf("logins %v", names)
	}
}

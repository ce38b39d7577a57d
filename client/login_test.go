package client_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/client"
	"github.com/saga-supervisor/saga-supervisor/daemon/brokerauth"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// On the locked embedded broker a controller gets in with the password the
// supervisor generated for it (PasswordFile; the username defaults to the
// agent), and not without it.
func TestDialWithGeneratedPassword(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "credentials")
	st, err := brokerauth.StartEmbedded(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Broker.Close()
	ctx := context.Background()
	opt := client.Options{Broker: st.Broker.URL(), Agent: "planner", Device: "arm1", NoLease: true, Timeout: 5 * time.Second}
	if c, err := client.Dial(ctx, opt); !errors.Is(err, client.ErrLoginRefused) {
		if c != nil {
			c.Close(ctx)
		}
		t.Fatalf("dialled the locked broker without a password: %v", err)
	}
	opt.PasswordFile = filepath.Join(cfg.MQTT.Auth.CredentialsDir, "planner")
	c, err := client.Dial(ctx, opt)
	if err != nil {
		t.Fatalf("with the generated password: %v", err)
	}
	c.Close(ctx)
	opt.PasswordFile = filepath.Join(dir, "missing")
	if _, err := client.Dial(ctx, opt); err == nil {
		t.Fatal("a missing password file was not an error")
	}
}

// A controller pointed at another device than the supervisor's is told
// so: the locked broker refuses its will topic with the CONNACK code of a
// wrong password, and Dial names the topic and the device, not the login.
// A wrong password is still a refused login.
func TestDialOtherDeviceNamesTheWill(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Device = "arm2"
	cfg.MQTT.ClientID = "saga-supervisor-arm2"
	cfg.MQTT.Listen = "127.0.0.1:0"
	cfg.MQTT.Auth.PasswordFile = filepath.Join(dir, "passwd")
	cfg.MQTT.Auth.CredentialsDir = filepath.Join(dir, "credentials")
	st, err := brokerauth.StartEmbedded(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Broker.Close()
	ctx := context.Background()
	opt := client.Options{Broker: st.Broker.URL(), Agent: "ctl", ClientID: "ctl/1", Device: "arm1", NoLease: true, Timeout: 5 * time.Second,
		PasswordFile: filepath.Join(cfg.MQTT.Auth.CredentialsDir, "ctl")}
	_, err = client.Dial(ctx, opt)
	if !errors.Is(err, client.ErrWillRefused) || errors.Is(err, client.ErrLoginRefused) ||
		!strings.Contains(err.Error(), "saga/v1/arm1/will/ctl") || !strings.Contains(err.Error(), `device "arm1"`) {
		t.Fatalf("dialling device arm1 of a broker of arm2: %v", err)
	}
	opt.Device = "arm2"
	c, err := client.Dial(ctx, opt)
	if err != nil {
		t.Fatalf("dialling its own device: %v", err)
	}
	c.Close(ctx)
	opt.PasswordFile, opt.Password, opt.Username = "", "a-wrong-password", "ctl"
	if _, err := client.Dial(ctx, opt); !errors.Is(err, client.ErrLoginRefused) || errors.Is(err, client.ErrWillRefused) {
		t.Fatalf("a wrong password: %v", err)
	}
}

package client_test

import (
	"context"
	"errors"
	"path/filepath"
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

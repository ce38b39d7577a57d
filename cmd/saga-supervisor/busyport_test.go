package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// A busy HTTP port stops `run` with a non-zero exit and the reason, before
// it is ready. It printed its banner, told systemd READY and exited 0
// (so Restart=on-failure never brought it back).
func TestRunExitsOnBusyHTTPPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	text := strings.NewReplacer(
		"  dir: ./saga-data/journal", "  dir: "+filepath.Join(dir, "journal"),
		"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
		"  listen: 127.0.0.1:1883", fmt.Sprintf("  listen: 127.0.0.1:%d", freePort(t)),
		"  listen: 127.0.0.1:8080", "  listen: "+busy.Addr().String(),
		"    password_file: ./saga-data/mqtt/passwd", "    password_file: "+filepath.Join(dir, "mqtt", "passwd"),
		"    credentials_dir: ./saga-data/mqtt/credentials", "    credentials_dir: "+filepath.Join(dir, "mqtt", "credentials"),
	).Replace(string(config.DefaultYAML))
	path := filepath.Join(dir, "arm.yaml")
	os.WriteFile(path, []byte(text), 0o600)
	out, code := run(t, "run", "--config", path)
	if code == 0 || !strings.Contains(out, "address already in use") || strings.Contains(out, "running on") {
		t.Fatalf("run on a busy HTTP port: exit %d\n%s", code, out)
	}
}

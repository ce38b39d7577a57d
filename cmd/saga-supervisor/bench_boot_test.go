package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/internal/latency"
)

// BenchmarkHTTPBrokerDown times what a user's curl and the dashboard get
// from the real binary with its external broker down (a closed port),
// beside the same binary with mosquitto up, in one run: GET /readyz, GET
// /api/v1/status and POST /api/v1/halt, one request at a time over a kept
// connection. It reports p50_us and p99_us. The figure is 100
// requests:
//
//	SAGA_TEST_NO_RACE=1 go test ./cmd/saga-supervisor -run '^$' -bench HTTPBrokerDown -benchtime 100x
//
// (without SAGA_TEST_NO_RACE the binary is built with the race detector,
// several times slower).
func BenchmarkHTTPBrokerDown(b *testing.B) {
	for _, broker := range []string{"down", "up"} {
		b.Run("broker="+broker, func(b *testing.B) {
			dir := b.TempDir()
			port := benchFreePort(b)
			url := fmt.Sprintf("tcp://127.0.0.1:%d", port)
			if broker == "up" {
				mosq, err := exec.LookPath("mosquitto")
				if err != nil {
					b.Skip("mosquitto not found: apt-get install mosquitto")
				}
				conf := filepath.Join(dir, "mosquitto.conf")
				os.WriteFile(conf, []byte(fmt.Sprintf("listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n", port)), 0o600)
				m := exec.Command(mosq, "-c", conf)
				if err := m.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { m.Process.Kill(); m.Wait() })
			}
			httpAddr := fmt.Sprintf("127.0.0.1:%d", benchFreePort(b))
			cfg := filepath.Join(dir, "arm.yaml")
			text := strings.NewReplacer(
				"  dir: ./saga-data/journal", "  dir: "+filepath.Join(dir, "journal"),
				"  world: ./saga-data/world", "  world: "+filepath.Join(dir, "world"),
				"  broker: embedded", "  broker: "+url,
				"  listen: 127.0.0.1:1883", `  listen: ""`,
				"  listen: 127.0.0.1:8080", "  listen: "+httpAddr,
			).Replace(defaultYAMLForTests(b))
			os.WriteFile(cfg, []byte(text), 0o600)
			d := exec.Command(binary, "run", "--config", cfg)
			if err := d.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { d.Process.Kill(); d.Wait() })

			c := &http.Client{Timeout: 5 * time.Second}
			wantReady := map[string]int{"down": 503, "up": 200}[broker]
			deadline := time.Now().Add(30 * time.Second)
			for {
				res, err := c.Get("http://" + httpAddr + "/readyz")
				if err == nil {
					body, _ := io.ReadAll(res.Body)
					res.Body.Close()
					// Past the start-up handler's 503 (boards, then the journal).
					if res.StatusCode == wantReady && !strings.Contains(string(body), "starting: ") {
						break
					}
				}
				if time.Now().After(deadline) {
					b.Fatalf("/readyz never answered %d with the broker %s", wantReady, broker)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, ep := range []struct{ method, path string }{
				{http.MethodGet, "/readyz"}, {http.MethodGet, "/api/v1/status"}, {http.MethodPost, "/api/v1/halt"},
			} {
				b.Run(strings.TrimPrefix(strings.ReplaceAll(ep.path, "/", "_"), "_"), func(b *testing.B) {
					s := make(latency.Samples, 0, b.N)
					for b.Loop() {
						req, _ := http.NewRequest(ep.method, "http://"+httpAddr+ep.path, strings.NewReader(`{"reason":"bench"}`))
						req.Header.Set("Content-Type", "application/json")
						start := time.Now()
						res, err := c.Do(req)
						if err != nil {
							b.Fatal(err)
						}
						var buf [4096]byte
						for {
							if _, err := res.Body.Read(buf[:]); err != nil {
								break
							}
						}
						res.Body.Close()
						s = append(s, time.Since(start))
					}
					b.ReportMetric(float64(s.Percentile(0.5).Microseconds()), "p50_us")
					b.ReportMetric(float64(s.Percentile(0.99).Microseconds()), "p99_us")
				})
			}
		})
	}
}

func benchFreePort(b *testing.B) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

package mcu

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// The firmware's protocol core (firmware/saga_mcu/src/saga_core.c) runs
// here on a host "board" (firmware/host/saga_host.c) that takes a script on
// stdin — bytes arriving, the clock moving, the e-stop, an output fault, an
// ADC reading — and prints every frame it sends. The same script runs on
// this package's MCU, stepped by the same virtual clock. The two must
// answer byte for byte alike: that is what keeps the Go simulation, which
// CI's HIL tests use, and the firmware users flash in step.

// firmwareDir is the repository's firmware/, from this package.
const firmwareDir = "../../../firmware"

var hostBuild struct {
	once sync.Once
	path string
	err  error
}

// hostProgram returns the host build of the firmware core: the one
// SAGA_FIRMWARE_HOST names (make firmware-test sets it to the ASan and
// UBSan build), or one built here with cc. Without a C compiler the test
// is skipped, except in CI, where it fails.
func hostProgram(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SAGA_FIRMWARE_HOST"); p != "" {
		return p
	}
	hostBuild.once.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			hostBuild.err = err
			return
		}
		dir, err := os.MkdirTemp("", "saga-host-")
		if err != nil {
			hostBuild.err = err
			return
		}
		hostBuild.path = filepath.Join(dir, "saga_host")
		out, err := exec.Command(cc, "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-o", hostBuild.path,
			filepath.Join(firmwareDir, "host/saga_host.c"), filepath.Join(firmwareDir, "saga_mcu/src/saga_core.c")).CombinedOutput()
		if err != nil {
			hostBuild.err = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if hostBuild.err != nil {
		if os.Getenv("CI") != "" || !errors.Is(hostBuild.err, exec.ErrNotFound) {
			t.Fatalf("building the firmware's host program: %v", hostBuild.err)
		}
		t.Skipf("no C compiler: %v", hostBuild.err)
	}
	return hostBuild.path
}

// TestMain removes the host program built for the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if hostBuild.path != "" {
		os.RemoveAll(filepath.Dir(hostBuild.path))
	}
	os.Exit(code)
}

// firmwareTable is what the host program prints about its table.
type firmwareTable struct {
	window, maxDuration, telemetry, gap, release int
	channels                                     []ChannelSpec
	uvPerCount                                   []int64
	ranges                                       []SupplyRange
	raw                                          []string // the lines as printed
}

// runFirmware runs script on the host program with args and returns its
// table and the rest of its output, one line per entry.
func runFirmware(t *testing.T, args []string, script []string) (firmwareTable, []string) {
	t.Helper()
	cmd := exec.Command(hostProgram(t), args...)
	cmd.Stdin = strings.NewReader(strings.Join(script, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("firmware host program %v: %v\n%s", args, err, stderr.String())
	}
	var tab firmwareTable
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		num := func(key string) int64 {
			for i := 1; i+1 < len(f); i++ {
				if f[i] == key {
					n, err := strconv.ParseInt(f[i+1], 10, 64)
					if err != nil {
						t.Fatalf("%q: %v", line, err)
					}
					return n
				}
			}
			t.Fatalf("%q has no %s", line, key)
			return 0
		}
		switch f[0] {
		case "info":
			tab.window, tab.maxDuration, tab.telemetry = int(num("window")), int(num("max_duration")), int(num("telemetry"))
			tab.gap, tab.release = int(num("gap")), int(num("release"))
			tab.raw = append(tab.raw, line)
		case "chan":
			fl := num("flags")
			c := ChannelSpec{Kind: serial.ChannelKind(num("kind")), Pin: uint8(num("pin")), ActiveLow: fl&1 != 0, SafeDetach: fl&2 != 0,
				PulseMinUS: uint16(num("pulse_min")), PulseMaxUS: uint16(num("pulse_max")),
				Min: serial.FromMilli(int32(num("min"))), Max: serial.FromMilli(int32(num("max"))), Safe: serial.FromMilli(int32(num("safe")))}
			tab.channels = append(tab.channels, c)
			tab.raw = append(tab.raw, line)
		case "supply":
			tab.uvPerCount = append(tab.uvPerCount, num("uv"))
			tab.ranges = append(tab.ranges, SupplyRange{serial.FromMilli(int32(num("min"))), serial.FromMilli(int32(num("max")))})
			tab.raw = append(tab.raw, line)
		default:
			lines = append(lines, line)
		}
	}
	return tab, lines
}

// runSim runs script on an MCU of this package built from the firmware's
// table, on the same virtual clock, and returns what the host program
// would print.
func runSim(t *testing.T, tab firmwareTable, script []string) []string {
	t.Helper()
	if tab.release != 0 {
		t.Fatalf("the simulation releases its e-stop at once: run the firmware with -r 0, not %d", tab.release)
	}
	opts := Options{Channels: tab.channels, Window: tab.window, MaxDuration: time.Duration(tab.maxDuration) * time.Millisecond,
		TelemetryPeriod: time.Duration(tab.telemetry) * time.Millisecond, FrameGap: time.Duration(tab.gap) * time.Millisecond,
		Supplies: make([]float64, len(tab.uvPerCount)), SupplyRanges: tab.ranges}
	m, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// Closed, the MCU runs no timers of its own: only the virtual clock
	// below moves it.
	m.Close()
	var s server
	base := time.Unix(1e6, 0)
	var now, lastTel int64
	var out []string
	at := func() time.Time { return base.Add(time.Duration(now) * time.Millisecond) }
	emit := func(frames [][]byte) {
		for _, f := range frames {
			out = append(out, fmt.Sprintf("tx %d %x", now, f))
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.volts {
		m.volts[i] = serial.NoReading
	}
	// tick is one turn of the firmware's main loop with no bytes waiting
	// (saga_core.c, poll): a stalled partial frame, the watchdog, telemetry.
	// The e-stop and output faults are set by their commands below.
	tick := func() {
		emit(s.gapLocked(m, at()))
		m.watchdogLocked(at())
		if now-lastTel >= int64(tab.telemetry) {
			lastTel = now
			emit([][]byte{m.telemetryLocked()})
		}
	}
	for _, line := range script {
		f := strings.Fields(line)
		arg := func(i int) int64 {
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				t.Fatalf("script %q: %v", line, err)
			}
			return n
		}
		switch f[0] {
		case "t":
			for to := arg(1); now < to; {
				now++
				tick()
			}
		case "rx":
			b, err := hex.DecodeString(strings.TrimPrefix(line, "rx "))
			if err != nil {
				t.Fatalf("script %q: %v", line, err)
			}
			tick()
			emit(s.receiveLocked(m, b, at()))
		case "estop":
			tick()
			if on := arg(1) != 0; on && m.faults&serial.FaultEStop == 0 {
				m.goSafeLocked()
				m.faults |= serial.FaultEStop
			} else if !on {
				m.faults &^= serial.FaultEStop
			}
		case "fault":
			tick()
			if ch := int(arg(1)); ch < len(m.fault) {
				m.fault[ch] = arg(2) != 0
			}
		case "adc":
			i := arg(1)
			if i >= int64(len(m.volts)) {
				break // a supply the board does not have
			}
			mv := serial.NoReading
			if f[2] != "none" {
				if counts := arg(2); counts <= 4095 {
					mv = int32((counts*tab.uvPerCount[i] + 500) / 1000)
				}
			}
			m.volts[i] = mv
		case "pins":
			line := fmt.Sprintf("pins %d", now)
			for ch := range m.out {
				line += fmt.Sprintf(" %d", m.out[ch].drive)
			}
			out = append(out, line)
		case "state":
			session := 0
			if m.session {
				session = 1
			}
			line := fmt.Sprintf("state %d faults %d session %d", now, m.faultsLocked(), session)
			for ch := range m.out {
				st := m.stateLocked(ch)
				line += fmt.Sprintf(" %d/%d", st.Value, st.Flags)
			}
			out = append(out, line)
		default:
			t.Fatalf("script %q: unknown command", line)
		}
	}
	return out
}

// differ runs script on both and fails, showing where, unless their
// outputs are identical. It returns the firmware's output.
func differ(t *testing.T, name string, args []string, script []string) []string {
	t.Helper()
	tab, fw := runFirmware(t, args, script)
	sim := runSim(t, tab, script)
	for i := 0; i < max(len(fw), len(sim)); i++ {
		var a, b string
		if i < len(fw) {
			a = fw[i]
		}
		if i < len(sim) {
			b = sim[i]
		}
		if a != b {
			from := max(0, i-8)
			t.Fatalf("%s (firmware %v): line %d differs\nfirmware: %s\nsim:      %s\nbefore it:\n  %s\nscript:\n  %s", name, args, i, a, b,
				strings.Join(fw[from:i], "\n  "), strings.Join(script[:min(len(script), 400)], "\n  "))
		}
	}
	return fw
}

// frameHex is one host frame, as a script's rx argument.
func frameHex(seq uint8, typ serial.Type, payload ...byte) string {
	b, err := serial.Frame{Seq: seq, Type: typ, Payload: payload}.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func setHex(seq, ch uint8, v int32) string {
	p, _ := serial.SetRequest{Channel: ch, Value: v}.AppendBinary(nil)
	return frameHex(seq, serial.TypeSet, p...)
}

// The two tables the host program has: the ATmega328P board's, with the
// e-stop released at once (the simulation has no release time), and a
// wider one.
var (
	unoArgs  = []string{"-t", "0", "-r", "0"}
	wideArgs = []string{"-t", "1"}
)

// sessions are hand-written scripts: every rule of docs/SERIAL.md once,
// on both tables.
func sessions() map[string][]string {
	hello := func(seq uint8) string { return "rx " + frameHex(seq, serial.TypeHello, 1) }
	s := map[string][]string{}
	s["no session"] = []string{"t 5", "rx " + setHex(0, 0, 1000), "rx " + frameHex(1, serial.TypePing), "rx " + frameHex(2, serial.TypeDescribe, 0), "state", "pins", "t 250"}
	s["handshake"] = []string{"t 3", hello(7), "state", "rx " + frameHex(8, serial.TypePing), "t 120", hello(200), "rx " + frameHex(201, serial.TypePing), "state"}
	s["hello refused"] = []string{
		"rx " + frameHex(0, serial.TypeHello, 2), "rx " + frameHex(1, serial.TypeHello), "rx " + frameHex(2, serial.TypeHello, 1, 1),
		"state", hello(3), "rx " + frameHex(4, serial.TypeHello, 9), "rx " + frameHex(5, serial.TypePing), "state"}
	// Every channel: the ends of its range, past them, and values
	// between steps.
	var sets []string
	sets = append(sets, hello(0))
	seq := uint8(1)
	for ch := uint8(0); ch < 8; ch++ {
		for _, v := range []int32{0, 1, 499, 500, 501, 999, 1000, 1001, 20000, 45000, 90000, 90050, 179999, 180000, 180001, -1, 1 << 30, -1 << 31} {
			sets = append(sets, "rx "+setHex(seq, ch, v), "pins")
			seq++
		}
		sets = append(sets, "rx "+frameHex(seq, serial.TypeHalt, ch), "pins", "state")
		seq++
		sets = append(sets, "rx "+frameHex(seq, serial.TypeDescribe, ch))
		seq++
		sets = append(sets, "t "+strconv.Itoa(int(ch+1)*50))
	}
	s["every channel"] = sets
	s["malformed and unknown"] = []string{hello(0),
		"rx " + frameHex(1, serial.TypeSet, 0, 1, 2), "rx " + frameHex(2, serial.TypeHalt), "rx " + frameHex(3, serial.TypePing, 1),
		"rx " + frameHex(4, serial.TypeDescribe), "rx " + frameHex(5, serial.TypeDescribe, 1, 2), "rx " + frameHex(6, 0x06, 1, 2, 3),
		"rx " + frameHex(7, 0x7f), "rx " + frameHex(8, serial.TypeSet, bytes.Repeat([]byte{1}, 40)...),
		"rx " + frameHex(8, serial.TypeSet, bytes.Repeat([]byte{1}, 40)...),            // its retransmission: from the cache
		"rx " + frameHex(8, serial.TypeSet, append(bytes.Repeat([]byte{1}, 39), 2)...), // another with its SEQ: dropped
		"rx " + frameHex(9, serial.TypeSetAck, 0, 0, 0, 0, 0, 0),                       // an echo: ignored
		"rx " + frameHex(9, serial.TypePing), "state"}
	s["retransmission"] = []string{hello(250),
		"rx " + setHex(251, 0, 30000), "rx " + setHex(251, 0, 30000), "rx " + setHex(252, 0, 40000) + frameHex(253, serial.TypeHalt, 0),
		"rx " + setHex(252, 0, 40000), "pins", "rx " + setHex(251, 0, 31000), "rx " + setHex(255, 1, 1000), "rx " + frameHex(254, serial.TypePing),
		"rx " + setHex(255, 1, 1000), "rx " + setHex(0, 1, 2000), "rx " + setHex(250, 1, 0), "rx " + setHex(248, 1, 0), "state",
		"t 100", "rx " + setHex(0, 1, 2000), "state"}
	s["watchdog"] = []string{hello(0), "rx " + setHex(1, 0, 10000), "rx " + setHex(2, 4, 1000), "rx " + setHex(3, 2, 700), "pins", "state",
		"t 150", "rx " + frameHex(4, serial.TypePing), "t 649", "state", "t 650", "state", "pins",
		"rx " + setHex(5, 0, 5000), "rx " + setHex(4, 0, 5000), "t 700", hello(6), "state", "t 2000", "state", "pins"}
	s["estop"] = []string{hello(0), "rx " + setHex(1, 0, 10000), "rx " + setHex(2, 4, 1000), "estop 1", "state", "pins",
		"rx " + setHex(3, 4, 1000), "rx " + frameHex(4, serial.TypeHalt, 0), "pins", "estop 1", "pins",
		"rx " + frameHex(5, serial.TypePing), "t 40", "estop 0", "rx " + setHex(6, 4, 1000), "state", "pins",
		"estop 1", hello(7), "estop 0", hello(8), "state"}
	s["output fault"] = []string{hello(0), "fault 2 1", "rx " + setHex(1, 2, 500), "rx " + frameHex(2, serial.TypeHalt, 2), "state",
		"rx " + frameHex(3, serial.TypePing), "t 130", "fault 2 0", "fault 3 1", "rx " + setHex(4, 2, 500), "state", hello(5), "fault 3 0", "state"}
	s["supplies"] = []string{"adc 0 0", "adc 1 12000", "t 100", "adc 0 818", "t 200", "adc 0 1017", "t 300", "adc 0 1023", "t 400",
		"adc 0 none", "t 500", "adc 0 5000", "adc 1 4095", "t 600", "adc 0 4096", "t 700", hello(1), "state"}
	s["torn and garbage"] = []string{hello(0),
		"rx a5c8", "rx " + setHex(1, 0, 1000), "t 30", "rx " + setHex(1, 0, 1000),
		"rx " + setHex(2, 0, 2000)[:10], "t 40", "rx " + setHex(2, 0, 2000)[10:] + setHex(3, 0, 3000),
		"rx 00a5a5a50aff" + setHex(4, 0, 4000) + "a5", "t 100",
		"rx a50504" + frameHex(5, serial.TypePing), "t 130", "rx " + setHex(6, 0, 6000)[:8], "t 149", "rx " + frameHex(7, serial.TypePing), "t 200",
		"rx a505", "t 219", "t 220", "rx " + setHex(6, 0, 6000), "state"}
	return s
}

// TestDifferentialSessions: the scripted sessions answer byte for byte
// alike on the firmware's core and on this package's MCU, on both tables.
func TestDifferentialSessions(t *testing.T) {
	for name, script := range sessions() {
		for _, args := range [][]string{unoArgs, wideArgs} {
			differ(t, name, args, script)
		}
	}
}

// randomScript is a session of n events from seed: requests in and out of
// order, retransmissions, corrupted, torn and concatenated frames,
// garbage, the clock moving by a little or past the watchdog, the e-stop,
// output faults and supply readings, with the pins and the state looked at
// all along.
func randomScript(seed int64, n, nch int) []string {
	r := rand.New(rand.NewSource(seed))
	var script, sent []string
	seq := uint8(r.Intn(256))
	now := 0
	value := func() int32 {
		switch r.Intn(6) {
		case 0:
			return int32(r.Uint32())
		case 1:
			return []int32{0, 1000, 180000, 90000, 500, -1, 1001, 180001}[r.Intn(8)]
		case 2:
			return int32(r.Intn(1001))
		case 3:
			return []int32{0, 1000}[r.Intn(2)]
		default:
			return int32(r.Intn(180001))
		}
	}
	request := func() string {
		ch := uint8(r.Intn(nch + 1))
		var f string
		switch k := r.Intn(20); {
		case k < 2:
			f = frameHex(seq, serial.TypeHello, 1)
		case k < 9:
			f = setHex(seq, ch, value())
		case k < 11:
			f = frameHex(seq, serial.TypeHalt, ch)
		case k < 13:
			f = frameHex(seq, serial.TypePing)
		case k < 15:
			f = frameHex(seq, serial.TypeDescribe, ch)
		case k < 16:
			p := make([]byte, r.Intn(12))
			r.Read(p)
			f = frameHex(seq, serial.Type([]uint8{1, 2, 3, 4, 5, 0x7e, 0x82}[r.Intn(7)]), p...)
		default:
			f = setHex(seq, ch, value())
		}
		seq++
		sent = append(sent, f)
		return f
	}
	for range n {
		switch k := r.Intn(40); {
		case k < 14:
			script = append(script, "rx "+request())
		case k < 17: // several in one read
			script = append(script, "rx "+request()+request()+request())
		case k < 20 && len(sent) > 0: // a retransmission
			script = append(script, "rx "+sent[len(sent)-1-r.Intn(min(len(sent), 10))])
		case k < 21: // ahead of a lost one
			seq += uint8(1 + r.Intn(3))
			script = append(script, "rx "+request())
		case k < 23: // corrupted
			b, _ := hex.DecodeString(request())
			b[r.Intn(len(b))] ^= byte(1 + r.Intn(255))
			script = append(script, "rx "+hex.EncodeToString(b))
		case k < 25: // torn: the rest later, or never
			f := request()
			cut := 2 * (1 + r.Intn(len(f)/2-1))
			script = append(script, "rx "+f[:cut])
			now += r.Intn(40)
			script = append(script, "t "+strconv.Itoa(now))
			if r.Intn(2) == 0 {
				script = append(script, "rx "+f[cut:])
			}
		case k < 26: // garbage, with false sync bytes
			g := make([]byte, 1+r.Intn(30))
			r.Read(g)
			for i := range g {
				if r.Intn(4) == 0 {
					g[i] = serial.Sync
				}
			}
			script = append(script, "rx "+hex.EncodeToString(g))
		case k < 32:
			now += 1 + r.Intn(30)
			script = append(script, "t "+strconv.Itoa(now))
		case k < 33:
			now += 100 + r.Intn(700)
			script = append(script, "t "+strconv.Itoa(now))
		case k < 34:
			script = append(script, "estop "+strconv.Itoa(r.Intn(2)))
		case k < 35:
			script = append(script, fmt.Sprintf("fault %d %d", r.Intn(nch), r.Intn(4)/3))
		case k < 36:
			if r.Intn(5) == 0 {
				script = append(script, fmt.Sprintf("adc %d none", r.Intn(2)))
			} else {
				script = append(script, fmt.Sprintf("adc %d %d", r.Intn(2), r.Intn(4200)))
			}
		case k < 38:
			script = append(script, "pins")
		default:
			script = append(script, "state")
		}
	}
	return append(script, "t "+strconv.Itoa(now+1000), "state", "pins")
}

// differentialSeeds is how many random sessions TestDifferentialRandom
// runs per table (a tenth with -short).
const differentialSeeds = 600

// TestDifferentialRandom: random sessions from fixed seeds answer byte for
// byte alike. A failure names its seed; the script is in the message.
func TestDifferentialRandom(t *testing.T) {
	seeds := differentialSeeds
	if testing.Short() {
		seeds /= 10
	}
	cases := 0
	for seed := range int64(seeds) {
		for _, tab := range []struct {
			args []string
			nch  int
		}{{unoArgs, 5}, {wideArgs, 7}} {
			differ(t, fmt.Sprintf("seed %d", seed), tab.args, randomScript(seed, 300, tab.nch))
			cases++
		}
	}
	t.Logf("%d random sessions of 300 events alike", cases)
}

// TestDifferentialFuzzCorpus: the fuzz corpora of this package (FuzzMCU)
// and of drivers/serial (FuzzDecoder) — the seeds and the inputs kept
// under testdata/fuzz — arrive as bytes on a line at once, in pieces with
// the clock moving between them, and after an open session.
func TestDifferentialFuzzCorpus(t *testing.T) {
	var inputs [][]byte
	inputs = append(inputs, fuzzMCUSeeds()...)
	for _, dir := range []string{"testdata/fuzz/FuzzMCU", "../../serial/testdata/fuzz/FuzzDecoder"} {
		files, err := filepath.Glob(filepath.Join(dir, "*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			b, err := readCorpusBytes(name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			inputs = append(inputs, b)
		}
	}
	if len(inputs) < 20 {
		t.Fatalf("%d corpus inputs: the corpus is missing", len(inputs))
	}
	cases := 0
	for i, in := range inputs {
		h := hex.EncodeToString(in)
		var pieces []string
		for j := 0; j < len(h); j += 14 {
			pieces = append(pieces, "rx "+h[j:min(j+14, len(h))], "t "+strconv.Itoa(j))
		}
		hello := "rx " + frameHex(0xff, serial.TypeHello, 1)
		for _, script := range [][]string{
			{"rx " + h, "state", "pins", "t 1000", "state"},
			append(append([]string{hello}, pieces...), "state", "pins", "t 2000", "state"),
			{hello, "rx " + h, "state", "pins", "t 100", "state"},
		} {
			for _, args := range [][]string{unoArgs, wideArgs} {
				differ(t, fmt.Sprintf("corpus input %d", i), args, script)
				cases++
			}
		}
	}
	t.Logf("%d corpus inputs, %d sessions alike", len(inputs), cases)
}

// readCorpusBytes reads the first []byte of a Go fuzz corpus file ("go test
// fuzz v1").
func readCorpusBytes(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 || lines[0] != "go test fuzz v1" {
		return nil, errors.New("not a go test fuzz v1 file")
	}
	for _, l := range lines[1:] {
		if q, ok := strings.CutPrefix(l, "[]byte("); ok {
			s, err := strconv.Unquote(strings.TrimSuffix(q, ")"))
			return []byte(s), err
		}
	}
	return nil, errors.New("no []byte in it")
}

// TestFirmwarePinMap: the ATmega328P board's table is the pin map
// docs/SERIAL.md and docs/HARDWARE.md show (and the rig is wired to):
// servos on D9 and D10 calibrated 1000..2000 us, PWM on D5, an
// active-high output on D7, an active-low relay on D8, all safe at 90
// degrees or off; the supply on A0 at 14.663 mV a count.
func TestFirmwarePinMap(t *testing.T) {
	tab, _ := runFirmware(t, []string{"-t", "0"}, nil)
	want := []string{
		"info nch 5 nsup 1 window 4 max_duration 500 telemetry 100 gap 20 release 50",
		"chan 0 kind 1 pin 9 flags 0 pulse_min 1000 pulse_max 2000 min 0 max 180000 safe 90000",
		"chan 1 kind 1 pin 10 flags 0 pulse_min 1000 pulse_max 2000 min 0 max 180000 safe 90000",
		"chan 2 kind 2 pin 5 flags 0 pulse_min 0 pulse_max 0 min 0 max 1000 safe 0",
		"chan 3 kind 3 pin 7 flags 0 pulse_min 0 pulse_max 0 min 0 max 1000 safe 0",
		"chan 4 kind 3 pin 8 flags 1 pulse_min 0 pulse_max 0 min 0 max 1000 safe 0",
		"supply 0 uv 14663 min 0 max 14900",
	}
	if got := strings.Join(tab.raw, "\n"); got != strings.Join(want, "\n") {
		t.Fatalf("the ATmega328P table is\n%s\nwant the documented pin map\n%s", got, strings.Join(want, "\n"))
	}
}

// pinsAt returns the drive of each channel from the "pins" lines of a
// firmware run, in order.
func pinsAt(t *testing.T, out []string) [][]string {
	t.Helper()
	var all [][]string
	for _, l := range out {
		if f := strings.Fields(l); f[0] == "pins" {
			all = append(all, f[2:])
		}
	}
	return all
}

// TestFirmwareActiveLowRelayOffWhenSafe: the ATmega328P board's channel 4
// is an active-low relay (D8). Power-on, the watchdog, HALT and the e-stop
// each leave it OFF — its pin HIGH — and only SET 1 drives the pin LOW;
// channel 3, active-high, is LOW when off. Checked at the board interface
// (what the core hands the pin), on the firmware and, through the
// differential, on the simulation.
func TestFirmwareActiveLowRelayOffWhenSafe(t *testing.T) {
	hello := func(seq uint8) string { return "rx " + frameHex(seq, serial.TypeHello, 1) }
	script := []string{
		"pins",                                                            // power-on
		hello(0), "rx " + setHex(1, 4, 1000) + setHex(2, 3, 1000), "pins", // both on
		"t 600", "pins", // the watchdog
		hello(3), "rx " + setHex(4, 4, 1000) + setHex(5, 3, 1000), "pins",
		"rx " + frameHex(6, serial.TypeHalt, 4) + frameHex(7, serial.TypeHalt, 3), "pins", // halt
		"rx " + setHex(8, 4, 1000) + setHex(9, 3, 1000), "pins",
		"estop 1", "pins", // the e-stop
		"t 700", "estop 0", "t 760", hello(10), "rx " + setHex(11, 4, 0) + setHex(12, 3, 0), "pins", // off by SET 0
	}
	_, out := runFirmware(t, []string{"-t", "0"}, script)
	got := pinsAt(t, out)
	type pin struct{ ch3, ch4 string }
	want := []struct {
		when string
		pin
	}{
		{"power-on", pin{"0", "1"}}, {"set on", pin{"1", "0"}}, {"watchdog", pin{"0", "1"}}, {"set on", pin{"1", "0"}},
		{"halt", pin{"0", "1"}}, {"set on", pin{"1", "0"}}, {"e-stop", pin{"0", "1"}}, {"set off", pin{"0", "1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d pins lines, want %d:\n%s", len(got), len(want), strings.Join(out, "\n"))
	}
	for i, w := range want {
		if g := (pin{got[i][3], got[i][4]}); g != w.pin {
			t.Errorf("after %s: D7 (active-high) %s, D8 (active-low relay) %s; want %s and %s (relay %s)",
				w.when, g.ch3, g.ch4, w.ch3, w.ch4, map[string]string{"0": "ON", "1": "OFF"}[w.ch4])
		}
	}
	differ(t, "active-low", unoArgs, script)
}

// TestFirmwareServoCalibration: a servo's value becomes a pulse within its
// own calibration, in 0.5 us steps, and SET_ACK reports the angle that
// pulse is: on the ATmega328P table (1000..2000 us) 20 degrees is 1111 us
// and reads back 19.98; on the wider table's 544..2400 us servo (range
// 10..170) 90 degrees is 1472 us.
func TestFirmwareServoCalibration(t *testing.T) {
	hello := "rx " + frameHex(0, serial.TypeHello, 1)
	for _, c := range []struct {
		args       []string
		ch         uint8
		v          int32
		halfUS     string
		applied    int32
		refused    bool
		calibrated string
	}{
		{[]string{"-t", "0"}, 0, 20000, "2222", 19980, false, "1000..2000"},
		{[]string{"-t", "0"}, 1, 0, "2000", 0, false, "1000..2000"},
		{[]string{"-t", "0"}, 1, 180000, "4000", 180000, false, "1000..2000"},
		{[]string{"-t", "1"}, 0, 90000, "2944", 90000, false, "544..2400"},
		{[]string{"-t", "1"}, 0, 10000, "1294", 9989, false, "544..2400"},
		{[]string{"-t", "1"}, 0, 9999, "", 0, true, "544..2400 (range 10..170)"},
		{[]string{"-t", "1"}, 1, 180000, "5000", 180000, false, "500..2500"},
	} {
		_, out := runFirmware(t, c.args, []string{hello, "rx " + setHex(1, c.ch, c.v), "pins"})
		ack, _ := serial.ChannelReport{Channel: c.ch, ChannelState: serial.ChannelState{Value: c.applied}}.AppendBinary(nil)
		want := frameHex(1, serial.TypeSetAck, ack...)
		if c.refused {
			want = frameHex(1, serial.TypeNak, byte(serial.NakRange), c.ch)
		}
		if len(out) != 3 || out[1] != "tx 0 "+want {
			t.Errorf("table %s, servo %d (%s us) set %d: %q, want tx %s", c.args[1], c.ch, c.calibrated, c.v, out, want)
			continue
		}
		if p := pinsAt(t, out)[0][c.ch]; !c.refused && p != c.halfUS {
			t.Errorf("table %s, servo %d (%s us) set %d: pulse %s half-us, want %s", c.args[1], c.ch, c.calibrated, c.v, p, c.halfUS)
		}
	}
}

// TestFirmwareEStopRelease: on the ATmega328P board the e-stop clears only
// after its input has read inactive for 50 ms without a break: a bouncing
// contact does not release it early. Until then SET is refused (NAK FAULT).
func TestFirmwareEStopRelease(t *testing.T) {
	hello := "rx " + frameHex(0, serial.TypeHello, 1)
	_, out := runFirmware(t, []string{"-t", "0"}, []string{
		hello, "estop 1", "t 10", "estop 0", "t 30", "estop 1", "estop 0", "t 79", "rx " + setHex(1, 0, 1000),
		"t 80", "rx " + setHex(2, 0, 1000), "state"})
	nak := "tx 79 " + frameHex(1, serial.TypeNak, byte(serial.NakFault), 0)
	ack, _ := serial.ChannelReport{Channel: 0, ChannelState: serial.ChannelState{Value: 990}}.AppendBinary(nil)
	ok := "tx 80 " + frameHex(2, serial.TypeSetAck, ack...)
	if !slices.Contains(out, nak) || !slices.Contains(out, ok) {
		t.Fatalf("released too early or not at all:\n%s\nwant %s and %s", strings.Join(out, "\n"), nak, ok)
	}
}

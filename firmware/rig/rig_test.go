package rig

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bugst "go.bug.st/serial"
)

// The rig is tested against testdata/blink.c, a program of its own that
// sets the firmware's pins to known values (its comment lists them and its
// commands): every measurement is checked against what the program set.

var (
	rigBin, blinkELF string
	skipWhy          string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if missing := Tools(); len(missing) > 0 {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "firmware/rig: CI is set and this machine lacks %s: CI must install them (.ci/run)\n", strings.Join(missing, ", "))
			os.Exit(1)
		}
		skipWhy = "this machine lacks " + strings.Join(missing, ", ") + "; CI is unset, so this is a skip, not a failure"
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "avr-rig-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		root, err := Root()
		if err == nil {
			rigBin, blinkELF = filepath.Join(dir, "saga-avr-rig"), filepath.Join(dir, "blink.elf")
			err = Build(root, rigBin)
		}
		if err == nil {
			err = BuildAVR("testdata/blink.c", blinkELF)
		}
		if err == nil {
			standinELF = filepath.Join(dir, "standin.elf")
			err = BuildAVR("testdata/standin.c", standinELF)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// board is blink on a rig, with the host end of its serial line open.
type board struct {
	t *testing.T
	*Rig
	port  bugst.Port
	mu    sync.Mutex
	raw   []byte   // every byte the host received
	lines []string // and split into lines
}

func newBoard(t *testing.T, opts Options) *board {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
	opts.Binary, opts.ELF = rigBin, blinkELF
	opts.Link = filepath.Join(t.TempDir(), "tty")
	var log bytes.Buffer
	var logMu sync.Mutex
	opts.Output = writerFunc(func(p []byte) (int, error) { logMu.Lock(); defer logMu.Unlock(); return log.Write(p) })
	r, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			logMu.Lock()
			t.Logf("saga-avr-rig's output:\n%s", log.String())
			logMu.Unlock()
		}
	})
	p, err := bugst.Open(r.PTY, &bugst.Mode{BaudRate: 115200})
	if err != nil {
		t.Fatal(err)
	}
	p.SetReadTimeout(20 * time.Millisecond)
	b := &board{t: t, Rig: r, port: p}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 512)
		var line []byte
		for {
			n, err := p.Read(buf)
			if err != nil {
				return
			}
			b.mu.Lock()
			b.raw = append(b.raw, buf[:n]...)
			for _, c := range buf[:n] {
				if c == '\n' {
					b.lines = append(b.lines, string(line))
					line = line[:0]
				} else {
					line = append(line, c)
				}
			}
			b.mu.Unlock()
		}
	}()
	t.Cleanup(func() { p.Close(); <-done })
	b.waitLine("boot mcusr=", 10*time.Second)
	return b
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (b *board) send(s string) {
	b.t.Helper()
	if _, err := b.port.Write([]byte(s)); err != nil {
		b.t.Fatal(err)
	}
}

// waitLine waits for a line starting with prefix, takes it and every line
// before it, and returns it.
func (b *board) waitLine(prefix string, d time.Duration) string {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		b.mu.Lock()
		for i, l := range b.lines {
			if strings.HasPrefix(l, prefix) {
				b.lines = b.lines[i+1:]
				b.mu.Unlock()
				return l
			}
		}
		b.mu.Unlock()
		if time.Now().After(deadline) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.t.Fatalf("no line %q from the board within %v (lines: %q)", prefix, d, b.lines)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (b *board) pins() Pins {
	b.t.Helper()
	p, err := b.Pins(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	return p
}

func (b *board) pin(name string) Pin {
	b.t.Helper()
	p, ok := b.pins().Pin(name)
	if !ok {
		b.t.Fatalf("no pin %s", name)
	}
	return p
}

func (b *board) history(since uint64) []Event {
	b.t.Helper()
	h, err := b.History(context.Background(), since)
	if err != nil {
		b.t.Fatal(err)
	}
	if h.Lost {
		b.t.Fatalf("history since %d lost", since)
	}
	return h.Events
}

func (b *board) check(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
}

// waitPin polls the pins until cond holds for the pin.
func (b *board) waitPin(name, what string, d time.Duration, cond func(Pin) bool) Pin {
	b.t.Helper()
	deadline := time.Now().Add(d)
	for {
		p := b.pin(name)
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("%s: not %s within %v: %+v", name, what, d, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pulsing(p Pin) bool { return p.Wave == "pulsing" && p.WavePeriod > 0 }

// usCycles is a pulse width in cycles of the 16 MHz clock.
func usCycles(us float64) uint64 { return uint64(us * 16) }

// Each servo's pulse width within 1 us (16 cycles) of what the program
// set — in fact exact: the rig takes each edge's cycle from the timer —,
// the 50 Hz frame, the 8-bit PWM, the levels, and which pins are outputs.
func TestPinsAsSet(t *testing.T) {
	b := newBoard(t, Options{})
	for _, c := range []struct {
		pin           string
		high, period  uint64
		compare, what string
	}{
		{"PB1", usCycles(1500), 320000, "OC1A", "servo 1500 us, OCR1A 2999 at clk/8"},
		{"PB2", usCycles(1000), 320000, "OC1B", "servo 1000 us, OCR1B 1999"},
		{"PD5", 64 * 64, 256 * 64, "OC0B", "PWM (OCR0B+1)/256 at clk/64"},
	} {
		p := b.waitPin(c.pin, "pulsing", 5*time.Second, pulsing)
		if d := int64(p.WaveHigh) - int64(c.high); d < -16 || d > 16 {
			t.Errorf("%s (%s): high %d cycles (%.3f us), want %d", c.pin, c.what, p.WaveHigh, float64(p.WaveHigh)/16, c.high)
		}
		if p.WaveHigh != c.high || p.WavePeriod != c.period {
			t.Errorf("%s (%s): high %d period %d cycles, want exactly %d and %d", c.pin, c.what, p.WaveHigh, p.WavePeriod, c.high, c.period)
		}
		if !p.Driven || p.Compare != c.compare {
			t.Errorf("%s: driven %v by %q, want driven by %s", c.pin, p.Driven, p.Compare, c.compare)
		}
	}
	for _, c := range []struct {
		pin            string
		level          int
		driven, pullup bool
		what           string
	}{
		{"PD7", 0, true, false, "an output, low"},
		{"PB0", 1, true, false, "an output, high"},
		{"PD2", 0, false, true, "an input with its pull-up, the e-stop loop closed"},
	} {
		p := b.pin(c.pin)
		if p.Level != c.level || p.Driven != c.driven || p.Pullup != c.pullup {
			t.Errorf("%s: level %d driven %v pull-up %v, want %s", c.pin, p.Level, p.Driven, p.Pullup, c.what)
		}
	}
	// PB0 went high before it became an output: at no cycle since the
	// power-on was it driven low (what an active-low relay must not see).
	for _, e := range b.history(0) {
		if e.Pin == "PB0" && e.Driven && e.Level == 0 {
			t.Errorf("PB0 driven low at cycle %d: %+v", e.Cycle, e)
		}
	}
}

// The firmware changes a servo's pulse width at random moments of its
// 20 ms frame. The silicon double-buffers OCR1A in fast PWM, so every
// pulse is one of the widths set; simavr alone would make runt pulses when
// a longer width is written after a pulse ended (the rig holds the write
// until the frame ends). Every pulse the rig decodes must be one of them.
func TestPulseChangesMakeNoRunts(t *testing.T) {
	b := newBoard(t, Options{})
	b.waitPin("PB1", "pulsing", 5*time.Second, pulsing)
	since := b.pins().Cycle
	set := []uint64{usCycles(1500)}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 40; i++ {
		us := 1000 + rng.IntN(1001)
		set = append(set, usCycles(float64(us)))
		b.send(fmt.Sprintf("A%d\n", us))
		time.Sleep(time.Duration(5+rng.IntN(25)) * time.Millisecond)
	}
	last := set[len(set)-1]
	b.waitPin("PB1", "at the last width", 5*time.Second, func(p Pin) bool { return p.WaveHigh == last })
	n := 0
	for _, e := range b.history(since) {
		if e.Pin != "PB1" {
			continue
		}
		if e.Kind != "pulse" {
			t.Errorf("PB1: %s event, want only pulses: %+v", e.Kind, e)
			continue
		}
		n++
		if !slices.Contains(set, e.High) {
			t.Errorf("PB1: a pulse of %d cycles (%.2f us) at cycle %d, which the program never set", e.High, float64(e.High)/16, e.Cycle)
		}
		if e.Period != 0 && e.Period != 320000 {
			t.Errorf("PB1: a period of %d cycles at cycle %d", e.Period, e.Cycle)
		}
	}
	if n < 10 {
		t.Errorf("PB1: %d pulse events for 40 changes", n)
	}
}

// The same for Timer0's 8-bit fast PWM on PD5 (OCR0B), which simavr does
// take at once — so a write after the compare match would restart the
// pulse: the rig holds it until the period ends. Every duty the rig
// decodes is one the program set, (OCR0B+1)/256; OCR0B at TOP (255) is
// the silicon's constant high, not simavr's constant low.
func TestPWMChangesMakeNoRunts(t *testing.T) {
	b := newBoard(t, Options{})
	b.waitPin("PD5", "pulsing", 5*time.Second, pulsing)
	since := b.pins().Cycle
	set := []uint64{64 * 64}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 60; i++ {
		v := 10 + rng.IntN(200)
		set = append(set, uint64(v+1)*64)
		b.send(fmt.Sprintf("P%d\n", v))
		time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
	}
	last := set[len(set)-1]
	b.waitPin("PD5", "at the last duty", 5*time.Second, func(p Pin) bool { return p.WaveHigh == last })
	for _, e := range b.history(since) {
		if e.Pin == "PD5" && e.Kind == "pulse" && !slices.Contains(set, e.High) {
			t.Errorf("PD5: a pulse of %d cycles at cycle %d, which the program never set", e.High, e.Cycle)
		}
	}
	b.send("P255\n")
	b.waitPin("PD5", "constantly high (OCR0B at TOP)", 5*time.Second, func(p Pin) bool { return p.Wave == "static" && p.Level == 1 && p.Driven })
	b.send("P63\n")
	b.waitPin("PD5", "back to 64/256", 5*time.Second, func(p Pin) bool { return pulsing(p) && p.WaveHigh == 64*64 })
}

// ADC0 reads what the rig sets, in counts of AVcc/1023.
func TestADCRoundTrip(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	for _, mv := range []int{4000, 2500, 0, 1234, 5000} {
		b.check(b.SetADC(ctx, 0, mv))
		b.send("Q\n")
		want := fmt.Sprintf("adc=%d ", mv*1023/5000)
		if got := b.waitLine("adc=", 5*time.Second); !strings.HasPrefix(got, want) {
			t.Errorf("ADC0 at %d mV: the program read %q, want %q", mv, got, want)
		}
	}
}

// The e-stop: the closed loop holds PD2 low; pressed, the pull-up pulls it
// high — what the program reads and what the rig shows.
func TestEStopRoundTrip(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	for _, pressed := range []bool{true, false, true, false} {
		b.check(b.EStop(ctx, pressed))
		b.send("Q\n")
		want := "pd2=0"
		if pressed {
			want = "pd2=1"
		}
		if got := b.waitLine("adc=", 5*time.Second); !strings.HasSuffix(got, want) {
			t.Errorf("e-stop pressed %v: the program read %q, want %s", pressed, got, want)
		}
		if p := b.pin("PD2"); (p.Level == 1) != pressed || b.pins().EStop.Pressed != pressed {
			t.Errorf("e-stop pressed %v: PD2 reads %d", pressed, p.Level)
		}
	}
}

// 40 lines through the pty to the UART and back, at 115200 baud: every
// byte arrives, in order, and no faster than the line carries them. (Not
// many more: blink echoes each line with a polled UART, about 1% slower
// than the lines come in, and its 128-byte buffer overflows after some 80
// lines — on the rig as on the silicon.)
func TestUARTEcho(t *testing.T) {
	b := newBoard(t, Options{})
	var want []string
	var all strings.Builder
	for i := 0; i < 40; i++ {
		l := fmt.Sprintf("X%03d-%s", i, strings.Repeat(string(rune('a'+i%26)), 40))
		want = append(want, l)
		all.WriteString(l + "\n")
	}
	t0 := time.Now()
	b.send(all.String())
	for _, w := range want {
		if got := b.waitLine("X", 10*time.Second); got != w {
			t.Fatalf("echo %q, want %q (the line: %+v)", got, w, b.pins().Link)
		}
	}
	took := time.Since(t0)
	wire := time.Duration(all.Len()) * 10 * time.Second / 115200
	t.Logf("%d bytes each way in %v (the line alone takes %v one way)", all.Len(), took.Round(time.Millisecond), wire.Round(time.Millisecond))
	if took < wire {
		t.Errorf("%d bytes echoed in %v, faster than 115200 baud carries them one way (%v)", all.Len(), took, wire)
	}
	l := b.pins().Link
	if l.ToMCUBytes < uint64(all.Len()) || l.RXMaxUnread > 2 {
		t.Errorf("to the MCU %d bytes (want %d); at most %d unread in its UART (the silicon holds 2)", l.ToMCUBytes, all.Len(), l.RXMaxUnread)
	}
	if l.MCUFrameBits != 10 || l.MCUBaud < 115200*0.97 || l.MCUBaud > 115200*1.03 {
		t.Errorf("the program's UART: %.0f baud, %d-bit frames; want 115200±3%% 8N1", l.MCUBaud, l.MCUFrameBits)
	}
}

// The reset button restarts the program: pins go to their reset state
// (inputs), the history says so, and the program boots again. Held, it is
// a power cut: nothing runs until it is let go.
func TestReset(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	b.send("D1\n")
	b.waitPin("PD7", "high", 5*time.Second, func(p Pin) bool { return p.Level == 1 })
	since := b.pins().Cycle
	b.check(b.Reset(ctx, 0))
	b.waitLine("boot mcusr=", 5*time.Second)
	p := b.pins()
	if p.Resets != 1 {
		t.Errorf("resets %d, want 1", p.Resets)
	}
	h, err := b.History(ctx, since)
	b.check(err)
	if h.LastReset != "external" {
		t.Errorf("last reset %q, want external", h.LastReset)
	}
	var sawReset, pd7Low bool
	for _, e := range h.Events {
		sawReset = sawReset || e.Kind == "reset"
		pd7Low = pd7Low || (sawReset && e.Pin == "PD7" && e.Level == 0)
	}
	if !sawReset || !pd7Low {
		t.Errorf("history after the reset: reset event %v, PD7 low after it %v: %+v", sawReset, pd7Low, h.Events)
	}
	b.waitPin("PB1", "pulsing again", 5*time.Second, pulsing)

	// Held for 300 ms: the pins are inputs, no pulses, no boot line.
	t0 := time.Now()
	b.check(b.Reset(ctx, 300*time.Millisecond))
	time.Sleep(100 * time.Millisecond)
	p = b.pins()
	if pb1, _ := p.Pin("PB1"); !p.Held || pb1.Driven {
		t.Errorf("held in reset: held %v, PB1 driven %v", p.Held, pb1.Driven)
	}
	b.waitLine("boot mcusr=", 5*time.Second)
	if took := time.Since(t0); took < 300*time.Millisecond {
		t.Errorf("booted %v after a 300 ms power cut began", took)
	}
}

// The program hangs (interrupts off), or sleeps with interrupts off (simavr
// then stops the core): the hardware watchdog resets it after 250 ms, and
// MCUSR says so.
func TestHardwareWatchdog(t *testing.T) {
	for _, cmd := range []string{"H", "Z"} {
		t.Run(cmd, func(t *testing.T) {
			b := newBoard(t, Options{})
			t0 := time.Now()
			b.send(cmd + "\n")
			l := b.waitLine("boot mcusr=", 5*time.Second)
			if l != "boot mcusr=8" {
				t.Errorf("after the watchdog: %q, want boot mcusr=8 (WDRF)", l)
			}
			h, err := b.History(context.Background(), 0)
			b.check(err)
			if h.LastReset != "watchdog" {
				t.Errorf("last reset %q, want watchdog", h.LastReset)
			}
			t.Logf("%s: rebooted by the watchdog %v after the command", cmd, time.Since(t0).Round(time.Millisecond))
		})
	}
}

// The cable cut: what the host sends is lost (not delayed), the program
// hears nothing and its pins stay; restored, the line works again.
func TestCableCut(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	b.check(b.Unplug(ctx))
	b.send("D1\nX1\n")
	time.Sleep(300 * time.Millisecond)
	if p := b.pin("PD7"); p.Level != 0 {
		t.Errorf("PD7 went high with the cable cut")
	}
	b.mu.Lock()
	for _, l := range b.lines {
		if l == "X1" {
			t.Errorf("an echo came back through a cut cable")
		}
	}
	b.mu.Unlock()
	if l := b.pins().Link; l.Plugged || l.DroppedUnpluggedToMCU != 6 {
		t.Errorf("cut: plugged %v, %d bytes to the MCU dropped, want 6", l.Plugged, l.DroppedUnpluggedToMCU)
	}
	b.check(b.Replug(ctx))
	b.send("X2\n")
	b.waitLine("X2", 5*time.Second)
}

// Bits flipped on the line, each way.
func TestCorruption(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	b.check(b.Corrupt(ctx, ToHost, 1, 1, 0x01))
	b.send("Xabc\n")
	if got := b.waitLine("Y", 5*time.Second); got != "Yabc" {
		t.Errorf("to the host, 'X' with bit 0 flipped: %q, want Yabc", got)
	}
	b.check(b.Corrupt(ctx, ToMCU, 1, 1, 0x20))
	b.send("Xdef\nXghi\n") // the first 'X' reaches the program as 'x': no command
	if got := b.waitLine("X", 5*time.Second); got != "Xghi" {
		t.Errorf("after a corrupted command: %q, want Xghi", got)
	}
	if l := b.pins().Link; l.CorruptedToHost != 1 || l.CorruptedToMCU != 1 {
		t.Errorf("corrupted %d to the host, %d to the MCU; want 1 and 1", l.CorruptedToHost, l.CorruptedToMCU)
	}
}

// frame builds a protocol frame (docs/SERIAL.md).
func frame(seq, typ byte, payload ...byte) []byte {
	f := append([]byte{0xA5, byte(len(payload)), seq, typ}, payload...)
	crc := uint16(0xFFFF)
	for _, c := range f[1:] {
		crc ^= uint16(c) << 8
		for i := 0; i < 8; i++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return append(f, byte(crc), byte(crc>>8))
}

// echoRaw has the program send payload back, raw, and returns what came.
func (b *board) echoRaw(payload []byte) []byte {
	b.t.Helper()
	b.mu.Lock()
	start := len(b.raw)
	b.mu.Unlock()
	if _, err := b.port.Write(append([]byte{'Y', byte(len(payload))}, payload...)); err != nil {
		b.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		got := append([]byte(nil), b.raw[start:]...)
		b.mu.Unlock()
		if len(got) >= len(payload) {
			return got[:len(payload)]
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("raw echo: %x of %d bytes", got, len(payload))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Refuse rewrites a SET to the refused channel on its way to the MCU:
// value INT32_MAX, the CRC fixed, so that the firmware itself refuses it.
// The taps decode the SET the MCU received and the MCU's own frames.
func TestRefuseAndTaps(t *testing.T) {
	b := newBoard(t, Options{})
	ctx := context.Background()
	b.check(b.Refuse(ctx, 3))
	set3 := frame(7, 0x02, 3, 0xE8, 0x03, 0, 0) // SET channel 3 to 1000
	if got, want := b.echoRaw(set3), frame(7, 0x02, 3, 0xFF, 0xFF, 0xFF, 0x7F); !bytes.Equal(got, want) {
		t.Errorf("a SET to the refused channel reached the MCU as %x, want %x", got, want)
	}
	set2 := frame(8, 0x02, 2, 0xE8, 0x03, 0, 0)
	if got := b.echoRaw(set2); !bytes.Equal(got, set2) {
		t.Errorf("a SET to another channel reached the MCU as %x, want %x unchanged", got, set2)
	}
	b.check(b.Rewrite(ctx, 3, 555))
	if got, want := b.echoRaw(set3), frame(7, 0x02, 3, 0x2B, 0x02, 0, 0); !bytes.Equal(got, want) {
		t.Errorf("a SET rewritten to 555 reached the MCU as %x, want %x", got, want)
	}
	b.check(b.Refuse(ctx, -1))
	if got := b.echoRaw(set3); !bytes.Equal(got, set3) {
		t.Errorf("with no channel refused, a SET reached the MCU as %x", got)
	}
	// What the MCU sends: a HELLO_ACK (max_duration 321 ms) and a
	// TELEMETRY with fault RESET.
	b.echoRaw(frame(0, 0x81, 1, 5, 1, 4, 0x41, 0x01, 100, 0, 2, 0))
	b.echoRaw(frame(9, 0xA0, 2, 0, 0, 0))
	l := b.pins().Link
	if l.Refused != 2 || len(l.Sets) != 4 || l.Sets[0].A != 3 || l.Sets[0].Value != 0x7FFFFFFF || l.Sets[1].Value != 1000 || l.Sets[2].Value != 555 {
		t.Errorf("refused %d; SETs the MCU received: %+v", l.Refused, l.Sets)
	}
	if l.HelloAck == nil || l.HelloAck.MaxDurationMS != 321 || l.HelloAck.Channels != 5 || l.Faults != 2 {
		t.Errorf("the tap on the MCU's line: hello_ack %+v, faults %d; want max_duration 321, 5 channels, faults 2", l.HelloAck, l.Faults)
	}
}

// The measurement of a watchdog trip: the program's link watchdog (100 ms
// without a byte: PD7 low, OC1A detached) fires 100 ms after the end of the
// last byte the MCU received, to its 1 ms tick. The servo's pulses stop at
// the first pulse that does not come.
func TestWatchdogTripAtThePins(t *testing.T) {
	b := newBoard(t, Options{})
	b.send("D1\n")
	b.waitPin("PD7", "high", 5*time.Second, func(p Pin) bool { return p.Level == 1 })
	b.waitPin("PB1", "pulsing", 5*time.Second, pulsing)
	since := b.pins().Cycle
	b.send("W100\n")
	b.waitPin("PB1", "stopped", 5*time.Second, func(p Pin) bool { return p.Wave == "static" && p.Level == 0 })
	p := b.pins()
	last := p.Link.LastByteToMCUCycle
	var pd7, pb1 uint64
	for _, e := range b.history(since) {
		switch {
		case e.Pin == "PD7" && e.Level == 0 && pd7 == 0:
			pd7 = e.Cycle
		case e.Pin == "PB1" && e.Kind == "level" && e.Level == 0 && pb1 == 0:
			pb1 = e.Cycle
		}
	}
	if pd7 == 0 || pb1 == 0 || pd7 < last {
		t.Fatalf("PD7 low at %d, PB1 stopped at %d, the last byte at %d", pd7, pb1, last)
	}
	trip := p.Micros(pd7-last) / 1000
	t.Logf("watchdog 100 ms: PD7 low %.3f ms after the last byte; PB1's first missing pulse %.3f ms after it", trip, p.Micros(pb1-last)/1000)
	if trip < 98.9 || trip > 101 {
		t.Errorf("PD7 went low %.3f ms after the last byte, want 100 ms to the 1 ms tick", trip)
	}
	if stop := p.Micros(pb1-last) / 1000; stop < trip-20 || stop > trip+21 {
		t.Errorf("PB1's pulses stopped %.3f ms after the last byte, want within a 20 ms frame of the trip", stop)
	}
}

// Simulated time keeps up with the clock (the host's timeouts are wall
// time): over 2 s, within 100 ms, with no slip.
func TestRealTime(t *testing.T) {
	b := newBoard(t, Options{})
	p0, t0 := b.pins(), MonoNow()
	time.Sleep(2 * time.Second)
	p1, t1 := b.pins(), MonoNow()
	sim := time.Duration(float64(p1.Cycle-p0.Cycle) / float64(p1.Hz) * 1e9)
	wall := time.Duration(t1 - t0)
	t.Logf("%v simulated in %v of wall time; behind the clock by %v at most, more than 2 ms %d times; %v CPU",
		sim.Round(time.Millisecond), wall.Round(time.Millisecond), time.Duration(p1.LagMaxNS).Round(time.Microsecond), p1.Late2ms,
		time.Duration(p1.CPUNS-p0.CPUNS).Round(time.Millisecond))
	if d := sim - wall; d > 100*time.Millisecond || d < -100*time.Millisecond || p1.Slips != 0 {
		t.Errorf("%v simulated in %v; %d slips", sim, wall, p1.Slips)
	}
}

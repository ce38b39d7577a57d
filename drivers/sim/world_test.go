package sim

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestWorldPersistsAcrossReopen(t *testing.T) {
	path := worldPath(t)
	clk := newFakeClock()

	w := openWorld(t, path, WithClock(clk.Now))
	base := w.Servo("base", 0, 60)
	grip := w.Servo("gripper", 0, 0)
	pump := w.Digital("pump", 0)
	fan := w.Setpoint("fan", 0)
	kick := w.Pulse("kicker")
	batt := w.Supply("battery", 8.4)
	w.Servo("wrist", 12, 0) // made, never set: must still be in the file
	mustSet(t, base, 90)
	mustSet(t, grip, 30)
	if err := grip.Halt(); err != nil {
		t.Fatal(err)
	}
	mustSet(t, pump, 1)
	mustSet(t, fan, 0.75)
	mustSet(t, kick, 1)
	mustSet(t, kick, 1)
	if err := batt.SetVolts(7.2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond) // base at 30 of 90
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// While no process runs, the servo keeps going (its controller still
	// pulses), so a second later it is at 90, not 30.
	clk.Advance(time.Second)
	w2 := openWorld(t, path, WithClock(clk.Now))
	got := w2.Snapshot()
	want := map[string]DeviceState{
		"base":    {Kind: "servo", Commanded: 90, Position: 90, Known: true},
		"gripper": {Kind: "servo", Commanded: 30, Position: 30, Detached: true, Known: true},
		"pump":    {Kind: "digital", Commanded: 1, Position: 1, Known: true},
		"fan":     {Kind: "setpoint", Commanded: 0.75, Position: 0.75, Known: true},
		"kicker":  {Kind: "pulse", Commanded: 1, Kicks: 2, Known: true},
		"battery": {Kind: "supply", Commanded: 7.2, Position: 7.2, Known: true},
		"wrist":   {Kind: "servo", Commanded: 12, Position: 12, Known: true},
	}
	if len(got) != len(want) {
		t.Fatalf("snapshot has %d devices, want %d: %v", len(got), len(want), got)
	}
	for n, ws := range want {
		if got[n] != ws {
			t.Errorf("%s = %+v, want %+v", n, got[n], ws)
		}
	}
	if got["nothing"].Known {
		t.Error("a name the world does not have is Known")
	}

	// The existing state wins over what the new process passes in.
	b2 := w2.Servo("base", 0, 1)
	if v := readBack(t, b2); v != 90 {
		t.Fatalf("reopened base at %g, want 90 (initial 0 must not win)", v)
	}
	if w2.Pulse("kicker").Kicks() != 2 {
		t.Fatal("kick count lost")
	}
	// And the new process goes on from there, in the same slots.
	mustSet(t, b2, 45)
	w2.Close()
	w3 := openWorld(t, path, WithClock(clk.Now))
	if c := w3.Snapshot()["base"].Commanded; c != 45 || len(w3.Snapshot()) != len(want) {
		t.Fatalf("third open: base command %g, %d devices", c, len(w3.Snapshot()))
	}
}

func TestWorldFileKindClash(t *testing.T) {
	path := worldPath(t)
	w := openWorld(t, path)
	w.Servo("base", 0, 0)
	w.Close()
	w2 := openWorld(t, path)
	if err := w2.Setpoint("base", 0).Err(); err == nil || !strings.Contains(err.Error(), "as a servo") {
		t.Fatalf("a name the file has as a servo made as a setpoint: %v", err)
	}
}

func TestWorldFileIsLocked(t *testing.T) {
	path := worldPath(t)
	w := openWorld(t, path)
	if w2, err := OpenWorld(path); err == nil {
		w2.Close()
		if runtime.GOOS == "linux" {
			t.Fatal("a second OpenWorld of an open world file succeeded")
		}
		t.Skip("no file locking on " + runtime.GOOS) // see lock_other.go
	} else if !strings.Contains(err.Error(), "already open") {
		t.Fatalf("second open: %v", err)
	}
	w.Close()
	w2 := openWorld(t, path)
	w2.Close()
}

func TestCorruptWorldFile(t *testing.T) {
	// A valid file with one device, to damage in different ways.
	valid := func(t *testing.T) []byte {
		p := worldPath(t)
		w := openWorld(t, p)
		mustSet(t, w.Servo("base", 0, 0), 12)
		w.Close()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name   string
		damage func([]byte) []byte
		msg    string
	}{
		{"foreign", func([]byte) []byte { return []byte(strings.Repeat("hello, world\n", 20)) }, "bad magic"},
		{"short", func(b []byte) []byte { return b[:10] }, "shorter than the header"},
		{"header", func(b []byte) []byte { b[9] ^= 1; return b }, "header checksum"},
		{"slot byte", func(b []byte) []byte { b[slotSize+20] ^= 0x40; return b }, "slot 0: checksum mismatch"},
		{"torn tail", func(b []byte) []byte { return b[:len(b)-5] }, "not a whole number"},
		{"zero tail", func(b []byte) []byte { return append(b, make([]byte, slotSize)...) }, "slot 1: checksum mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := worldPath(t)
			bad := c.damage(valid(t))
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := OpenWorld(path)
			if err == nil {
				w.Close()
				t.Fatal("damaged file opened")
			}
			if !errors.Is(err, ErrBadWorldFile) || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q: want ErrBadWorldFile naming the file and %q", err, c.msg)
			}
			// A file that is not ours is never altered.
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, bad) {
				t.Fatal("OpenWorld changed a file it refused")
			}
		})
	}
}

func TestFormat(t *testing.T) {
	clk := newFakeClock()
	w := NewMemoryWorld(WithClock(clk.Now))
	mustSet(t, w.Servo("shoulder", 0, 10), 45)
	w.Servo("base", 0, 0)
	mustSet(t, w.Digital("pump", 0), 1)
	mustSet(t, w.Pulse("kicker"), 1)
	w.Supply("battery", 7.4)
	g := w.Servo("gripper", 20, 0)
	g.LoseLink(false)
	if err := g.Halt(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	want := strings.Join([]string{
		"base      servo    0.0°",
		"battery   supply   7.40 V",
		"gripper   servo    20.0°    detached, link lost",
		"kicker    pulse    1 kicks",
		"pump      digital  on",
		"shoulder  servo    10.0°    commanded 45.0°",
		"",
	}, "\n")
	if got := w.Format(); got != want {
		t.Fatalf("Format:\n%s\nwant:\n%s", got, want)
	}
}

// TestConcurrentUse runs Sets, reads, halts, fault changes and snapshots on
// shared and separate devices at once, for the race detector, and then
// checks that the file agrees with memory.
func TestConcurrentUse(t *testing.T) {
	path := worldPath(t)
	w := openWorld(t, path)
	shared := w.Servo("shared", 0, 1000)
	done := make(chan struct{})
	errs := make(chan error, 16)
	for g := range 8 {
		go func() {
			own := w.Setpoint("own"+string(rune('a'+g)), 0)
			ctx := context.Background()
			for i := range 300 {
				v := float64(g*1000 + i)
				if err := shared.Set(ctx, v); err != nil && !errors.Is(err, ErrInjected) {
					errs <- err
					return
				}
				if err := own.Set(ctx, v); err != nil {
					errs <- err
					return
				}
				if _, err := shared.ReadBack(ctx); err != nil {
					errs <- err
					return
				}
				if i%50 == 0 {
					shared.Halt()
					shared.FailOnNth(3)
				}
			}
			errs <- nil
		}()
	}
	go func() {
		defer close(done)
		for range 200 {
			_ = w.Snapshot()
			_ = w.Format()
			shared.FailWhen(func(v float64) bool { return v == 7 })
			shared.Clear()
		}
	}()
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	<-done
	mem := w.Snapshot()
	w.Close()
	w2 := openWorld(t, path)
	file := w2.Snapshot()
	for n, s := range mem {
		f := file[n]
		if f.Commanded != s.Commanded || f.Detached != s.Detached || f.Kind != s.Kind {
			t.Errorf("%s: file %+v, memory %+v", n, f, s)
		}
	}
	if len(file) != 9 {
		t.Errorf("file has %d devices, want 9", len(file))
	}
}

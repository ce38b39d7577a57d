package gpio

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fakeChip makes ROOT/pwmchipN with the files the kernel shows for a chip
// of npwm channels, none exported.
func fakeChip(t *testing.T, chip, npwm int) (root string) {
	t.Helper()
	root = t.TempDir()
	dir := filepath.Join(root, fmt.Sprintf("pwmchip%d", chip))
	mustWrite(t, filepath.Join(dir, "npwm"), strconv.Itoa(npwm)+"\n")
	mustWrite(t, filepath.Join(dir, "export"), "")
	mustWrite(t, filepath.Join(dir, "unexport"), "")
	return root
}

// fakeChannel makes pwmM as the kernel does on export: disabled, zero.
func fakeChannel(t *testing.T, chipDir string, ch int) {
	t.Helper()
	if err := makeChannel(chipDir, ch); err != nil {
		t.Fatal(err)
	}
}

// makeChannel creates the channel's files as the kernel shows them: each
// appears whole (written aside and renamed), polarity first and enable last.
func makeChannel(chipDir string, ch int) error {
	dir := filepath.Join(chipDir, fmt.Sprintf("pwm%d", ch))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range [...]struct{ name, v string }{
		{"polarity", "normal\n"}, {"period", "0\n"}, {"duty_cycle", "0\n"}, {"enable", "0\n"},
	} {
		tmp := filepath.Join(chipDir, ".new-"+f.name)
		if err := os.WriteFile(tmp, []byte(f.v), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, f.name)); err != nil {
			return err
		}
	}
	return nil
}

func mustWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// kernel plays the kernel and udev for a chip: a channel number written
// to export is consumed (the file reads empty again) and appears as pwmM
// after a delay, first as an empty directory (udev has not run) and then
// with its files.
type kernel struct {
	mu       sync.Mutex
	exported []int
}

func fakeKernel(t *testing.T, chipDir string, delay time.Duration) *kernel {
	k := &kernel{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	t.Cleanup(func() { close(done); wg.Wait() })
	go func() {
		defer wg.Done()
		export := filepath.Join(chipDir, "export")
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			b, _ := os.ReadFile(export)
			ch, err := strconv.Atoi(string(b))
			if err != nil {
				continue // nothing written, or caught mid-write
			}
			os.WriteFile(export, nil, 0o644)
			k.mu.Lock()
			k.exported = append(k.exported, ch)
			k.mu.Unlock()
			dir := filepath.Join(chipDir, fmt.Sprintf("pwm%d", ch))
			time.Sleep(delay)
			os.Mkdir(dir, 0o755)
			time.Sleep(delay)
			if err := makeChannel(chipDir, ch); err != nil {
				t.Error(err) // not Fatal: this is not the test's goroutine
				return
			}
		}
	}()
	return k
}

// exports returns the channels exported so far, in order.
func (k *kernel) exports() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return fmt.Sprint(k.exported)
}

// dumpTree lists every file under root with its exact content, sorted.
func dumpTree(t *testing.T, root string) string {
	t.Helper()
	var b bytes.Buffer
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		fmt.Fprintf(&b, "%s = %q\n", filepath.ToSlash(rel), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// golden compares the tree under root with testdata/name.golden, or
// rewrites the golden file with -update.
func golden(t *testing.T, root, name string) {
	t.Helper()
	got := dumpTree(t, root)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("sysfs tree differs from %s:\n--- got\n%s--- want\n%s", path, got, want)
	}
}

func TestSysfsServoExportSetDetach(t *testing.T) {
	root := fakeChip(t, 0, 2)
	k := fakeKernel(t, filepath.Join(root, "pwmchip0"), 10*time.Millisecond)
	s, err := OpenSysfsServo(SysfsConfig{Root: root, Chip: 0, Channel: 1}, sg90)
	if err != nil {
		t.Fatal(err)
	}
	if got := k.exports(); got != "[1]" {
		t.Fatalf("exported %s, want [1]", got)
	}
	golden(t, root, "exported")
	ctx := context.Background()
	if _, err := s.ReadBack(ctx); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack of a disabled channel = %v, want ErrNotDriven", err)
	}

	if err := s.Set(ctx, 45); err != nil {
		t.Fatal(err)
	}
	golden(t, root, "set45")
	if got, err := s.ReadBack(ctx); err != nil || got != 45 {
		t.Fatalf("ReadBack = %g, %v; want 45", got, err)
	}

	if err := s.Set(ctx, -90); err != nil {
		t.Fatal(err)
	}
	golden(t, root, "set-90")

	// Refused angles write nothing.
	before := dumpTree(t, root)
	for _, a := range []float64{90.5, -1000} {
		if err := s.Set(ctx, a); !errors.Is(err, ErrInvalidValue) {
			t.Fatalf("Set(%g) = %v, want ErrInvalidValue", a, err)
		}
	}
	if after := dumpTree(t, root); after != before {
		t.Fatalf("refused angles changed the tree:\n%s", after)
	}

	if err := s.Halt(); err != nil {
		t.Fatal(err)
	}
	golden(t, root, "detached")
	if _, err := s.ReadBack(ctx); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack after Halt = %v, want ErrNotDriven", err)
	}
}

func TestSysfsServoAlreadyExported(t *testing.T) {
	root := fakeChip(t, 2, 4)
	fakeChannel(t, filepath.Join(root, "pwmchip2"), 3)
	// No fake kernel: writing export would leave the channel missing and
	// time out.
	s, err := OpenSysfsServo(SysfsConfig{Root: root, Chip: 2, Channel: 3, ExportTimeout: 50 * time.Millisecond}, sg90)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Set(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	golden(t, root, "preexported-set0")
}

// ReadBack decodes the kernel's files: a pulse written by someone else (or
// left by a previous process) shows as its angle.
func TestSysfsServoReadBackDecodesDutyCycle(t *testing.T) {
	root := fakeChip(t, 0, 1)
	chip := filepath.Join(root, "pwmchip0")
	fakeChannel(t, chip, 0)
	s, err := OpenSysfsServo(SysfsConfig{Root: root}, sg90)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(chip, "pwm0", "period"), "20000000\n")
	mustWrite(t, filepath.Join(chip, "pwm0", "duty_cycle"), "1000000\n")
	mustWrite(t, filepath.Join(chip, "pwm0", "enable"), "1\n")
	if got, err := s.ReadBack(context.Background()); err != nil || got != -45 {
		t.Fatalf("ReadBack of a 1 ms pulse = %g, %v; want -45", got, err)
	}
	// The same files after a Set of another angle: the file wins over the
	// remembered angle once it no longer matches.
	if err := s.Set(context.Background(), 30); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(chip, "pwm0", "duty_cycle"), "2500000\n")
	if got, err := s.ReadBack(context.Background()); err != nil || got != 90 {
		t.Fatalf("ReadBack of a 2.5 ms pulse = %g, %v; want 90", got, err)
	}
	mustWrite(t, filepath.Join(chip, "pwm0", "period"), "10000000\n")
	if _, err := s.ReadBack(context.Background()); !errors.Is(err, ErrBadSysfs) {
		t.Fatalf("ReadBack with a foreign period = %v, want ErrBadSysfs", err)
	}
}

func TestSysfsServoBadFilesWriteNothing(t *testing.T) {
	root := fakeChip(t, 0, 1)
	chip := filepath.Join(root, "pwmchip0")
	fakeChannel(t, chip, 0)
	s, err := OpenSysfsServo(SysfsConfig{Root: root}, sg90)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, content string }{
		{"enable", "2\n"},
		{"period", "-1\n"},
		{"duty_cycle", "twelve\n"},
		{"period", ""},
	} {
		fakeChannel(t, chip, 0)
		mustWrite(t, filepath.Join(chip, "pwm0", tc.file), tc.content)
		before := dumpTree(t, root)
		if err := s.Set(context.Background(), 0); !errors.Is(err, ErrBadSysfs) || !errors.Is(err, actuators.ErrNotApplied) {
			t.Errorf("%s=%q: Set = %v, want ErrBadSysfs, not applied", tc.file, tc.content, err)
		}
		if _, err := s.ReadBack(context.Background()); !errors.Is(err, ErrBadSysfs) {
			t.Errorf("%s=%q: ReadBack = %v, want ErrBadSysfs", tc.file, tc.content, err)
		}
		if after := dumpTree(t, root); after != before {
			t.Errorf("%s=%q: Set changed the tree", tc.file, tc.content)
		}
	}
}

// TestSysfsSetPulseDoubt: a SetPulse that fails before writing the
// channel promises nothing changed (actuators.ErrNotApplied) and leaves the
// tree as it was; an export that times out makes no such promise.
func TestSysfsSetPulseDoubt(t *testing.T) {
	const ms = time.Millisecond
	done, cancel := context.WithCancel(context.Background())
	cancel()
	unexport := func(t *testing.T, chip string) {
		if err := os.RemoveAll(filepath.Join(chip, "pwm0")); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name       string
		prep       func(t *testing.T, chip string)
		ctx        context.Context
		width      time.Duration
		want       error
		notApplied bool
	}{
		{"context done", nil, done, ms, context.Canceled, true},
		{"width over the period", nil, nil, 25 * ms, ErrInvalidValue, true},
		{"export refused", func(t *testing.T, chip string) {
			unexport(t, chip)
			if err := os.Remove(filepath.Join(chip, "export")); err != nil {
				t.Fatal(err)
			}
		}, nil, ms, fs.ErrNotExist, true},
		{"export times out", unexport, nil, ms, ErrExportTimeout, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeChip(t, 0, 1)
			chip := filepath.Join(root, "pwmchip0")
			fakeChannel(t, chip, 0)
			p, err := OpenSysfsPWM(SysfsConfig{Root: root, ExportTimeout: 30 * ms})
			if err != nil {
				t.Fatal(err)
			}
			if tt.prep != nil {
				tt.prep(t, chip)
			}
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			before := dumpTree(t, root)
			err = p.SetPulse(ctx, tt.width, 20*ms)
			if !errors.Is(err, tt.want) {
				t.Fatalf("SetPulse = %v, want %v", err, tt.want)
			}
			if got := errors.Is(err, actuators.ErrNotApplied); got != tt.notApplied {
				t.Errorf("SetPulse = %v: wraps ErrNotApplied %v, want %v", err, got, tt.notApplied)
			}
			if after := dumpTree(t, root); tt.notApplied && after != before {
				t.Errorf("a SetPulse not applied changed the tree:\n%s\nto\n%s", before, after)
			}
		})
	}
}

func TestSysfsOpenErrors(t *testing.T) {
	root := fakeChip(t, 0, 2)
	for _, tc := range []struct {
		name string
		cfg  SysfsConfig
		want error
	}{
		{"no chip", SysfsConfig{Root: root, Chip: 1}, ErrNoPWMChip},
		{"no channel", SysfsConfig{Root: root, Channel: 2}, ErrNoPWMChip},
		{"negative", SysfsConfig{Root: root, Channel: -1}, ErrConfig},
		{"no root", SysfsConfig{Root: filepath.Join(root, "missing")}, ErrNoPWMChip},
		{"never appears", SysfsConfig{Root: root, Channel: 1, ExportTimeout: 30 * time.Millisecond}, ErrExportTimeout},
	} {
		if _, err := OpenSysfsPWM(tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("%s: OpenSysfsPWM = %v, want %v", tc.name, err, tc.want)
		}
	}
	// Only the channel that was asked for and exists was exported.
	golden(t, root, "export-timeout")
	if _, err := OpenSysfsServo(SysfsConfig{Root: root}, ServoConfig{}); !errors.Is(err, ErrConfig) {
		t.Errorf("OpenSysfsServo with no calibration = %v, want ErrConfig", err)
	}
}

// A channel that was unexported behind the servo's back is exported again
// on the next Set; Detach of an unexported channel has nothing to stop.
func TestSysfsReexport(t *testing.T) {
	root := fakeChip(t, 0, 1)
	chip := filepath.Join(root, "pwmchip0")
	k := fakeKernel(t, chip, time.Millisecond)
	s, err := OpenSysfsServo(SysfsConfig{Root: root}, sg90)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(chip, "pwm0")); err != nil {
		t.Fatal(err)
	}
	if err := s.Halt(); err != nil {
		t.Fatalf("Halt of an unexported channel: %v", err)
	}
	if _, err := s.ReadBack(context.Background()); !errors.Is(err, ErrNotDriven) {
		t.Fatalf("ReadBack of an unexported channel = %v", err)
	}
	if err := s.Set(context.Background(), 90); err != nil {
		t.Fatal(err)
	}
	if got := k.exports(); got != "[0 0]" {
		t.Fatalf("exported %s, want [0 0]", got)
	}
	golden(t, root, "reexported-set90")
}

// The kernel refuses a duty cycle longer than the period at every write, so
// the order of the writes depends on where the channel is coming from.
func TestSysfsWriteOrder(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name          string
		duty, period  time.Duration
		on            bool
		width, newPer time.Duration
		want          string
	}{
		{"fresh", 0, 0, false, 1500 * us, 20 * ms, "period=20000000 duty_cycle=1500000 enable=1"},
		{"same period", 1 * ms, 20 * ms, true, 2 * ms, 20 * ms, "duty_cycle=2000000"},
		{"same period off", 1 * ms, 20 * ms, false, 2 * ms, 20 * ms, "duty_cycle=2000000 enable=1"},
		{"longer period", 1 * ms, 10 * ms, true, 2 * ms, 20 * ms, "period=20000000 duty_cycle=2000000"},
		{"shorter, duty fits", 1 * ms, 40 * ms, true, 2 * ms, 20 * ms, "period=20000000 duty_cycle=2000000"},
		{"shorter, duty would not", 30 * ms, 40 * ms, true, 2 * ms, 20 * ms, "duty_cycle=2000000 period=20000000"},
	} {
		var got string
		for i, s := range planWrites(tc.duty, tc.period, tc.on, tc.width, tc.newPer) {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s=%d", s.file, s.v)
		}
		if got != tc.want {
			t.Errorf("%s: writes %q, want %q", tc.name, got, tc.want)
		}
	}
}

package gpio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
)

// DefaultSysfsRoot is where the kernel's PWM class lives.
const DefaultSysfsRoot = "/sys/class/pwm"

// DefaultExportTimeout bounds the wait for an exported channel to appear
// and become writable (udev changes its group after the kernel creates it).
const DefaultExportTimeout = 2 * time.Second

// exportPoll is how often the export wait looks again.
const exportPoll = 5 * time.Millisecond

// SysfsConfig names a kernel PWM channel: Root/pwmchipChip/pwmChannel.
type SysfsConfig struct {
	// Root is the PWM class directory; "" means DefaultSysfsRoot. Tests
	// point it at a fake tree.
	Root string
	// Chip and Channel select pwmchipN/pwmM. On a Raspberry Pi 5 with the
	// pwm-2chan overlay, GPIO12/13/18/19 are channels of one chip.
	Chip, Channel int
	// ExportTimeout bounds the wait after exporting; 0 means
	// DefaultExportTimeout.
	ExportTimeout time.Duration
}

func (c SysfsConfig) name() string {
	return fmt.Sprintf("pwmchip%d/pwm%d", c.Chip, c.Channel)
}

// SysfsPWM is a PulseOutput on a kernel PWM channel, written through
// /sys/class/pwm in nanoseconds. It implements PulseReader from the same
// files.
type SysfsPWM struct {
	cfg     SysfsConfig
	chipDir string
	dir     string // chipDir/pwmM
}

// OpenSysfsPWM checks that the chip and channel exist and exports the
// channel if it is not exported yet, waiting (bounded by ExportTimeout) for
// the kernel and udev to make its files writable. It does not enable the
// channel.
func OpenSysfsPWM(cfg SysfsConfig) (*SysfsPWM, error) {
	if cfg.Root == "" {
		cfg.Root = DefaultSysfsRoot
	}
	if cfg.ExportTimeout == 0 {
		cfg.ExportTimeout = DefaultExportTimeout
	}
	if cfg.Chip < 0 || cfg.Channel < 0 || cfg.ExportTimeout < 0 {
		return nil, fmt.Errorf("gpio: pwm %s: %w: negative chip, channel or timeout", cfg.name(), ErrConfig)
	}
	p := &SysfsPWM{cfg: cfg, chipDir: filepath.Join(cfg.Root, fmt.Sprintf("pwmchip%d", cfg.Chip))}
	p.dir = filepath.Join(p.chipDir, fmt.Sprintf("pwm%d", cfg.Channel))
	if st, err := os.Stat(p.chipDir); err != nil || !st.IsDir() {
		if err == nil {
			err = errors.New("not a directory")
		}
		return nil, fmt.Errorf("gpio: %s: %w: %w", p, ErrNoPWMChip, err)
	}
	if b, err := os.ReadFile(filepath.Join(p.chipDir, "npwm")); err == nil {
		n, err := parseCount(b)
		if err != nil {
			return nil, fmt.Errorf("gpio: %s: npwm: %w", p, err)
		}
		if int64(cfg.Channel) >= n {
			return nil, fmt.Errorf("gpio: %s: %w: the chip has %d channels", p, ErrNoPWMChip, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ExportTimeout)
	defer cancel()
	if err := p.export(ctx); err != nil {
		return nil, fmt.Errorf("gpio: %w", err)
	}
	return p, nil
}

// String names the channel.
func (p *SysfsPWM) String() string { return "pwm " + p.dir }

// writable reports whether the channel's files can be opened for writing,
// and if not, why.
func (p *SysfsPWM) writable() error {
	for _, f := range [...]string{"period", "duty_cycle", "enable"} {
		fd, err := os.OpenFile(filepath.Join(p.dir, f), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		fd.Close()
	}
	return nil
}

// export makes the channel's files writable, exporting the channel if its
// directory does not exist, and waits for them, bounded by ctx.
func (p *SysfsPWM) export(ctx context.Context) error {
	err := p.writable()
	if err == nil {
		return nil
	}
	if _, serr := os.Stat(p.dir); errors.Is(serr, fs.ErrNotExist) {
		_, werr := writeAttr(filepath.Join(p.chipDir, "export"), int64(p.cfg.Channel))
		// EBUSY: exported meanwhile, by another process or an earlier
		// attempt whose udev change is still running.
		if werr != nil && !errors.Is(werr, syscall.EBUSY) {
			return fmt.Errorf("%s: export: %w", p, werr)
		}
	}
	t := time.NewTicker(exportPoll)
	defer t.Stop()
	for {
		if err = p.writable(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w: %w (last: %w)", p, ErrExportTimeout, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// writeAttr writes one decimal value to a sysfs attribute. attempted
// reports whether the write itself was tried: a failure before it (the
// file cannot be opened) changed nothing.
func writeAttr(path string, v int64) (attempted bool, err error) {
	// No O_CREAT: a missing attribute is an error, as it is on sysfs.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return false, err
	}
	_, err = f.Write([]byte(strconv.FormatInt(v, 10)))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return true, err
}

// maxAttr bounds what readAttr reads: a sysfs attribute is a page at most,
// these are a few bytes.
const maxAttr = 64

func readAttr(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAttr+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAttr {
		return nil, fmt.Errorf("%w: %s: longer than %d bytes", ErrBadSysfs, path, maxAttr)
	}
	return b, nil
}

// state reads the channel's period, duty cycle and enable files.
func (p *SysfsPWM) state() (width, period time.Duration, on bool, err error) {
	var raw [3][]byte
	for i, f := range [...]string{"period", "duty_cycle", "enable"} {
		if raw[i], err = readAttr(filepath.Join(p.dir, f)); err != nil {
			return 0, 0, false, fmt.Errorf("%s: read %s: %w", p, f, err)
		}
	}
	width, period, on, err = decodePulse(raw[0], raw[1], raw[2])
	if err != nil {
		return 0, 0, false, fmt.Errorf("%s: %w", p, err)
	}
	return width, period, on, nil
}

// Pulse implements PulseReader: it decodes the kernel's view of the channel.
// A channel that is not exported is off.
func (p *SysfsPWM) Pulse() (width, period time.Duration, on bool, err error) {
	if _, err := os.Stat(p.dir); errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false, nil
	}
	return p.state()
}

// SetPulse writes period, duty_cycle and enable, in an order the kernel
// accepts (see planWrites). A channel unexported behind our back is
// exported again. A failure before the first write changed nothing (it
// wraps actuators.ErrNotApplied); a failed write is in doubt (it wraps
// actuators.ErrLinkLost), and so is a wait for the export that ran out of
// time (ErrExportTimeout), which errs on the safe side.
func (p *SysfsPWM) SetPulse(ctx context.Context, width, period time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w: %w", p, actuators.ErrNotApplied, err)
	}
	if width < 0 || period <= 0 || width > period {
		return fmt.Errorf("%s: %w: pulse %s in period %s (%w)", p, ErrInvalidValue, width, period, actuators.ErrNotApplied)
	}
	ectx, cancel := context.WithTimeout(ctx, p.cfg.ExportTimeout)
	err := p.export(ectx)
	cancel()
	if errors.Is(err, ErrExportTimeout) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (%w)", err, actuators.ErrNotApplied)
	}
	curDuty, curPeriod, on, err := p.state()
	if err != nil {
		return fmt.Errorf("%w (%w)", err, actuators.ErrNotApplied)
	}
	steps := planWrites(curDuty, curPeriod, on, width, period)
	for i, s := range steps {
		attempted, err := writeAttr(filepath.Join(p.dir, s.file), s.v)
		if err == nil {
			continue
		}
		if i == 0 && !attempted {
			return fmt.Errorf("%s: write %s=%d: %w (%w)", p, s.file, s.v, err, actuators.ErrNotApplied)
		}
		return fmt.Errorf("%s: write %s=%d: %w (%w)", p, s.file, s.v, actuators.ErrLinkLost, err)
	}
	return nil
}

// attrWrite is one write of a sysfs attribute.
type attrWrite struct {
	file string
	v    int64
}

// planWrites orders the writes that take a channel from (curDuty,
// curPeriod, on) to width every period, enabled. The kernel refuses a duty
// cycle longer than the period at every step, so the period goes first
// unless the current duty cycle would exceed the new period.
func planWrites(curDuty, curPeriod time.Duration, on bool, width, period time.Duration) []attrWrite {
	var w []attrWrite
	switch {
	case curPeriod == period:
		w = append(w, attrWrite{"duty_cycle", int64(width)})
	case curDuty > period:
		w = append(w, attrWrite{"duty_cycle", int64(width)}, attrWrite{"period", int64(period)})
	default:
		w = append(w, attrWrite{"period", int64(period)}, attrWrite{"duty_cycle", int64(width)})
	}
	if !on {
		w = append(w, attrWrite{"enable", 1})
	}
	return w
}

// Detach writes enable=0. A channel that is not exported produces no
// pulses, so there is nothing to do.
func (p *SysfsPWM) Detach() error {
	if _, err := os.Stat(p.dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := writeAttr(filepath.Join(p.dir, "enable"), 0); err != nil {
		return fmt.Errorf("%s: write enable=0: %w", p, err)
	}
	return nil
}

// decodePulse decodes the contents of the period, duty_cycle and enable
// files. The kernel writes each as a decimal number and a newline, and
// never a duty cycle longer than the period.
func decodePulse(periodB, dutyB, enableB []byte) (width, period time.Duration, on bool, err error) {
	if period, err = parseNanos(periodB); err != nil {
		return 0, 0, false, fmt.Errorf("period: %w", err)
	}
	if width, err = parseNanos(dutyB); err != nil {
		return 0, 0, false, fmt.Errorf("duty_cycle: %w", err)
	}
	switch string(trimNewline(enableB)) {
	case "0":
	case "1":
		on = true
	default:
		return 0, 0, false, fmt.Errorf("%w: enable %q is not 0 or 1", ErrBadSysfs, enableB)
	}
	if width > period {
		return 0, 0, false, fmt.Errorf("%w: duty_cycle %d ns longer than period %d ns", ErrBadSysfs, width, period)
	}
	return width, period, on, nil
}

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

// parseCount parses a non-negative decimal count, with an optional trailing
// newline: digits only, no sign, no spaces.
func parseCount(b []byte) (int64, error) {
	s := trimNewline(b)
	if len(s) == 0 || len(s) > 19 {
		return 0, fmt.Errorf("%w: %q is not a decimal number", ErrBadSysfs, b)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %q is not a decimal number", ErrBadSysfs, b)
		}
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	if err != nil || v > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %q is out of range", ErrBadSysfs, b)
	}
	return int64(v), nil
}

// parseNanos parses a sysfs PWM time in nanoseconds.
func parseNanos(b []byte) (time.Duration, error) {
	v, err := parseCount(b)
	return time.Duration(v), err
}

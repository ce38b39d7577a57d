package sim

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// ErrWorldClosed is returned by every device of a World after World.Close.
var ErrWorldClosed = errors.New("sim: world closed")

// World is the simulated physical world shared by the simulated devices of a
// process. It is safe for concurrent use.
type World struct {
	f     *os.File // nil for a memory-only world
	clock func() time.Time

	closed atomic.Bool
	// done is closed by Close so that Sets hanging on an injected fault end
	// with the world instead of leaking their goroutines.
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex // guards byName and recs
	byName map[string]*record
	recs   []*record // in slot order
}

// record is one device in the world. Its state has its own lock, so Sets on
// different devices do not wait for each other's file writes.
type record struct {
	w    *World
	name string
	off  int64 // offset of the device's slot in the world file

	mu   sync.Mutex // guards everything below
	st   state
	next state // scratch for update
	// buf is reused for every write of this slot so that a Set allocates
	// nothing.
	buf [slotSize]byte
	// handle is the device value handed out for this record in this process
	// (nil until one is made), so that asking twice for a device gives the
	// same one, with the same faults.
	handle any
	faults *Faults
	// A supply's script is a test input of this process, not physical state,
	// so it is kept here and not in the world file.
	script      []ScriptPoint
	scriptStart int64
}

// Option configures a World.
type Option func(*World)

// WithClock makes the World read time from now instead of time.Now. Servo
// motion and supply scripts follow this clock, so tests can move time by
// hand. The clock must not call into the World.
func WithClock(now func() time.Time) Option {
	return func(w *World) {
		if now != nil {
			w.clock = now
		}
	}
}

// NewMemoryWorld returns a World kept in memory only.
func NewMemoryWorld(opts ...Option) *World {
	w := &World{
		clock:  time.Now,
		done:   make(chan struct{}),
		byName: make(map[string]*record),
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

// OpenWorld opens the world file at path, creating it if it does not exist,
// and loads the devices a previous process left in it. An empty path gives a
// memory-only World. A file that is not a valid world file gives an error
// wrapping ErrBadWorldFile; it is never altered.
//
// The file must not be open in another process at the same time (see the
// package documentation); opening it again after that process has exited or
// been killed is what it is for.
func OpenWorld(path string, opts ...Option) (*World, error) {
	w := NewMemoryWorld(opts...)
	if path == "" {
		return w, nil
	}
	// 0600: the daemon's data is private to its user, like the journal.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sim: open world: %w", err)
	}
	if err := w.load(f, path); err != nil {
		f.Close()
		return nil, err
	}
	w.f = f
	return w, nil
}

func (w *World) load(f *os.File, path string) error {
	if err := lockFile(f); err != nil {
		return fmt.Errorf("sim: world file %s is already open in another World (one process at a time): %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("sim: world file %s: %w", path, err)
	}
	if fi.Size() == 0 {
		var hdr [slotSize]byte
		encodeHeader(&hdr)
		if _, err := f.WriteAt(hdr[:], 0); err != nil {
			return fmt.Errorf("sim: world file %s: write header: %w", path, err)
		}
		return nil
	}
	// Read the header first so that a large foreign file is refused without
	// being read.
	var hdr [slotSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("sim: world file %s: %w", path, err)
	}
	if err := checkHeader(hdr[:min(int64(slotSize), fi.Size())]); err != nil {
		return fmt.Errorf("sim: world file %s: %w", path, err)
	}
	if fi.Size() > (maxSlots+1)*slotSize {
		return fmt.Errorf("sim: world file %s: %w: %d bytes is more than %d devices", path, ErrBadWorldFile, fi.Size(), maxSlots)
	}
	data := make([]byte, fi.Size())
	if _, err := f.ReadAt(data, 0); err != nil {
		return fmt.Errorf("sim: world file %s: %w", path, err)
	}
	names, states, err := decodeFile(data)
	if err != nil {
		return fmt.Errorf("sim: world file %s: %w", path, err)
	}
	for i, name := range names {
		r := &record{w: w, name: name, off: int64(i+1) * slotSize, st: states[i]}
		w.byName[name] = r
		w.recs = append(w.recs, r)
	}
	return nil
}

// Close ends the World: it closes the world file and releases its lock, makes
// every later Set, ReadBack and Halt of its devices fail with ErrWorldClosed,
// and ends Sets hanging on an injected fault. Closing twice is harmless.
func (w *World) Close() error {
	w.closeOnce.Do(func() {
		w.closed.Store(true)
		close(w.done)
		if w.f != nil {
			// Taking every record's lock waits out writes in flight, so
			// none fails merely because it raced with Close.
			w.mu.Lock()
			for _, r := range w.recs {
				r.mu.Lock()
			}
			w.closeErr = w.f.Close()
			for _, r := range w.recs {
				r.mu.Unlock()
			}
			w.mu.Unlock()
		}
	})
	return w.closeErr
}

func (w *World) now() int64 { return w.clock().UnixNano() }

// DeviceState is the state of one device as the world sees it.
type DeviceState struct {
	// Kind is "servo", "digital", "setpoint", "pulse" or "supply".
	Kind string
	// Commanded is the last value set (a supply's: the last SetVolts).
	Commanded float64
	// Position is where the device physically is now: a servo's angle on its
	// way to Commanded, 0 for a halted digital output, a supply's voltage.
	Position float64
	// Detached is true after Halt until the next Set.
	Detached bool
	// Kicks counts a pulse output's kicks.
	Kicks uint64
	// LinkLost reports a lost link injected with LoseLink in this process.
	LinkLost bool
	// Known is true for every device the world has, so that a lookup of a
	// name it does not have is told apart from a device at zero.
	Known bool
}

// Snapshot returns the state of every device in the world, including those a
// previous process left in the world file and this one has not made again.
func (w *World) Snapshot() map[string]DeviceState {
	w.mu.Lock()
	recs := slices.Clone(w.recs)
	w.mu.Unlock()
	m := make(map[string]DeviceState, len(recs))
	for _, r := range recs {
		m[r.name] = r.snapshot()
	}
	return m
}

// Format returns the state of every device as a table sorted by name, one
// device per line, e.g. "base  servo  0.0°". It is how the demo shows what a
// world file says is left standing.
func (w *World) Format() string {
	snap := w.Snapshot()
	names := make([]string, 0, len(snap))
	for n := range snap {
		names = append(names, n)
	}
	slices.Sort(names)
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 4, 2, ' ', 0)
	for _, n := range names {
		d := snap[n]
		var notes []string
		now := formatValue(d.Kind, d.Position)
		switch d.Kind {
		case "pulse":
			now = fmt.Sprintf("%d kicks", d.Kicks)
		case "servo", "setpoint":
			if d.Commanded != d.Position {
				notes = append(notes, "commanded "+formatValue(d.Kind, d.Commanded))
			}
		case "supply":
			if d.Commanded != d.Position {
				notes = append(notes, "set "+formatValue(d.Kind, d.Commanded))
			}
		}
		if d.Detached {
			notes = append(notes, "detached")
		}
		if d.LinkLost {
			notes = append(notes, "link lost")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n, d.Kind, now, strings.Join(notes, ", "))
	}
	tw.Flush()
	// tabwriter pads the empty last column; trailing blanks only get in the
	// way of golden comparisons.
	lines := strings.Split(sb.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func formatValue(k string, v float64) string {
	switch k {
	case "servo":
		return fmt.Sprintf("%.1f°", v)
	case "digital":
		if v == 0 {
			return "off"
		}
		return "on"
	case "supply":
		return fmt.Sprintf("%.2f V", v)
	}
	return fmt.Sprintf("%g", v)
}

// attach binds the new device h, with its faults f and its part d, to the
// record named name, making the record with initial state init if the world
// has none, and returns the device to use: h, or the device of that name and
// kind this process already made (h is then left alone). A problem (bad
// name, kind clash, closed world, write failure) is left in d.err, so that
// the constructors need no error result and the mistake surfaces on the
// first Set, ReadBack or Halt.
func attach[P any](w *World, h P, f *Faults, d *device, name string, k kind, init state) P {
	d.name, d.kind, d.faults = name, k, f
	f.done = w.done
	if d.err != nil {
		return h
	}
	if err := checkName(name); err != nil {
		d.err = fmt.Errorf("sim: %s: %w", k, err)
		return h
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed.Load() {
		d.err = fmt.Errorf("sim: %s %s: %w", k, name, ErrWorldClosed)
		return h
	}
	r := w.byName[name]
	if r == nil {
		r = &record{w: w, name: name, off: int64(len(w.recs)+1) * slotSize, st: init}
		r.st.kind = k
		r.st.since = w.now()
		if err := r.write(&r.st); err != nil {
			d.err = fmt.Errorf("sim: %s %s: %w", k, name, err)
			return h
		}
		w.byName[name] = r
		w.recs = append(w.recs, r)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.st.kind != k {
		d.err = fmt.Errorf("sim: %s %s: the world already has %s as a %s", k, name, name, r.st.kind)
		return h
	}
	if r.handle != nil {
		return r.handle.(P)
	}
	r.handle, r.faults = h, f
	d.rec = r
	return h
}

// write stores st in the record's slot of the world file, if there is one.
// The caller holds r.mu, or is the only one to know r.
func (r *record) write(st *state) error {
	if r.w.f == nil {
		return nil
	}
	encodeSlot(&r.buf, r.name, st)
	if _, err := r.w.f.WriteAt(r.buf[:], r.off); err != nil {
		if r.w.closed.Load() {
			return ErrWorldClosed
		}
		return fmt.Errorf("world file: %w", err)
	}
	return nil
}

// update applies change to a copy of the record's state, stores the copy in
// the world file, and only then makes it the state: a failed write leaves
// the world as it was, and a change is never visible before it is durable
// against a kill.
func (r *record) update(change func(st *state, now int64)) error {
	if r.w.closed.Load() {
		return ErrWorldClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The change works on r.next, not on a local copy: a local whose address
	// goes to an unknown function escapes, and would cost every Set an
	// allocation.
	r.next = r.st
	change(&r.next, r.w.now())
	return r.commitLocked(&r.next)
}

// commitLocked writes st to the world file and then makes it the state. The
// caller holds r.mu.
func (r *record) commitLocked(st *state) error {
	if err := r.write(st); err != nil {
		return err
	}
	r.st = *st
	return nil
}

// read returns the record's state and a reading of the clock taken under its
// lock, so the reading is not older than the state's own time.
func (r *record) read() (state, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st, r.w.now()
}

func (r *record) snapshot() DeviceState {
	r.mu.Lock()
	st, now := r.st, r.w.now()
	pos := st.position(now)
	if st.kind == kindSupply {
		pos = r.volts(now)
	}
	f := r.faults
	r.mu.Unlock()
	ds := DeviceState{
		Kind:      st.kind.String(),
		Commanded: st.commanded,
		Position:  pos,
		Detached:  st.detached,
		Kicks:     st.kicks,
		Known:     true,
	}
	if f != nil {
		ds.LinkLost, _ = f.link()
	}
	return ds
}

// position is where the device physically is at time now.
func (st *state) position(now int64) float64 {
	if st.kind != kindServo {
		return st.from
	}
	// A detached servo gets no pulses and stays where it was; a servo with
	// no slew limit is wherever it was last told to be.
	if st.detached {
		return st.from
	}
	if st.slew == 0 || math.IsInf(st.slew, 1) {
		return st.commanded
	}
	elapsed := now - st.since
	if elapsed <= 0 {
		return st.from
	}
	travel := st.slew * float64(elapsed) / float64(time.Second)
	d := st.commanded - st.from
	if math.Abs(d) <= travel {
		return st.commanded
	}
	return st.from + math.Copysign(travel, d)
}

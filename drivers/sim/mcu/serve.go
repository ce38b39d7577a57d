package mcu

import (
	"context"
	"fmt"
	"io"
	"time"

	bugst "go.bug.st/serial"

	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
)

// server is one connection being served.
type server struct {
	dec      serial.Decoder // guarded by MCU.mu, as is lastByte
	lastByte time.Time
	out      chan pending
}

type pending struct {
	b   []byte
	due time.Time
}

// What a queued frame is, for the faults that apply to it.
type kind int

const (
	raw       kind = iota // garbage: no faults apply
	answer                // an answer to a request
	telemetry             // unsolicited telemetry
)

// receiveLocked takes bytes that arrived at now and returns the answers.
func (s *server) receiveLocked(m *MCU, p []byte, now time.Time) [][]byte {
	s.lastByte = now
	return m.receiveLocked(&s.dec, p, now)
}

// gapLocked gives up a partial frame once the line has been quiet for
// FrameGap (docs/SERIAL.md, section 2) and returns the answers to the
// complete frames found behind it.
func (s *server) gapLocked(m *MCU, now time.Time) [][]byte {
	if !s.dec.Pending() || now.Sub(s.lastByte) < m.opts.FrameGap {
		return nil
	}
	s.dec.Abandon()
	s.lastByte = now
	return m.receiveLocked(&s.dec, nil, now)
}

// sendLocked queues a frame (or garbage) for the writer, applying the
// reply faults that fit its kind.
func (s *server) sendLocked(m *MCU, b []byte, k kind) {
	if k != raw && m.unplugged {
		m.stats.DroppedOut++
		return
	}
	if k == answer {
		if m.dropOut > 0 {
			m.dropOut--
			m.stats.DroppedOut++
			return
		}
		if m.corruptOut > 0 {
			m.corruptOut--
			m.stats.Corrupted++
			b = append([]byte{}, b...)
			b[len(b)-1] ^= 0xFF
		}
	}
	select {
	case s.out <- pending{b: b, due: time.Now().Add(m.delay)}:
	default:
		m.stats.DroppedOut++
	}
}

// Serve runs the MCU over rw until ctx is done or rw fails, and returns
// why. If rw is an io.Closer, Serve closes it before returning (that is
// how a Read blocked in another goroutine ends). The MCU's state — outputs,
// session, watchdog — outlives Serve.
func (m *MCU) Serve(ctx context.Context, rw io.ReadWriter) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{out: make(chan pending, 256)}
	m.mu.Lock()
	m.servers[s] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.servers, s)
		d := s.dec.Stats()
		m.decPast.Frames += d.Frames
		m.decPast.BadCRC += d.BadCRC
		m.decPast.BadLength += d.BadLength
		m.decPast.Truncated += d.Truncated
		m.decPast.Skipped += d.Skipped
		m.mu.Unlock()
	}()

	errc := make(chan error, 2)
	go func() { // reader
		buf := make([]byte, 512)
		for {
			n, err := rw.Read(buf)
			if n > 0 {
				now := time.Now()
				m.mu.Lock()
				for _, r := range s.receiveLocked(m, buf[:n], now) {
					s.sendLocked(m, r, answer)
				}
				m.mu.Unlock()
			}
			if err != nil {
				errc <- fmt.Errorf("mcu: read: %w", err)
				return
			}
			if n == 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Millisecond):
				}
			}
		}
	}()
	go func() { // writer: keeps order; holds each frame until it is due
		for {
			select {
			case <-ctx.Done():
				return
			case p := <-s.out:
				if wait := time.Until(p.due); wait > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(wait):
					}
				}
				if _, err := rw.Write(p.b); err != nil {
					errc <- fmt.Errorf("mcu: write: %w", err)
					return
				}
			}
		}
	}()

	t := time.NewTicker(m.opts.TelemetryPeriod)
	defer t.Stop()
	gap := time.NewTicker(m.opts.FrameGap / 2)
	defer gap.Stop()
	var err error
	for err == nil {
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case err = <-errc:
		case <-t.C:
			m.mu.Lock()
			s.sendLocked(m, m.telemetryLocked(), telemetry)
			m.mu.Unlock()
		case now := <-gap.C:
			m.mu.Lock()
			for _, r := range s.gapLocked(m, now) {
				s.sendLocked(m, r, answer)
			}
			m.mu.Unlock()
		}
	}
	if c, ok := rw.(io.Closer); ok {
		c.Close()
	}
	return err
}

// ServePort opens the serial port name (a real port or a pty) at baud and
// serves it until ctx is done or the port fails.
func (m *MCU) ServePort(ctx context.Context, name string, baud int) error {
	p, err := bugst.Open(name, &bugst.Mode{BaudRate: baud, DataBits: 8, Parity: bugst.NoParity, StopBits: bugst.OneStopBit})
	if err != nil {
		return fmt.Errorf("mcu: opening %s: %w", name, err)
	}
	return m.Serve(ctx, p)
}

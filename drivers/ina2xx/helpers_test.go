package ina2xx

import (
	"errors"
	"math"
	"testing"

	"periph.io/x/conn/v3"
	"periph.io/x/conn/v3/conntest"
)

// rd is a recorded register read: the address written, two bytes back.
func rd(reg byte, v uint16) conntest.IO {
	return conntest.IO{W: []byte{reg}, R: []byte{byte(v >> 8), byte(v)}}
}

// wr is a recorded register write.
func wr(reg byte, v uint16) conntest.IO {
	return conntest.IO{W: []byte{reg, byte(v >> 8), byte(v)}}
}

// playback replays ops and, when the test ends, checks that every one was
// consumed. Unexpected traffic is an error from Tx, not a panic.
func playback(t *testing.T, ops ...conntest.IO) *conntest.Playback {
	t.Helper()
	p := &conntest.Playback{Ops: ops, D: conn.Half, DontPanic: true}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

// failConn fails every transaction after the first n.
type failConn struct {
	conn.Conn
	n int
}

func (f *failConn) Tx(w, r []byte) error {
	if f.n <= 0 {
		return errors.New("i2c: remote I/O error")
	}
	f.n--
	return f.Conn.Tx(w, r)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

package client

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// DialKillable dials over a plain TCP connection that kill cuts without an
// MQTT DISCONNECT, as when a controller's process dies or its link drops:
// the broker sees the connection end and publishes the will, and the
// client's reads fail as they would when the peer resets.
func DialKillable(ctx context.Context, opt Options) (c *Client, kill func(), err error) {
	var mu sync.Mutex
	var conn *cutConn
	opt.openConn = func(uri *url.URL, _ paho.ClientOptions) (net.Conn, error) {
		cn, err := net.Dial("tcp", uri.Host)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		conn = &cutConn{Conn: cn}
		return conn, nil
	}
	c, err = Dial(ctx, opt)
	kill = func() {
		mu.Lock()
		defer mu.Unlock()
		if conn != nil {
			conn.cut.Store(true)
			conn.Close()
		}
	}
	return c, kill, err
}

// cutConn reports a cut link as the peer going away (paho ignores "use of
// closed network connection", which it takes for its own Disconnect).
type cutConn struct {
	net.Conn
	cut atomic.Bool
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.cut.Load() {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// StopHeartbeats stops c's heartbeats, as if its process hung.
func StopHeartbeats(c *Client) { c.stopHeartbeat() }

// CodeClassified reports whether the client knows the code.
func CodeClassified(code string) bool { _, ok := codeClass[code]; return ok }

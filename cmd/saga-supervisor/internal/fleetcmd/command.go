// Package fleetcmd is `saga-supervisor fleet`: package fleet's view of
// every supervisor on a broker, on a terminal or as JSON. It is apart from
// package fleet because it connects the way ctl does (ctl.Conn), and the
// daemon, which publishes the summary, must not import ctl.
package fleetcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/ctl"
	"github.com/saga-supervisor/saga-supervisor/daemon/fleet"
	"github.com/saga-supervisor/saga-supervisor/transport/mqtt"
)

const helpText = `usage: saga-supervisor fleet [--once] [--json] [--stale D] [connection flags]

Every supervisor on a broker at a glance: subscribes to <prefix>/+/summary and
<prefix>/+/status (mqtt.fleet in each supervisor's config) and shows one row per
device: READY, NOT_READY, HALTED (with its reason), OFFLINE (its will said so, or
no status), STALE (no summary for --stale), BAD (a payload that cannot be read:
the coded error is shown). Refreshes in place on a terminal; --once prints once
what the broker holds and exits; --json prints the rows as JSON.

Log in as a read-only viewer (mqtt.fleet.viewers) with --agent NAME (its client
id is NAME/<pid>) and --password-file.

Flags:
`

// Run is `saga-supervisor fleet`.
func Run(args []string, w io.Writer) error {
	conn := ctl.NewConn("fleet")
	fs := cli.NewFlags("fleet")
	conn.Register(fs)
	once := fs.Bool("once", false, "print once what the broker holds and exit")
	stale := fs.Duration("stale", 15*time.Second, "a summary older than this is STALE (3 publish periods is a good choice)")
	every := fs.Duration("every", time.Second, "how often the table is redrawn")
	settle := fs.Duration("settle", 500*time.Millisecond, "--once: print when no message came for this long after subscribing")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), helpText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Exit(2, "%v", err)
	}
	if *stale <= 0 || *every <= 0 || *settle <= 0 {
		return cli.Exit(2, "--stale, --every and --settle must be positive")
	}
	opt, err := conn.Options()
	if err != nil {
		return cli.Exit(2, "%v", err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	topics := mqtt.Topics{Prefix: opt.Prefix, Device: "x"}
	view := fleet.NewView(opt.Prefix)
	got := make(chan struct{}, 1)
	subscribed := make(chan error, 1)
	handle := func(f func(string, []byte)) paho.MessageHandler {
		return func(_ paho.Client, m paho.Message) {
			f(m.Topic(), m.Payload()) // decodes and stores: never blocks
			select {
			case got <- struct{}{}:
			default:
			}
		}
	}
	co := paho.NewClientOptions().AddBroker(opt.Broker).SetClientID(opt.ClientID).
		SetCleanSession(true).SetConnectTimeout(opt.Timeout).SetKeepAlive(10 * time.Second).
		SetAutoReconnect(!*once).SetMaxReconnectInterval(10 * time.Second).SetOrderMatters(false).
		SetOnConnectHandler(func(c paho.Client) {
			// Subscribed on every (re)connect; the broker sends what is
			// retained right after each SUBACK.
			t1 := c.Subscribe(topics.StatusFilter(), 1, handle(view.Status))
			t2 := c.Subscribe(topics.SummaryFilter(), 1, handle(view.Summary))
			t1.WaitTimeout(opt.Timeout)
			t2.WaitTimeout(opt.Timeout)
			select {
			case subscribed <- errors.Join(t1.Error(), t2.Error()):
			default:
			}
		})
	user := opt.Username
	if user == "" && opt.Password != "" {
		user = opt.Agent
	}
	if user != "" {
		co.SetUsername(user).SetPassword(opt.Password)
	}
	if opt.TLS != nil {
		co.SetTLSConfig(opt.TLS)
	}
	c := paho.NewClient(co)
	tok := c.Connect()
	if !tok.WaitTimeout(opt.Timeout) {
		c.Disconnect(0)
		return cli.Exit(1, "fleet: connect %s: no answer within %v", opt.Broker, opt.Timeout)
	}
	if err := tok.Error(); err != nil {
		return cli.Exit(1, "fleet: connect %s as %q: %v", opt.Broker, user, err)
	}
	defer c.Disconnect(100)

	print := func() error {
		rows := view.Rows(time.Now(), *stale)
		if conn.JSON() {
			enc := json.NewEncoder(w)
			return enc.Encode(rows)
		}
		return fleet.WriteTable(w, rows)
	}
	if *once {
		deadline := time.After(opt.Timeout)
		select {
		case err := <-subscribed:
			if err != nil {
				return cli.Exit(1, "fleet: subscribe: %v", err)
			}
		case <-deadline:
			return cli.Exit(1, "fleet: subscribe: no answer within %v", opt.Timeout)
		}
		// Retained messages come right after the subscription; print once
		// they stop coming (or at the timeout).
		quiet := time.NewTimer(*settle)
	wait:
		for {
			select {
			case <-got:
				quiet.Reset(*settle)
			case <-quiet.C:
				break wait
			case <-deadline:
				break wait
			case <-ctx.Done():
				return nil
			}
		}
		return print()
	}
	tty := isTerminal(w)
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		if tty {
			fmt.Fprint(w, "\x1b[H\x1b[2J") // home and clear: redraw in place
		}
		fmt.Fprintf(w, "fleet under %s/+ on %s at %s\n", opt.Prefix, opt.Broker, time.Now().Format(time.TimeOnly))
		if err := print(); err != nil {
			return err
		}
		if !tty {
			fmt.Fprintln(w)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

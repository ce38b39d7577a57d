// Package simmcu is the hidden `saga-supervisor sim-mcu` command: a
// simulated microcontroller (drivers/sim/mcu) served on a serial port, with
// an HTTP control interface for black-box tests.
package simmcu

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim/mcu"
)

// Run is the hidden `sim-mcu` command: a simulated microcontroller on
// a serial port (a pty in tests), speaking docs/SERIAL.md, with a small
// HTTP control interface so that black-box tests can observe its outputs
// and inject what a real board and its wiring would do: a sagging supply, a
// refused channel, an unplugged cable, an e-stop.
//
//	GET  /state                       outputs, volts, faults, session, counters
//	POST /volts?supply=I&v=V          set a supply's voltage ("unknown": no reading)
//	POST /nak?channel=C&code=N        refuse a channel (code 0 clears)
//	POST /fault?flag=NAME&on=true     raise or clear a fault flag (watchdog, reset, supply, output, estop)
//	POST /unplug, /replug, /reset     the cable and the board's reset button
func Run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim-mcu", flag.ContinueOnError)
	port := fs.String("port", "", "serial device to serve (e.g. one end of a socat pty pair)")
	baud := fs.Int("baud", serial.DefaultBaud, "line speed")
	control := fs.String("control", "127.0.0.1:0", "HTTP control address; the bound address is printed")
	channels := fs.String("channels", "0,0,0,0", "safe value of each channel, comma separated (\"detach\" for a detaching output)")
	supplies := fs.String("supplies", "12", "initial volts of each supply, comma separated")
	maxDur := fs.Duration("max-duration", mcu.DefaultMaxDuration, "the board's link watchdog")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *port == "" {
		return cli.Exit(2, "sim-mcu: --port is required")
	}
	opts := mcu.Options{MaxDuration: *maxDur}
	for _, c := range strings.Split(*channels, ",") {
		var spec mcu.ChannelSpec
		if c == "detach" {
			spec.SafeDetach = true
		} else if v, err := strconv.ParseFloat(c, 64); err == nil {
			spec.Safe = v
		} else {
			return cli.Exit(2, "sim-mcu: channel safe value %q: %v", c, err)
		}
		opts.Channels = append(opts.Channels, spec)
	}
	for _, s := range strings.Split(*supplies, ",") {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return cli.Exit(2, "sim-mcu: supply volts %q: %v", s, err)
		}
		opts.Supplies = append(opts.Supplies, v)
	}
	m, err := mcu.New(opts)
	if err != nil {
		return cli.Exit(2, "sim-mcu: %v", err)
	}
	defer m.Close()
	ln, err := net.Listen("tcp", *control)
	if err != nil {
		return cli.Exit(1, "sim-mcu: control: %v", err)
	}
	fmt.Fprintf(stdout, "sim-mcu control on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: controlHandler(m, len(opts.Channels), len(opts.Supplies)), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The board outlives its cable: serve the port again whenever it fails
	// (the pty's other end went away, the test pulled it).
	for ctx.Err() == nil {
		if err := m.ServePort(ctx, *port, *baud); err != nil && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

var faultNames = map[string]serial.Faults{
	"watchdog": serial.FaultWatchdog, "reset": serial.FaultReset, "supply": serial.FaultSupply,
	"output": serial.FaultOutput, "estop": serial.FaultEStop,
}

func controlHandler(m *mcu.MCU, nch, nsup int) http.Handler {
	mux := http.NewServeMux()
	type output struct {
		Value    float64 `json:"value"`
		Detached bool    `json:"detached"`
	}
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		st := struct {
			Outputs   []output  `json:"outputs"`
			Faults    string    `json:"faults"`
			InSession bool      `json:"in_session"`
			Stats     mcu.Stats `json:"stats"`
		}{Faults: m.Faults().String(), InSession: m.InSession(), Stats: m.Stats()}
		for ch := range nch {
			v, d := m.Output(ch)
			st.Outputs = append(st.Outputs, output{v, d})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	fail := func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), http.StatusBadRequest) }
	mux.HandleFunc("POST /volts", func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.URL.Query().Get("supply"))
		if err != nil || i < 0 || i >= nsup {
			fail(w, fmt.Errorf("supply: want 0..%d", nsup-1))
			return
		}
		if v := r.URL.Query().Get("v"); v == "unknown" {
			err = m.SetVoltsUnknown(i)
		} else if f, perr := strconv.ParseFloat(v, 64); perr != nil {
			err = perr
		} else {
			err = m.SetVolts(i, f)
		}
		if err != nil {
			fail(w, err)
		}
	})
	mux.HandleFunc("POST /nak", func(w http.ResponseWriter, r *http.Request) {
		ch, err1 := strconv.Atoi(r.URL.Query().Get("channel"))
		code, err2 := strconv.Atoi(r.URL.Query().Get("code"))
		if err := errors.Join(err1, err2); err != nil || ch < 0 || ch >= nch || code < 0 || code > 255 {
			fail(w, fmt.Errorf("want channel=0..%d&code=0..255", nch-1))
			return
		}
		m.NakChannel(ch, serial.NakCode(code))
	})
	mux.HandleFunc("POST /fault", func(w http.ResponseWriter, r *http.Request) {
		f, ok := faultNames[r.URL.Query().Get("flag")]
		if !ok {
			fail(w, errors.New("flag: watchdog, reset, supply, output or estop"))
			return
		}
		m.SetFault(f, r.URL.Query().Get("on") != "false")
	})
	mux.HandleFunc("POST /unplug", func(http.ResponseWriter, *http.Request) { m.Unplug() })
	mux.HandleFunc("POST /replug", func(http.ResponseWriter, *http.Request) { m.Replug() })
	mux.HandleFunc("POST /reset", func(http.ResponseWriter, *http.Request) { m.Reset() })
	return mux
}

package supervisor

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/api"
	"github.com/saga-supervisor/saga-supervisor/approval"
	mqttdev "github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/drivers/serial"
	"github.com/saga-supervisor/saga-supervisor/drivers/sim"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/lease"
)

// Built is what FromConfig made: the Supervisor's options, the simulated
// world its sim drivers live in and the MQTT link of its mqtt drivers (both
// closed after the Supervisor).
type Built struct {
	Options Options
	World   *sim.World
	devices *mqttdev.DeviceLink // nil: no mqtt actuators
	closers []io.Closer         // hardware opened for drivers: e-stop watcher, I2C buses
}

// Close releases what FromConfig opened.
func (b *Built) Close() error {
	var errs []error
	if b.devices != nil {
		errs = append(errs, b.devices.Close())
	}
	for i := len(b.closers) - 1; i >= 0; i-- {
		errs = append(errs, b.closers[i].Close())
	}
	return errors.Join(append(errs, b.World.Close())...)
}

// FromConfig builds actuators and supplies with their drivers, and every
// other option, from a configuration.
func FromConfig(cfg *config.Config, lg *slog.Logger) (*Built, error) {
	if dir := filepath.Dir(cfg.Sim.World); cfg.Sim.World != "" && dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	world, err := sim.OpenWorld(cfg.Sim.World)
	if err != nil {
		return nil, err
	}
	b := &Built{World: world}
	fail := func(err error) (*Built, error) {
		b.Close()
		return nil, err
	}
	var inputs []Input
	bl := &boards{cfg: cfg, lg: lg, links: map[string]*serial.Link{}}
	board := func(name string) (*serial.Link, error) {
		l, opened, err := bl.link(name)
		if opened {
			b.closers = append(b.closers, l)
			inputs = append(inputs, mcuInput{name: name, l: l})
		}
		return l, err
	}
	var list []*actuators.Actuator
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		var d actuators.Driver
		var derr error
		switch a.Driver {
		case "sim":
			switch a.Kind {
			case actuators.Servo:
				s := world.Servo(name, a.Initial, a.Sim.Slew)
				d, derr = s, s.Err()
			case actuators.Digital:
				s := world.Digital(name, a.Initial)
				d, derr = s, s.Err()
			case actuators.PWM, actuators.Setpoint:
				s := world.Setpoint(name, a.Initial)
				d, derr = s, s.Err()
			case actuators.Pulse:
				s := world.Pulse(name)
				d, derr = s, s.Err()
			}
		case "mqtt":
			if b.devices == nil {
				if b.devices, derr = dialDevices(cfg, lg); derr != nil {
					break
				}
			}
			var dev *mqttdev.Device
			if dev, derr = b.devices.Device(mqttdev.DeviceOptions{Name: name, SetTopic: a.MQTT.SetTopic,
				AckTopic: a.MQTT.AckTopic, StateTopic: a.MQTT.StateTopic}); derr == nil {
				d = dev.Driver()
			}
		case "gpio":
			d, derr = gpioDriver(a)
		case "mcu":
			var l *serial.Link
			if l, derr = board(a.MCUOut.Board); derr == nil {
				var opts []serial.ChannelOption
				if a.MCUOut.Tolerance > 0 {
					opts = append(opts, serial.WithTolerance(a.MCUOut.Tolerance))
				}
				d, derr = l.Channel(a.MCUOut.Channel, opts...)
			}
		default:
			derr = fmt.Errorf("driver %q is not available in this build", a.Driver)
		}
		if derr == nil && d == nil {
			derr = fmt.Errorf("no %s driver for kind %s", a.Driver, a.Kind)
		}
		if derr != nil {
			return fail(fmt.Errorf("%s: actuators.%s: %w", cfg.Where("actuators."+name), name, derr))
		}
		list = append(list, a.Actuator(name, d))
	}
	reg, err := actuators.NewRegistry(list...)
	if err != nil {
		return fail(err)
	}
	supplies := NewSupplies()
	for _, name := range cfg.SupplyNames() {
		sc := cfg.Supplies[name]
		var src VoltSource
		switch sc.Driver {
		case "sim":
			src = world.Supply(name, sc.Sim.Volts)
		case "mcu":
			l, err := board(sc.MCU.Board)
			if err == nil {
				src, err = l.Supply(sc.MCU.Supply)
			}
			if err != nil {
				return fail(fmt.Errorf("%s: supplies.%s: %w", cfg.Where("supplies."+name), name, err))
			}
		case "ina219", "ina226":
			m, bus, err := openPowerMonitor(sc)
			if bus != nil {
				b.closers = append(b.closers, bus)
			}
			if err != nil {
				return fail(fmt.Errorf("%s: supplies.%s: %w", cfg.Where("supplies."+name), name, err))
			}
			src = m
		default:
			return fail(fmt.Errorf("%s: supplies.%s: driver %q is not available in this build", cfg.Where("supplies."+name), name, sc.Driver))
		}
		if err := supplies.Add(sc.Spec(name), src); err != nil {
			return fail(err)
		}
	}
	line := &HaltLine{}
	if cfg.EStop.Driver == "gpio" {
		es, err := openEStop(cfg.EStop, line)
		if es != nil {
			b.closers = append(b.closers, es)
			// Even a pin that failed to open is watched: it reports not
			// ready (fail closed) rather than stopping the daemon, so
			// status shows why.
			inputs = append(inputs, es)
		}
		if err != nil {
			lg.Error("e-stop", "pin", cfg.EStop.Pin, "err", err)
		}
	}
	b.Options = Options{
		Actuators:   reg,
		Supplies:    supplies,
		JournalDir:  cfg.Journal.Dir,
		WAL:         cfg.Journal.WALOptions(),
		Engine:      cfg.RollbackConfig(),
		Leases:      lease.Options{DefaultTTL: cfg.Leases.DefaultTTL, MinTTL: cfg.Leases.MinTTL, MaxTTL: cfg.Leases.MaxTTL},
		Ingress:     cfg.Agents.IngressOptions(),
		ResetToken:  cfg.HTTP.ResetToken.Reveal(),
		RemoteReset: cfg.MQTT.AllowReset,
		Permissions: permissionsOf(cfg.Agents.Allow),
		Logger:      lg,
		Inputs:      inputs,
		HaltLine:    line,
	}
	if len(cfg.Approvals.Keys) > 0 || len(cfg.ApprovalRequired()) > 0 {
		a := &Approvals{Device: cfg.Device, Required: map[string]bool{}}
		for _, n := range cfg.ApprovalRequired() {
			a.Required[n] = true
		}
		if len(cfg.Approvals.Keys) > 0 {
			v, err := approval.NewVerifier(cfg.Approvals.Keys, cfg.Approvals.MaxTTL)
			if err != nil {
				b.Close()
				return nil, fmt.Errorf("%s: %w", cfg.Where("approvals"), err)
			}
			a.Verifier = v
		}
		b.Options.Approvals = a
	}
	return b, nil
}

// dialDevices opens the one MQTT connection all mqtt actuators share, to the
// supervisor's own broker, as client <mqtt.client_id>-devices.
//
// The broker is waited for briefly (3 s), so that crash recovery — which
// runs in New, right after this — finds the devices reachable. The daemon
// starts its embedded broker before building the actuators for the same
// reason. A device whose link is still down fails every Set in doubt with
// ErrLinkLost, and the supervisor is not ready (for actuators with a state
// topic).
func dialDevices(cfg *config.Config, lg *slog.Logger) (*mqttdev.DeviceLink, error) {
	opt := mqttdev.LinkOptions{
		Broker: cfg.MQTT.Broker, ClientID: cfg.MQTT.ClientID + "-devices", // transport/mqtt.DevicesSuffix
		Password:    cfg.MQTT.Password.Reveal(),
		ConnectWait: 3 * time.Second,
	}
	if cfg.MQTT.Username != "" {
		opt.Username = cfg.MQTT.Username + "-devices" // a login of its own (transport/mqtt.DevicesSuffix)
	}
	if lg != nil {
		opt.Logger = lg.With("component", "mqtt-devices")
	}
	if cfg.MQTT.Embedded() {
		host, port, err := net.SplitHostPort(cfg.MQTT.Listen)
		if err != nil || port == "0" {
			return nil, fmt.Errorf("mqtt devices cannot find the embedded broker at %q: give mqtt.listen a fixed port", cfg.MQTT.Listen)
		}
		if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
			host = "127.0.0.1"
			if err == nil && ip.Is6() {
				host = "::1"
			}
		}
		opt.Broker = "tcp://" + net.JoinHostPort(host, port)
		if cfg.MQTT.TLS.CertFile != "" {
			tc, err := PinnedTLS(cfg.MQTT.TLS)
			if err != nil {
				return nil, err
			}
			opt.Broker, opt.TLS = "ssl://"+net.JoinHostPort(host, port), tc
		}
	} else if cfg.MQTT.UsesTLS() {
		tc, err := TLSConfig(cfg.MQTT.TLS)
		if err != nil {
			return nil, err
		}
		opt.TLS = tc
	}
	return mqttdev.DialDeviceLink(opt)
}

// TLSConfig reads the TLS files the mqtt section names: the daemon's own
// connection and the MQTT devices' connection use it alike.
func TLSConfig(c config.TLS) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mqtt.tls.ca_file %s: no certificate found", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// permissionsOf turns agents.allow into the supervisor's table, keeping
// omitted lists nil (everything) apart from empty ones (nothing).
func permissionsOf(allow map[string]config.Permission) map[string]Permission {
	if len(allow) == 0 {
		return nil
	}
	out := make(map[string]Permission, len(allow))
	for name, p := range allow {
		var ops []api.Op
		if p.Ops != nil {
			ops = make([]api.Op, len(p.Ops))
			for i, op := range p.Ops {
				ops[i] = api.Op(op)
			}
		}
		out[name] = Permission{Actuators: p.Actuators, Ops: ops}
	}
	return out
}

// PinnedTLS is the TLS of the supervisor's own connections to the
// embedded broker's TLS listener (mqtt.tls.cert_file and key_file): it
// trusts exactly that certificate, whatever name it was issued for — the
// connection is to this process, on loopback.
func PinnedTLS(c config.TLS) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, err
	}
	want := cert.Certificate[0]
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by the pin below, not skipped
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 || !bytes.Equal(raw[0], want) {
				return errors.New("the broker's certificate is not the embedded broker's own")
			}
			return nil
		},
	}, nil
}

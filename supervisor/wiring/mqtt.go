package wiring

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	mqttdev "github.com/saga-supervisor/saga-supervisor/drivers/mqtt"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// mqtt: devices that take setpoints over the supervisor's own broker.
func init() {
	Register(Kind{Name: "mqtt", OpenActuator: openMQTTActuator})
}

func openMQTTActuator(e *Env, name string, a *config.Actuator) (actuators.Driver, error) {
	link, err := Shared(e, "mqtt devices", func() (*mqttdev.DeviceLink, error) { return dialDevices(e) })
	if err != nil {
		return nil, err
	}
	m := a.Section.(*config.MQTTActuator)
	dev, err := link.Device(mqttdev.DeviceOptions{Name: name, SetTopic: m.SetTopic, AckTopic: m.AckTopic, StateTopic: m.StateTopic})
	if err != nil {
		return nil, err
	}
	return dev.Driver(), nil
}

// dialDevices opens the one MQTT connection all mqtt actuators share, to the
// supervisor's own broker, as client <mqtt.client_id>-devices.
//
// The broker is waited for briefly (3 s), so that crash recovery — which
// runs right after the drivers are opened — finds the devices reachable.
// The daemon starts its embedded broker before opening the drivers for the
// same reason. A device whose link is still down fails every Set in doubt
// with ErrLinkLost, and the supervisor is not ready (for actuators with a
// state topic).
func dialDevices(e *Env) (*mqttdev.DeviceLink, error) {
	cfg := e.Config
	opt := mqttdev.LinkOptions{
		Broker: cfg.MQTT.Broker, ClientID: cfg.MQTT.ClientID + "-devices", // transport/mqtt.DevicesSuffix
		Password:    cfg.MQTT.Password.Reveal(),
		ConnectWait: 3 * time.Second,
		Logger:      e.Logger.With("component", "mqtt-devices"),
	}
	if cfg.MQTT.Username != "" {
		opt.Username = cfg.MQTT.Username + "-devices" // a login of its own (transport/mqtt.DevicesSuffix)
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
		opt.After = e.BrokerUp
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

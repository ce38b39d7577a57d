package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/saga-supervisor/saga-supervisor/cmd/internal/cli"
	"github.com/saga-supervisor/saga-supervisor/cmd/saga-supervisor/internal/credentials"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The shipped unit (configs/saga-supervisor.service) is static: it drops
// every packet from and to other machines (IPAddressDeny=any,
// IPAddressAllow=localhost), whatever the config listens on. A config that
// serves other machines — the dashboard over TLS with a login, an embedded
// broker with TLS — or dials a broker on another machine gets its rules
// from systemd-dropin, which writes them as a drop-in beside the unit.

// DefaultDropin is where systemd-dropin writes: a drop-in of the unit,
// read after it, so its IPAddressAllow= adds to the unit's localhost.
const DefaultDropin = "/etc/systemd/system/saga-supervisor.service.d/http.conf"

// dropinMark leads every drop-in systemd-dropin writes: a file without it
// is someone else's, and is never replaced or removed.
const dropinMark = "# Written by saga-supervisor systemd-dropin"

// unitRules are the shipped unit's IP rules, which the drop-in adds to
// (TestShippedFilesAgree keeps them in step with the unit).
const unitRules = "IPAddressDeny=any and IPAddressAllow=localhost"

// peer is one address the config makes the daemon listen on or dial
// beyond loopback, and what it needs let through.
type peer struct {
	what  string   // "http.listen 0.0.0.0:8443", for the comment
	allow []string // "any", or prefixes
}

// runSystemdDropin writes the drop-in that lets through the unit's IP
// rules what the config listens on or dials beyond loopback: for a
// listener on every address, any; on one address, the network of the
// interface that has it (192.168.1.0/24, say); for an external broker,
// its addresses. --allow replaces what it finds. A config that needs
// nothing beyond loopback gets no drop-in: one this command wrote before
// is removed.
func runSystemdDropin(args []string, w io.Writer) error {
	fs := cli.NewFlags("systemd-dropin")
	cfgPath := fs.String("config", "", "the supervisor's configuration (required: the unit's, /etc/saga-supervisor/config.yaml)")
	out := fs.String("out", DefaultDropin, "the drop-in to write; - prints it")
	allowFlag := fs.String("allow", "", "what to let in instead of what the config's addresses give, comma-separated: any, or networks (192.168.1.0/24,fd00::/64)")
	if err := fs.Parse(args); err != nil {
		return cli.Exit(2, "%v", err)
	}
	if *cfgPath == "" {
		return cli.Exit(2, "systemd-dropin: --config FILE is required (the config the unit runs: /etc/saga-supervisor/config.yaml)")
	}
	if fs.NArg() > 0 {
		return cli.Exit(2, "systemd-dropin: unexpected argument %q", fs.Arg(0))
	}
	data, err := os.ReadFile(*cfgPath)
	if err != nil {
		return cli.Exit(2, "systemd-dropin: --config: %w", credentials.Unreadable(*cfgPath, "", err))
	}
	// Its rules (TLS and a login beyond loopback) are checked as
	// check-config does; its secrets are not read.
	cfg, err := config.ParseLayout(data, *cfgPath)
	if err != nil {
		return cli.Exit(1, "%v", err)
	}
	peers, err := dropinPeers(cfg)
	if err != nil {
		return cli.Exit(1, "systemd-dropin: %v; give --allow NETWORK,... to say what to let in", err)
	}
	var allow []string
	if *allowFlag != "" {
		for _, a := range strings.Split(*allowFlag, ",") {
			a = strings.TrimSpace(a)
			if a != "any" {
				p, err := netip.ParsePrefix(a)
				if err != nil {
					return cli.Exit(2, "systemd-dropin: --allow %q: want any or a network such as 192.168.1.0/24", a)
				}
				a = p.Masked().String()
			}
			if !slices.Contains(allow, a) {
				allow = append(allow, a)
			}
		}
	} else {
		for _, p := range peers {
			for _, a := range p.allow {
				if !slices.Contains(allow, a) {
					allow = append(allow, a)
				}
			}
		}
	}
	if slices.Contains(allow, "any") {
		allow = []string{"any"}
	}
	if len(allow) == 0 {
		if *out == "-" {
			fmt.Fprintf(w, "# %s listens and dials on loopback only: the unit's %s is all it needs.\n", *cfgPath, unitRules)
			return nil
		}
		removed, err := removeDropin(*out)
		if err != nil {
			return cli.Exit(1, "systemd-dropin: %v", err)
		}
		fmt.Fprintf(w, "%s listens and dials on loopback only: the unit's %s is all it needs.\n", *cfgPath, unitRules)
		if removed {
			fmt.Fprintf(w, "Removed %s (written for an earlier config). Now: sudo systemctl daemon-reload && sudo systemctl restart saga-supervisor\n", *out)
		}
		return nil
	}
	text := dropinText(*cfgPath, peers, allow, *allowFlag != "")
	if *out == "-" {
		_, err := io.WriteString(w, text)
		return err
	}
	if err := writeDropin(*out, text); err != nil {
		return cli.Exit(1, "systemd-dropin: %v", err)
	}
	fmt.Fprintf(w, "Wrote %s: IPAddressAllow=%s, besides the unit's localhost.\nNow: sudo systemctl daemon-reload && sudo systemctl restart saga-supervisor\n",
		*out, strings.Join(allow, " "))
	return nil
}

// dropinPeers are the addresses cfg listens on or dials beyond loopback:
// http.listen, the embedded broker's mqtt.listen, an external broker.
func dropinPeers(cfg *config.Config) ([]peer, error) {
	var peers []peer
	listener := func(key, addr, note string) error {
		if addr == "" {
			return nil
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("%s %s: %v", key, addr, err)
		}
		ips, err := hostIPs(host)
		if err != nil {
			return fmt.Errorf("%s %s: %v", key, addr, err)
		}
		p := peer{what: key + " " + addr + note}
		for _, ip := range ips {
			switch {
			case ip.IsLoopback():
			case ip.IsUnspecified():
				p.allow = []string{"any"}
			default:
				n, err := interfaceNetwork(ip)
				if err != nil {
					return fmt.Errorf("%s %s: %v", key, addr, err)
				}
				if !slices.Contains(p.allow, n) && !slices.Contains(p.allow, "any") {
					p.allow = append(p.allow, n)
				}
			}
		}
		if len(p.allow) > 0 {
			peers = append(peers, p)
		}
		return nil
	}
	note := ""
	if cfg.HTTP.TLS.Enabled() {
		note = " (TLS"
		if cfg.HTTP.Login {
			note += ", login"
		}
		note += ")"
	}
	if err := listener("http.listen", cfg.HTTP.Listen, note); err != nil {
		return nil, err
	}
	if cfg.MQTT.Embedded() {
		if err := listener("mqtt.listen", cfg.MQTT.Listen, " (the embedded broker, TLS)"); err != nil {
			return nil, err
		}
	} else if u, err := url.Parse(cfg.MQTT.Broker); err == nil && u.Hostname() != "" {
		// The daemon dials an external broker: its addresses, exactly.
		ips, err := hostIPs(u.Hostname())
		if err != nil {
			return nil, fmt.Errorf("mqtt.broker %s: %v", cfg.MQTT.Broker, err)
		}
		p := peer{what: "mqtt.broker " + cfg.MQTT.Broker}
		for _, ip := range ips {
			if !ip.IsLoopback() {
				p.allow = append(p.allow, netip.PrefixFrom(ip, ip.BitLen()).String())
			}
		}
		if len(p.allow) > 0 {
			peers = append(peers, p)
		}
	}
	return peers, nil
}

// hostIPs are the addresses of a listen or broker host: an address as it
// is, "" every address, a name as it resolves now.
func hostIPs(host string) ([]netip.Addr, error) {
	if host == "" {
		return []netip.Addr{netip.IPv6Unspecified()}, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	addrs, err := net.LookupHost(host)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil {
			ips = append(ips, ip.Unmap())
		}
	}
	return ips, nil
}

// interfaceNetwork is the network (masked prefix) of the interface of
// this machine that has ip: the LAN a listener on ip serves.
func interfaceNetwork(ip netip.Addr) (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		p, err := netip.ParsePrefix(n.String())
		if err != nil {
			continue
		}
		if p.Addr().Unmap() == ip {
			return p.Masked().String(), nil
		}
	}
	return "", fmt.Errorf("no interface of this machine has the address %s (run this on the robot)", ip)
}

// dropinText is the drop-in: what it is for, then the rule.
func dropinText(cfgPath string, peers []peer, allow []string, given bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s --config %s.\n", dropinMark, cli.ShellQuote(cfgPath))
	fmt.Fprintf(&b, "# It lets through the unit's %s what that config listens on or dials:\n", unitRules)
	for _, p := range peers {
		fmt.Fprintf(&b, "#   %s: %s\n", p.what, strings.Join(p.allow, " "))
	}
	if given {
		fmt.Fprintf(&b, "# (--allow %s given instead.)\n", strings.Join(allow, ","))
	}
	b.WriteString("# Run the command again after changing those settings, then\n")
	b.WriteString("# sudo systemctl daemon-reload && sudo systemctl restart saga-supervisor.\n")
	b.WriteString("[Service]\n")
	fmt.Fprintf(&b, "IPAddressAllow=%s\n", strings.Join(allow, " "))
	return b.String()
}

// ours reports whether the file at path was written by this command (or
// is not there).
func ours(path string) (exists bool, mine bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, true, nil
	}
	if err != nil {
		return false, false, err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	return true, strings.HasPrefix(line, dropinMark), nil
}

// writeDropin writes text at path (mode 0644, its directory made 0755),
// replacing only a drop-in this command wrote, atomically.
func writeDropin(path, text string) error {
	exists, mine, err := ours(path)
	if err != nil {
		return err
	}
	if exists && !mine {
		return fmt.Errorf("%s is not one this command wrote (its first line is not %q): move it away, or give --out another file", path, dropinMark)
	}
	if exists {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, []byte(text)) {
			return nil
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".http.conf.tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := errors.Join(f.Chmod(0o644), func() error { _, err := f.WriteString(text); return err }(), f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// removeDropin removes a drop-in this command wrote; one of someone
// else's is left, with an error.
func removeDropin(path string) (bool, error) {
	exists, mine, err := ours(path)
	switch {
	case err != nil:
		return false, err
	case !exists:
		return false, nil
	case !mine:
		return false, fmt.Errorf("%s is not one this command wrote: left as it is", path)
	}
	return true, os.Remove(path)
}

package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// NormalizeHost splits a Host header's value, an Origin's host[:port] or an
// http.allowed_hosts entry into its host and port, each in the one
// spelling the HTTP guard compares: a DNS name in lower case without its
// trailing dot (robot.local. is robot.local), an IPv4 address in dotted
// decimal, an IPv6 address canonical and in brackets ([::1]). port is ""
// when none is written, else a number 1..65535 without leading zeros.
//
// Anything else is an error rather than a guess: an IPv6 address without
// brackets or with a zone, a name with characters DNS names do not have,
// a name whose last label is a number (a browser would read 127.1 or
// 0x7f.0.0.1 as an IPv4 address), a scheme, a path or a wildcard.
func NormalizeHost(s string) (host, port string, err error) {
	if s == "" {
		return "", "", errors.New("empty")
	}
	switch {
	case strings.Contains(s, "://") || strings.ContainsAny(s, "/?#@"):
		return "", "", fmt.Errorf("%.80q is not a host: write the name alone, or name:port (robot.local, robot.local:8080), without a scheme or path", s)
	case strings.Contains(s, "*"):
		return "", "", fmt.Errorf("%.80q: wildcards are not supported: list each name", s)
	}
	h := s
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("%.80q: an IPv6 address without its closing ]", s)
		}
		h = s[1:end]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", "", fmt.Errorf("%.80q: want [address] or [address]:port", s)
			}
			if port, err = checkHostPort(s, p); err != nil {
				return "", "", err
			}
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", "", fmt.Errorf("%.80q: not an IPv6 address (without a zone) in brackets", s)
		}
		return "[" + ip.String() + "]", port, nil
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		if strings.Count(s, ":") > 1 {
			return "", "", fmt.Errorf("%.80q: an IPv6 address goes in brackets: [%s]", s, s)
		}
		h = s[:i]
		if port, err = checkHostPort(s, s[i+1:]); err != nil {
			return "", "", err
		}
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.String(), port, nil // IPv4: IPv6 has colons, refused above
	}
	if h == "" || !validHostname(h) {
		return "", "", fmt.Errorf("%.80q: not a host name (letters, digits, '-' and '.') or an IP address", s)
	}
	last := h[strings.LastIndexByte(h, '.')+1:]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		return "", "", fmt.Errorf("%.80q: ends in a number, so browsers read it as an IPv4 address: write the address in dotted decimal (127.0.0.1)", s)
	}
	return h, port, nil
}

// checkHostPort checks the port of a host:port: digits, 1..65535, written
// without leading zeros (a second spelling of a port is a second name).
func checkHostPort(s, p string) (string, error) {
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
		return "", fmt.Errorf("%.80q: bad port %.20q: want a number 1..65535", s, p)
	}
	return p, nil
}

// validateAllowedHosts checks http.allowed_hosts: each entry a name,
// name:port, an address or address:port (NormalizeHost), none twice.
func (d *decoder) validateAllowedHosts(h HTTP) {
	if !d.ok("http.allowed_hosts") {
		return
	}
	seen := map[string]int{}
	for i, e := range h.AllowedHosts {
		p := fmt.Sprintf("http.allowed_hosts[%d]", i)
		host, port, err := NormalizeHost(e)
		if err != nil {
			d.errorf(p, "%v", err)
			continue
		}
		key := host
		if port != "" {
			key += ":" + port
		}
		if j, dup := seen[key]; dup {
			d.errorf(p, "%s is listed twice (first as entry %d)", key, j)
			continue
		}
		seen[key] = i
	}
}

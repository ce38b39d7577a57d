package serial

import (
	"context"
	"fmt"
	"io"
	"strings"

	bugst "go.bug.st/serial"
	"go.bug.st/serial/enumerator"
)

// portOpener opens c's port with go.bug.st/serial: by name, or by looking up
// the USB ids at every call.
func portOpener(c Config) Opener {
	return func(ctx context.Context) (io.ReadWriteCloser, error) {
		name := c.Port
		if name == "" {
			list, err := enumerator.GetDetailedPortsList()
			if err != nil {
				return nil, fmt.Errorf("serial: listing USB ports: %w", err)
			}
			if name, err = pickPort(list, c.VID, c.PID, c.SerialNumber); err != nil {
				return nil, err
			}
		}
		p, err := bugst.Open(name, &bugst.Mode{BaudRate: c.Baud, DataBits: 8, Parity: bugst.NoParity, StopBits: bugst.OneStopBit})
		if err != nil {
			return nil, fmt.Errorf("serial: opening %s: %w", name, err)
		}
		return p, nil
	}
}

// pickPort returns the one USB port with the given ids. No match and more
// than one match are both errors: guessing which board is the robot's arm
// is not the driver's call.
func pickPort(list []*enumerator.PortDetails, vid, pid, serialNumber string) (string, error) {
	var found []string
	for _, p := range list {
		if p == nil || !p.IsUSB || !strings.EqualFold(p.VID, vid) || !strings.EqualFold(p.PID, pid) {
			continue
		}
		if serialNumber != "" && p.SerialNumber != serialNumber {
			continue
		}
		found = append(found, p.Name)
	}
	want := fmt.Sprintf("USB %s:%s", vid, pid)
	if serialNumber != "" {
		want += " serial " + serialNumber
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("serial: no port for %s", want)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("serial: %d ports for %s (%s): set SerialNumber", len(found), want, strings.Join(found, ", "))
}

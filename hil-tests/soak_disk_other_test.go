//go:build !linux && !saga_lean

package hil

import (
	"errors"
	"path/filepath"
	"testing"
)

// journalDisk off Linux is a plain directory: the soak can neither fill
// nor fail it, and reports both faults as not exercised.
type journalDisk struct {
	kind, mnt       string
	noENOSPC, noEIO string
}

func newJournalDisk(t *testing.T, dir string) *journalDisk {
	why := "the soak makes full and failing file systems on Linux only"
	return &journalDisk{kind: "directory", mnt: dir, noENOSPC: why, noEIO: why}
}

func (d *journalDisk) JournalDir() string { return filepath.Join(d.mnt, "journal") }
func (d *journalDisk) fill() error        { return errors.New(d.noENOSPC) }
func (d *journalDisk) free() error        { return nil }
func (d *journalDisk) shutdown() error    { return errors.New(d.noEIO) }
func (d *journalDisk) remount() error     { return nil }

//go:build linux && !saga_lean

package hil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// The soak's journal lives on a file system of its own, which it fills
// (ENOSPC) and fails (EIO). Best first:
//
//   - ext4 on a loop device over an image file: filled by a file that
//     takes every free block; failed by FS_IOC_SHUTDOWN without flushing
//     its log, after which the kernel answers every write, fsync and open
//     on it with EIO — a disk that died — until it is unmounted and
//     mounted again (which replays its log, as after a power cut);
//   - a tmpfs: filled the same way; it cannot fail, so EIO is not
//     exercised;
//   - a plain directory: neither.
//
// What cannot be done here is said (noENOSPC, noEIO) and reported as not
// exercised, never passed.
type journalDisk struct {
	t        *testing.T
	kind     string // "ext4 on loop", "tmpfs", "directory"
	image    string // ext4: the image file
	mnt      string // the mount point ("" for a directory)
	noENOSPC string // why a full disk cannot be made here; "" if it can
	noEIO    string // why an I/O error cannot be made here; "" if it can
}

// journalDiskSize bounds the file system: far more than a long soak's
// journal, small enough to fill in an instant.
const journalDiskSize = 256 << 20

// fsIocShutdown is FS_IOC_SHUTDOWN (_IOR('X', 125, __u32)), and
// shutdownNoLogFlush its flag that drops what is not yet on the disk.
const (
	fsIocShutdown      = 0x8004587d
	shutdownNoLogFlush = 2
)

// newJournalDisk makes the best journal file system the machine allows.
func newJournalDisk(t *testing.T, dir string) *journalDisk {
	t.Helper()
	d := &journalDisk{t: t, mnt: filepath.Join(dir, "journal-fs")}
	if err := os.Mkdir(d.mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	ext4 := d.mountExt4(dir)
	if ext4 == nil {
		d.kind = "ext4 on loop"
		return d
	}
	d.noEIO = fmt.Sprintf("cannot fail a file system here (ext4 on a loop device: %v)", ext4)
	err := command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", journalDiskSize), "tmpfs", d.mnt)
	if err == nil {
		d.kind = "tmpfs"
		t.Cleanup(func() { exec.Command("umount", "-l", d.mnt).Run() })
		return d
	}
	d.noENOSPC = fmt.Sprintf("cannot mount a small file system to fill (%v)", err)
	d.kind, d.mnt = "directory", dir
	return d
}

// mountExt4 makes an ext4 image and mounts it through a loop device.
func (d *journalDisk) mountExt4(dir string) error {
	d.image = filepath.Join(dir, "journal.img")
	f, err := os.Create(d.image)
	if err != nil {
		return err
	}
	err = f.Truncate(journalDiskSize) // sparse
	f.Close()
	if err != nil {
		return err
	}
	if err := command("mkfs.ext4", "-q", "-F", "-E", "nodiscard", d.image); err != nil {
		return err
	}
	if err := d.mount(); err != nil {
		return err
	}
	if err := d.probeShutdown(); err != nil {
		exec.Command("umount", "-l", d.mnt).Run()
		return err
	}
	d.t.Cleanup(func() { exec.Command("umount", "-l", d.mnt).Run() })
	return nil
}

// probeShutdown fails the file system and brings it back once before the
// journal is on it, rather than find out at the first EIO fault that this
// kernel cannot.
func (d *journalDisk) probeShutdown() error {
	probe := filepath.Join(d.mnt, "probe")
	if err := d.shutdown(); err != nil {
		return err
	}
	if err := os.WriteFile(probe, nil, 0o600); !errors.Is(err, syscall.EIO) {
		return fmt.Errorf("a write after FS_IOC_SHUTDOWN returned %v, not EIO", err)
	}
	if err := d.remount(); err != nil {
		return err
	}
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return fmt.Errorf("after a remount: %w", err)
	}
	return os.Remove(probe)
}

func (d *journalDisk) mount() error { return command("mount", "-o", "loop", d.image, d.mnt) }

// command runs a program, its output in the error.
func command(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err == nil {
		return nil
	}
	if o := strings.TrimSpace(string(out)); o != "" {
		return fmt.Errorf("%s: %w: %s", name, err, o)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// JournalDir is the journal's directory on the disk.
func (d *journalDisk) JournalDir() string { return filepath.Join(d.mnt, "journal") }

func (d *journalDisk) filler() string { return filepath.Join(d.mnt, "filler") }

// fill takes every free block: the next block the journal needs (a new
// segment) is refused with ENOSPC.
func (d *journalDisk) fill() error {
	if d.noENOSPC != "" {
		return errors.New(d.noENOSPC)
	}
	f, err := os.OpenFile(d.filler(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	var st syscall.Statfs_t
	if err := syscall.Statfs(d.mnt, &st); err != nil {
		return err
	}
	// Most of it at once, then what is left a block at a time: a file
	// system keeps some blocks for its own metadata.
	if free := int64(st.Bfree) * int64(st.Bsize); free > 1<<20 { // Bsize is an int32 on 32-bit ARM
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, free-1<<20); err != nil && !errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("fallocate: %w", err)
		}
	}
	block := make([]byte, 4096)
	for i := 0; i < 1<<16; i++ {
		if _, err := f.Write(block); errors.Is(err, syscall.ENOSPC) {
			return f.Sync()
		} else if err != nil {
			return err
		}
	}
	return errors.New("the disk never filled")
}

// free removes the filler.
func (d *journalDisk) free() error { return os.Remove(d.filler()) }

// shutdown fails the file system: every write, sync and open on it gets
// EIO until it is mounted again.
func (d *journalDisk) shutdown() error {
	if d.noEIO != "" {
		return errors.New(d.noEIO)
	}
	f, err := os.Open(d.mnt)
	if err != nil {
		return err
	}
	defer f.Close()
	flag := uint32(shutdownNoLogFlush)
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocShutdown, uintptr(unsafe.Pointer(&flag))); e != 0 {
		return fmt.Errorf("FS_IOC_SHUTDOWN: %w", e)
	}
	return nil
}

// remount unmounts the failed file system and mounts it again, as an
// operator would after replacing a card: the kernel replays its log. The
// supervisor must have exited (it holds files open on it).
func (d *journalDisk) remount() error {
	var err error
	for range 50 {
		if err = command("umount", d.mnt); err == nil {
			return d.mount()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

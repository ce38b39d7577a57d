//go:build linux && !saga_lean

package hil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
//
// An unmount does not always end the file system: another process's mount
// namespace (a container, a sandboxed service, unshare -m) may hold it.
// Then its loop device stays attached, and `mount -o loop` takes that
// device again — and with it the shut-down file system, which answers EIO
// although the mount "succeeded". So remount proves it has a fresh one:
// the old loop device must have been released (the file system ended
// with it) before it mounts, and a file must then be written, synced and
// read back. If the old device is held, it mounts a copy of the image on
// a new loop device (the disk's contents as the dead file system left
// them, as a card moved to a new reader); if the proof still fails, it
// returns an error with what it saw.
func (d *journalDisk) remount() error {
	before, err := d.mounted()
	if err != nil {
		return fmt.Errorf("remount: before: %w", err)
	}
	for i := 0; ; i++ {
		if err = command("umount", d.mnt); err == nil {
			break
		}
		if i == 50 {
			return fmt.Errorf("remount: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The loop device is detached once the file system on it has ended
	// (autoclear); the kernel may take a moment after the unmount.
	held := !waitUntil(5*time.Second, func() bool { return !loopAttached(before.source, d.image) })
	how := "the same image"
	if held {
		// Never mount the held device again; a second loop device over
		// the same file would share it with the dead file system. A copy.
		fresh := fmt.Sprintf("%s.%d", strings.TrimSuffix(d.image, filepath.Ext(d.image)), time.Now().UnixNano()) + filepath.Ext(d.image)
		if err := command("cp", "--sparse=always", d.image, fresh); err != nil {
			return fmt.Errorf("remount: %s is still attached to %s after the unmount (another mount namespace holds the file system), and copying the image failed: %w",
				before.source, d.image, err)
		}
		d.image = fresh
		how = fmt.Sprintf("a copy of the image (%s is still attached: another mount namespace holds the failed file system)", before.source)
	}
	if err := d.mount(); err != nil {
		return fmt.Errorf("remount (%s): %w", how, err)
	}
	after, err := d.mounted()
	if err != nil {
		return fmt.Errorf("remount (%s): after: %w", how, err)
	}
	if err := d.proveFresh(after); err != nil {
		return fmt.Errorf("remount (%s) did not give a working file system: before %v, after %v, loop devices on %s: %s: %w",
			how, before, after, d.image, loops(d.image), err)
	}
	if held {
		d.t.Logf("soak: remount: %s, now %v (was %v)", how, after, before)
	}
	return nil
}

// mountInfo is what identifies a mounted file system.
type mountInfo struct {
	id     int    // the mount's id (/proc/self/mountinfo); ids are reused
	dev    string // major:minor of the file system (its superblock)
	source string // the device mounted, e.g. /dev/loop3
}

func (m mountInfo) String() string {
	return fmt.Sprintf("mount %d of %s (dev %s)", m.id, m.source, m.dev)
}

// mounted reads the mount on d.mnt from /proc/self/mountinfo (the last
// one, which hides any under it).
func (d *journalDisk) mounted() (mountInfo, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, err
	}
	return parseMountInfo(string(b), d.mnt)
}

// parseMountInfo finds the last mount on mnt in a mountinfo table
// (proc(5): id parent major:minor root point options [optional...] -
// type source super-options).
func parseMountInfo(table, mnt string) (mountInfo, error) {
	var m mountInfo
	found := false
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 5 || sep < 0 || sep+2 >= len(f) || unescapeMount(f[4]) != mnt {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			return m, fmt.Errorf("mountinfo: %q: %w", line, err)
		}
		m, found = mountInfo{id: id, dev: f[2], source: unescapeMount(f[sep+2])}, true
	}
	if !found {
		return m, fmt.Errorf("nothing is mounted on %s", mnt)
	}
	return m, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// proveFresh checks that the mount is not the file system that failed: a
// loop device over the image it means to mount
// (remount mounts the same image only once its old device was released,
// else a copy), on which a file can be written, synced, read back and removed.
func (d *journalDisk) proveFresh(after mountInfo) error {
	if !loopAttached(after.source, d.image) {
		return fmt.Errorf("%s is not a loop device over %s", after.source, d.image)
	}
	probe := filepath.Join(d.mnt, "remount-probe")
	want := []byte(after.String())
	f, err := os.OpenFile(probe, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(want)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	got, err := os.ReadFile(probe)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("the probe file read back %q, want %q", got, want)
	}
	return os.Remove(probe)
}

// loopAttached reports whether the loop device dev is still attached to
// image (/sys/block/loopN/loop/backing_file).
func loopAttached(dev, image string) bool {
	name := filepath.Base(dev)
	if !strings.HasPrefix(name, "loop") {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	if err != nil {
		return false // detached: the file is gone
	}
	return sameFile(strings.TrimSpace(string(b)), image)
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// loops lists the loop devices attached to image, for an error.
func loops(image string) string {
	out, err := exec.Command("losetup", "-j", image).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("losetup -j: %v %s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return s
	}
	return "none"
}

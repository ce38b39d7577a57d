//go:build linux && !saga_lean

package hil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestJournalDiskRemountWhileHeld is the soak's harness error of issue 30:
// after an eio fault, another process's mount namespace held the failed
// file system, the unmount did not end it, and `mount -o loop` took it up
// again — remount returned success and the journal still read EIO. Here a
// process in a mount namespace of its own holds it; remount must give a
// file system that works, with what was synced before the failure on it.
func TestJournalDiskRemountWhileHeld(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skipf("unshare (util-linux) is not installed: %v", err)
	}
	d := newJournalDisk(t, t.TempDir())
	if d.noEIO != "" {
		t.Skipf("the soak cannot fail a file system here: %s", d.noEIO)
	}
	kept := filepath.Join(d.mnt, "kept")
	if err := os.WriteFile(kept, []byte("synced before the failure"), 0o600); err != nil {
		t.Fatal(err)
	}
	syncFile(t, kept)
	if err := d.shutdown(); err != nil {
		t.Fatal(err)
	}

	// The holder: a copy of this namespace's mounts, private, so that
	// the unmount here does not reach it.
	holder := exec.Command(unshare, "--mount", "--propagation", "private", "sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Skipf("cannot make a mount namespace here: %v", err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	pid := holder.Process.Pid
	waitFor(t, "the holder's namespace to have the journal's file system", 10*time.Second, func() bool {
		ours, err1 := os.Readlink("/proc/self/ns/mnt")
		its, err2 := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", "mnt"))
		b, err3 := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
		return err1 == nil && err2 == nil && err3 == nil && ours != its && strings.Contains(string(b), " "+d.mnt+" ")
	})
	before, err := d.mounted()
	if err != nil {
		t.Fatal(err)
	}
	image := d.image

	if err := d.remount(); err != nil {
		t.Fatalf("remount: %v", err)
	}
	probe := filepath.Join(d.mnt, "after")
	if err := os.WriteFile(probe, []byte("x"), 0o600); err != nil {
		t.Fatalf("remount returned success, but a write on %s fails: %v (mounted before: %v; loop devices: %s)",
			d.mnt, err, before, loops(d.image))
	}
	syncFile(t, probe)
	got, err := os.ReadFile(kept)
	if err != nil || string(got) != "synced before the failure" {
		t.Fatalf("after the remount %s reads %q, %v: want what was synced before the failure", kept, got, err)
	}
	if d.image == image {
		t.Errorf("remount mounted %s again while %s held it (%s)", image, before.source, loops(image))
	}
}

// TestJournalDiskRemountFresh is the ordinary case: nothing else holds the
// file system; remount mounts the same image once its loop device is
// released, and the mount works.
func TestJournalDiskRemountFresh(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	d := newJournalDisk(t, t.TempDir())
	if d.noEIO != "" {
		t.Skipf("the soak cannot fail a file system here: %s", d.noEIO)
	}
	image := d.image
	if err := d.shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.mnt, "x"), nil, 0o600); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a write on the failed file system: %v, want EIO", err)
	}
	if err := d.remount(); err != nil {
		t.Fatalf("remount: %v", err)
	}
	if d.image != image {
		t.Errorf("remount mounted a copy (%s) though nothing held the file system", d.image)
	}
	if err := os.WriteFile(filepath.Join(d.mnt, "x"), nil, 0o600); err != nil {
		t.Fatalf("after the remount: %v", err)
	}
}

func TestParseMountInfo(t *testing.T) {
	table := `22 1 0:21 / /proc rw,nosuid - proc proc rw
97 30 7:3 / /tmp/a\040b/journal-fs rw,relatime shared:50 - ext4 /dev/loop3 rw
98 30 7:4 / /tmp/a\040b/journal-fs rw,relatime - ext4 /dev/loop4 rw
`
	m, err := parseMountInfo(table, "/tmp/a b/journal-fs")
	if err != nil {
		t.Fatal(err)
	}
	if m.id != 98 || m.dev != "7:4" || m.source != "/dev/loop4" {
		t.Errorf("got %+v, want the last mount: 98 7:4 /dev/loop4", m)
	}
	if _, err := parseMountInfo(table, "/mnt"); err == nil {
		t.Error("a point with nothing mounted: no error")
	}
}

func syncFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseMountInfo: any table parses without a panic, and a mount found
// is one of the table's lines for that point.
func FuzzParseMountInfo(f *testing.F) {
	f.Add("97 30 7:3 / /mnt/j rw,relatime shared:50 - ext4 /dev/loop3 rw\n", "/mnt/j")
	f.Add(`98 30 7:4 / /a\040b rw - ext4 /dev/loop4 rw`, "/a b")
	f.Add("1 2 3 4 /x - -\n- - - - /x\n", "/x")
	f.Fuzz(func(t *testing.T, table, mnt string) {
		m, err := parseMountInfo(table, mnt)
		if err != nil {
			return
		}
		if !strings.Contains(table, m.dev) || !strings.Contains(table, strconv.Itoa(m.id)) {
			t.Errorf("%+v is not from the table %q", m, table)
		}
	})
}

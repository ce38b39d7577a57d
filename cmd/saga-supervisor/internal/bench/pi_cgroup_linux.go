//go:build linux

package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A CPU quota for the daemon bench pi measures: a cgroup of its own with a
// CFS bandwidth limit (quota per period), made under the cgroup file
// system's cpu controller — cgroup v2 (cpu.max) or, where the cpu
// controller is still bound to a v1 hierarchy (hybrid hosts, many
// containers), v1 (cpu.cfs_quota_us and cpu.cfs_period_us). The daemon
// joins it before its first instruction (the launcher, pi-exec, writes its
// own pid to cgroup.procs and then execs the daemon), so no part of its
// start runs unconfined; the bench's own agents stay outside it. When a
// cgroup cannot be made or set, the bench fails and says why: it never
// measures an unconfined daemon as a confined one.

// cgroupFS is where cpu cgroups are made on this host.
type cgroupFS struct {
	version int    // 1 or 2
	parent  string // the directory the bench's cgroups are made in
}

// findCgroupFS finds the cpu controller: parent, when set, is a cgroup
// directory the caller prepared (a delegated subtree); otherwise the cpu
// hierarchy of cgroup v1 if one is mounted, else the root of cgroup v2.
func findCgroupFS(parent string) (cgroupFS, error) {
	if parent != "" {
		v := 1
		if _, err := os.Stat(filepath.Join(parent, "cgroup.controllers")); err == nil {
			v = 2
		} else if _, err := os.Stat(filepath.Join(parent, "cpu.cfs_quota_us")); err != nil {
			return cgroupFS{}, fmt.Errorf("--cgroup-parent %s: neither a cgroup v2 directory (cgroup.controllers) nor a v1 cpu cgroup (cpu.cfs_quota_us)", parent)
		}
		return cgroupFS{version: v, parent: parent}, nil
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cgroupFS{}, err
	}
	var v1, v2 string
	for line := range strings.Lines(string(data)) {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		pre, post, ok := strings.Cut(strings.TrimSpace(line), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		switch g[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = f[4]
			}
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == "cpu" && v1 == "" {
					v1 = f[4]
				}
			}
		}
	}
	switch {
	case v1 != "":
		// The bench's own cgroup in that hierarchy, if it is there to nest
		// under (it is "/" in most containers).
		if own := ownCgroup("cpu"); own != "" {
			if st, err := os.Stat(filepath.Join(v1, own)); err == nil && st.IsDir() {
				return cgroupFS{version: 1, parent: filepath.Join(v1, own)}, nil
			}
		}
		return cgroupFS{version: 1, parent: v1}, nil
	case v2 != "":
		ctrl, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
		if err != nil {
			return cgroupFS{}, err
		}
		if !slicesContainsField(string(ctrl), "cpu") {
			return cgroupFS{}, fmt.Errorf("cgroup v2 at %s has no cpu controller (cgroup.controllers: %q)", v2, strings.TrimSpace(string(ctrl)))
		}
		return cgroupFS{version: 2, parent: v2}, nil
	}
	return cgroupFS{}, errors.New("no cgroup file system with the cpu controller is mounted (neither cgroup2 nor a v1 cpu hierarchy in /proc/self/mountinfo)")
}

// ownCgroup is this process's cgroup in the v1 hierarchy of controller
// (from /proc/self/cgroup), or "".
func ownCgroup(controller string) string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && slicesContainsField(strings.ReplaceAll(parts[1], ",", " "), controller) {
			return parts[2]
		}
	}
	return ""
}

func slicesContainsField(s, word string) bool {
	for _, f := range strings.Fields(s) {
		if f == word {
			return true
		}
	}
	return false
}

// cpuCgroup is one cgroup the bench made for a daemon.
type cpuCgroup struct {
	fs     cgroupFS
	dir    string
	quota  float64       // CPUs; 0: no limit (the whole machine)
	period time.Duration // the CFS period the quota is spent over
}

// String says how the cgroup limits the CPU, as its files say it.
func (c *cpuCgroup) String() string {
	if c.fs.version == 2 {
		b, _ := os.ReadFile(filepath.Join(c.dir, "cpu.max"))
		return fmt.Sprintf("cgroup v2 %s, cpu.max %q", c.dir, strings.TrimSpace(string(b)))
	}
	q, _ := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_quota_us"))
	p, _ := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_period_us"))
	return fmt.Sprintf("cgroup v1 %s, cpu.cfs_quota_us %s, cpu.cfs_period_us %s", c.dir, strings.TrimSpace(string(q)), strings.TrimSpace(string(p)))
}

// newCPUCgroup makes a cgroup named name limited to quota CPUs over
// period (quota 0: unlimited), with the CPU weight weight (cgroup v2's
// scale, 100 the default).
func newCPUCgroup(fs cgroupFS, name string, quota float64, period time.Duration, weight int) (_ *cpuCgroup, err error) {
	c := &cpuCgroup{fs: fs, dir: filepath.Join(fs.parent, name), quota: quota, period: period}
	if fs.version == 2 {
		// The cpu controller must be enabled for the parent's children.
		sub, err := os.ReadFile(filepath.Join(fs.parent, "cgroup.subtree_control"))
		if err != nil {
			return nil, fmt.Errorf("cgroup v2: %w", err)
		}
		if !slicesContainsField(string(sub), "cpu") {
			if err := os.WriteFile(filepath.Join(fs.parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
				return nil, fmt.Errorf("cgroup v2: enabling the cpu controller in %s/cgroup.subtree_control: %w "+
					"(a cgroup with processes of its own cannot; run as root, or pass --cgroup-parent a delegated cgroup with none)", fs.parent, err)
			}
		}
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("making the cgroup: %w (bench pi needs root, or a delegated cgroup: --cgroup-parent)", err)
	}
	defer func() {
		if err != nil {
			os.Remove(c.dir)
		}
	}()
	periodUs := period.Microseconds()
	quotaUs := int64(quota * float64(periodUs))
	if quota > 0 && quotaUs < 1000 {
		return nil, fmt.Errorf("a quota of %g CPU over %v is %d µs a period: the kernel takes no less than 1000 µs", quota, period, quotaUs)
	}
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0); err != nil {
			return fmt.Errorf("cgroup: writing %q to %s: %w", value, filepath.Join(c.dir, file), err)
		}
		return nil
	}
	if fs.version == 2 {
		max := "max"
		if quota > 0 {
			max = strconv.FormatInt(quotaUs, 10)
		}
		if err := write("cpu.max", fmt.Sprintf("%s %d", max, periodUs)); err != nil {
			return nil, err
		}
		if err := write("cpu.weight", strconv.Itoa(weight)); err != nil {
			return nil, err
		}
	} else {
		q := int64(-1)
		if quota > 0 {
			q = quotaUs
		}
		for _, kv := range [][2]string{{"cpu.cfs_quota_us", "-1"}, {"cpu.cfs_period_us", strconv.FormatInt(periodUs, 10)},
			{"cpu.cfs_quota_us", strconv.FormatInt(q, 10)}, {"cpu.shares", strconv.Itoa(max(2, weight*1024/100))}} {
			if err := write(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// check reads the limit back: what the kernel took is what is reported.
func (c *cpuCgroup) check() error {
	periodUs := c.period.Microseconds()
	quotaUs := int64(c.quota * float64(periodUs))
	read := func(file string) string {
		b, _ := os.ReadFile(filepath.Join(c.dir, file))
		return strings.TrimSpace(string(b))
	}
	var got, want string
	if c.fs.version == 2 {
		got, want = read("cpu.max"), fmt.Sprintf("max %d", periodUs)
		if c.quota > 0 {
			want = fmt.Sprintf("%d %d", quotaUs, periodUs)
		}
	} else {
		got, want = read("cpu.cfs_quota_us")+" "+read("cpu.cfs_period_us"), fmt.Sprintf("-1 %d", periodUs)
		if c.quota > 0 {
			want = fmt.Sprintf("%d %d", quotaUs, periodUs)
		}
	}
	if got != want {
		return fmt.Errorf("cgroup %s: the limit reads %q, not %q as written", c.dir, got, want)
	}
	return nil
}

// procs is the file a process writes its pid to, to join the cgroup.
func (c *cpuCgroup) procs() string { return filepath.Join(c.dir, "cgroup.procs") }

// holds reports whether process pid is in the cgroup (from
// /proc/PID/cgroup): the bench checks it before it measures anything.
func (c *cpuCgroup) holds(pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	name := "/" + filepath.Base(c.dir)
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		v2 := parts[0] == "0" && parts[1] == ""
		v1cpu := slicesContainsField(strings.ReplaceAll(parts[1], ",", " "), "cpu")
		if (c.fs.version == 2 && v2 || c.fs.version == 1 && v1cpu) && strings.HasSuffix(parts[2], name) {
			return nil
		}
	}
	return fmt.Errorf("process %d is not in the cgroup %s; its /proc/%d/cgroup:\n%s", pid, c.dir, pid, data)
}

func (c *cpuCgroup) stat() throttle {
	var t throttle
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return t
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "nr_periods":
			t.Periods = n
		case "nr_throttled":
			t.Throttled = n
		case "throttled_usec":
			t.TimeNs = n * 1000
		case "throttled_time":
			t.TimeNs = n
		}
	}
	return t
}

// ownCgroupDir is the directory of this process's cgroup in fs's
// hierarchy (v2: the unified one; v1: the cpu controller's).
func ownCgroupDir(fs cgroupFS) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	root := fs.parent
	if fs.version == 1 {
		// fs.parent is the hierarchy's mount, or this process's own cgroup
		// under it: the mount is what /proc/self/cgroup's paths are under.
		if own := ownCgroup("cpu"); own != "" && own != "/" && strings.HasSuffix(root, own) {
			root = strings.TrimSuffix(root, own)
		}
	}
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if fs.version == 2 && parts[0] == "0" && parts[1] == "" ||
			fs.version == 1 && slicesContainsField(strings.ReplaceAll(parts[1], ",", " "), "cpu") {
			return filepath.Join(root, parts[2]), nil
		}
	}
	return "", fmt.Errorf("this process's cgroup is not in /proc/self/cgroup:\n%s", data)
}

// moveSelf moves this process (all its threads) into the cgroup at dir.
func moveSelf(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("moving the bench into the cgroup %s: %w", dir, err)
	}
	return nil
}

// remove removes the cgroup, once its processes have gone (a process that
// exited may linger in it for a moment).
func (c *cpuCgroup) remove() error {
	var err error
	for range 100 {
		if err = os.Remove(c.dir); err == nil || os.IsNotExist(err) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing the cgroup %s: %w", c.dir, err)
}

package promtext

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: 100 on every
// Linux the daemon runs on (as procfs, which client_golang used, assumes).
const userHZ = 100

// ProcessCollector writes the process's families from /proc, as
// client_golang's process collector did: CPU time, memory, file
// descriptors, start time and the network bytes of its namespace. A file
// it cannot read leaves its families out of that scrape.
type ProcessCollector struct {
	root                                string
	cpu, vsize, rss, start, fds, maxFDs *Desc
	maxVsize, netIn, netOut             *Desc
}

// NewProcessCollector returns the collector of the process, read from
// root/self ("": /proc).
func NewProcessCollector(root string) *ProcessCollector {
	if root == "" {
		root = "/proc"
	}
	return &ProcessCollector{
		root:     root,
		cpu:      NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", CounterKind),
		vsize:    NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", GaugeKind),
		rss:      NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", GaugeKind),
		start:    NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", GaugeKind),
		fds:      NewDesc("process_open_fds", "Number of open file descriptors.", GaugeKind),
		maxFDs:   NewDesc("process_max_fds", "Maximum number of open file descriptors.", GaugeKind),
		maxVsize: NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", GaugeKind),
		netIn:    NewDesc("process_network_receive_bytes_total", "Number of bytes received by the process over the network.", CounterKind),
		netOut:   NewDesc("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.", CounterKind),
	}
}

// Describe implements Collector.
func (c *ProcessCollector) Describe() []*Desc {
	return []*Desc{c.cpu, c.vsize, c.rss, c.start, c.fds, c.maxFDs, c.maxVsize, c.netIn, c.netOut}
}

// Collect implements Collector.
func (c *ProcessCollector) Collect(s *Sink) {
	self := filepath.Join(c.root, "self")
	if st, err := readStat(self); err == nil {
		s.Value(c.cpu, float64(st.utime+st.stime)/userHZ)
		s.Value(c.vsize, float64(st.vsize))
		s.Value(c.rss, float64(st.rssPages)*float64(os.Getpagesize()))
		if boot, err := bootTime(c.root); err == nil {
			s.Value(c.start, float64(boot)+float64(st.startTicks)/userHZ)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(self, "fd")); err == nil {
		s.Value(c.fds, float64(len(ents)))
	}
	if files, space, err := readLimits(self); err == nil {
		s.Value(c.maxFDs, files)
		s.Value(c.maxVsize, space)
	}
	if in, out, err := readNetstat(self); err == nil {
		s.Value(c.netIn, in)
		s.Value(c.netOut, out)
	}
}

type procStat struct {
	utime, stime, startTicks, vsize, rssPages uint64
}

// readStat reads /proc/<pid>/stat. The command name, in parentheses, may
// hold spaces and parentheses itself: the fields start after the last ')'.
func readStat(self string) (procStat, error) {
	b, err := os.ReadFile(filepath.Join(self, "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("promtext: stat: no command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): field n is f[n-3].
	if len(f) < 22 {
		return procStat{}, errors.New("promtext: stat: too few fields")
	}
	var st procStat
	for _, x := range []struct {
		field int
		to    *uint64
	}{{14, &st.utime}, {15, &st.stime}, {22, &st.startTicks}, {23, &st.vsize}, {24, &st.rssPages}} {
		if *x.to, err = strconv.ParseUint(f[x.field-3], 10, 64); err != nil {
			return procStat{}, err
		}
	}
	return st, nil
}

// bootTime is the btime line of /proc/stat: the boot, in seconds since
// the epoch.
func bootTime(root string) (uint64, error) {
	f, err := os.Open(filepath.Join(root, "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "btime "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("promtext: no btime in stat")
}

// readLimits returns the soft limits on open files and address space;
// "unlimited" is the largest uint64, as procfs read it.
func readLimits(self string) (files, space float64, err error) {
	b, err := os.ReadFile(filepath.Join(self, "limits"))
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for line := range strings.Lines(string(b)) {
		for name, to := range map[string]*float64{"Max open files": &files, "Max address space": &space} {
			rest, ok := strings.CutPrefix(line, name)
			if !ok {
				continue
			}
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, 0, errors.New("promtext: limits: " + name + " without a value")
			}
			if f[0] == "unlimited" {
				*to = math.MaxUint64
			} else {
				v, err := strconv.ParseUint(f[0], 10, 64)
				if err != nil {
					return 0, 0, err
				}
				*to = float64(v)
			}
			found++
		}
	}
	if found != 2 {
		return 0, 0, errors.New("promtext: limits: open files or address space missing")
	}
	return files, space, nil
}

// readNetstat returns IpExt's InOctets and OutOctets from
// /proc/<pid>/net/netstat: a line of names, then a line of values.
func readNetstat(self string) (in, out float64, err error) {
	b, err := os.ReadFile(filepath.Join(self, "net", "netstat"))
	if err != nil {
		return 0, 0, err
	}
	lines := strings.Split(string(b), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "IpExt:" || len(values) != len(names) || values[0] != "IpExt:" {
			continue
		}
		for j, n := range names {
			var to *float64
			switch n {
			case "InOctets":
				to = &in
			case "OutOctets":
				to = &out
			default:
				continue
			}
			if *to, err = strconv.ParseFloat(values[j], 64); err != nil {
				return 0, 0, err
			}
		}
		return in, out, nil
	}
	return 0, 0, errors.New("promtext: netstat: no IpExt")
}

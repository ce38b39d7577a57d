package promtext

import (
	"runtime"
	"runtime/debug"
	rm "runtime/metrics"
	"sync"
	"time"
)

// goStat is one go_ family read from runtime/metrics: the runtime
// metrics it sums (or, with sub, the first minus the rest).
type goStat struct {
	name, help string
	kind       Kind
	from       []string
}

// The families client_golang's Go collector wrote by default, with its
// names, help and the same runtime/metrics sources, so that dashboards
// built on them keep working. None of them stops the world to read.
var goStats = []goStat{
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", GaugeKind, []string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", GaugeKind, []string{"/gc/gomemlimit:bytes"}},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", GaugeKind, []string{"/sched/gomaxprocs:threads"}},
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", GaugeKind, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", CounterKind, []string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", GaugeKind, []string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", CounterKind, []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", GaugeKind, []string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", GaugeKind, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", GaugeKind, []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", GaugeKind, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", GaugeKind, []string{"/gc/heap/objects:objects"}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", GaugeKind, []string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", GaugeKind, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", CounterKind, []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", GaugeKind, []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", GaugeKind, []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", GaugeKind, []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", GaugeKind, []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", GaugeKind, []string{"/gc/heap/goal:bytes"}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", GaugeKind, []string{"/memory/classes/other:bytes"}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", GaugeKind, []string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", GaugeKind, []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", GaugeKind, []string{"/memory/classes/total:bytes"}},
}

// GoCollector writes the Go runtime's families: goroutines, threads,
// collection pauses, the heap's classes.
type GoCollector struct {
	goroutines, threads, gcPauses, lastGC, info *Desc
	stats                                       []*Desc

	mu      sync.Mutex // guards samples, read into at each scrape
	samples []rm.Sample
	index   map[string]int // runtime metric → its place in samples
}

// NewGoCollector returns the Go runtime's collector.
func NewGoCollector() *GoCollector {
	c := &GoCollector{
		goroutines: NewDesc("go_goroutines", "Number of goroutines that currently exist.", GaugeKind),
		threads:    NewDesc("go_threads", "Number of OS threads created.", GaugeKind),
		gcPauses:   NewDesc("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", SummaryKind),
		lastGC:     NewDesc("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.", GaugeKind),
		info: &Desc{Name: "go_info", Help: "Information about the Go environment.", Kind: GaugeKind,
			ConstLabels: []Label{{"version", runtime.Version()}}},
		index: map[string]int{},
	}
	for _, s := range goStats {
		c.stats = append(c.stats, NewDesc(s.name, s.help, s.kind))
		for _, from := range s.from {
			if _, ok := c.index[from]; !ok {
				c.index[from] = len(c.samples)
				c.samples = append(c.samples, rm.Sample{Name: from})
			}
		}
	}
	return c
}

// Describe implements Collector.
func (c *GoCollector) Describe() []*Desc {
	return append([]*Desc{c.goroutines, c.threads, c.gcPauses, c.lastGC, c.info}, c.stats...)
}

// Collect implements Collector.
func (c *GoCollector) Collect(s *Sink) {
	s.Value(c.goroutines, float64(runtime.NumGoroutine()))
	threads, _ := runtime.ThreadCreateProfile(nil)
	s.Value(c.threads, float64(threads))

	// The quantiles of the pauses the runtime remembers, as client_golang
	// computed them: min, quartiles, max.
	gc := debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}
	debug.ReadGCStats(&gc)
	q := map[float64]float64{}
	for i, p := range gc.PauseQuantiles {
		q[float64(i)/4] = p.Seconds()
	}
	s.Summary(c.gcPauses, q, gc.PauseTotal.Seconds(), uint64(gc.NumGC))
	s.Value(c.lastGC, float64(gc.LastGC.UnixNano())/1e9)
	s.Value(c.info, 1)

	c.mu.Lock()
	defer c.mu.Unlock()
	rm.Read(c.samples)
	for i, st := range goStats {
		var v float64
		for _, from := range st.from {
			v += scalar(c.samples[c.index[from]].Value)
		}
		s.Value(c.stats[i], v)
	}
}

// scalar is a runtime metric's value as a float (0 if this runtime does
// not know it).
func scalar(v rm.Value) float64 {
	switch v.Kind() {
	case rm.KindUint64:
		return float64(v.Uint64())
	case rm.KindFloat64:
		return v.Float64()
	}
	return 0
}

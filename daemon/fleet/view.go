package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// maxStatusBytes bounds a status payload the view reads (the retained
// status is small: api.Status).
const maxStatusBytes = 4 << 10

// Row states, worst first in the order a reader should look at them.
const (
	RowBad      = "BAD"     // its summary or status could not be read
	RowOffline  = "OFFLINE" // its status says offline (the will), or no status
	RowStale    = "STALE"   // its summary is older than the view's stale age
	RowHalted   = "HALTED"
	RowNotReady = "NOT_READY"
	RowReady    = "READY"
)

// Row is one device as the view shows it.
type Row struct {
	Device     string        `json:"device"`
	State      string        `json:"state"`  // one of the Row* states
	Online     *bool         `json:"online"` // from the status topic; null: no status seen
	Ready      bool          `json:"ready"`
	Halted     bool          `json:"halted"`
	HaltReason string        `json:"halt_reason,omitempty"`
	OpenSagas  int           `json:"open_sagas"`
	Seq        uint64        `json:"seq"`
	Hash       string        `json:"hash,omitempty"`
	Version    string        `json:"version,omitempty"`
	At         *time.Time    `json:"at,omitempty"`
	Age        time.Duration `json:"age_ns"`
	Error      string        `json:"error,omitempty"` // why BAD: the coded error
}

type entry struct {
	sum    *Summary
	sumErr error
	online *bool
	stErr  error
}

// View is the fleet as the wildcard subscriptions deliver it. Its methods
// are safe for concurrent use: an MQTT handler calls Summary and Status
// (they only decode and store), a printer calls Rows.
type View struct {
	prefix string
	mu     sync.Mutex
	dev    map[string]*entry
}

// NewView returns an empty view of the devices under prefix.
func NewView(prefix string) *View { return &View{prefix: prefix, dev: map[string]*entry{}} }

// device returns the device level of <prefix>/<device>/<leaf>, or "".
func (v *View) device(topic, leaf string) string {
	rest, ok := strings.CutPrefix(topic, v.prefix+"/")
	if !ok {
		return ""
	}
	d, ok := strings.CutSuffix(rest, "/"+leaf)
	if !ok || api.ValidName(d) != nil {
		return ""
	}
	return d
}

func (v *View) entry(d string) *entry {
	e := v.dev[d]
	if e == nil {
		e = &entry{}
		v.dev[d] = e
	}
	return e
}

// Summary takes a message from <prefix>/+/summary. An empty payload (a
// cleared retained summary) forgets the device's summary.
func (v *View) Summary(topic string, payload []byte) {
	d := v.device(topic, "summary")
	if d == "" {
		return
	}
	var s *Summary
	var err error
	if len(payload) > 0 {
		var got Summary
		if got, err = Decode(payload); err == nil && got.Device != d {
			err = bad("summary on %s names device %q", topic, truncate(got.Device, 64))
		}
		if err == nil {
			s = &got
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.entry(d)
	if err != nil {
		e.sumErr = err // the last good summary stays, marked bad
		return
	}
	e.sum, e.sumErr = s, nil
}

// Status takes a message from <prefix>/+/status (api.Status: online, or
// the offline will).
func (v *View) Status(topic string, payload []byte) {
	d := v.device(topic, "status")
	if d == "" {
		return
	}
	var err error
	var online bool
	if len(payload) > maxStatusBytes {
		err = &api.Error{Code: api.CodePayloadTooLarge, Message: fmt.Sprintf("status of %d bytes: at most %d are read", len(payload), maxStatusBytes)}
	} else {
		var st struct {
			State string `json:"state"`
		}
		switch jerr := json.Unmarshal(payload, &st); {
		case jerr != nil:
			err = bad("status is not JSON: %v", jerr)
		case st.State == api.StateOnline:
			online = true
		case st.State == api.StateOffline:
		default:
			err = bad("status state %q", truncate(st.State, 32))
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	e := v.entry(d)
	e.stErr = err
	if err == nil {
		e.online = &online
	}
}

// Rows returns every device, sorted by name, as of now: a summary older
// than staleAfter is STALE, a status saying offline is OFFLINE.
func (v *View) Rows(now time.Time, staleAfter time.Duration) []Row {
	v.mu.Lock()
	defer v.mu.Unlock()
	rows := make([]Row, 0, len(v.dev))
	for d, e := range v.dev {
		r := Row{Device: d, Online: e.online}
		if s := e.sum; s != nil {
			at := s.At
			r.Ready, r.Halted, r.HaltReason, r.OpenSagas = s.Ready, s.Halted, s.HaltReason, s.OpenSagas
			r.Seq, r.Hash, r.Version, r.At = s.Seq, s.Hash, s.Version, &at
			r.Age = max(now.Sub(s.At), 0)
		}
		switch {
		case e.sumErr != nil:
			r.State, r.Error = RowBad, e.sumErr.Error()
		case e.stErr != nil:
			r.State, r.Error = RowBad, e.stErr.Error()
		case e.online == nil || !*e.online:
			r.State = RowOffline
		case e.sum == nil || r.Age > staleAfter:
			r.State = RowStale
		case r.Halted:
			r.State = RowHalted
		case !r.Ready:
			r.State = RowNotReady
		default:
			r.State = RowReady
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b Row) int { return strings.Compare(a.Device, b.Device) })
	return rows
}

// WriteTable writes rows as an aligned table.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tSTATE\tSAGAS\tSEQ\tHASH\tVERSION\tAGE\tDETAIL")
	for _, r := range rows {
		age := "-"
		if r.At != nil {
			age = r.Age.Round(100 * time.Millisecond).String()
		}
		detail := r.HaltReason
		if r.Error != "" {
			detail = r.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.Device, r.State, r.OpenSagas, r.Seq, dash(r.Hash), dash(r.Version), age, oneLine(detail, 80))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a free-text field on its row: control characters become
// spaces, and it is cut to n bytes.
func oneLine(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		return truncate(s, n-3) + "..."
	}
	return s
}

package replay

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Format names the result document's layout; a fixture of another format
// is refused rather than compared.
const Format = "saga-supervisor replay 1"

// Result is what a replay found. Every list is sorted (commands by seq,
// actuators by name), so equal replays encode to equal bytes.
type Result struct {
	Format string `json:"format"`
	// Journal and Config name the inputs. They are left out of a fixture:
	// the same incident is replayed from other paths on other machines.
	Journal string `json:"journal,omitempty"`
	Config  string `json:"config,omitempty"`
	Window  Window `json:"window"`
	// Notes say what the replay could not check as the daemon did, and
	// what it took from the journal instead.
	Notes []string `json:"notes"`
	// NotReplayed counts, by code, the refusals not replayed: those the
	// supervisor decided before the engine's gate (leases, permissions,
	// rates, readiness), whose causes are not in the journal, and those
	// journaled only as a count, which name no command.
	NotReplayed map[string]int `json:"not_replayed"`
	// Skipped are sagas the journal names without their BEGIN.
	Skipped []SkippedSaga `json:"skipped_sagas"`

	RefusedNow         []Command    `json:"refused_now"`         // served then, refused now
	ServedNow          []Command    `json:"served_now"`          // refused then, served now
	RefusedDifferently []Command    `json:"refused_differently"` // refused then and now, with other codes
	ClampedDifferently []Command    `json:"clamped_differently"` // served then and now, to other targets
	Sagas              []SagaDiff   `json:"sagas_differ"`        // sagas that ended otherwise
	Divergence         []Divergence `json:"divergence"`          // per actuator, the first record it differs at
	Final              []Position   `json:"final"`               // every actuator at the window's end
	Summary            Summary      `json:"summary"`
}

// Window is the part of the journal replayed and reported.
type Window struct {
	FirstSeq uint64 `json:"journal_first_seq"`
	LastSeq  uint64 `json:"journal_last_seq"`
	FromSeq  uint64 `json:"from_seq"`
	ToSeq    uint64 `json:"to_seq"`
	From     string `json:"from_time,omitempty"`
	To       string `json:"to_time,omitempty"`
	// StartSeq is where driving starts: FromSeq, or the BEGIN of a saga
	// open at FromSeq, or the record after Checkpoint. Records before it
	// (and after Checkpoint) are applied as recovery would.
	StartSeq uint64 `json:"start_seq"`
	// Checkpoint is the checkpoint a journal that begins after seq 1 is
	// replayed from: both the replay's engine and the journal's view start
	// from its snapshot, and the records up to it are not replayed. Nil
	// when the journal begins at seq 1 or no checkpoint could be used.
	Checkpoint  *StartCheckpoint `json:"start_checkpoint,omitempty"`
	OpenAtStart []OpenSaga       `json:"open_at_start"`
}

// StartCheckpoint names the checkpoint a replay started from.
type StartCheckpoint struct {
	Seq  uint64 `json:"seq"`  // the last record its snapshot covers
	File string `json:"file"` // its file name in the journal directory
}

// OpenSaga is a saga open at the window's start, replayed from its BEGIN
// or, when FromCheckpoint, from the checkpoint that holds it open.
type OpenSaga struct {
	Saga  uint64 `json:"saga"`
	Agent string `json:"agent"`
	// BeginSeq is its BEGIN; 0 when the journal no longer holds it.
	BeginSeq uint64 `json:"begin_seq"`
	// FromCheckpoint: the saga was open in the checkpoint's snapshot,
	// which gives its owner and steps; its records after the checkpoint
	// are replayed.
	FromCheckpoint bool `json:"from_checkpoint,omitempty"`
}

// SkippedSaga is a saga whose records were not replayed, and why.
type SkippedSaga struct {
	Saga   uint64 `json:"saga"`
	Reason string `json:"reason"`
}

// Command is one step command that the replay decided otherwise.
type Command struct {
	Seq       uint64 `json:"seq"`
	Time      string `json:"time"`
	Saga      uint64 `json:"saga"`
	Agent     string `json:"agent"`
	Actuator  string `json:"actuator"`
	CmdID     string `json:"cmd_id,omitempty"`
	Requested Num    `json:"requested"`
	// BeforeWindow marks a command of a saga open at the window's start,
	// replayed from its BEGIN.
	BeforeWindow bool    `json:"before_window,omitempty"`
	Then         Verdict `json:"then"`
	Now          Verdict `json:"now"`
}

// Verdict is what the gate decided on a command.
type Verdict struct {
	Served  bool   `json:"served"`
	Target  *Num   `json:"target,omitempty"` // served: the value commanded
	Clamped bool   `json:"clamped,omitempty"`
	Code    string `json:"code,omitempty"` // refused: why
	Reason  string `json:"reason,omitempty"`
}

// String is the verdict for a person: "served, target 40 (clamped)" or
// "refused LIMIT_MAX: shoulder: 150 is above max 120".
func (v Verdict) String() string {
	if v.Served {
		s := "served, target -"
		if v.Target != nil {
			s = "served, target " + v.Target.String()
		}
		if v.Clamped {
			s += " (clamped)"
		}
		return s
	}
	if v.Reason == "" {
		return "refused " + v.Code
	}
	return "refused " + v.Code + ": " + v.Reason
}

// SagaDiff is a saga that ended otherwise: committed, clean or partial
// (unwound), open, or "not begun: CODE" when the replay refused its BEGIN.
type SagaDiff struct {
	Saga     uint64 `json:"saga"`
	Agent    string `json:"agent"`
	BeginSeq uint64 `json:"begin_seq"` // 0: begun before the journal's first record
	Then     string `json:"then"`
	Now      string `json:"now"`
}

// Divergence is the first record after which an actuator's commanded
// value in the replay differs from the journal's.
type Divergence struct {
	Actuator string `json:"actuator"`
	Seq      uint64 `json:"seq"`
	Time     string `json:"time"`
	Record   string `json:"record"`
	Journal  Num    `json:"journal"`
	Replay   Num    `json:"replay"`
}

// Position is an actuator's commanded value at the window's end.
type Position struct {
	Actuator string `json:"actuator"`
	Journal  Num    `json:"journal"`
	Replay   Num    `json:"replay"`
	Differs  bool   `json:"differs,omitempty"`
}

// Summary counts what was replayed and what differs.
type Summary struct {
	Records            uint64 `json:"records"` // records read from the replay's start to the window's end
	Steps              int    `json:"steps"`   // step commands driven (served and refused then)
	Begins             int    `json:"begins"`
	Commits            int    `json:"commits"`
	Aborts             int    `json:"aborts"`
	Halts              int    `json:"halts"`
	Resets             int    `json:"resets"`
	Restarts           int    `json:"restarts"`
	InjectedFaults     int    `json:"injected_faults"`
	RefusedNow         int    `json:"refused_now"`
	ServedNow          int    `json:"served_now"`
	RefusedDifferently int    `json:"refused_differently"`
	ClampedDifferently int    `json:"clamped_differently"`
	SagasDiffer        int    `json:"sagas_differ"`
	Diverged           int    `json:"actuators_diverged"`
	FinalDiffer        int    `json:"final_differ"`
	Differs            bool   `json:"differs"`
	Line               string `json:"line"`
}

// Num is a float64 that survives JSON whatever its value: a finite number
// is a JSON number, NaN and ±Inf (which a journal can hold) are strings.
type Num float64

// MarshalJSON writes the shortest form that reads back as the same value.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte(strconv.Quote(n.String())), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

// UnmarshalJSON reads a number, or "NaN", "+Inf" or "-Inf".
func (n *Num) UnmarshalJSON(b []byte) error {
	s := string(b)
	if uq, err := strconv.Unquote(s); err == nil {
		switch uq {
		case "NaN", "+Inf", "-Inf":
			f, _ := strconv.ParseFloat(uq, 64)
			*n = Num(f)
			return nil
		}
		return fmt.Errorf("replay: %s is not a number", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return fmt.Errorf("replay: %.40q is not a number", s)
	}
	*n = Num(f)
	return nil
}

// String is the number in its shortest exact form.
func (n Num) String() string { return strconv.FormatFloat(float64(n), 'g', -1, 64) }

func num(f float64) *Num { n := Num(f); return &n }

// summarize counts the lists and writes the summary line.
func (r *Result) summarize() {
	s := &r.Summary
	s.RefusedNow, s.ServedNow = len(r.RefusedNow), len(r.ServedNow)
	s.RefusedDifferently, s.ClampedDifferently = len(r.RefusedDifferently), len(r.ClampedDifferently)
	s.SagasDiffer, s.Diverged = len(r.Sagas), len(r.Divergence)
	s.FinalDiffer = 0
	for _, p := range r.Final {
		if p.Differs {
			s.FinalDiffer++
		}
	}
	s.Differs = s.RefusedNow+s.ServedNow+s.RefusedDifferently+s.ClampedDifferently+s.SagasDiffer+s.Diverged+s.FinalDiffer > 0
	verdict := "SAME"
	if s.Differs {
		verdict = "DIFFERS"
	}
	s.Line = fmt.Sprintf("%s: seq %d..%d, %d step commands replayed: %d refused now, %d served now, %d refused differently, "+
		"%d clamped differently, %d sagas ended differently, %d actuators diverged, %d end elsewhere",
		verdict, r.Window.FromSeq, r.Window.ToSeq, s.Steps, s.RefusedNow, s.ServedNow, s.RefusedDifferently,
		s.ClampedDifferently, s.SagasDiffer, s.Diverged, s.FinalDiffer)
}

// normalize makes every list non-nil, so a result encodes the same
// whether it was built or decoded.
func (r *Result) normalize() {
	for _, l := range []*[]Command{&r.RefusedNow, &r.ServedNow, &r.RefusedDifferently, &r.ClampedDifferently} {
		if *l == nil {
			*l = []Command{}
		}
	}
	if r.Notes == nil {
		r.Notes = []string{}
	}
	if r.NotReplayed == nil {
		r.NotReplayed = map[string]int{}
	}
	if r.Skipped == nil {
		r.Skipped = []SkippedSaga{}
	}
	if r.Sagas == nil {
		r.Sagas = []SagaDiff{}
	}
	if r.Divergence == nil {
		r.Divergence = []Divergence{}
	}
	if r.Final == nil {
		r.Final = []Position{}
	}
	if r.Window.OpenAtStart == nil {
		r.Window.OpenAtStart = []OpenSaga{}
	}
}

// WriteText writes the result for a person.
func (r *Result) WriteText(w io.Writer) error {
	b := &strings.Builder{}
	cfg := r.Config
	if cfg == "" {
		cfg = "(unnamed)"
	}
	fmt.Fprintf(b, "replay of %s (seq %d..%d) under %s\n", r.Journal, r.Window.FirstSeq, r.Window.LastSeq, cfg)
	fmt.Fprintf(b, "window: seq %d..%d", r.Window.FromSeq, r.Window.ToSeq)
	if r.Window.From != "" {
		fmt.Fprintf(b, " (%s .. %s)", r.Window.From, r.Window.To)
	}
	b.WriteString("\n")
	if c := r.Window.Checkpoint; c != nil {
		fmt.Fprintf(b, "  started from checkpoint %s (seq %d): the records up to it are in its snapshot and not replayed\n", c.File, c.Seq)
	}
	if r.Window.StartSeq < r.Window.FromSeq {
		fmt.Fprintf(b, "  driving starts at seq %d: sagas open at the window's start are replayed from their BEGIN or the checkpoint\n", r.Window.StartSeq)
	}
	for _, o := range r.Window.OpenAtStart {
		switch {
		case o.FromCheckpoint && r.Window.Checkpoint != nil:
			fmt.Fprintf(b, "  saga %d (%s) was open at checkpoint seq %d: replayed from there, its owner and earlier steps from the snapshot\n",
				o.Saga, o.Agent, r.Window.Checkpoint.Seq)
		default:
			fmt.Fprintf(b, "  saga %d (%s) was open at the window's start: replayed from its BEGIN at seq %d\n", o.Saga, o.Agent, o.BeginSeq)
		}
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(b, "  saga %d skipped: %s\n", s.Saga, s.Reason)
	}
	b.WriteString("what the replay could not check as the daemon did:\n")
	for _, n := range r.Notes {
		b.WriteString("  - " + n + "\n")
	}
	if len(r.NotReplayed) > 0 {
		b.WriteString("refusals the supervisor decided before the gate, not replayed:")
		for _, code := range sortedKeys(r.NotReplayed) {
			fmt.Fprintf(b, " %s %d", code, r.NotReplayed[code])
		}
		b.WriteString("\n")
	}
	commands := func(title string, cs []Command) {
		fmt.Fprintf(b, "%s (%d)\n", title, len(cs))
		for _, c := range cs {
			fmt.Fprintf(b, "  seq %d  %s  saga %d (%s)  %s  requested %s", c.Seq, c.Time, c.Saga, c.Agent, c.Actuator, c.Requested)
			if c.BeforeWindow {
				b.WriteString("  [before the window]")
			}
			fmt.Fprintf(b, "\n      then: %s\n      now:  %s\n", c.Then, c.Now)
		}
	}
	commands("refused now, served then", r.RefusedNow)
	commands("served now, refused then", r.ServedNow)
	commands("refused then and now, for another reason", r.RefusedDifferently)
	commands("clamped differently", r.ClampedDifferently)
	fmt.Fprintf(b, "sagas that ended differently (%d)\n", len(r.Sagas))
	for _, s := range r.Sagas {
		begun := fmt.Sprintf("begun at seq %d", s.BeginSeq)
		if s.BeginSeq == 0 {
			begun = "begun before the journal's first record"
		}
		fmt.Fprintf(b, "  saga %d (%s, %s): then %s, now %s\n", s.Saga, s.Agent, begun, s.Then, s.Now)
	}
	fmt.Fprintf(b, "where the replayed world diverges (%d)\n", len(r.Divergence))
	for _, d := range r.Divergence {
		fmt.Fprintf(b, "  %s: first at seq %d (%s, %s): journal %s, replay %s\n", d.Actuator, d.Seq, d.Record, d.Time, d.Journal, d.Replay)
	}
	b.WriteString("commanded values at the window's end\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  actuator\tjournal\treplay\t")
	for _, p := range r.Final {
		mark := ""
		if p.Differs {
			mark = "differs"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", p.Actuator, p.Journal, p.Replay, mark)
	}
	tw.Flush()
	b.WriteString(r.Summary.Line + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

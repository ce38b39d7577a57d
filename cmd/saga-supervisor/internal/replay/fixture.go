package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// maxFixture bounds a fixture file: one entry per differing command, so
// even a large incident is far below it, and a wrong file given to
// --expect is refused without reading it all.
const maxFixture = 64 << 20

// ErrBadFixture is wrapped by every error reading a fixture.
var ErrBadFixture = errors.New("replay: bad fixture")

// Fixture is the result as a regression fixture: the JSON document without
// the paths of its inputs, indented, one final newline.
func (r *Result) Fixture() ([]byte, error) {
	c := *r
	c.Journal, c.Config = "", ""
	c.normalize()
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodeFixture reads a fixture. It is strict: one JSON document of this
// format, no unknown fields, nothing after it.
func DecodeFixture(b []byte) (*Result, error) {
	if len(b) > maxFixture {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadFixture, maxFixture)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Result
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadFixture, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: more after the document", ErrBadFixture)
	}
	if r.Format != Format {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrBadFixture, r.Format, Format)
	}
	if r.Journal != "" || r.Config != "" {
		return nil, fmt.Errorf("%w: a fixture names no journal or config path", ErrBadFixture)
	}
	r.normalize()
	return &r, nil
}

// ReadFixture reads and decodes a fixture file.
func ReadFixture(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFixture+1))
	if err != nil {
		return nil, err
	}
	return DecodeFixture(b)
}

// WriteFixture writes r's fixture to path atomically (a temporary file in
// the same directory, synced, renamed over path, the directory synced), so
// an interrupted write never leaves half a fixture. It refuses a path
// inside the journal directory: the replay never writes there.
func WriteFixture(path, journalDir string, r *Result) error {
	if inside(path, journalDir) {
		return fmt.Errorf("%s is inside the journal directory %s: the replay writes nothing there", path, journalDir)
	}
	b, err := r.Fixture()
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// inside reports whether path lies in dir (or is dir).
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	if real, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		p = filepath.Join(real, filepath.Base(p))
	}
	if real, err := filepath.EvalSymlinks(d); err == nil {
		d = real
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// maxDiffLines bounds a diff's length: past it, the rest is counted.
const maxDiffLines = 60

// Compare returns the differences between a fixture and a replay's result,
// one line each, naming where in the document each lies ("refused_now[seq
// 14].now.code: fixture LIMIT_MAX, now LIMIT_STEP"). None means equal.
func Compare(fixture, got *Result) []string {
	a, err1 := fixture.Fixture()
	b, err2 := got.Fixture()
	if err1 != nil || err2 != nil {
		return []string{fmt.Sprintf("cannot encode: %v %v", err1, err2)}
	}
	if bytes.Equal(a, b) {
		return nil
	}
	var av, bv any
	json.Unmarshal(a, &av)
	json.Unmarshal(b, &bv)
	var out []string
	diffValue("", av, bv, &out)
	if len(out) == 0 {
		// Equal values, different bytes: cannot happen with one encoder,
		// but never call them equal.
		out = append(out, "the documents differ in encoding only")
	}
	if len(out) > maxDiffLines {
		n := len(out) - maxDiffLines
		out = append(out[:maxDiffLines], fmt.Sprintf("... and %d more differences", n))
	}
	return out
}

func diffValue(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		if bv, ok := b.(map[string]any); ok {
			diffObject(path, av, bv, out)
			return
		}
	case []any:
		if bv, ok := b.([]any); ok {
			diffArray(path, av, bv, out)
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*out = append(*out, fmt.Sprintf("%s: fixture %s, now %s", orRoot(path), brief(a), brief(b)))
	}
}

func diffObject(path string, a, b map[string]any, out *[]string) {
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		av, ina := a[k]
		bv, inb := b[k]
		switch {
		case !inb:
			*out = append(*out, fmt.Sprintf("%s: only in the fixture: %s", p, brief(av)))
		case !ina:
			*out = append(*out, fmt.Sprintf("%s: only now: %s", p, brief(bv)))
		default:
			diffValue(p, av, bv, out)
		}
	}
}

// diffArray matches elements by their identity — a command's seq, an
// actuator's name, a saga's id — so one element more or less is one line,
// not every element after it; by index when they have none.
func diffArray(path string, a, b []any, out *[]string) {
	ka, oka := keys(a)
	kb, okb := keys(b)
	if !oka || !okb {
		for i := 0; i < max(len(a), len(b)); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(b):
				*out = append(*out, fmt.Sprintf("%s: only in the fixture: %s", p, brief(a[i])))
			case i >= len(a):
				*out = append(*out, fmt.Sprintf("%s: only now: %s", p, brief(b[i])))
			default:
				diffValue(p, a[i], b[i], out)
			}
		}
		return
	}
	index := map[string]int{}
	for i, k := range kb {
		index[k] = i
	}
	seen := map[string]bool{}
	for i, k := range ka {
		p := fmt.Sprintf("%s[%s]", path, k)
		seen[k] = true
		if j, ok := index[k]; ok {
			diffValue(p, a[i], b[j], out)
		} else {
			*out = append(*out, fmt.Sprintf("%s: only in the fixture: %s", p, brief(a[i])))
		}
	}
	for j, k := range kb {
		if !seen[k] {
			*out = append(*out, fmt.Sprintf("%s[%s]: only now: %s", path, k, brief(b[j])))
		}
	}
}

// keys names each element by an identity field — the first of seq,
// actuator and saga that every element has and no two share.
func keys(list []any) ([]string, bool) {
	for _, f := range []string{"seq", "actuator", "saga"} {
		if out, ok := keysBy(list, f); ok {
			return out, true
		}
	}
	return nil, false
}

func keysBy(list []any, field string) ([]string, bool) {
	out := make([]string, 0, len(list))
	seen := map[string]bool{}
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		v, ok := m[field]
		if !ok {
			return nil, false
		}
		k := fmt.Sprintf("%s %v", field, v)
		if seen[k] {
			return nil, false
		}
		seen[k] = true
		out = append(out, k)
	}
	return out, true
}

func orRoot(path string) string {
	if path == "" {
		return "(document)"
	}
	return path
}

// brief is a value as compact JSON, cut to a readable length.
func brief(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	const limit = 160
	if len(b) > limit {
		return string(b[:limit]) + "…"
	}
	return string(b)
}

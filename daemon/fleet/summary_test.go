package fleet

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/saga-supervisor/saga-supervisor/api"
)

func sample() Summary {
	return Summary{Device: "arm1", Ready: true, OpenSagas: 2, Seq: 1234, Hash: "9f86d081884c7d65", Version: "v1.2.3",
		At: time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC), Supplies: map[string]float64{"battery": 12.3456}}
}

func TestRoundTrip(t *testing.T) {
	in := sample()
	got, err := Decode(Encode(in))
	if err != nil {
		t.Fatal(err)
	}
	if got.V != Version || got.Device != in.Device || got.Ready != in.Ready || got.OpenSagas != 2 || got.Seq != 1234 ||
		got.Hash != in.Hash || got.Version != in.Version || !got.At.Equal(in.At.Truncate(time.Millisecond)) || got.Supplies["battery"] != 12.35 {
		t.Errorf("round trip: got %+v from %+v", got, in)
	}
}

func TestEncodeBoundsTheReason(t *testing.T) {
	s := sample()
	s.Halted, s.HaltReason = true, strings.Repeat("é", 500)
	b := Encode(s)
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.HaltReason) > maxReasonBytes || !strings.HasPrefix(s.HaltReason, got.HaltReason) || got.HaltReason == "" {
		t.Errorf("reason of %d bytes kept as %d bytes", len(s.HaltReason), len(got.HaltReason))
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := string(Encode(sample()))
	for name, c := range map[string]struct {
		payload string
		code    string
	}{
		"too large":        {`{"v":1,"device":"a","at":"2026-01-01T00:00:00Z","x":"` + strings.Repeat("a", MaxSummaryBytes) + `"}`, api.CodePayloadTooLarge},
		"not json":         {"online", api.CodeBadRequest},
		"empty":            {"", api.CodeBadRequest},
		"array":            {"[]", api.CodeBadRequest},
		"other version":    {strings.Replace(good, `"v":1`, `"v":2`, 1), api.CodeBadRequest},
		"no version":       {strings.Replace(good, `"v":1,`, ``, 1), api.CodeBadRequest},
		"device wildcard":  {strings.Replace(good, `"device":"arm1"`, `"device":"a/+"`, 1), api.CodeBadRequest},
		"no time":          {strings.Replace(good, `"at":`, `"x":`, 1), api.CodeBadRequest},
		"negative sagas":   {strings.Replace(good, `"open_sagas":2`, `"open_sagas":-1`, 1), api.CodeBadRequest},
		"trailing garbage": {good + "{}", api.CodeBadRequest},
		"wrong type":       {strings.Replace(good, `"ready":true`, `"ready":"yes"`, 1), api.CodeBadRequest},
	} {
		_, err := Decode([]byte(c.payload))
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != c.code {
			t.Errorf("%s: got %v, want code %s", name, err, c.code)
		}
	}
	// Unknown fields are a later minor addition, not an error.
	if _, err := Decode([]byte(strings.Replace(good, `{`, `{"new":1,`, 1))); err != nil {
		t.Errorf("unknown field refused: %v", err)
	}
}

// BenchmarkEncode reports the size of a typical summary (four supplies).
func BenchmarkEncode(b *testing.B) {
	s := sample()
	s.Supplies = map[string]float64{"battery": 12.1, "servo-rail": 6.02, "logic": 5.01, "motor": 24.2}
	var n int
	for b.Loop() {
		n = len(Encode(s))
	}
	b.ReportMetric(float64(n), "bytes/summary")
}

// TestDocExample: the summary docs/API.md shows decodes, and encodes back
// to the same bytes.
func TestDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Fleet summary")
	if !ok {
		t.Fatal(`docs/API.md has no "## Fleet summary"`)
	}
	_, rest, ok = strings.Cut(rest, "```json\n")
	if !ok {
		t.Fatal("the fleet summary section shows no JSON")
	}
	example, _, _ := strings.Cut(rest, "\n```")
	s, err := Decode([]byte(example))
	if err != nil {
		t.Fatalf("the documented summary does not decode: %v\n%s", err, example)
	}
	if got := string(Encode(s)); got != example {
		t.Errorf("the documented summary encodes differently:\n%s\n%s", example, got)
	}
}

package fleet

import (
	"testing"
	"time"
)

// FuzzDecode: no payload crashes the decoder, and whatever it accepts
// encodes and decodes to itself.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(sample()))
	f.Add([]byte(`{"v":1,"device":"a","at":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"v":1,"device":"a","at":"2026-01-01T00:00:00Z","supplies":{"x":1e308}}`))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(s))
		if err != nil {
			t.Fatalf("re-encoding an accepted summary: %v", err)
		}
		if again.Device != s.Device || again.Ready != s.Ready || again.Halted != s.Halted || again.OpenSagas != s.OpenSagas ||
			again.Seq != s.Seq || !again.At.Equal(s.At.UTC().Truncate(time.Millisecond)) {
			t.Fatalf("re-encoded %+v as %+v", s, again)
		}
	})
}

// FuzzView: no summary or status payload crashes the view or its table.
func FuzzView(f *testing.F) {
	f.Add([]byte(`{"state":"offline"}`), Encode(sample()))
	f.Add([]byte(`x`), []byte(`{"v":1,"device":"b","at":"2026-01-01T00:00:00Z"}`))
	f.Fuzz(func(t *testing.T, status, summary []byte) {
		v := NewView("saga/v1")
		v.Status("saga/v1/arm1/status", status)
		v.Summary("saga/v1/arm1/summary", summary)
		rows := v.Rows(time.Now(), time.Second)
		if len(rows) != 1 || rows[0].State == "" {
			t.Fatalf("rows %+v", rows)
		}
		var sink discard
		if err := WriteTable(&sink, rows); err != nil {
			t.Fatal(err)
		}
	})
}

type discard struct{}

func (*discard) Write(p []byte) (int, error) { return len(p), nil }

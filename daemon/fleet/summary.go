// Package fleet is the fleet view of many supervisors sharing one MQTT
// broker: each daemon retains a small JSON summary of itself on
// <prefix>/<device>/summary (Publisher), and `saga-supervisor fleet`
// subscribes to <prefix>/+/summary and <prefix>/+/status (the status
// topic carries each daemon's offline will) and shows every device at a
// glance (View; the command is package fleetcmd). Distribution is the
// broker's business — mosquitto bridges or a clustered broker — nothing
// here talks to another daemon.
//
// The summary, version 1 (field v):
//
//	{"v":1,"device":"arm1","ready":true,"halted":false,"halt_reason":"…",
//	 "open_sagas":0,"seq":1234,"hash":"9f86d081884c7d65","version":"v1.2.0",
//	 "at":"2026-01-02T15:04:05.123Z","supplies":{"battery":12.1}}
//
// seq and hash are the journal's last durable record and the first 8
// bytes of its chain hash; at is when the summary was made (UTC). Readers
// ignore fields they do not know; a v they do not know is refused.
package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/saga-supervisor/saga-supervisor/api"
)

// Version is the summary format's version (field v).
const Version = 1

// MaxSummaryBytes bounds a summary payload: a decoder reads nothing
// larger. A real one is a few hundred bytes.
const MaxSummaryBytes = 4 << 10

// maxReasonBytes bounds the halt reason carried (a reason is free text
// from whoever halted).
const maxReasonBytes = 200

// Summary is one device's retained summary.
type Summary struct {
	V          int                `json:"v"`
	Device     string             `json:"device"`
	Ready      bool               `json:"ready"`
	Halted     bool               `json:"halted"`
	HaltReason string             `json:"halt_reason,omitempty"`
	OpenSagas  int                `json:"open_sagas"`
	Seq        uint64             `json:"seq"`
	Hash       string             `json:"hash"`
	Version    string             `json:"version"`
	At         time.Time          `json:"at"`
	Supplies   map[string]float64 `json:"supplies,omitempty"` // volts of each supply with a reading
}

// Encode encodes s as a summary payload of version Version: the halt
// reason cut to 200 bytes, at in UTC to the millisecond, volts to the
// hundredth.
func Encode(s Summary) []byte {
	s.V = Version
	s.HaltReason = truncate(s.HaltReason, maxReasonBytes)
	s.At = s.At.UTC().Truncate(time.Millisecond)
	if len(s.Supplies) > 0 {
		sup := make(map[string]float64, len(s.Supplies))
		for k, v := range s.Supplies {
			if r := math.Round(v*100) / 100; !math.IsNaN(r) && !math.IsInf(r, 0) {
				sup[k] = r
			} else if !math.IsNaN(v) && !math.IsInf(v, 0) {
				sup[k] = v // too large to scale: as it is
			}
		}
		s.Supplies = sup
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic("fleet: encoding a summary: " + err.Error())
	}
	return b
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Decode reads a summary payload. It refuses, with an *api.Error, a
// payload over MaxSummaryBytes (PAYLOAD_TOO_LARGE), one that is not a
// JSON object of the known version, or one without a valid device name or
// time (BAD_REQUEST). Unknown fields are ignored: a later version 1 may
// add some.
func Decode(b []byte) (Summary, error) {
	if len(b) > MaxSummaryBytes {
		return Summary{}, &api.Error{Code: api.CodePayloadTooLarge, Message: fmt.Sprintf("summary of %d bytes: at most %d are read", len(b), MaxSummaryBytes)}
	}
	var s Summary
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&s); err != nil {
		return Summary{}, bad("not a summary: %v", err)
	}
	if dec.More() {
		return Summary{}, bad("not a summary: data after the JSON object")
	}
	switch {
	case s.V != Version:
		return Summary{}, bad("summary version %d: this reader knows %d", s.V, Version)
	case api.ValidName(s.Device) != nil:
		return Summary{}, bad("summary device %q: %v", truncate(s.Device, 64), api.ValidName(s.Device))
	case s.At.IsZero():
		return Summary{}, bad("summary without a time (at)")
	case s.At.UTC().Year() < 1 || s.At.UTC().Year() > 9999:
		return Summary{}, bad("summary time (at) outside years 1..9999 in UTC")
	case s.OpenSagas < 0:
		return Summary{}, bad("summary with %d open sagas", s.OpenSagas)
	case len(s.HaltReason) > maxReasonBytes || len(s.Version) > 64 || len(s.Hash) > 64:
		return Summary{}, bad("summary with an over-long halt_reason, version or hash")
	}
	return s, nil
}

func bad(format string, args ...any) error {
	return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

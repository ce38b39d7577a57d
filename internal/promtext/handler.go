package promtext

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// ContentType is the text format's media type, as Prometheus names it.
const ContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

// HandlerOpts bound what scrapes may cost.
type HandlerOpts struct {
	// MaxInFlight is how many scrapes may run at once; more are answered
	// 503 at once (0: no limit).
	MaxInFlight int
	// Timeout answers a scrape that takes longer 503 (0: none).
	Timeout time.Duration
	// Log receives the errors writing a scrape's answer (nil: none).
	Log *slog.Logger
}

// Handler serves the registry in the text format, gzipped when the
// client accepts it (Prometheus does).
func (r *Registry) Handler(o HandlerOpts) http.Handler {
	var slots chan struct{}
	if o.MaxInFlight > 0 {
		slots = make(chan struct{}, o.MaxInFlight)
	}
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if slots != nil {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			default:
				http.Error(w, "too many scrapes at once, try again later", http.StatusServiceUnavailable)
				return
			}
		}
		var buf bytes.Buffer
		if err := r.WriteText(&buf); err != nil {
			http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hdr := w.Header()
		hdr.Set("Content-Type", ContentType)
		hdr.Add("Vary", "Accept-Encoding")
		if !acceptsGzip(req.Header.Get("Accept-Encoding")) {
			if _, err := w.Write(buf.Bytes()); err != nil && o.Log != nil {
				o.Log.Error("writing metrics", "err", err)
			}
			return
		}
		hdr.Set("Content-Encoding", "gzip")
		z := gzip.NewWriter(w)
		_, err := z.Write(buf.Bytes())
		if cerr := z.Close(); err == nil {
			err = cerr
		}
		if err != nil && o.Log != nil {
			o.Log.Error("writing metrics", "err", err)
		}
	})
	if o.Timeout > 0 {
		h = http.TimeoutHandler(h, o.Timeout, "collecting metrics took too long")
	}
	return h
}

// acceptsGzip reports whether an Accept-Encoding header lists gzip with a
// quality above 0.
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			continue
		}
		q := strings.ReplaceAll(params, " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}

// Package promtexttest lets tests read a promtext.Registry with
// client_golang's testutil (GatherAndCount, GatherAndCompare,
// GatherAndLint): Gatherer parses what the registry serves, the text
// format, back into client_model's families, so the tests check the
// bytes a scraper reads. Only tests import it; the daemon links neither
// client_golang nor protobuf.
package promtexttest

import (
	"bytes"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/saga-supervisor/saga-supervisor/internal/promtext"
)

// Gatherer gathers r through its text exposition.
func Gatherer(r *promtext.Registry) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var buf bytes.Buffer
		if err := r.WriteText(&buf); err != nil {
			return nil, err
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(&buf)
		if err != nil {
			return nil, err
		}
		out := make([]*dto.MetricFamily, 0, len(fams))
		for _, f := range fams {
			out = append(out, f)
		}
		return out, nil
	})
}

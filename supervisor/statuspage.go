package supervisor

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// writeStatusPage writes the status page of st, as of at.
//
// It is written with fmt and html.EscapeString, not html/template, on
// purpose: the templates call methods by name through reflection, and a
// binary that can do that keeps every exported method of every type the
// linker cannot prove unused — 2.2 MB of the arm64 binary, for one page
// (docs/DESIGN.md, "Memory"). Every string that comes from the status —
// names, reasons, errors, paths — goes through esc.
func writeStatusPage(b *bytes.Buffer, st Status, at string) {
	esc := html.EscapeString
	b.WriteString(statusPageHead)
	b.WriteString("<p>\n")
	switch {
	case st.Halted:
		b.WriteString(`<span class="state bad">HALTED</span>`)
	case st.Ready:
		b.WriteString(`<span class="state ok">READY</span>`)
	default:
		b.WriteString(`<span class="state warn">NOT READY</span>`)
	}
	fmt.Fprintf(b, "\n<span class=\"muted\">as of %s</span>\n</p>\n", esc(at))
	if st.Halted {
		fmt.Fprintf(b, "<p>Halt: %s</p>\n", esc(st.HaltWhy))
	}
	if len(st.Reasons) > 0 {
		b.WriteString("<ul>")
		for _, r := range st.Reasons {
			fmt.Fprintf(b, "<li>%s</li>", esc(r))
		}
		b.WriteString("</ul>\n")
	}

	b.WriteString("\n<h2>Supplies</h2>\n")
	if len(st.Supplies) == 0 {
		b.WriteString(`<p class="muted">none</p>` + "\n")
	} else {
		b.WriteString("<table>\n<tr><th>supply</th><th>volts</th><th>state</th><th>on trip</th></tr>\n")
		for _, sp := range st.Supplies {
			volts, state := "–", "ok"
			if sp.Known {
				volts = fmtNum(sp.Volts)
			}
			switch {
			case sp.Tripped:
				state = "tripped"
			case sp.Stale:
				state = "stale"
			case !sp.Known:
				state = "unknown"
			}
			fmt.Fprintf(b, "<tr><td>%s</td><td class=\"n\">%s</td>\n<td>%s", esc(sp.Name), volts, state)
			if sp.Code != "" {
				fmt.Fprintf(b, " (%s)", esc(sp.Code))
			}
			if sp.ReadError != "" {
				fmt.Fprintf(b, " — %s", esc(sp.ReadError))
			}
			fmt.Fprintf(b, "</td><td>%s</td></tr>\n", esc(sp.Action))
		}
		b.WriteString("</table>\n")
	}

	b.WriteString("\n<h2>Actuators</h2>\n<table>\n<tr><th>actuator</th><th>kind</th><th>commanded</th><th>read back</th></tr>\n")
	for _, a := range st.Actuators {
		readBack := "–"
		if a.ReadBack != nil {
			readBack = fmtNum(*a.ReadBack)
		}
		fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td class=\"n\">%s</td><td class=\"n\">%s", esc(a.Name), esc(a.Kind), fmtNum(a.Commanded), readBack)
		if a.Error != "" {
			fmt.Fprintf(b, " — %s", esc(a.Error))
		}
		b.WriteString("</td></tr>\n")
	}
	b.WriteString("</table>\n")

	b.WriteString("\n<h2>Leases</h2>\n")
	if len(st.Leases) == 0 {
		b.WriteString(`<p class="muted">none</p>` + "\n")
	} else {
		b.WriteString("<table>\n<tr><th>agent</th><th>TTL</th><th>expires in</th></tr>\n")
		for _, l := range st.Leases {
			fmt.Fprintf(b, "<tr><td>%s</td><td class=\"n\">%d ms</td><td class=\"n\">%s s</td></tr>\n", esc(l.Agent), l.TTLMS, fmtNum(l.ExpiresIn))
		}
		b.WriteString("</table>\n")
	}

	b.WriteString("\n<h2>Open sagas</h2>\n")
	if len(st.OpenSagas) == 0 {
		b.WriteString(`<p class="muted">none</p>` + "\n")
	} else {
		b.WriteString("<p>")
		for i, id := range st.OpenSagas {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatUint(id, 10))
		}
		b.WriteString("</p>\n")
	}

	j := st.Journal
	fmt.Fprintf(b, "\n<h2>Journal</h2>\n<p>%s: last record %d, durable %d, %d replayed at start.\n", esc(j.Dir), j.LastSeq, j.Durable, j.Replayed)
	if j.TailCut != "" {
		fmt.Fprintf(b, "<br>Torn tail cut at start: %s\n", esc(j.TailCut))
	}
	if j.Error != "" {
		fmt.Fprintf(b, "<br><strong>Failed: %s</strong>\n", esc(j.Error))
	}
	b.WriteString("</p>\n" + statusPageFoot)
}

// fmtNum formats a number for the page ("–" for NaN or infinite).
func fmtNum(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "–"
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}

const statusPageHead = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="1">
<title>saga-supervisor</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin-top: 1.4em; }
.state { display: inline-block; padding: .3em .8em; border-radius: .3em; font-weight: bold; color: #fff; }
.ok { background: #2a7d2a; } .bad { background: #b3261e; } .warn { background: #b36b00; }
table { border-collapse: collapse; } td, th { padding: .2em .8em; border-bottom: 1px solid #ddd; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.muted { color: #777; }
</style>
</head>
<body>
<h1>saga-supervisor</h1>
`

const statusPageFoot = `<p class="muted"><a href="/api/v1/status">status JSON</a> · <a href="/metrics">metrics</a> · <a href="/readyz">readyz</a></p>
</body>
</html>
`

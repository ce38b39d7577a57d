package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

const apiDoc = "../docs/API.md"

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(apiDoc)
	if err != nil {
		t.Fatalf("the API documentation must sit at %s: %v", apiDoc, err)
	}
	return string(b)
}

// TestCodesTable checks the table itself: each code once, upper snake case,
// with both columns filled, and every code the engine and the gate can
// return present.
func TestCodesTable(t *testing.T) {
	name := regexp.MustCompile(`^[A-Z]+(_[A-Z]+)*$`)
	seen := map[string]bool{}
	for _, c := range Codes {
		if !name.MatchString(c.Code) || c.Meaning == "" || c.Retry == "" || seen[c.Code] {
			t.Errorf("bad or repeated entry %+v", c)
		}
		if strings.Contains(c.Meaning+c.Retry, "|") {
			t.Errorf("%s: a '|' would break the Markdown table", c.Code)
		}
		seen[c.Code] = true
	}
	engine := []rollback.Code{rollback.CodeHalted, rollback.CodeJournalFailed, rollback.CodeSagaUnknown, rollback.CodeSagaNotOwner,
		rollback.CodeSagaBusy, rollback.CodeSagaFull, rollback.CodeActuatorUnknown, rollback.CodeActuatorBusy, rollback.CodeDeadlinePassed,
		rollback.CodeDuplicateID, rollback.CodeStepFailed, rollback.CodeStepInDoubt, rollback.CodeBadRequest}
	gate := []limits.Code{limits.LimitMin, limits.LimitMax, limits.LimitStep, limits.LimitSlew, limits.NotFinite,
		limits.SupplyLow, limits.SupplyHigh, limits.SupplyUnknown, limits.SupplyStale, limits.SupplyTripped}
	for _, c := range engine {
		if !seen[string(c)] {
			t.Errorf("engine code %s missing", c)
		}
	}
	for _, c := range gate {
		if !seen[string(c)] {
			t.Errorf("limits code %s missing", c)
		}
	}
	for _, c := range []string{CodeBadRequest, CodePayloadTooLarge, CodeNotFinite, CodeNotReady, CodeUnauthorized, CodeInternal,
		"LEASE_UNKNOWN", "LEASE_EXPIRED", "LEASE_NOT_HOLDER"} {
		if !seen[c] {
			t.Errorf("code %s missing", c)
		}
	}
	// Every code string that is both the engine's and a limits code, or
	// ours and the engine's, means one thing.
	if CodeBadRequest != string(rollback.CodeBadRequest) || CodeNotFinite != string(limits.NotFinite) {
		t.Error("a shared code differs between packages")
	}
	if !strings.Contains(mustLookup(t, CodePayloadTooLarge).Meaning, fmt.Sprint(DefaultMaxRequestBytes)) {
		t.Error("PAYLOAD_TOO_LARGE's meaning states another limit than DefaultMaxRequestBytes")
	}
}

func mustLookup(t *testing.T, code string) CodeInfo {
	t.Helper()
	c, ok := Lookup(code)
	if !ok {
		t.Fatalf("no code %s", code)
	}
	return c
}

// TestDocListsEveryCode parses the code table of docs/API.md: its rows must
// be Codes, in order, word for word, so the documentation and the wire
// cannot drift. On failure, the expected row is printed to paste.
func TestDocListsEveryCode(t *testing.T) {
	doc := readDoc(t)
	start := strings.Index(doc, "| code | meaning | what the agent should do |")
	if start < 0 {
		t.Fatal("docs/API.md has no code table")
	}
	var rows [][3]string
	for _, line := range strings.Split(doc[start:], "\n")[2:] { // after the header and its rule
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("row with %d cells: %s", len(cells), line)
		}
		code := strings.Trim(strings.TrimSpace(cells[0]), "`")
		rows = append(rows, [3]string{code, strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])})
	}
	inDoc := map[string][3]string{}
	for _, r := range rows {
		if _, dup := inDoc[r[0]]; dup {
			t.Errorf("docs/API.md lists %s twice", r[0])
		}
		inDoc[r[0]] = r
		if _, ok := Lookup(r[0]); !ok {
			t.Errorf("docs/API.md lists %s, which Codes does not", r[0])
		}
	}
	for _, c := range Codes {
		row := fmt.Sprintf("| `%s` | %s | %s |", c.Code, c.Meaning, c.Retry)
		got, ok := inDoc[c.Code]
		switch {
		case !ok:
			t.Errorf("docs/API.md does not list %s; add:\n%s", c.Code, row)
		case got != [3]string{c.Code, c.Meaning, c.Retry}:
			t.Errorf("docs/API.md's row for %s differs from Codes; want:\n%s", c.Code, row)
		}
	}
	if t.Failed() {
		return
	}
	for i, c := range Codes { // same set: now the same order, so the doc reads like the table
		if rows[i][0] != c.Code {
			t.Fatalf("docs/API.md row %d is %s; Codes has %s there", i+1, rows[i][0], c.Code)
		}
	}
}

// TestDocExamples checks every JSON object in the fenced blocks of
// docs/API.md: requests must be accepted and written as EncodeRequest
// writes them; replies, statuses and events must be exactly what this
// package encodes. Lines built by the shell ($...) are skipped.
func TestDocExamples(t *testing.T) {
	doc := readDoc(t)
	fenced := false
	counts := map[string]int{}
	for n, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		i := strings.Index(line, "{")
		if !fenced || i < 0 || strings.Contains(line, "$") {
			continue
		}
		text := line[i:]
		if j := strings.LastIndex(text, "}"); j >= 0 {
			text = text[:j+1] // drop the shell's closing quote
		}
		where := fmt.Sprintf("docs/API.md:%d", n+1)
		var probe map[string]any
		if err := json.Unmarshal([]byte(text), &probe); err != nil {
			t.Errorf("%s: not JSON: %v", where, err)
			continue
		}
		var canonical []byte
		switch {
		case probe["op"] != nil:
			r, err := DecodeRequest([]byte(text), 0)
			if err != nil {
				t.Errorf("%s: request refused: %v", where, err)
				continue
			}
			canonical, _ = EncodeRequest(r)
			counts["request"]++
		case probe["ok"] != nil:
			var r Reply
			if !strictDecode(t, where, text, &r) {
				continue
			}
			canonical = EncodeReply(r)
			counts["reply"]++
		case probe["state"] != nil:
			var s Status
			if !strictDecode(t, where, text, &s) {
				continue
			}
			canonical = EncodeStatus(s)
			counts["status"]++
		case probe["kind"] != nil:
			var e Event
			if !strictDecode(t, where, text, &e) {
				continue
			}
			canonical = EncodeEvent(e)
			counts["event"]++
		case probe["v"] != nil && probe["device"] != nil:
			// The fleet summary: daemon/fleet's TestDocExample
			// decodes and re-encodes it.
			counts["fleet summary"]++
			continue
		default:
			t.Errorf("%s: JSON of no known kind: %s", where, text)
			continue
		}
		if string(canonical) != text {
			t.Errorf("%s: the example differs from what is encoded:\n%s\n%s", where, text, canonical)
		}
	}
	seen := map[Op]bool{}
	for _, line := range strings.Split(doc, "\n") {
		for op := range opFields {
			if strings.Contains(line, `"op":"`+string(op)+`"`) {
				seen[op] = true
			}
		}
	}
	for op := range opFields {
		if !seen[op] {
			t.Errorf("docs/API.md has no example of op %s", op)
		}
	}
	if counts["request"] < 10 || counts["reply"] < 10 || counts["status"] < 1 || counts["event"] < 2 {
		t.Errorf("too few examples checked: %v", counts)
	}
}

func strictDecode(t *testing.T, where, text string, v any) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Errorf("%s: %v", where, err)
		return false
	}
	return true
}

// TestDocStatesTheLimits: the numbers the documentation promises are the
// numbers the decoder enforces.
func TestDocStatesTheLimits(t *testing.T) {
	doc := readDoc(t)
	for _, s := range []string{
		fmt.Sprintf("1..%d bytes, printable", MaxIDBytes),
		fmt.Sprintf("1..%d bytes. Replies go to", MaxNameBytes),
		fmt.Sprintf("1..%d bytes. Opaque", MaxLeaseBytes),
		fmt.Sprintf("0..%d bytes, printable", MaxReasonBytes),
		fmt.Sprintf("1..%d bytes.", MaxTokenBytes),
		fmt.Sprintf("1..%d: see", MaxDeadlineMS),
		fmt.Sprintf("1..%d bytes: see [approvals]", MaxApprovalBytes),
		fmt.Sprintf("A payload over %d bytes", DefaultMaxRequestBytes),
		fmt.Sprintf("1 to %d bytes of", MaxNameBytes),
		fmt.Sprintf("Only under a bound of %d bytes", MinEncodeBytes),
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/API.md does not say %q", s)
		}
	}
}

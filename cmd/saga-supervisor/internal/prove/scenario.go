package prove

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

// The scenario file: parsed strictly, every problem named by its line.

// Scenario is a user's sequence: the steps of one saga, on a config.
type Scenario struct {
	File       string        // the path as given
	Config     string        // the config path as written ("" = the embedded default)
	ConfigLine int           // where config: is written
	Interval   time.Duration // virtual time between steps
	Steps      []Step
}

// Step is one command of the saga.
type Step struct {
	Actuator string  `json:"actuator"`
	Value    float64 `json:"value"`
	Line     int     `json:"line"`
}

// scenarioYAML is the document as decoded (strictly: KnownFields).
type scenarioYAML struct {
	Config   locatedString `yaml:"config"`
	Interval yamlDuration  `yaml:"interval"`
	Steps    []stepYAML    `yaml:"steps"`
}

// locatedString is a string scalar that remembers its line.
type locatedString struct {
	Value string
	Line  int
}

func (s *locatedString) UnmarshalYAML(n *yaml.Node) error {
	s.Line = n.Line
	if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
		return yamlTypeError(n.Line, "config: want a file path")
	}
	s.Value = n.Value
	return nil
}

// yamlDuration is a Go duration written as a string, e.g. 500ms.
type yamlDuration struct {
	D    time.Duration
	Line int
}

func (d *yamlDuration) UnmarshalYAML(n *yaml.Node) error {
	d.Line = n.Line
	if n.Kind != yaml.ScalarNode {
		return yamlTypeError(n.Line, "interval: want a duration such as 500ms or 2s")
	}
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return yamlTypeError(n.Line, "interval: want a duration such as 500ms or 2s, not %q", n.Value)
	case v <= 0 || v > maxInterval:
		return yamlTypeError(n.Line, "interval: %s is outside (0, %s]", v, maxInterval)
	}
	d.D = v
	return nil
}

// stepYAML is one step as written: {actuator: NAME, value: V}. It is
// decoded by hand so that each problem names its own line.
type stepYAML struct {
	actuator    string
	value       float64
	hasActuator bool
	hasValue    bool
	line        int
}

func (s *stepYAML) UnmarshalYAML(n *yaml.Node) error {
	s.line = n.Line
	if n.Kind != yaml.MappingNode {
		return yamlTypeError(n.Line, "a step is a mapping {actuator: NAME, value: V}")
	}
	var problems []string
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			problems = append(problems, fmt.Sprintf("line %d: key %q written twice", k.Line, k.Value))
			continue
		}
		seen[k.Value] = true
		switch k.Value {
		case "actuator":
			if v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" {
				problems = append(problems, fmt.Sprintf("line %d: actuator: want an actuator name", v.Line))
				continue
			}
			s.actuator, s.hasActuator = v.Value, true
		case "value":
			if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
				problems = append(problems, fmt.Sprintf("line %d: value: want a number, not %q", v.Line, v.Value))
				continue
			}
			if err := v.Decode(&s.value); err != nil {
				problems = append(problems, fmt.Sprintf("line %d: value: %q is not a number", v.Line, v.Value))
				continue
			}
			s.hasValue = true
		default:
			problems = append(problems, fmt.Sprintf("line %d: unknown key %q in a step (known keys: actuator, value)", k.Line, k.Value))
		}
	}
	if !s.hasActuator && !seen["actuator"] {
		problems = append(problems, fmt.Sprintf("line %d: step without actuator", n.Line))
	}
	if !s.hasValue && !seen["value"] {
		problems = append(problems, fmt.Sprintf("line %d: step without value", n.Line))
	}
	if len(problems) > 0 {
		return &yaml.TypeError{Errors: problems}
	}
	return nil
}

func yamlTypeError(line int, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %s", line, fmt.Sprintf(format, args...))}}
}

var (
	yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	// The Go names of the decoded types, as the YAML library writes them
	// (package.type): replaced by what the user wrote.
	yamlScenarioType = reflect.TypeFor[scenarioYAML]().String()
	yamlStepType     = reflect.TypeFor[stepYAML]().String()
	yamlUnknownRE    = regexp.MustCompile(`field (\S+) not found in type ` + regexp.QuoteMeta(yamlScenarioType))
	yamlGoTypeNames  = strings.NewReplacer(yamlScenarioType, "a scenario (config, interval, steps)",
		"[]"+yamlStepType, "a list of steps", yamlStepType, "a step")
)

// scenarioErrors turns the YAML library's errors into file:line: message
// lines, with Go type names replaced by what the user wrote.
func scenarioErrors(name string, err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	var errs []error
	for _, m := range msgs {
		m = yamlUnknownRE.ReplaceAllString(m, `unknown key "$1" (known keys: config, interval, steps)`)
		m = yamlGoTypeNames.Replace(m)
		if sub := yamlLineRE.FindStringSubmatch(m); sub != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", name, sub[1], sub[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", name, strings.TrimPrefix(m, "yaml: ")))
		}
	}
	return errors.Join(errs...)
}

// parseScenario reads a scenario strictly: an unknown key, a key written
// twice, a value of the wrong type, a missing field or a second document is
// an error naming its line. It does not check the steps against a config.
func parseScenario(data []byte, name string) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var y scenarioYAML
	if err := dec.Decode(&y); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty scenario: want steps: [{actuator: NAME, value: V}, ...]", name)
		}
		return nil, scenarioErrors(name, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, scenarioErrors(name, err)
		}
		return nil, fmt.Errorf("%s:%d: a second YAML document: a scenario is one document", name, next.Line)
	}
	if len(y.Steps) == 0 {
		return nil, fmt.Errorf("%s: no steps: want steps: [{actuator: NAME, value: V}, ...]", name)
	}
	sc := &Scenario{File: name, Config: y.Config.Value, ConfigLine: y.Config.Line, Interval: defaultInterval}
	if y.Interval.D > 0 {
		sc.Interval = y.Interval.D
	}
	for _, s := range y.Steps {
		sc.Steps = append(sc.Steps, Step{Actuator: s.actuator, Value: s.value, Line: s.line})
	}
	return sc, nil
}

// LoadScenario reads the scenario file and its config (relative to the
// scenario's directory; the embedded default when none is named).
func LoadScenario(path string) (*Scenario, *config.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	sc, err := parseScenario(data, path)
	if err != nil {
		return nil, nil, err
	}
	if sc.Config == "" {
		return sc, config.Default(), nil
	}
	cpath := sc.Config
	if !filepath.IsAbs(cpath) {
		cpath = filepath.Join(filepath.Dir(path), cpath)
	}
	cfg, err := config.Load(cpath)
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return nil, nil, fmt.Errorf("%s:%d: config: %w", path, sc.ConfigLine, err)
	case err != nil:
		// The config's own errors name their file:line:col, one a line.
		return nil, nil, fmt.Errorf("%s:%d: config %s is not valid:\n%w", path, sc.ConfigLine, cpath, err)
	}
	return sc, cfg, nil
}

package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/limits"
	"github.com/saga-supervisor/saga-supervisor/rollback"
)

// maxConfigSize bounds a config file: a robot's config is a few KiB, and a
// path naming a huge file by mistake must not be read whole.
const maxConfigSize = 1 << 20

// Error is one problem in a config file. It is located where the offending
// value (or key) is written; a problem with an omitted key is located at
// the mapping that should hold it.
type Error struct {
	File   string
	Line   int    // 1-based; 0 when the problem has no place in the file
	Column int    // 1-based; 0 when unknown
	Path   string // dotted path, e.g. "actuators.elbow.max"; "" for the document
	Msg    string
}

// Error formats the problem as file:line:col: path: message, the form
// editors and CI logs turn into links.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Load reads and parses the config file at path, and reads the secret files
// it names. A file that cannot be read gives the *os.PathError; otherwise the
// error lists every problem found (errors.Join of *Error), sorted by line.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxConfigSize {
		return nil, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes: not a config file", maxConfigSize)}
	}
	c, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	// Inline secrets are allowed, but then the config file is itself a
	// secret file and deserves the same mode.
	if st, err := f.Stat(); err == nil && st.Mode().Perm()&0o077 != 0 &&
		(c.MQTT.PasswordFile == "" && c.MQTT.Password != "" || c.HTTP.ResetTokenFile == "" && c.HTTP.ResetToken != "") {
		c.warnings = append(c.warnings, fmt.Sprintf("%s: holds an inline secret but has mode %04o; chmod 600 it or use *_file keys",
			path, st.Mode().Perm()))
	}
	return c, nil
}

// Parse parses a config held in data; name is the file name used in errors
// (and by Where). Like Load, it reads the secret files the config names.
// The returned error lists every problem found (errors.Join of *Error),
// sorted by line.
func Parse(data []byte, name string) (*Config, error) {
	return parse(&decoder{file: name, at: map[string]place{}, bad: map[string]bool{}, claims: map[string]string{}}, data)
}

func parse(d *decoder, data []byte) (*Config, error) {
	name := d.file
	c := d.parse(data)
	if len(d.errs) > 0 {
		return nil, d.joined()
	}
	c.file, c.at = name, d.at
	for _, w := range d.warns {
		c.warnings = append(c.warnings, w.Error())
	}
	return c, nil
}

// ParseLayout parses a config as Parse does but reads none of the files it
// names (secrets, keys): for tools that derive something from the layout —
// the mosquitto password file and ACL — before those files exist. The
// secrets of the result are empty.
func ParseLayout(data []byte, name string) (*Config, error) {
	d := &decoder{file: name, at: map[string]place{}, bad: map[string]bool{}, claims: map[string]string{}, noSecrets: true}
	c := d.parse(data)
	if len(d.errs) > 0 {
		return nil, d.joined()
	}
	c.file, c.at = name, d.at
	return c, nil
}

// place is where a value is written in the file.
type place struct{ line, col int }

// decoder walks the YAML node tree into a Config itself, rather than letting
// yaml.v3 decode into structs, so that every problem — unknown or duplicate
// keys, wrong types, invalid values — is reported with its line and dotted
// path, and all of them at once.
type decoder struct {
	file  string
	errs  []*Error
	warns []*Error
	at    map[string]place // dotted path → where its value (or, for a mapping, its key) is
	bad   map[string]bool  // paths whose value did not decode: later checks skip them
	// claims maps a resource a driver section takes (a channel, a topic)
	// to the path that took it first (Check.Claim).
	claims map[string]string
	// resources are the hardware the sections take (Resource), for
	// checkClaims.
	resources []claim
	// noSecrets: read none of the files the config names (ParseLayout).
	noSecrets bool
	// defaultConfig: parsing the embedded default (Default), whose
	// generated operator token is the daemon's to read or create.
	defaultConfig bool
}

func (d *decoder) parse(data []byte) *Config {
	if len(data) > maxConfigSize {
		d.errs = append(d.errs, &Error{File: d.file, Msg: fmt.Sprintf("larger than %d bytes: not a config file", maxConfigSize)})
		return nil
	}
	root := d.document(data)
	if root == nil {
		return nil
	}
	switch {
	case root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null":
		d.fail(nil, "", "the file is empty")
		return nil
	case root.Kind != yaml.MappingNode:
		d.fail(root, "", "a config is a mapping of keys (device:, actuators:, ...), not %s", describe(root))
		return nil
	}
	c := defaults()
	d.at[""] = place{root.Line, root.Column}
	d.value(root, reflect.ValueOf(c).Elem(), "")
	d.complete(c)
	d.resolvePaths(c)
	d.validate(c)
	if !d.noSecrets {
		d.readSecrets(c)
		d.readApprovalKeys(c)
	}
	return c
}

// document parses data as exactly one YAML document and returns its root.
func (d *decoder) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.fail(nil, "", "the file is empty")
		} else {
			d.syntax(err)
		}
		return nil
	}
	if len(doc.Content) == 0 {
		d.fail(nil, "", "the file is empty")
		return nil
	}
	// A second document would be silently ignored by a plain Unmarshal:
	// settings in it would look configured and not be.
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		d.fail(&next, "", "a config holds one YAML document; this is a second one")
	} else if !errors.Is(err, io.EOF) {
		d.syntax(err)
	}
	return doc.Content[0]
}

var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntax rewrites the parser's "yaml: line N: msg" as file:N: msg.
func (d *decoder) syntax(err error) {
	msg := err.Error()
	e := &Error{File: d.file}
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	e.Msg = "YAML syntax: " + strings.TrimPrefix(msg, "yaml: ")
	d.errs = append(d.errs, e)
}

// fail records a problem at node n (nil: the file as a whole).
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// badValue records a value that could not be decoded; checks that read it
// later are skipped, so one mistake is reported once.
func (d *decoder) badValue(n *yaml.Node, path, format string, args ...any) {
	d.fail(n, path, format, args...)
	d.bad[path] = true
}

// errorf records a problem found after decoding, located at path or, if
// path was not written, at the nearest enclosing mapping that was.
func (d *decoder) errorf(path, format string, args ...any) {
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	e.Line, e.Column = d.locate(path)
	d.errs = append(d.errs, e)
}

// warnf records something allowed but discouraged.
func (d *decoder) warnf(path, format string, args ...any) {
	e := &Error{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	e.Line, e.Column = d.locate(path)
	d.warns = append(d.warns, e)
}

func (d *decoder) locate(path string) (line, col int) {
	for p := path; ; p = parent(p) {
		if at, ok := d.at[p]; ok {
			return at.line, at.col
		}
		if p == "" {
			return 0, 0
		}
	}
}

// set reports whether path was written in the file.
func (d *decoder) set(path string) bool { _, ok := d.at[path]; return ok }

// ok reports whether every path decoded (or was left at its default), so a
// check on them means something.
func (d *decoder) ok(paths ...string) bool {
	for _, p := range paths {
		if d.bad[p] {
			return false
		}
	}
	return true
}

// joined returns the errors sorted by place (file-level ones first) and
// joined, dropping exact repeats.
func (d *decoder) joined() error {
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i], d.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	errs := make([]error, 0, len(d.errs))
	seen := map[string]bool{}
	for _, e := range d.errs {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			errs = append(errs, e)
		}
	}
	return errors.Join(errs...)
}

func parent(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value decodes node n into v, which is a field of the Config at path.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	d.at[path] = place{n.Line, n.Column}
	if n.Kind == yaml.AliasNode {
		// An alias would make the error positions point at the anchor, and
		// merge keys (<<) would bypass the duplicate-key check.
		d.badValue(n, path, "aliases are not supported: write the value out")
		return
	}
	if t := n.ShortTag(); n.Tag != "" && !strings.HasPrefix(t, "!!") {
		d.badValue(n, path, "custom tag %s is not supported", t)
		return
	}
	switch p := v.Addr().Interface().(type) {
	case *time.Duration:
		d.duration(n, path, p)
	case *Size:
		d.size(n, path, p)
	case *Secret:
		var s string
		if d.str(n, path, &s) {
			*p = Secret(s)
		}
	case *actuators.Kind:
		enum(d, n, path, p, "kind", []string{"servo", "pwm", "digital", "setpoint", "pulse"}, func(s string) (actuators.Kind, bool) {
			k := actuators.Kind(s)
			return k, k.Valid()
		})
	case *actuators.SafePolicy:
		d.safe(n, path, p)
	case *limits.Policy:
		enum(d, n, path, p, "policy", []string{"reject", "clamp"}, func(s string) (limits.Policy, bool) {
			v, err := limits.ParsePolicy(s)
			return v, err == nil
		})
	case *limits.Action:
		enum(d, n, path, p, "action", []string{"warn", "refuse", "unwind", "halt"}, func(s string) (limits.Action, bool) {
			v, err := limits.ParseAction(s)
			return v, err == nil
		})
	case *rollback.Durability:
		enum(d, n, path, p, "durability", []string{"every-step", "first-touch"}, words(map[string]rollback.Durability{
			"every-step": rollback.EveryStep, "first-touch": rollback.FirstTouch}))
	case *rollback.Order:
		enum(d, n, path, p, "order", []string{"retrace", "direct"}, words(map[string]rollback.Order{
			"retrace": rollback.Retrace, "direct": rollback.Direct}))
	case *rollback.OnCompensationFailure:
		enum(d, n, path, p, "on_compensation_failure", []string{"halt", "continue"}, words(map[string]rollback.OnCompensationFailure{
			"halt": rollback.HaltOnFailure, "continue": rollback.ContinueOnFailure}))
	default:
		switch v.Kind() {
		case reflect.Struct:
			d.mapping(n, v, path)
		case reflect.Map:
			d.named(n, v, path)
		case reflect.Slice:
			d.strings(n, v, path)
		case reflect.String:
			var s string
			if d.str(n, path, &s) {
				v.SetString(s)
			}
		case reflect.Float64:
			d.float(n, v, path)
		case reflect.Int:
			d.integer(n, v, path)
		case reflect.Bool:
			if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
				d.badValue(n, path, "want true or false, got %s", describe(n))
				return
			}
			var b bool
			if err := n.Decode(&b); err != nil {
				d.badValue(n, path, "want true or false, got %s", describe(n))
				return
			}
			v.SetBool(b)
		default:
			// A field type this decoder does not know is a bug in this
			// package; TestDefault decodes every field type.
			panic(fmt.Sprintf("config: %s: unsupported field type %s", path, v.Type()))
		}
	}
}

// field is one key of a section: its name and the struct field it fills.
type field struct {
	key   string
	index int
}

func fieldsOf(t reflect.Type) []field {
	var fs []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.IsExported() && key != "" && key != "-" {
			fs = append(fs, field{key, i})
		}
	}
	return fs
}

// mapping decodes a section (a struct) key by key.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.badValue(n, path, "want a mapping, got %s", describe(n))
		return
	}
	fields := fieldsOf(v.Type())
	sec, sectioned := v.Addr().Interface().(sectioned)
	d.pairs(n, path, func(k, val *yaml.Node, key string) {
		for _, f := range fields {
			if f.key == key {
				d.child(k, val, v.Field(f.index), join(path, key))
				return
			}
		}
		if sectioned {
			if sv, ok := sec.section(key); ok {
				d.child(k, val, sv, join(path, key))
				return
			}
		}
		known := make([]string, len(fields))
		for i, f := range fields {
			known[i] = f.key
		}
		if sectioned {
			at := slices.Index(known, "driver") + 1
			known = slices.Insert(known, at, sec.sectionKeys()...)
		}
		d.fail(k, path, "unknown key %q (known keys: %s)", key, strings.Join(known, ", "))
	})
}

// sectioned is a struct that holds driver sections (Actuator, Supply):
// keys other than its fields may be a registered driver's section, listed
// after "driver" in errors.
type sectioned interface {
	section(key string) (reflect.Value, bool)
	sectionKeys() []string
}

// named decodes a mapping of names to entries (actuators, supplies). Each
// entry starts from its defaults.
func (d *decoder) named(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.badValue(n, path, "want a mapping of names, got %s", describe(n))
		return
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	d.pairs(n, path, func(k, val *yaml.Node, name string) {
		if err := checkName(name); err != nil {
			d.fail(k, join(path, name), "bad name: %v", err)
			d.bad[path] = true // not empty, only wrong: no "at least one" on top
			return
		}
		elem := reflect.New(v.Type().Elem())
		if def, ok := elem.Interface().(interface{ setDefaults() }); ok {
			def.setDefaults()
		}
		d.child(k, val, elem.Elem(), join(path, name))
		v.SetMapIndex(reflect.ValueOf(name), elem.Elem())
	})
}

// child decodes one value of a mapping. A section's place is its key's
// line: "actuators.elbow: ..." should point at "elbow:", not at its first
// setting.
func (d *decoder) child(k, val *yaml.Node, v reflect.Value, path string) {
	d.value(val, v, path)
	if val.Kind == yaml.MappingNode || val.Kind == yaml.SequenceNode {
		d.at[path] = place{k.Line, k.Column}
	}
}

// pairs calls fn for each key of mapping n, refusing keys that are not
// plain strings and keys written twice (yaml.v3 keeps the last of a
// duplicate silently when decoding into a node).
func (d *decoder) pairs(n *yaml.Node, path string, fn func(k, v *yaml.Node, key string)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			if k.Kind == yaml.AliasNode {
				d.fail(k, path, "aliases are not supported (a merge key << is not either): write the keys out")
			} else {
				d.fail(k, path, "a key must be a plain string, got %s", describe(k))
			}
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(k, path, "duplicate key %q (first at line %d)", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		fn(k, v, k.Value)
	}
}

// strings decodes a list of strings. Each item's place is path[i]; an
// explicit empty list ([]) decodes to an empty, non-nil slice, so that
// "none" and "not given" stay apart.
func (d *decoder) strings(n *yaml.Node, v reflect.Value, path string) {
	if v.Type().Elem().Kind() != reflect.String {
		panic(fmt.Sprintf("config: %s: unsupported field type %s", path, v.Type()))
	}
	if n.Kind != yaml.SequenceNode {
		d.badValue(n, path, "want a list of strings, got %s", describe(n))
		return
	}
	out := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.at[p] = place{item.Line, item.Column}
		if item.Kind == yaml.AliasNode {
			d.badValue(item, p, "aliases are not supported: write the value out")
			d.bad[path] = true
			continue
		}
		var s string
		if !d.str(item, p, &s) {
			d.bad[path] = true
			continue
		}
		out = reflect.Append(out, reflect.ValueOf(s).Convert(v.Type().Elem()))
	}
	v.Set(out)
}

// describe names what a node holds, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!null":
		return "no value (null)"
	case "!!bool":
		return "the boolean " + n.Value
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!str":
		return fmt.Sprintf("the string %.40q", n.Value)
	case "!!timestamp":
		return "the timestamp " + n.Value
	}
	return fmt.Sprintf("%s %.40q", n.ShortTag(), n.Value)
}

// str decodes a string. Only a YAML string is accepted: `device: 0123` or
// `username: yes` would otherwise arrive as something other than what was
// typed, so the fix (quote it) is asked for instead.
func (d *decoder) str(n *yaml.Node, path string, s *string) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		hint := ""
		if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
			hint = fmt.Sprintf(" (quote it if you mean the text: %q)", n.Value)
		}
		d.badValue(n, path, "want a string, got %s%s", describe(n), hint)
		return false
	}
	*s = n.Value
	return true
}

// float decodes a finite number. YAML's .nan and .inf are refused here: no
// limit, voltage or value can be NaN or infinite.
func (d *decoder) float(n *yaml.Node, v reflect.Value, path string) {
	t := n.ShortTag()
	if n.Kind != yaml.ScalarNode || (t != "!!int" && t != "!!float") {
		d.badValue(n, path, "want a number, got %s", describe(n))
		return
	}
	var f float64
	if err := n.Decode(&f); err != nil {
		d.badValue(n, path, "want a number, got %s", describe(n))
		return
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.badValue(n, path, "%s is not a finite number", n.Value)
		return
	}
	v.SetFloat(f)
}

func (d *decoder) integer(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		d.badValue(n, path, "want a whole number, got %s", describe(n))
		return
	}
	var i int64
	if err := n.Decode(&i); err != nil || v.OverflowInt(i) {
		d.badValue(n, path, "%s is out of range", n.Value)
		return
	}
	v.SetInt(i)
}

// duration decodes a Go duration string ("200ms", "1m30s"). A bare number
// is refused (except 0): 200 could be seconds or milliseconds.
func (d *decoder) duration(n *yaml.Node, path string, p *time.Duration) {
	t := n.ShortTag()
	if n.Kind == yaml.ScalarNode && t == "!!int" && isZero(n.Value) {
		*p = 0
		return
	}
	if n.Kind != yaml.ScalarNode || t != "!!str" {
		hint := ""
		if t == "!!int" || t == "!!float" {
			hint = ": a duration needs a unit, e.g. \"200ms\" or \"2s\""
		}
		d.badValue(n, path, "want a duration, got %s%s", describe(n), hint)
		return
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		d.badValue(n, path, "bad duration %.40q: want e.g. \"200ms\", \"2s\", \"1m\"", n.Value)
		return
	}
	*p = v
}

func isZero(s string) bool { return strings.Trim(s, "0") == "" || s == "+0" || s == "-0" }

// size decodes bytes (a whole number) or a string with a binary unit.
func (d *decoder) size(n *yaml.Node, path string, p *Size) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int64
		if err := n.Decode(&i); err != nil || i < 0 {
			d.badValue(n, path, "bad size %s: want whole bytes or e.g. \"64KiB\"", n.Value)
			return
		}
		*p = Size(i)
		return
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.badValue(n, path, "want a size (e.g. \"64KiB\", \"16MiB\" or bytes), got %s", describe(n))
		return
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		d.badValue(n, path, "%v", err)
		return
	}
	*p = v
}

// enum decodes one of a fixed set of words.
func enum[T any](d *decoder, n *yaml.Node, path string, p *T, what string, known []string, parse func(string) (T, bool)) {
	var s string
	if !d.str(n, path, &s) {
		return
	}
	v, ok := parse(s)
	if !ok {
		d.badValue(n, path, "unknown %s %.40q (known: %s)", what, s, strings.Join(known, ", "))
		return
	}
	*p = v
}

func words[T any](m map[string]T) func(string) (T, bool) {
	return func(s string) (T, bool) { v, ok := m[s]; return v, ok }
}

// safe decodes a safe policy: hold, detach or {value: X}.
func (d *decoder) safe(n *yaml.Node, path string, p *actuators.SafePolicy) {
	const want = "want hold, detach or {value: X}"
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		switch n.Value {
		case "hold":
			*p = actuators.SafePolicy{Mode: actuators.SafeHold}
		case "detach":
			*p = actuators.SafePolicy{Mode: actuators.SafeDetach}
		case "value":
			d.badValue(n, path, "a safe value needs the value: write {value: X}")
		default:
			d.badValue(n, path, "unknown safe policy %.40q: %s", n.Value, want)
		}
	case n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float"):
		d.badValue(n, path, "%s, got %s: write {value: %s}", want, describe(n), n.Value)
	case n.Kind == yaml.MappingNode:
		var sv struct {
			Value float64 `yaml:"value"`
		}
		v := reflect.ValueOf(&sv).Elem()
		d.pairs(n, path, func(k, val *yaml.Node, key string) {
			if key != "value" {
				d.fail(k, path, "unknown key %q (known keys: value)", key)
				return
			}
			d.value(val, v.Field(0), join(path, "value"))
		})
		switch {
		case !d.set(join(path, "value")):
			d.badValue(n, path, "%s: the mapping has no value", want)
		case d.bad[join(path, "value")]:
			d.bad[path] = true
		default:
			*p = actuators.SafePolicy{Mode: actuators.SafeValue, Value: sv.Value}
		}
	default:
		d.badValue(n, path, "%s, got %s", want, describe(n))
	}
}

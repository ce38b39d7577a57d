package homeassistant

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Eval renders a template of the form Template makes against a JSON
// payload as Home Assistant's Jinja would: true and false as True and
// False, null as None, numbers as written, strings as they are. A missing
// key, or a template of any other form, is an error.
func Eval(tmpl string, payload []byte) (string, error) {
	body, ok := strings.CutPrefix(tmpl, "{{ value_json")
	if body, ok = strings.CutSuffix(body, " }}"); !ok {
		return "", fmt.Errorf("template %q: not {{ value_json... }}", tmpl)
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("payload is not JSON: %w", err)
	}
	for body != "" {
		var key string
		switch {
		case strings.HasPrefix(body, "."):
			end := strings.IndexAny(body[1:], ".[")
			if end < 0 {
				end = len(body) - 1
			}
			key, body = body[1:1+end], body[1+end:]
			if !isIdent(key) {
				return "", fmt.Errorf("template %q: %q is not an identifier", tmpl, key)
			}
		case strings.HasPrefix(body, "['"):
			var b strings.Builder
			i := 2
			for ; i < len(body) && body[i] != '\''; i++ {
				if body[i] == '\\' && i+1 < len(body) {
					i++
				}
				b.WriteByte(body[i])
			}
			if !strings.HasPrefix(body[i:], "']") {
				return "", fmt.Errorf("template %q: unterminated ['...']", tmpl)
			}
			key, body = b.String(), body[i+2:]
		default:
			return "", fmt.Errorf("template %q: unexpected %q", tmpl, body)
		}
		m, ok := v.(map[string]any)
		if !ok {
			return "", fmt.Errorf("template %q: %q is not a key of an object", tmpl, key)
		}
		if v, ok = m[key]; !ok {
			return "", fmt.Errorf("template %q: no key %q in %s", tmpl, key, payload)
		}
	}
	switch x := v.(type) {
	case bool:
		return map[bool]string{true: "True", false: "False"}[x], nil
	case nil:
		return "None", nil
	case json.Number:
		return x.String(), nil
	case string:
		return x, nil
	}
	return "", fmt.Errorf("template %q: the value is an object or a list", tmpl)
}

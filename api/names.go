package api

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxNameBytes bounds a name: an agent, an actuator, a device. Every name
// is also a valid level of an MQTT topic (a transport builds reply and
// state topics from them), so the rule is the strictest of the transports'.
const MaxNameBytes = 64

var errEmptyName = errors.New("empty name")

// ValidName reports whether s can be one level of a topic: 1..MaxNameBytes
// bytes of UTF-8 with no '/' (it would split into two levels, so agent
// "a/b" would read agent "a"'s replies), no '+' or '#' (wildcards, refused
// in a published topic) and no unprintable character (NUL is forbidden
// by MQTT; control characters are discouraged by it and unreadable in logs).
func ValidName(s string) error {
	if s == "" {
		return errEmptyName
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("name is %d bytes, over the limit of %d", len(s), MaxNameBytes)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("name %q is not valid UTF-8", s)
	}
	for _, c := range s {
		switch {
		case c == '/' || c == '+' || c == '#':
			return fmt.Errorf("name %q holds %q, which MQTT topics reserve", s, c)
		case !unicode.IsPrint(c):
			return fmt.Errorf("name %q holds the unprintable character %U", s, c)
		}
	}
	return nil
}

// Package mqtttopic checks MQTT topic names a client publishes to. It has
// no dependencies, so the configuration (which must not pull in an MQTT
// client) and the MQTT drivers share one rule.
package mqtttopic

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxBytes is MQTT's bound on a topic name.
const MaxBytes = 65535

// CheckPublish checks a topic name a client may publish to (or subscribe to
// exactly): 1 to MaxBytes bytes of valid UTF-8, no wildcard ('+', '#'), no
// control character, not starting with '$' (brokers reserve those topics).
func CheckPublish(t string) error {
	switch {
	case t == "":
		return errors.New("must not be empty")
	case len(t) > MaxBytes:
		return fmt.Errorf("is longer than %d bytes, MQTT's bound on a topic", MaxBytes)
	case !utf8.ValidString(t):
		return errors.New("is not valid UTF-8")
	case strings.ContainsAny(t, "+#"):
		return fmt.Errorf("%.60q holds a wildcard ('+' or '#'): a topic to publish to cannot", t)
	case strings.HasPrefix(t, "$"):
		return fmt.Errorf("%.60q: a topic must not start with '$' (brokers reserve those)", t)
	case strings.IndexFunc(t, unicode.IsControl) >= 0:
		return fmt.Errorf("%.60q holds a control character", t)
	}
	return nil
}

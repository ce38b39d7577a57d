package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Size is a number of bytes. In a config file it is written as plain bytes
// (65536) or with a binary unit: "64KiB", "16MiB", "1GiB".
type Size int64

// The binary units a Size may be written with. Decimal units (KB, MB) are
// refused rather than guessed at: "16MB" means 16,000,000 bytes to some
// readers and 16 MiB to others, and a segment size should not depend on which.
var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"GiB", 1 << 30},
	{"MiB", 1 << 20},
	{"KiB", 1 << 10},
	{"B", 1},
}

// ParseSize parses a size: digits, optionally followed (with or without a
// space) by B, KiB, MiB or GiB.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	num, mult := t, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	if num == "" || strings.TrimLeft(num, "0123456789") != "" {
		if unit := strings.TrimLeft(t, "0123456789 "); isDecimalUnit(unit) {
			return 0, fmt.Errorf("size %q: %s is ambiguous; use %siB (binary units)", s, unit, strings.ToUpper(unit[:1]))
		}
		return 0, fmt.Errorf("size %q: want whole bytes or a whole number of KiB, MiB or GiB, e.g. \"16MiB\"", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

func isDecimalUnit(u string) bool {
	switch strings.ToUpper(u) {
	case "K", "KB", "M", "MB", "G", "GB":
		return true
	}
	return false
}

// String writes the size with the largest binary unit that divides it, so it
// reads back as the same number of bytes.
func (s Size) String() string {
	if s != 0 {
		for _, u := range sizeUnits[:3] {
			if s%Size(u.mult) == 0 {
				return strconv.FormatInt(int64(s)/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalText writes the size as String does.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText is ParseSize for encoding packages.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

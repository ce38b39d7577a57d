package config_test

import (
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want config.Size
		str  string
	}{
		{"0", 0, "0"},
		{"512", 512, "512"},
		{"512B", 512, "512"},
		{"1024", 1024, "1KiB"},
		{"64KiB", 64 << 10, "64KiB"},
		{"16MiB", 16 << 20, "16MiB"},
		{"16 MiB", 16 << 20, "16MiB"},
		{"1GiB", 1 << 30, "1GiB"},
		{"1536KiB", 1536 << 10, "1536KiB"},
		{"8589934592GiB", 0, ""},
	} {
		got, err := config.ParseSize(tc.in)
		if tc.str == "" {
			if err == nil || !strings.Contains(err.Error(), "too large") {
				t.Errorf("%q: %v, %v", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != tc.str {
			t.Errorf("%q: %d (%s), %v; want %d (%s)", tc.in, got, got, err, tc.want, tc.str)
		}
		var back config.Size
		if err := back.UnmarshalText([]byte(got.String())); err != nil || back != got {
			t.Errorf("%q: String %s reads back as %d, %v", tc.in, got, back, err)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "16mib", "16MB", "16K", "1TiB", "0x10"} {
		if got, err := config.ParseSize(in); err == nil {
			t.Errorf("%q accepted as %d", in, got)
		}
	}
	if _, err := config.ParseSize("16MB"); err == nil || !strings.Contains(err.Error(), "MB is ambiguous; use MiB") {
		t.Errorf("16MB: %v", err)
	}
}

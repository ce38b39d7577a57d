package serial

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// TestSerialDocFrames keeps docs/SERIAL.md honest: every frame written out
// in hex there (a line starting "a5 ") is exactly one valid frame whose
// payload decodes, and the CRC check value it quotes is this package's.
func TestSerialDocFrames(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SERIAL.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "0x29B1") || CRC16([]byte("123456789")) != 0x29B1 {
		t.Fatal("the CRC check value in docs/SERIAL.md and CRC16 disagree")
	}
	frames := 0
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "a5 ") {
			continue
		}
		var raw []byte
		for _, tok := range strings.Fields(line) {
			b, err := hex.DecodeString(tok)
			if err != nil || len(b) != 1 {
				break
			}
			raw = append(raw, b[0])
		}
		var d Decoder
		d.Write(raw)
		f, ok := d.Next()
		if !ok || d.Pending() || d.Stats().Skipped != 0 {
			t.Errorf("docs/SERIAL.md: % x is not exactly one valid frame", raw)
			continue
		}
		if m := decoderFor(f.Type); m != nil {
			if err := m.UnmarshalBinary(f.Payload); err != nil {
				t.Errorf("docs/SERIAL.md: % x: %v", raw, err)
			}
		} else if f.Type != TypePing {
			t.Errorf("docs/SERIAL.md: % x: unknown type %v", raw, f.Type)
		}
		frames++
	}
	if frames < 8 {
		t.Fatalf("found %d example frames in docs/SERIAL.md; the parser is broken", frames)
	}
}

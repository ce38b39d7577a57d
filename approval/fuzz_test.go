package approval

import (
	"crypto/ed25519"
	"testing"
)

// FuzzApprovalToken feeds arbitrary text to the token decoder: it must
// never panic, never accept what the fixed key did not sign, and whatever
// it accepts must re-sign to a token that verifies to the same claims.
func FuzzApprovalToken(f *testing.F) {
	seed := make([]byte, ed25519.SeedSize)
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	v, err := NewVerifier([]ed25519.PublicKey{pub}, MaxTTLLimit)
	if err != nil {
		f.Fatal(err)
	}
	c := claims()
	c.Nonce = [NonceLen]byte{9}
	tok, err := Sign(priv, c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok)
	f.Add("")
	f.Add("AAAA")
	f.Add(tok[:len(tok)-4])
	f.Fuzz(func(t *testing.T, s string) {
		p, perr := parse(s)
		got, err := v.Verify(s, t0)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("refusal without a code: %v", err)
			}
			return
		}
		if perr != nil || len(s) > MaxTokenLen {
			t.Fatalf("verified what parse refused: %v", perr)
		}
		if s != tok {
			// Ed25519 signatures are deterministic and the encoding strict:
			// only the one token signed verifies.
			t.Fatalf("accepted %q, which was never signed", s)
		}
		if got.Saga != p.c.Saga {
			t.Fatal("parse and Verify disagree")
		}
		back, err := Sign(priv, got)
		if err != nil || back != s {
			t.Fatalf("re-signed %q, %v", back, err)
		}
	})
}

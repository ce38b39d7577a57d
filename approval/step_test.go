package approval

import (
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"
)

// TestStep checks a step's approvals as a set: each must verify and name
// the step, no nonce may come twice, no key sign twice.
func TestStep(t *testing.T) {
	pubA, privA := keys(t)
	pubB, privB := keys(t)
	pubC, privC := keys(t)
	_, stranger := keys(t)
	v := verifier(t, pubA, pubB, pubC)
	c := claims()
	a, b, cc := sign(t, privA, c), sign(t, privB, c), sign(t, privC, c)
	late := c
	late.NotBefore, late.NotAfter = t0.Add(-time.Minute), t0.Add(-10*time.Second)
	other := c
	other.Value = 1
	check := func(toks ...string) ([]Claims, error) {
		return v.Step(toks, t0, c.Device, c.Actuator, c.Value, c.Saga)
	}
	for _, tt := range []struct {
		name string
		toks []string
		code Code
	}{
		{"two keys", []string{a, b}, ""},
		{"three keys", []string{a, b, cc}, ""},
		{"none", nil, ""},
		{"one token twice", []string{a, b, a}, CodeDuplicate},
		{"one key twice", []string{a, sign(t, privA, c)}, CodeDuplicateKey},
		{"two keys, one nonce", []string{a, sign(t, privB, withNonce(c, claimsOf(t, v, a).Nonce))}, CodeDuplicate},
		{"an unknown key", []string{a, sign(t, stranger, c)}, CodeInvalid},
		{"one expired", []string{a, sign(t, privB, late)}, CodeExpired},
		{"one for another value", []string{sign(t, privB, other), a}, CodeMismatch},
		{"garbage", []string{a, "AAAA"}, CodeInvalid},
		{"over the bound", []string{a, b, cc, a, b, cc, a, b, cc}, CodeInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := check(tt.toks...)
			if tt.code != "" {
				wantCode(t, err, tt.code)
				if got != nil {
					t.Fatalf("refused, yet returned %d claims", len(got))
				}
				return
			}
			if err != nil || len(got) != len(tt.toks) {
				t.Fatalf("%d claims, %v", len(got), err)
			}
			for i, g := range got {
				if g.KeyID != claimsOf(t, v, tt.toks[i]).KeyID {
					t.Fatalf("claim %d is not token %d's", i, i)
				}
			}
		})
	}
}

func withNonce(c Claims, n [NonceLen]byte) Claims {
	c.Nonce = n
	return c
}

func claimsOf(t *testing.T, v *Verifier, tok string) Claims {
	t.Helper()
	c, err := v.Verify(tok, t0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// FuzzStep: whatever tokens a step carries, Step never panics, refuses
// with a code, and what it accepts is from distinct keys with distinct
// nonces, every one approving the step.
func FuzzStep(f *testing.F) {
	var privs []ed25519.PrivateKey
	var pubs []ed25519.PublicKey
	for i := range 3 {
		seed := make([]byte, ed25519.SeedSize)
		seed[0] = byte(i + 1)
		priv := ed25519.NewKeyFromSeed(seed)
		privs = append(privs, priv)
		pubs = append(pubs, priv.Public().(ed25519.PublicKey))
	}
	v, err := NewVerifier(pubs, MaxTTLLimit)
	if err != nil {
		f.Fatal(err)
	}
	c := claims()
	var toks []string
	for i, p := range privs {
		c.Nonce = [NonceLen]byte{byte(i + 1)}
		tok, err := Sign(p, c)
		if err != nil {
			f.Fatal(err)
		}
		toks = append(toks, tok)
	}
	f.Add(toks[0], toks[1], toks[2], uint8(2))
	f.Add(toks[0], toks[0], toks[1], uint8(2))
	f.Add(toks[0], "AAAA", "", uint8(3))
	f.Fuzz(func(t *testing.T, x, y, z string, n uint8) {
		in := []string{x, y, z}[:n%4]
		got, err := v.Step(in, t0, c.Device, c.Actuator, c.Value, c.Saga)
		if err != nil {
			if CodeOf(err) == "" {
				t.Fatalf("refusal without a code: %v", err)
			}
			return
		}
		if len(got) != len(in) {
			t.Fatalf("%d claims for %d tokens", len(got), len(in))
		}
		keys, nonces := map[string]bool{}, map[[NonceLen]byte]bool{}
		for _, g := range got {
			if keys[g.KeyID] || nonces[g.Nonce] || g.Check(c.Device, c.Actuator, c.Value, c.Saga) != nil {
				t.Fatalf("accepted %+v: a repeated key or nonce, or another step's", got)
			}
			keys[g.KeyID], nonces[g.Nonce] = true, true
		}
	})
}

// BenchmarkVerifierStep measures checking a step's approvals: one Ed25519
// verification per token, so the cost grows with M (at most MaxPerStep).
func BenchmarkVerifierStep(b *testing.B) {
	var pubs []ed25519.PublicKey
	var toks []string
	c := claims()
	for i := range MaxPerStep {
		seed := make([]byte, ed25519.SeedSize)
		seed[0] = byte(i + 1)
		priv := ed25519.NewKeyFromSeed(seed)
		pubs = append(pubs, priv.Public().(ed25519.PublicKey))
		tok, err := Sign(priv, c)
		if err != nil {
			b.Fatal(err)
		}
		toks = append(toks, tok)
	}
	v, err := NewVerifier(pubs, MaxTTLLimit)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 2, 3, MaxPerStep} {
		b.Run(fmt.Sprintf("tokens=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := v.Step(toks[:n], t0, c.Device, c.Actuator, c.Value, c.Saga); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

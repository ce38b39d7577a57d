package approval

import (
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	t0        = time.UnixMilli(1_700_000_000_000)
	point1    = 0.1
	point3ish = point1 + 0.2 // 0.30000000000000004 at run time
)

func keys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func claims() Claims {
	return Claims{Device: "arm1", Actuator: "gripper", Value: point3ish, Saga: 7,
		NotBefore: t0, NotAfter: t0.Add(30 * time.Second)}
}

func sign(t testing.TB, priv ed25519.PrivateKey, c Claims) string {
	t.Helper()
	tok, err := Sign(priv, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func verifier(t testing.TB, pubs ...ed25519.PublicKey) *Verifier {
	t.Helper()
	v, err := NewVerifier(pubs, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantCode(t *testing.T, err error, code Code) {
	t.Helper()
	if CodeOf(err) != code {
		t.Fatalf("error %v, want code %s", err, code)
	}
}

func TestRoundTrip(t *testing.T) {
	pub, priv := keys(t)
	c := claims()
	tok := sign(t, priv, c)
	if len(tok) > MaxTokenLen {
		t.Fatalf("token %d > %d", len(tok), MaxTokenLen)
	}
	got, err := verifier(t, pub).Verify(tok, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got.Nonce == ([NonceLen]byte{}) {
		t.Fatal("Sign kept a zero nonce")
	}
	if got.KeyID != KeyID(pub) || len(got.KeyID) != 16 {
		t.Fatalf("key id %q, want %q", got.KeyID, KeyID(pub))
	}
	c.Nonce, c.KeyID = got.Nonce, got.KeyID
	if !got.NotBefore.Equal(c.NotBefore) || !got.NotAfter.Equal(c.NotAfter) {
		t.Fatalf("window %v..%v, want %v..%v", got.NotBefore, got.NotAfter, c.NotBefore, c.NotAfter)
	}
	got.NotBefore, got.NotAfter, c.NotBefore, c.NotAfter = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != c {
		t.Fatalf("claims %+v, want %+v", got, c)
	}
	if err := got.Check("arm1", "gripper", 0.30000000000000004, 7); err != nil {
		t.Fatal(err)
	}
	// Two signatures of the same claims differ (fresh nonces).
	if sign(t, priv, claims()) == tok {
		t.Fatal("two approvals with the same token")
	}
}

// TestLayout pins the documented byte layout, so another language's
// implementation has something exact to match.
func TestLayout(t *testing.T) {
	_, priv := keys(t)
	c := claims()
	c.Nonce = [NonceLen]byte{1, 2, 3}
	raw, err := base64.RawURLEncoding.DecodeString(sign(t, priv, c))
	if err != nil {
		t.Fatal(err)
	}
	if want := 57 + 1 + 4 + 1 + 7 + 64; len(raw) != want {
		t.Fatalf("%d bytes, want %d", len(raw), want)
	}
	if raw[0] != 1 || raw[16] != 7 || raw[41] != 1 || raw[42] != 2 || raw[57] != 4 || string(raw[58:62]) != "arm1" ||
		raw[62] != 7 || string(raw[63:70]) != "gripper" {
		t.Fatalf("layout: % x", raw[:70])
	}
	pub := priv.Public().(ed25519.PublicKey)
	if !ed25519.Verify(pub, append([]byte(SignedPrefix), raw[:70]...), raw[70:]) {
		t.Fatal("the signature is not over SignedPrefix || payload")
	}
}

func TestEveryTamperedByteRefused(t *testing.T) {
	pub, priv := keys(t)
	v := verifier(t, pub)
	tok := sign(t, priv, claims())
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	now := t0.Add(time.Second)
	for i := range raw {
		for _, flip := range []byte{0x01, 0x80, 0xff} {
			b := append([]byte(nil), raw...)
			b[i] ^= flip
			if _, err := v.Verify(base64.RawURLEncoding.EncodeToString(b), now); err == nil {
				t.Fatalf("byte %d ^ %#x accepted", i, flip)
			}
		}
	}
	// And every character of the text.
	for i := range tok {
		for _, c := range []byte{'A', '_', '-', '=', '.'} {
			if tok[i] == c {
				continue
			}
			s := tok[:i] + string(c) + tok[i+1:]
			if _, err := v.Verify(s, now); err == nil {
				t.Fatalf("character %d -> %q accepted", i, c)
			}
		}
	}
	for _, s := range []string{"", tok[:len(tok)-1], tok + "A", tok + "AA", tok + "=", " " + tok, tok + "\n"} {
		if _, err := v.Verify(s, now); CodeOf(err) != CodeInvalid {
			t.Fatalf("%q: %v, want %s", s, err, CodeInvalid)
		}
	}
}

func TestWrongKey(t *testing.T) {
	pub, priv := keys(t)
	other, _ := keys(t)
	tok := sign(t, priv, claims())
	_, err := verifier(t, other).Verify(tok, t0)
	wantCode(t, err, CodeInvalid)
	if !strings.Contains(err.Error(), "unknown key") {
		t.Fatal(err)
	}
	// A key whose id collides (forged id, wrong key): a bad signature.
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	oid := keyID(other)
	copy(raw[1:9], oid[:])
	_, err = verifier(t, other, pub).Verify(base64.RawURLEncoding.EncodeToString(raw), t0)
	wantCode(t, err, CodeInvalid)
	if _, err := verifier(t, other, pub).Verify(tok, t0); err != nil {
		t.Fatalf("with both keys: %v", err)
	}
}

func TestWindow(t *testing.T) {
	pub, priv := keys(t)
	v := verifier(t, pub)
	tok := sign(t, priv, claims())
	for _, tt := range []struct {
		at   time.Duration
		code Code
	}{
		{-DefaultSkew - time.Millisecond, CodeExpired}, // not yet valid
		{-DefaultSkew, ""},
		{0, ""},
		{30*time.Second + DefaultSkew, ""},
		{30*time.Second + DefaultSkew + time.Millisecond, CodeExpired},
		{time.Hour, CodeExpired},
	} {
		_, err := v.Verify(tok, t0.Add(tt.at))
		if CodeOf(err) != tt.code || (tt.code == "") != (err == nil) {
			t.Errorf("at %v: %v, want %q", tt.at, err, tt.code)
		}
	}
}

func TestTTLOverMax(t *testing.T) {
	pub, priv := keys(t)
	c := claims()
	c.NotAfter = c.NotBefore.Add(5*time.Minute + time.Millisecond)
	_, err := verifier(t, pub).Verify(sign(t, priv, c), t0)
	wantCode(t, err, CodeInvalid)
	c.NotAfter = c.NotBefore.Add(5 * time.Minute)
	if _, err := verifier(t, pub).Verify(sign(t, priv, c), t0); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-1, MaxTTLLimit + 1} {
		if _, err := NewVerifier([]ed25519.PublicKey{pub}, d); err == nil {
			t.Errorf("NewVerifier max ttl %v accepted", d)
		}
	}
	if _, err := NewVerifier(nil, 0); err == nil {
		t.Error("NewVerifier without keys accepted")
	}
}

func TestMismatch(t *testing.T) {
	c := claims()
	c.Value = 90
	for _, tt := range []struct {
		dev, act string
		v        float64
		saga     uint64
		ok       bool
	}{
		{"arm1", "gripper", 90, 7, true},
		{"arm1", "gripper", -90 + 180, 7, true},
		{"arm2", "gripper", 90, 7, false},
		{"arm1", "elbow", 90, 7, false},
		{"arm1", "gripper", 90.00000000000001, 7, false},
		{"arm1", "gripper", 89.99999999999999, 7, false},
		{"arm1", "gripper", 90, 8, false},
		{"arm1", "Gripper", 90, 7, false},
	} {
		err := c.Check(tt.dev, tt.act, tt.v, tt.saga)
		if tt.ok != (err == nil) || (!tt.ok && CodeOf(err) != CodeMismatch) {
			t.Errorf("%+v: %v", tt, err)
		}
	}
}

func TestSizeBound(t *testing.T) {
	pub, priv := keys(t)
	c := claims()
	c.Device, c.Actuator = strings.Repeat("d", MaxNameLen), strings.Repeat("a", MaxNameLen)
	tok := sign(t, priv, c)
	if len(tok) != MaxTokenLen {
		t.Fatalf("longest token %d, MaxTokenLen %d", len(tok), MaxTokenLen)
	}
	if _, err := verifier(t, pub).Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
	_, err := verifier(t, pub).Verify(tok+"AAAA", t0)
	wantCode(t, err, CodeInvalid)
	if !strings.Contains(err.Error(), "over the limit") {
		t.Fatal(err)
	}
	c.Device += "x"
	if _, err := Sign(priv, c); err == nil {
		t.Fatal("Sign accepted a 65-byte device name")
	}
}

func TestSignRefuses(t *testing.T) {
	_, priv := keys(t)
	for name, mod := range map[string]func(*Claims){
		"no saga":      func(c *Claims) { c.Saga = 0 },
		"NaN":          func(c *Claims) { c.Value = nan() },
		"empty window": func(c *Claims) { c.NotAfter = c.NotBefore },
		"no actuator":  func(c *Claims) { c.Actuator = "" },
		"bad UTF-8":    func(c *Claims) { c.Device = "\xff" },
	} {
		c := claims()
		mod(&c)
		if _, err := Sign(priv, c); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
}

func nan() float64 { z := 0.0; return z / z }

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "op.key")
	pub, priv := keys(t)
	if err := WriteKeyPair(path, pub, priv, "operator\nalice"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %v, %v", st.Mode(), err)
	}
	if err := WriteKeyPair(path, pub, priv, ""); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("overwrite: %v", err)
	}
	gotPriv, err := LoadPrivateKey(path)
	if err != nil || !gotPriv.Equal(priv) {
		t.Fatalf("private key: %v", err)
	}
	gotPub, err := LoadPublicKey(path + ".pub")
	if err != nil || !gotPub.Equal(pub) {
		t.Fatalf("public key: %v", err)
	}
	b, _ := os.ReadFile(path + ".pub")
	if strings.Count(string(b), "\n") != 1 || !strings.HasSuffix(string(b), " operator alice\n") {
		t.Fatalf("public key file %q", b)
	}
	os.Chmod(path, 0o640)
	if _, err := LoadPrivateKey(path); err == nil || !strings.Contains(err.Error(), "mode 0640") {
		t.Fatalf("group-readable private key: %v", err)
	}
	if _, err := LoadPublicKey(path); err == nil {
		t.Fatal("a private key file read as a public key")
	}
	for _, bad := range []string{"", "ed25519\n", "ed25519 !!!\n", "ed25519 AAAA\n", "rsa " + base64.StdEncoding.EncodeToString(pub) + "\n",
		"ed25519 " + base64.StdEncoding.EncodeToString(pub) + "\nx\n"} {
		if _, err := ParsePublicKey([]byte(bad)); err == nil {
			t.Errorf("public key %q accepted", bad)
		}
	}
	if _, err := LoadPublicKey(dir); err == nil {
		t.Error("a directory read as a key")
	}
	// A key written by one tool and read by another: the pair still signs
	// and verifies.
	tok := sign(t, gotPriv, claims())
	if _, err := verifier(t, gotPub).Verify(tok, t0); err != nil {
		t.Fatal(err)
	}
}

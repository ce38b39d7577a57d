// Package approval signs and verifies operator approvals: single-use,
// time-limited Ed25519 signatures that let one step move an actuator the
// configuration marks requires_approval.
//
// An approval names everything the step may do — the device, the
// actuator, the exact target value and the saga — plus a random nonce and
// a validity window. The operator signs it with a private key (Sign; from
// a shell, `saga-supervisor ctl approve`); the supervisor holds only public
// keys (Verifier) and remembers each nonce it has admitted until the
// approval expires, so one approval moves one step once.
//
// An actuator may require M approvals from M distinct keys (two-person
// approval): the step then carries M tokens, each an ordinary approval
// signed on its own by one operator, and Verifier.Step checks them as a
// set. The token format below does not change with M.
//
// # Token format
//
// A token is the unpadded base64url encoding (RFC 4648 §5, no '=') of
// payload || signature. The payload is a fixed binary layout, all integers
// big-endian:
//
//	offset  size  field
//	0       1     version: 1
//	1       8     key id: the first 8 bytes of SHA-256(the 32-byte public key)
//	9       8     saga id, uint64
//	17      8     value, the IEEE 754 binary64 bits of the target value
//	25      8     not_before, int64 Unix milliseconds
//	33      8     not_after, int64 Unix milliseconds
//	41      16    nonce: 16 random bytes
//	57      1     device name length n, 1..64
//	58      n     device name, UTF-8
//	58+n    1     actuator name length m, 1..64
//	59+n    m     actuator name, UTF-8
//
// The signature is the 64-byte Ed25519 signature (RFC 8032, pure Ed25519,
// no context) of SignedPrefix followed by the payload: the prefix keeps an
// approval key's signatures from being mistaken for anything else it
// might ever sign. Nothing may follow the signature. A token is at most
// MaxTokenLen characters.
//
// The value must be finite; the saga id is never 0; not_before must be
// before not_after. The supervisor compares the value with the step's
// using == (so 0 and -0 are the same value, and nothing else is).
//
// # Key files
//
// A public key file holds one line, "ed25519 " and the standard base64 of
// the 32-byte key, optionally followed by a space and a comment. A private
// key file holds one line, "ed25519-private " and the standard base64 of
// the 32-byte seed (RFC 8032's private key); it must be mode 0600 or 0400.
//
// This package imports only the standard library, so a controller can
// sign approvals without linking the supervisor.
package approval

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"
)

// Version is the payload version this package writes and reads.
const Version = 1

// SignedPrefix is prepended to the payload to form the signed message.
const SignedPrefix = "saga-supervisor approval v1\x00"

// Sizes of the format.
const (
	MaxNameLen    = 64 // device and actuator names, bytes
	NonceLen      = 16 // random bytes
	KeyIDLen      = 8  // bytes of SHA-256 of the public key
	fixedLen      = 57 // version .. nonce
	minPayload    = fixedLen + 2 + 2
	maxPayload    = fixedLen + 2 + 2*MaxNameLen
	maxRawLen     = maxPayload + ed25519.SignatureSize
	DefaultSkew   = 2 * time.Second // clock skew allowed at both ends of the window
	MaxTTLLimit   = time.Hour       // no configuration may accept a longer validity
	DefaultTTL    = 30 * time.Second
	DefaultMaxTTL = 5 * time.Minute
	// MaxPerStep bounds the approvals one step may carry, and so the M of
	// an M-of-N requirement.
	MaxPerStep = 8
)

// MaxTokenLen bounds a token's text: the base64url length of the longest
// valid payload and its signature (335 characters).
var MaxTokenLen = base64.RawURLEncoding.EncodedLen(maxRawLen)

// Code says why an approval was refused. The values are the supervisor's
// wire codes (docs/API.md).
type Code string

// The refusal codes.
const (
	CodeRequired Code = "APPROVAL_REQUIRED" // the actuator needs an approval and the step has none
	CodeInvalid  Code = "APPROVAL_INVALID"  // malformed, unknown key, bad signature, too long a validity
	CodeMismatch Code = "APPROVAL_MISMATCH" // valid, but for another device, actuator, value or saga
	CodeExpired  Code = "APPROVAL_EXPIRED"  // outside its validity window
	CodeReplayed Code = "APPROVAL_REPLAYED" // its nonce was already used
	CodeFull     Code = "APPROVALS_FULL"    // too many live approvals remembered: retry later
	// M-of-N approvals (Step).
	CodeTooFew       Code = "APPROVALS_TOO_FEW"      // fewer approvals than the actuator requires
	CodeDuplicateKey Code = "APPROVAL_DUPLICATE_KEY" // two approvals of one step signed by one key
	CodeDuplicate    Code = "APPROVAL_DUPLICATE"     // one approval (one nonce) twice in one step
)

// Error is a refused approval.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Msg }

func fail(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the Code of the *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Claims is what an approval permits.
type Claims struct {
	KeyID     string // hex of the key id; set by Sign and Verify, ignored on input
	Device    string
	Actuator  string
	Value     float64
	Saga      uint64
	Nonce     [NonceLen]byte // zero: Sign draws a random one
	NotBefore time.Time      // kept to the millisecond
	NotAfter  time.Time
}

// KeyID returns the key id of pub: hex of the first 8 bytes of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	id := keyID(pub)
	return hex.EncodeToString(id[:])
}

func keyID(pub ed25519.PublicKey) [KeyIDLen]byte {
	sum := sha256.Sum256(pub)
	var id [KeyIDLen]byte
	copy(id[:], sum[:KeyIDLen])
	return id
}

func checkName(what, s string) error {
	if s == "" || len(s) > MaxNameLen || !utf8.ValidString(s) {
		return fmt.Errorf("%s %.70q must be 1..%d bytes of UTF-8", what, s, MaxNameLen)
	}
	return nil
}

// Sign returns the token of c signed with priv. A zero nonce is replaced
// by a random one; NotBefore and NotAfter are truncated to milliseconds.
// Sign checks what Verify would refuse on its own (names, a finite value,
// a saga id, an empty window) but not a supervisor's max_ttl.
func Sign(priv ed25519.PrivateKey, c Claims) (string, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return "", errors.New("approval: not an Ed25519 private key")
	}
	if c.Nonce == [NonceLen]byte{} {
		if _, err := rand.Read(c.Nonce[:]); err != nil {
			return "", fmt.Errorf("approval: nonce: %w", err)
		}
	}
	payload, err := encode(keyID(priv.Public().(ed25519.PublicKey)), c)
	if err != nil {
		return "", err
	}
	sig := ed25519.Sign(priv, append([]byte(SignedPrefix), payload...))
	return base64.RawURLEncoding.EncodeToString(append(payload, sig...)), nil
}

func encode(id [KeyIDLen]byte, c Claims) ([]byte, error) {
	if err := checkName("device", c.Device); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	if err := checkName("actuator", c.Actuator); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	if math.IsNaN(c.Value) || math.IsInf(c.Value, 0) {
		return nil, errors.New("approval: the value must be finite")
	}
	if c.Saga == 0 {
		return nil, errors.New("approval: no saga id")
	}
	nb, na := c.NotBefore.UnixMilli(), c.NotAfter.UnixMilli()
	if na <= nb {
		return nil, errors.New("approval: not_after must be after not_before")
	}
	b := make([]byte, 0, maxPayload)
	b = append(b, Version)
	b = append(b, id[:]...)
	b = binary.BigEndian.AppendUint64(b, c.Saga)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(c.Value))
	b = binary.BigEndian.AppendUint64(b, uint64(nb))
	b = binary.BigEndian.AppendUint64(b, uint64(na))
	b = append(b, c.Nonce[:]...)
	b = append(b, byte(len(c.Device)))
	b = append(b, c.Device...)
	b = append(b, byte(len(c.Actuator)))
	b = append(b, c.Actuator...)
	return b, nil
}

// parsed is a token split into its parts, before the signature is checked.
type parsed struct {
	id      [KeyIDLen]byte
	c       Claims
	payload []byte
	sig     []byte
}

// parse decodes a token's structure. Every refusal is CodeInvalid.
func parse(token string) (*parsed, error) {
	if len(token) > MaxTokenLen {
		return nil, fail(CodeInvalid, "token is %d characters, over the limit of %d", len(token), MaxTokenLen)
	}
	// encoding/base64 skips '\r' and '\n' even in strict mode: one token
	// must have one spelling, so anything outside the alphabet is refused.
	for i := 0; i < len(token); i++ {
		if c := token[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return nil, fail(CodeInvalid, "token holds %q at offset %d: not unpadded base64url", c, i)
		}
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil {
		return nil, fail(CodeInvalid, "token is not unpadded base64url")
	}
	if len(raw) < minPayload+ed25519.SignatureSize {
		return nil, fail(CodeInvalid, "token is too short")
	}
	p := &parsed{}
	if raw[0] != Version {
		return nil, fail(CodeInvalid, "unknown approval version %d", raw[0])
	}
	copy(p.id[:], raw[1:9])
	c := &p.c
	c.KeyID = hex.EncodeToString(p.id[:])
	c.Saga = binary.BigEndian.Uint64(raw[9:17])
	c.Value = math.Float64frombits(binary.BigEndian.Uint64(raw[17:25]))
	nb, na := int64(binary.BigEndian.Uint64(raw[25:33])), int64(binary.BigEndian.Uint64(raw[33:41]))
	copy(c.Nonce[:], raw[41:57])
	rest := raw[fixedLen:]
	name := func(what string) (string, error) {
		if len(rest) < 1 || int(rest[0]) > len(rest)-1 {
			return "", fail(CodeInvalid, "token ends inside the %s name", what)
		}
		n := int(rest[0])
		s := string(rest[1 : 1+n])
		rest = rest[1+n:]
		if err := checkName(what, s); err != nil {
			return "", fail(CodeInvalid, "%v", err)
		}
		return s, nil
	}
	if c.Device, err = name("device"); err != nil {
		return nil, err
	}
	if c.Actuator, err = name("actuator"); err != nil {
		return nil, err
	}
	if len(rest) != ed25519.SignatureSize {
		return nil, fail(CodeInvalid, "token has %d bytes after its payload, want a %d-byte signature", len(rest), ed25519.SignatureSize)
	}
	p.payload, p.sig = raw[:len(raw)-ed25519.SignatureSize], rest
	switch {
	case math.IsNaN(c.Value) || math.IsInf(c.Value, 0):
		return nil, fail(CodeInvalid, "the value is not finite")
	case c.Saga == 0:
		return nil, fail(CodeInvalid, "saga id 0")
	case na <= nb:
		return nil, fail(CodeInvalid, "not_after is not after not_before")
	}
	c.NotBefore, c.NotAfter = time.UnixMilli(nb), time.UnixMilli(na)
	return p, nil
}

// Verifier checks approvals against a set of public keys.
type Verifier struct {
	keys   map[[KeyIDLen]byte]ed25519.PublicKey
	maxTTL time.Duration
	skew   time.Duration
}

// NewVerifier returns a verifier trusting keys, refusing approvals valid
// for longer than maxTTL (0: DefaultMaxTTL; at most MaxTTLLimit), with
// DefaultSkew of clock skew allowed.
func NewVerifier(keys []ed25519.PublicKey, maxTTL time.Duration) (*Verifier, error) {
	if maxTTL == 0 {
		maxTTL = DefaultMaxTTL
	}
	if maxTTL < 0 || maxTTL > MaxTTLLimit {
		return nil, fmt.Errorf("approval: max ttl %v is outside 0..%v", maxTTL, MaxTTLLimit)
	}
	if len(keys) == 0 {
		return nil, errors.New("approval: no public key")
	}
	v := &Verifier{keys: map[[KeyIDLen]byte]ed25519.PublicKey{}, maxTTL: maxTTL, skew: DefaultSkew}
	for _, k := range keys {
		if len(k) != ed25519.PublicKeySize {
			return nil, errors.New("approval: not an Ed25519 public key")
		}
		v.keys[keyID(k)] = append(ed25519.PublicKey(nil), k...)
	}
	return v, nil
}

// MaxTTL is the longest validity the verifier accepts.
func (v *Verifier) MaxTTL() time.Duration { return v.maxTTL }

// Skew is the clock skew allowed at both ends of a validity window.
func (v *Verifier) Skew() time.Duration { return v.skew }

// Verify decodes token, checks its signature against the key it names,
// its validity (not_after - not_before at most MaxTTL) and that now lies in
// [not_before - skew, not_after + skew]. It does not check what the
// approval names (Claims.Check) or whether its nonce was used.
func (v *Verifier) Verify(token string, now time.Time) (Claims, error) {
	p, err := parse(token)
	if err != nil {
		return Claims{}, err
	}
	pub, ok := v.keys[p.id]
	if !ok {
		return Claims{}, fail(CodeInvalid, "signed by unknown key %s", p.c.KeyID)
	}
	msg := append([]byte(SignedPrefix), p.payload...)
	if !ed25519.Verify(pub, msg, p.sig) {
		return Claims{}, fail(CodeInvalid, "bad signature for key %s", p.c.KeyID)
	}
	c := p.c
	if ttl := c.NotAfter.Sub(c.NotBefore); ttl > v.maxTTL {
		return Claims{}, fail(CodeInvalid, "valid for %v, longer than the %v this supervisor accepts", ttl, v.maxTTL)
	}
	if now.Before(c.NotBefore.Add(-v.skew)) {
		return Claims{}, fail(CodeExpired, "not valid until %s (in %v)", c.NotBefore.UTC().Format(time.RFC3339Nano), c.NotBefore.Sub(now).Round(time.Millisecond))
	}
	if now.After(c.NotAfter.Add(v.skew)) {
		return Claims{}, fail(CodeExpired, "expired at %s (%v ago)", c.NotAfter.UTC().Format(time.RFC3339Nano), now.Sub(c.NotAfter).Round(time.Millisecond))
	}
	return c, nil
}

// Verify is NewVerifier(pubs, maxTTL) then Verify(token, now).
func Verify(pubs []ed25519.PublicKey, token string, now time.Time, maxTTL time.Duration) (Claims, error) {
	v, err := NewVerifier(pubs, maxTTL)
	if err != nil {
		return Claims{}, err
	}
	return v.Verify(token, now)
}

// Check returns a CodeMismatch error unless c approves exactly this step.
// The value is compared with ==.
func (c Claims) Check(device, actuator string, value float64, saga uint64) error {
	switch {
	case c.Device != device:
		return fail(CodeMismatch, "approval is for device %q, not %q", c.Device, device)
	case c.Actuator != actuator:
		return fail(CodeMismatch, "approval is for actuator %q, not %q", c.Actuator, actuator)
	case c.Value != value:
		return fail(CodeMismatch, "approval is for value %v, not %v", c.Value, value)
	case c.Saga != saga:
		return fail(CodeMismatch, "approval is for saga %d, not %d", c.Saga, saga)
	}
	return nil
}

// Step checks tokens as the approvals of one step — on device, moving
// actuator to value in saga — and returns their claims in order. Each
// token must verify (Verify) and approve exactly this step (Check); the
// first that does not is refused with its code, in the order given. Then,
// across the tokens: two carrying the same nonce (the same approval sent
// twice) are refused CodeDuplicate, two signed by one key CodeDuplicateKey.
// So every claim returned is from a distinct key and has a distinct
// nonce. Step does not count them against a requirement, nor look at which
// nonces were used before: both are the caller's.
func (v *Verifier) Step(tokens []string, now time.Time, device, actuator string, value float64, saga uint64) ([]Claims, error) {
	if len(tokens) > MaxPerStep {
		return nil, fail(CodeInvalid, "%d approvals, more than the %d one step may carry", len(tokens), MaxPerStep)
	}
	out := make([]Claims, 0, len(tokens))
	for i, tok := range tokens {
		c, err := v.Verify(tok, now)
		if err == nil {
			err = c.Check(device, actuator, value, saga)
		}
		if err != nil {
			if len(tokens) > 1 {
				if e, ok := err.(*Error); ok {
					return nil, fail(e.Code, "approval %d of %d: %s", i+1, len(tokens), e.Msg)
				}
			}
			return nil, err
		}
		out = append(out, c)
	}
	for i := range out {
		for j := range i {
			switch {
			case out[i].Nonce == out[j].Nonce:
				return nil, fail(CodeDuplicate, "approvals %d and %d are one approval (nonce %s): each counts once", j+1, i+1, out[i].NonceHex())
			case out[i].KeyID == out[j].KeyID:
				return nil, fail(CodeDuplicateKey, "approvals %d and %d are both signed by key %s: each must come from a different key", j+1, i+1, out[i].KeyID)
			}
		}
	}
	return out, nil
}

// NonceHex is the nonce as hex, for logs and journals.
func (c Claims) NonceHex() string { return hex.EncodeToString(c.Nonce[:]) }

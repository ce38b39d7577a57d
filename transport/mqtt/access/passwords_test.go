package access

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Entries written by the real mosquitto_passwd 2.0.11: default ($7$, 101
// iterations), -I 5, and -H sha512 ($6$).
const realFile = `alice:$7$101$jCC/KYC/rFEhze1M$MVrDXA58CNccZVEtkuhNnlrVVjI5Q8GqQmFJSRG4iByMN8KR9jER8X9qYvEh1v3dN/3fbyYkvsiac3/GydZpEg==
bob:$6$CQ0NQA40JImU1wI2$0eg5NV9pXVb6tRojgpSaa0pG+kK7f77jzr+A4po9k7l0qHCJqLdfGnIuYZ838FoCX2pX+RwKJPLI0X6S2zZPcw==
carol:$7$5$LbUnyWQcMz3Owv2B$/IAce1nzv2THzLjwopuSAQtc2f6WA1L+yLc9q49kwbuZCAY8s2oPQnr/iH4n8Ug509MzDCX4/NTxzdZbptkzSA==
`

func TestParseRealEntries(t *testing.T) {
	p, err := ParsePasswords(strings.NewReader("# comment\n\n" + realFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Users(), ","); got != "alice,bob,carol" {
		t.Errorf("users %s", got)
	}
	for _, c := range []struct {
		user, pw string
		ok       bool
	}{
		{"alice", "secret", true}, {"bob", "pw", true}, {"carol", "pw", true},
		{"alice", "Secret", false}, {"alice", "", false}, {"bob", "pw ", false},
		{"carol", "secret", false}, {"dave", "pw", false}, {"", "", false},
	} {
		if got := p.Check(c.user, c.pw); got != c.ok {
			t.Errorf("Check(%q, %q) = %v", c.user, c.pw, got)
		}
	}
	var none *Passwords
	if none.Check("alice", "secret") || none.Users() != nil {
		t.Error("nil Passwords allows")
	}
}

func TestHashPasswordRoundTrip(t *testing.T) {
	h, err := HashPassword("hunter2")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Split(h, "$"); len(f) != 5 || f[1] != "7" || f[2] != "101" || len(f[3]) != 16 || len(f[4]) != 88 {
		t.Fatalf("hash %q is not mosquitto's $7$101$<16>$<88> shape", h)
	}
	h2, _ := HashPassword("hunter2")
	if h == h2 {
		t.Error("two hashes of one password are equal: no salt")
	}
	p, err := ParsePasswords(strings.NewReader("u:" + h + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Check("u", "hunter2") || p.Check("u", "hunter3") {
		t.Error("round trip")
	}
}

func TestParseRefuses(t *testing.T) {
	good := strings.SplitN(realFile, "\n", 2)[0]
	hash := strings.TrimPrefix(good, "alice:")
	for name, c := range map[string]struct{ text, want string }{
		"no colon":        {"alice\n", "line 1: no ':'"},
		"plaintext":       {"alice:secret\n", "line 1 (user \"alice\"): hash is not"},
		"duplicate":       {good + "\n" + good + "\n", "line 2: user \"alice\" listed twice"},
		"empty user":      {":" + hash + "\n", "line 1: username"},
		"slash user":      {"a/b:" + hash + "\n", "line 1: username"},
		"space user":      {"a b:" + hash + "\n", "line 1: username"},
		"unknown type":    {"u:$5$abc$def\n", "$5$"},
		"fields":          {"u:$7$101$abc\n", "fields"},
		"iterations":      {"u:$7$0$" + strings.SplitN(hash, "$", 4)[3] + "\n", "iteration"},
		"huge iterations": {"u:$7$99999999999$" + strings.SplitN(hash, "$", 4)[3] + "\n", "iteration"},
		"short hash":      {"u:$7$101$jCC/KYC/rFEhze1M$MVrD\n", "hash is not 64 bytes"},
		"bad salt":        {"u:$7$101$!!!!$" + hash[len(hash)-88:] + "\n", "salt"},
		"line 3":          {"# c\n\nalice:x\n", "line 3"},
		"long line":       {"u:" + strings.Repeat("x", 5000) + "\n", "longer than"},
	} {
		_, err := ParsePasswords(strings.NewReader(c.text))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.want)
		}
	}
}

func TestCRLF(t *testing.T) {
	p, err := ParsePasswords(strings.NewReader(strings.ReplaceAll(realFile, "\n", "\r\n")))
	if err != nil || !p.Check("alice", "secret") {
		t.Fatalf("CRLF file: %v", err)
	}
}

func TestWriteAndLoadPasswords(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "passwd")
	if err := WritePasswords(path, map[string]string{"zed": "z", "amy": "a"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	data, _ := os.ReadFile(path)
	if lines := strings.Split(strings.TrimSpace(string(data)), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "amy:$7$101$") || !strings.HasPrefix(lines[1], "zed:") {
		t.Errorf("file not sorted $7$ lines:\n%s", data)
	}
	p, err := LoadPasswords(path)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Check("amy", "a") || !p.Check("zed", "z") || p.Check("amy", "z") {
		t.Error("check after load")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary files left: %v", ents)
	}
	// Rewriting replaces the file.
	if err := WritePasswords(path, map[string]string{"amy": "b"}); err != nil {
		t.Fatal(err)
	}
	if p, _ = LoadPasswords(path); p.Check("amy", "a") || !p.Check("amy", "b") || p.Has("zed") {
		t.Error("rewrite")
	}

	if err := WritePasswords(path, map[string]string{"a:b": "x"}); err == nil {
		t.Error("username with ':' written")
	}
	if err := WritePasswords(path, map[string]string{"a": ""}); err == nil {
		t.Error("empty password written")
	}

	os.Chmod(path, 0o640)
	if _, err := LoadPasswords(path); err == nil || !strings.Contains(err.Error(), "0640") {
		t.Errorf("group-readable file: %v", err)
	}
	os.Chmod(path, 0o600)
	link := filepath.Join(dir, "link")
	os.Symlink(path, link)
	if _, err := LoadPasswords(link); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("symlink: %v", err)
	}
	if _, err := LoadPasswords(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file loaded")
	}
}

func TestGeneratePassword(t *testing.T) {
	a, err := GeneratePassword()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GeneratePassword()
	if a == b || len(a) < 22 || strings.ContainsAny(a, "+/=:$ ") {
		t.Errorf("passwords %q %q", a, b)
	}
}

func FuzzParsePasswords(f *testing.F) {
	f.Add(realFile)
	f.Add("# c\n\nu:$7$1$AAAA$" + strings.Repeat("A", 86) + "==\n")
	f.Add("u:$6$AAAA$$\n")
	f.Add("u:plain\nu:plain\n")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParsePasswords(strings.NewReader(text))
		if err != nil {
			if p != nil {
				t.Fatal("passwords and an error")
			}
			return
		}
		for _, u := range p.Users() {
			if ValidUser(u) != nil {
				t.Fatalf("accepted invalid user %q", u)
			}
			e := p.users[u]
			if len(e.hash) != keyBytes || len(e.salt) == 0 || (e.kind == kindPBKDF2 && (e.iterations < 1 || e.iterations > maxIterations)) {
				t.Fatalf("accepted entry %+v", e)
			}
			if e.kind == kindPBKDF2 && e.iterations > 1000 {
				continue // keep the fuzzer fast
			}
			p.Check(u, "x")
		}
	})
}

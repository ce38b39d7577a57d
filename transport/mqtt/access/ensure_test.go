package access

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// EnsureLogins creates what is missing and nothing else: a first run
// writes every login's password in clear (0600) and hashed; a second run
// with one more agent adds only that agent and leaves every earlier entry
// and password as it was; a deleted entry is added again with the password
// still in its credentials file.
func TestEnsureLogins(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "mqtt", "passwd")
	creds := filepath.Join(dir, "mqtt", "credentials")
	sup := Login{Name: "saga-supervisor-arm1", Users: []string{"saga-supervisor-arm1", "saga-supervisor-arm1-estop", "saga-supervisor-arm1-devices"}}
	planner := Login{Name: "planner", Users: []string{"planner"}}
	added, err := EnsureLogins(passwd, creds, []Login{sup, planner})
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 4 {
		t.Fatalf("added %v", added)
	}
	for _, p := range []string{passwd, filepath.Join(creds, "planner"), filepath.Join(creds, sup.Name)} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", p, fi.Mode(), err)
		}
	}
	if fi, _ := os.Stat(creds); fi.Mode().Perm() != 0o700 {
		t.Errorf("credentials dir mode %v", fi.Mode())
	}
	pw, err := ReadSecret(filepath.Join(creds, sup.Name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadPasswords(passwd)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range sup.Users {
		if !p.Check(u, pw) {
			t.Errorf("%s does not log in with the supervisor's password", u)
		}
	}
	before, _ := os.ReadFile(passwd)

	// Again, with one more agent: only it is added.
	added, err = EnsureLogins(passwd, creds, []Login{sup, planner, {Name: "ctl", Users: []string{"ctl"}}})
	if err != nil || !slices.Equal(added, []string{"ctl"}) {
		t.Fatalf("second run added %v (%v)", added, err)
	}
	after, _ := os.ReadFile(passwd)
	if string(after[:len(before)]) != string(before) {
		t.Error("a second run changed existing entries")
	}
	if again, _ := ReadSecret(filepath.Join(creds, sup.Name)); again != pw {
		t.Error("a second run changed the supervisor's password")
	}
	// Nothing missing: nothing written.
	if added, err := EnsureLogins(passwd, creds, []Login{sup, planner}); err != nil || added != nil {
		t.Fatalf("third run added %v (%v)", added, err)
	}
	// A password file others can read is refused, not silently used.
	os.Chmod(passwd, 0o644)
	if _, err := EnsureLogins(passwd, creds, []Login{planner}); err == nil {
		t.Fatal("a world-readable password file was accepted")
	}
	os.Chmod(passwd, 0o600)
	// A bad name is refused before anything is written.
	if _, err := EnsureLogins(passwd, creds, []Login{{Name: "a b", Users: []string{"a b"}}}); err == nil {
		t.Fatal("a user with a space was accepted")
	}
}

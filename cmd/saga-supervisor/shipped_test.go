//go:build !saga_lean

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/saga-supervisor/saga-supervisor/actuators"
	"github.com/saga-supervisor/saga-supervisor/supervisor/config"
	"github.com/saga-supervisor/saga-supervisor/supervisor/wiring"
)

// repoRoot is the repository, seen from this package's directory.
const repoRoot = "../.."

// shippedConfigs are the supervisor configs the repository ships, relative
// to repoRoot. The unit must be able to run each of them.
var shippedConfigs = []string{
	"configs/default.yaml",
	"configs/raspberry-pi.yaml",
	"supervisor/config/default.yaml",
	"examples/scenarios/kick-config.yaml",
	"hil-tests/configs/sim.yaml",
}

// hilPlaceholders fill in what hil-tests fills in hil-tests/configs/sim.yaml.
var hilPlaceholders = map[string]string{
	"DIR": "/tmp/hil", "JOURNAL": "./journal", "SEGMENT": "16MiB", "TTY": "/dev/ttyACM0",
	"BROKER": "embedded", "LISTEN": "127.0.0.1:1883", "HTTP": "127.0.0.1:8080", "ACTION": "halt",
}

// deviceNeed is what one use of hardware in a config needs from the unit:
// a supplementary group and the DeviceAllow= entries for its devices.
// docs/HARDWARE.md, "Running without root", shows the same table.
type deviceNeed struct {
	group string
	allow []string
	root  bool // cannot run as the unit's user at all
}

// deviceNeeds maps what a config uses (see configUses) to what it needs.
var deviceNeeds = map[string]deviceNeed{
	"gpio":            {group: "gpio", allow: []string{"char-gpiochip", "/dev/gpiomem"}},
	"gpio pwm sysfs":  {group: "gpio"}, // sysfs files: the udev rules give them to gpio
	"gpio pwm periph": {root: true},    // /dev/mem
	"estop gpio":      {group: "gpio", allow: []string{"char-gpiochip", "/dev/gpiomem"}},
	"pca9685":         {group: "i2c", allow: []string{"char-i2c"}},
	"ina219":          {group: "i2c", allow: []string{"char-i2c"}},
	"ina226":          {group: "i2c", allow: []string{"char-i2c"}},
	"mcus":            {group: "dialout", allow: []string{"char-ttyACM", "char-ttyUSB", "char-ttyAMA"}},
	"mcu":             {}, // through its board, under mcus
	"sim":             {},
	"mqtt":            {}, // a device over the broker
}

// configUses lists what cfg uses, as keys of deviceNeeds.
func configUses(cfg *config.Config) []string {
	var uses []string
	for _, name := range cfg.ActuatorNames() {
		a := cfg.Actuators[name]
		use := a.Driver
		if g, ok := a.Section.(*wiring.GPIOActuator); ok && a.Driver == "gpio" && a.Kind == actuators.Servo {
			use = "gpio pwm " + g.PWM
		}
		uses = append(uses, use)
	}
	for _, s := range cfg.Supplies {
		uses = append(uses, s.Driver)
	}
	if cfg.EStop.Driver != "" {
		uses = append(uses, "estop "+cfg.EStop.Driver)
	}
	if len(cfg.MCUs) > 0 {
		uses = append(uses, "mcus")
	}
	slices.Sort(uses)
	return slices.Compact(uses)
}

// tree is the repository's files, some of them replaced (nil: removed),
// so that each check can be shown to catch a broken copy.
type tree struct {
	root string
	over map[string][]byte
}

func (tr tree) read(rel string) ([]byte, error) {
	if b, ok := tr.over[rel]; ok {
		if b == nil {
			return nil, os.ErrNotExist
		}
		return b, nil
	}
	return os.ReadFile(filepath.Join(tr.root, rel))
}

func (tr tree) exists(rel string) bool {
	if b, ok := tr.over[rel]; ok {
		return b != nil
	}
	_, err := os.Stat(filepath.Join(tr.root, rel))
	return err == nil
}

// mustRead reads a file every check needs: its absence fails the test.
func (tr tree) mustRead(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := tr.read(rel)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadShipped reads a shipped config's layout (secret files need not exist).
func loadShipped(t *testing.T, tr tree, rel string) *config.Config {
	t.Helper()
	b := tr.mustRead(t, rel)
	if strings.HasPrefix(rel, "hil-tests/") {
		b = regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllFunc(b, func(m []byte) []byte {
			v, ok := hilPlaceholders[string(m[2:len(m)-1])]
			if !ok {
				t.Fatalf("%s: placeholder %s unknown to this test", rel, m)
			}
			return []byte(v)
		})
	}
	cfg, err := config.ParseLayout(b, rel)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return cfg
}

// unitSettings returns every value of each key of a systemd unit, in order.
func unitSettings(text string) map[string][]string {
	m := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = append(m[k], strings.TrimSpace(v))
		}
	}
	return m
}

// The files shipped together agree with each other: the mosquitto files are
// what mosquitto-config writes for the config they name, the unit can open
// every device the shipped configs use, the docs name files that exist and
// configs that check, and the unit and the docs install to the same paths.
// Each check returns the disagreements it finds, so that
// TestShippedFilesAgreeCatches can run it on broken copies.
func TestShippedFilesAgree(t *testing.T) {
	for _, c := range shippedChecks {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range c.check(t, tree{root: repoRoot}) {
				t.Error(p)
			}
		})
	}
}

var shippedChecks = []struct {
	name  string
	check func(t *testing.T, tr tree) []string
}{
	{"mosquitto files are mosquitto-config's output", checkMosquittoGenerated},
	{"unit grants what the configs use", checkUnitCoversConfigs},
	{"docs name files that exist", checkDocPathsExist},
	{"HARDWARE.md snippets are valid", checkHardwareSnippets},
	{"unit and docs install to the same paths", checkInstallPaths},
	{"the example config's state_dir is the unit's state directory", checkExampleStateDir},
	{"check-config's refusal and warning for HTTP beyond loopback name the unit's IP rules and the drop-in", checkHTTPBeyondLoopback},
}

// unitStateDir is the directory the unit's StateDirectory= makes and its
// WorkingDirectory= runs the daemon in.
func unitStateDir(t *testing.T, tr tree) (string, []string) {
	unit := unitSettings(string(tr.mustRead(t, "configs/saga-supervisor.service")))
	if len(unit["StateDirectory"]) != 1 {
		return "", []string{fmt.Sprintf("the unit has StateDirectory=%q: want one", unit["StateDirectory"])}
	}
	dir := "/var/lib/" + unit["StateDirectory"][0]
	if wd := unit["WorkingDirectory"]; len(wd) != 1 || wd[0] != dir {
		return dir, []string{fmt.Sprintf("the unit's WorkingDirectory=%q is not its state directory %s", wd, dir)}
	}
	return dir, nil
}

// tunnel is the way to the dashboard from another machine without TLS,
// as check-config and the docs give it for http.listen: 0.0.0.0:8080.
const tunnel = "ssh -N -L 8080:127.0.0.1:8080"

// dropinCmd is the command that lets other machines through the unit's
// IP rules, as check-config, the unit and the docs give it.
const dropinCmd = "saga-supervisor systemd-dropin --config"

// checkHTTPBeyondLoopback: check-config refuses an http.listen other
// machines could reach without TLS, and warns about one with TLS; both
// name the unit's IP rules as the unit has them (it drops their packets,
// whatever the config says), the command whose drop-in lets them through,
// and the SSH tunnel. That command's drop-in for the TLS config names the
// same rules and allows what the listener needs; the unit's own comment
// names the command, and docs/HARDWARE.md and docs/SECURITY.md give the
// same rules, tunnel and command.
func checkHTTPBeyondLoopback(t *testing.T, tr tree) (problems []string) {
	unitText := string(tr.mustRead(t, "configs/saga-supervisor.service"))
	unit := unitSettings(unitText)
	rules := fmt.Sprintf("IPAddressDeny=%s and IPAddressAllow=%s", strings.Join(unit["IPAddressDeny"], " "), strings.Join(unit["IPAddressAllow"], " "))
	dir := t.TempDir()
	plain, withTLS := filepath.Join(dir, "http.yaml"), filepath.Join(dir, "https.yaml")
	const actuators = "actuators:\n  base: {kind: servo, driver: sim, min: 0, max: 1}\n"
	if err := os.WriteFile(plain, []byte("device: arm1\nhttp: {listen: 0.0.0.0:8080}\n"+actuators), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(withTLS, []byte("device: arm1\nhttp: {listen: 0.0.0.0:8080, tls: {self_signed: true}}\n"+actuators), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := run(t, "check-config", plain)
	if code != 1 || !strings.Contains(out, plain+":2:16: http.listen: 0.0.0.0:8080 is reachable from other machines") || !strings.Contains(out, "needs TLS and a login") {
		problems = append(problems, fmt.Sprintf("check-config of http.listen 0.0.0.0:8080 without TLS: exit %d, not refused for TLS and a login:\n%s", code, out))
	}
	for _, want := range []string{rules, tunnel, dropinCmd + " " + plain} {
		if !strings.Contains(out, want) {
			problems = append(problems, fmt.Sprintf("check-config's error for http.listen 0.0.0.0:8080 without TLS does not say %q (the unit's IP rules; the tunnel; the drop-in):\n%s", want, out))
		}
	}
	out, code = run(t, "check-config", withTLS)
	if code != 0 || !strings.Contains(out, "warning: "+withTLS+":2:16: http.listen: 0.0.0.0:8080 is reachable from other machines") {
		problems = append(problems, fmt.Sprintf("check-config of http.listen 0.0.0.0:8080 with TLS: exit %d, no warning:\n%s", code, out))
	}
	for _, want := range []string{rules, tunnel, dropinCmd + " " + withTLS} {
		if !strings.Contains(out, want) {
			problems = append(problems, fmt.Sprintf("check-config's warning for http.listen 0.0.0.0:8080 with TLS does not say %q (the unit's IP rules; the tunnel; the drop-in):\n%s", want, out))
		}
	}
	out, code = run(t, "systemd-dropin", "--config", withTLS, "--out", "-")
	if code != 0 || !strings.Contains(out, "[Service]\nIPAddressAllow=any\n") || !strings.Contains(out, rules) {
		problems = append(problems, fmt.Sprintf("systemd-dropin for http.listen 0.0.0.0:8080 with TLS: exit %d, not IPAddressAllow=any after the unit's %s:\n%s", code, rules, out))
	}
	if !strings.Contains(unitText, "sudo "+dropinCmd+" /etc/saga-supervisor/config.yaml") {
		problems = append(problems, fmt.Sprintf("configs/saga-supervisor.service does not name %q beside its IP rules", "sudo "+dropinCmd+" /etc/saga-supervisor/config.yaml"))
	}
	// docs/HARDWARE.md's HTTPS config (a plain block: its warning about
	// the unit would fail the yaml blocks' check) is valid, and warns of
	// nothing but the unit.
	hw := string(tr.mustRead(t, "docs/HARDWARE.md"))
	if m := regexp.MustCompile("(?ms)^\\*\\*HTTPS with a login\\*\\*.*?^```\n(http:\n.*?)^```").FindStringSubmatch(hw); m == nil {
		problems = append(problems, "docs/HARDWARE.md has no http: block under **HTTPS with a login**")
	} else {
		path := filepath.Join(dir, "hardware-https.yaml")
		if err := os.WriteFile(path, []byte("device: arm1\n"+m[1]+actuators), 0o600); err != nil {
			t.Fatal(err)
		}
		out, code := run(t, "check-config", path)
		if code != 0 || strings.Count(out, "warning: ") != 1 || !strings.Contains(out, "http.listen: 0.0.0.0:8443 is reachable from other machines") {
			problems = append(problems, fmt.Sprintf("docs/HARDWARE.md's HTTPS config does not check clean but for the unit's warning (exit %d):\n%s", code, out))
		}
	}
	allow := "IPAddressAllow=" + strings.Join(unit["IPAddressAllow"], " ")
	for _, doc := range []string{"docs/HARDWARE.md", "docs/SECURITY.md"} {
		text := string(tr.mustRead(t, doc))
		for _, want := range []string{allow, tunnel, dropinCmd} {
			if !strings.Contains(text, want) {
				problems = append(problems, fmt.Sprintf("%s does not say %q, as check-config's refusal and warning for http.listen do", doc, want))
			}
		}
	}
	return problems
}

// checkExampleStateDir: the example config written for the unit
// (configs/raspberry-pi.yaml, installed as the unit's config) names the
// unit's state directory as its state_dir, so that the tools given it find
// the daemon's files from any directory.
func checkExampleStateDir(t *testing.T, tr tree) []string {
	dir, problems := unitStateDir(t, tr)
	if dir == "" {
		return problems
	}
	if got := loadShipped(t, tr, "configs/raspberry-pi.yaml").StateDir; got != dir {
		problems = append(problems, fmt.Sprintf("configs/raspberry-pi.yaml has state_dir %q; the unit runs the daemon in %s", got, dir))
	}
	return problems
}

// generatedLine is the first line mosquitto-config writes (generatedFrom).
var generatedLine = regexp.MustCompile(`^# Written by saga-supervisor mosquitto-config --config (\S+): `)

// checkMosquittoGenerated: configs/mosquitto.acl and configs/mosquitto.conf
// are, byte for byte, what mosquitto-config writes from the config the
// ACL's first line names (the conf with its --out directory as installed).
func checkMosquittoGenerated(t *testing.T, tr tree) (problems []string) {
	acl := tr.mustRead(t, "configs/mosquitto.acl")
	m := generatedLine.FindSubmatch(acl)
	if m == nil {
		return []string{"configs/mosquitto.acl does not start with the line naming the config it was written from"}
	}
	src := string(m[1])
	out := t.TempDir()
	cmd := exec.Command(binary, "mosquitto-config", "--config", src, "--out", out, "--credentials", t.TempDir())
	cmd.Dir = tr.root
	if b, err := cmd.CombinedOutput(); err != nil {
		return []string{"mosquitto-config --config " + src + ": " + err.Error() + "\n" + string(b)}
	}
	for _, f := range [...]struct{ shipped, written string }{{"configs/mosquitto.acl", "saga.acl"}, {"configs/mosquitto.conf", "mosquitto.conf"}} {
		want, err := os.ReadFile(filepath.Join(out, f.written))
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.ReplaceAll(want, []byte(out), []byte(shippedMosquittoDir))
		if got := tr.mustRead(t, f.shipped); !bytes.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("%s is not what `saga-supervisor mosquitto-config --config %s --out %s` writes as %s: regenerate it",
				f.shipped, src, shippedMosquittoDir, f.written))
		}
	}
	return problems
}

// checkUnitCoversConfigs: the unit runs as an unprivileged user whose
// groups and DeviceAllow= cover every device each shipped config uses.
func checkUnitCoversConfigs(t *testing.T, tr tree) (problems []string) {
	unit := unitSettings(string(tr.mustRead(t, "configs/saga-supervisor.service")))
	user, group := strings.Join(unit["User"], " "), strings.Join(unit["Group"], " ")
	if user == "" || user == "root" || group == "" || group == "root" {
		problems = append(problems, fmt.Sprintf("the unit runs as User=%q Group=%q: want an unprivileged user and group", user, group))
	}
	groups := map[string]bool{group: true}
	for _, v := range unit["SupplementaryGroups"] {
		for _, g := range strings.Fields(v) {
			groups[g] = true
		}
	}
	allowed := map[string]bool{}
	for _, v := range unit["DeviceAllow"] {
		if f := strings.Fields(v); len(f) > 0 {
			allowed[f[0]] = true
		}
	}
	for _, rel := range shippedConfigs {
		for _, use := range configUses(loadShipped(t, tr, rel)) {
			need, ok := deviceNeeds[use]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s uses %q, which deviceNeeds does not know: add what it needs", rel, use))
			case need.root:
				problems = append(problems, fmt.Sprintf("%s uses %q, which needs root; the unit runs as %s", rel, use, user))
			}
			if need.group != "" && !groups[need.group] {
				problems = append(problems, fmt.Sprintf("%s uses %q: the unit's User/Group/SupplementaryGroups lack %s", rel, use, need.group))
			}
			for _, a := range need.allow {
				if !allowed[a] {
					problems = append(problems, fmt.Sprintf("%s uses %q: the unit lacks DeviceAllow=%s", rel, use, a))
				}
			}
		}
	}
	return problems
}

// docPath finds a repository path in prose: configs/…, docs/… and the
// other top-level directories, not preceded by a path or word character
// (so /etc/saga-supervisor/config.yaml and DIR/saga.acl are not taken).
// cmd/ and transport/ are left out: cmd/<agent> is an MQTT topic, and
// transport/mqtt.Name a Go identifier.
var docPath = regexp.MustCompile(`(?:^|[^\w./-])((?:configs|docs|examples|firmware|hil-tests|drivers|supervisor|internal)/[\w./{},-]*[\w}])`)

// docFiles are the files whose repository paths must exist.
var docFiles = []string{"README.md", "docs/*.md", "configs/*", "examples/*.yaml", "examples/scenarios/*.yaml", "hil-tests/configs/*.yaml"}

// expandBraces expands one {a,b} group: configs/mosquitto.{conf,acl}.
func expandBraces(p string) []string {
	i, j := strings.Index(p, "{"), strings.Index(p, "}")
	if i < 0 || j < i {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[i+1:j], ",") {
		out = append(out, p[:i]+alt+p[j+1:])
	}
	return out
}

// checkDocPathsExist: every repository path the docs and shipped files
// name exists.
func checkDocPathsExist(t *testing.T, tr tree) (problems []string) {
	var files []string
	for _, glob := range docFiles {
		m, _ := filepath.Glob(filepath.Join(tr.root, glob))
		for _, f := range m {
			rel, _ := filepath.Rel(tr.root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	if len(files) < 10 {
		t.Fatalf("found only %d files to read under %s", len(files), tr.root)
	}
	for _, rel := range files {
		b := tr.mustRead(t, rel)
		for n, line := range strings.Split(string(b), "\n") {
			for _, m := range docPath.FindAllStringSubmatch(line, -1) {
				for _, p := range expandBraces(strings.TrimRight(m[1], ".")) {
					if tr.exists(p) {
						continue
					}
					// What make firmware writes is not in a checkout: its
					// Makefile must still be there to write it.
					if strings.HasPrefix(p, "firmware/build/") && tr.exists("firmware/Makefile") {
						continue
					}
					problems = append(problems, fmt.Sprintf("%s:%d: names %s, which does not exist", rel, n+1, p))
				}
			}
		}
	}
	return problems
}

// yamlBlock is a fenced yaml block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// checkHardwareSnippets: every fenced yaml block of docs/HARDWARE.md is a
// config fragment check-config accepts without a warning, given a device
// name and, if it has none, one simulated actuator.
func checkHardwareSnippets(t *testing.T, tr tree) (problems []string) {
	b := tr.mustRead(t, "docs/HARDWARE.md")
	blocks := yamlBlock.FindAllSubmatchIndex(b, -1)
	// PCA9685, PWM servo, relay, e-stop, INA219/226, MCU.
	if len(blocks) < 6 {
		problems = append(problems, fmt.Sprintf("docs/HARDWARE.md has %d yaml blocks, want one per section (6 or more)", len(blocks)))
	}
	dir := t.TempDir()
	for i, m := range blocks {
		line := bytes.Count(b[:m[2]], []byte("\n")) + 1
		text := string(b[m[2]:m[3]])
		if !regexp.MustCompile(`(?m)^device:`).MatchString(text) {
			text = "device: hwdoc\n" + text
		}
		if !regexp.MustCompile(`(?m)^actuators:`).MatchString(text) {
			text += "actuators:\n  hwdoc_filler: {kind: digital, driver: sim}\n"
		}
		// Relative paths resolve under a state_dir of the test's own, where
		// the secret files a fragment names are made (0600), never in the
		// package's directory, where other tests' files may lie.
		if !regexp.MustCompile(`(?m)^state_dir:`).MatchString(text) {
			text = "state_dir: " + dir + "\n" + text
			for _, m := range regexp.MustCompile(`(?m)^\s*password_file:\s*(\S+)`).FindAllStringSubmatch(text, -1) {
				if p := m[1]; !filepath.IsAbs(p) && p != `""` {
					os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o700)
					os.WriteFile(filepath.Join(dir, p), []byte("hwdoc-secret-0123456789abcdef-0123456789\n"), 0o600)
				}
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("snippet%d.yaml", i))
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, code := run(t, "check-config", path); code != 0 || strings.Contains(out, "warning:") {
			problems = append(problems, fmt.Sprintf("docs/HARDWARE.md:%d: the yaml block does not check clean (exit %d):\n%s", line, code, out))
		}
	}
	return problems
}

// execStart is the unit's command: the binary and its config.
var execStart = regexp.MustCompile(`^(/\S+/saga-supervisor) run --config (/\S+)$`)

// checkInstallPaths: the binary and the config path in the unit's
// ExecStart= are the ones the docs and the example config install to.
func checkInstallPaths(t *testing.T, tr tree) (problems []string) {
	es := unitSettings(string(tr.mustRead(t, "configs/saga-supervisor.service")))["ExecStart"]
	if len(es) != 1 || execStart.FindStringSubmatch(es[0]) == nil {
		return []string{fmt.Sprintf("ExecStart=%q: want one `BINARY run --config FILE`", es)}
	}
	m := execStart.FindStringSubmatch(es[0])
	bin, cfgPath := m[1], m[2]
	binRef := regexp.MustCompile(`/usr/(?:local/)?s?bin/saga-supervisor\b`)
	cfgRef := regexp.MustCompile(`/etc/saga-supervisor/[\w.-]+\.yaml`)
	for _, rel := range []string{"README.md", "docs/HARDWARE.md", "configs/raspberry-pi.yaml", "configs/saga-supervisor.service"} {
		text := string(tr.mustRead(t, rel))
		for _, ref := range binRef.FindAllString(text, -1) {
			if ref != bin {
				problems = append(problems, fmt.Sprintf("%s installs the binary as %s; the unit runs %s", rel, ref, bin))
			}
		}
		for _, ref := range cfgRef.FindAllString(text, -1) {
			if ref != cfgPath {
				problems = append(problems, fmt.Sprintf("%s names the config %s; the unit runs --config %s", rel, ref, cfgPath))
			}
		}
		if rel == "docs/HARDWARE.md" && (!strings.Contains(text, bin) || !strings.Contains(text, cfgPath)) {
			problems = append(problems, fmt.Sprintf("docs/HARDWARE.md does not say where the binary (%s) and the config (%s) go", bin, cfgPath))
		}
	}
	return problems
}

// Each check of TestShippedFilesAgree finds the disagreement it exists for
// in a deliberately broken copy of one file.
func TestShippedFilesAgreeCatches(t *testing.T) {
	edit := func(t *testing.T, rel, old, new string) map[string][]byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(repoRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s no longer holds %q: pick another edit", rel, old)
		}
		return map[string][]byte{rel: bytes.Replace(b, []byte(old), []byte(new), 1)}
	}
	cases := []struct {
		check         int // index in shippedChecks
		rel, old, new string
		want          string
	}{
		{0, "configs/mosquitto.acl", "topic read saga/v1/pi-arm/reply/planner", "topic read saga/v1/pi-arm/reply/+", "configs/mosquitto.acl is not what"},
		{0, "configs/mosquitto.acl", "--config configs/raspberry-pi.yaml", "--config configs/default.yaml", "configs/mosquitto.acl is not what"},
		{0, "configs/mosquitto.conf", "max_queued_messages 10000", "max_queued_messages 100", "configs/mosquitto.conf is not what"},
		{1, "configs/saga-supervisor.service", "SupplementaryGroups=gpio dialout i2c", "SupplementaryGroups=gpio dialout", "lack i2c"},
		{1, "configs/saga-supervisor.service", "DeviceAllow=char-ttyACM rw\n", "", "lacks DeviceAllow=char-ttyACM"},
		{1, "configs/saga-supervisor.service", "User=saga", "User=root", "want an unprivileged user"},
		{1, "configs/raspberry-pi.yaml", "pwm: sysfs\n      chip: 0\n      channel: 1\n      pin: GPIO19", "pwm: periph\n      pin: GPIO19", "needs root"},
		{2, "docs/HARDWARE.md", "(see configs/raspberry-pi.yaml)", "(see configs/raspberrypi.yaml)", "names configs/raspberrypi.yaml, which does not exist"},
		{2, "docs/API.md", "(configs/mosquitto.acl)", "(configs/mosquitto.{acl,acls})", "names configs/mosquitto.acls"},
		{3, "docs/HARDWARE.md", "      active_low: true     # the module", "      active_lo: true      # the module", "does not check clean"},
		{3, "docs/HARDWARE.md", "  pin: GPIO27\n  active_high: true ", "  pin: GPIO27\n  active_high: yes-please ", "does not check clean"},
		// A pwm: sysfs servo's pin is checked: GPIO17 has no hardware PWM.
		{3, "docs/HARDWARE.md", "      pin: GPIO18          # optional, never driven", "      pin: GPIO17          # optional, never driven", "has no hardware PWM on GPIO17"},
		{4, "configs/saga-supervisor.service", "ExecStart=/usr/local/bin/saga-supervisor", "ExecStart=/usr/bin/saga-supervisor", "installs the binary as /usr/local/bin/saga-supervisor; the unit runs /usr/bin/saga-supervisor"},
		{4, "configs/raspberry-pi.yaml", "# /etc/saga-supervisor/config.yaml for", "# /etc/saga-supervisor/robot.yaml for", "names the config /etc/saga-supervisor/robot.yaml"},
		{5, "configs/raspberry-pi.yaml", "state_dir: /var/lib/saga-supervisor", "state_dir: /var/lib/saga", "has state_dir \"/var/lib/saga\""},
		{5, "configs/saga-supervisor.service", "StateDirectory=saga-supervisor", "StateDirectory=saga", "WorkingDirectory=[\"/var/lib/saga-supervisor\"] is not its state directory /var/lib/saga"},
		{6, "configs/saga-supervisor.service", "IPAddressAllow=localhost", "IPAddressAllow=localhost 192.168.1.0/24", "does not say \"IPAddressDeny=any and IPAddressAllow=localhost 192.168.1.0/24\""},
		{6, "docs/HARDWARE.md", tunnel, "ssh -L 8080:localhost:8080", "docs/HARDWARE.md does not say \"" + tunnel + "\""},
		{6, "docs/SECURITY.md", tunnel, "ssh -L 8080:localhost:8080", "docs/SECURITY.md does not say \"" + tunnel + "\""},
		{6, "configs/saga-supervisor.service", "sudo saga-supervisor systemd-dropin", "sudo saga-supervisor dropin", "configs/saga-supervisor.service does not name"},
		{6, "docs/HARDWARE.md", dropinCmd, "saga-supervisor dropin --config", "docs/HARDWARE.md does not say \"" + dropinCmd + "\""},
	}
	for _, tc := range cases {
		c := shippedChecks[tc.check]
		t.Run(c.name+": "+tc.rel, func(t *testing.T) {
			problems := c.check(t, tree{root: repoRoot, over: edit(t, tc.rel, tc.old, tc.new)})
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("after replacing %q with %q in %s, no problem says %q; got %q", tc.old, tc.new, tc.rel, tc.want, problems)
			}
		})
	}
}

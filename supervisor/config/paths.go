package config

import "path/filepath"

// DefaultStateDir is state_dir's default: the process's working directory.
const DefaultStateDir = "."

// ResolvePath is path as the supervisor opens it: an absolute path, or ""
// (no file), as written; a relative one joined to stateDir. Every command
// that reads a config — the daemon, check-config, ctl --config,
// credentials, mosquitto-config — gets its paths through it (Parse calls
// it on each), so that they all name the same files whatever their working
// directory.
func ResolvePath(stateDir, path string) string {
	if path == "" || filepath.IsAbs(path) || stateDir == "" || stateDir == DefaultStateDir {
		return path
	}
	return filepath.Join(stateDir, path)
}

// resolvePaths rewrites every file path of c with ResolvePath. The device
// paths of driver sections (a serial port, sysfs_root) are not the
// supervisor's files and are taken as written.
func (d *decoder) resolvePaths(c *Config) {
	if c.StateDir == "" {
		if d.ok("state_dir") {
			d.errorf("state_dir", "want a directory: the one relative paths in this file are relative to (%q: the working directory; /var/lib/saga-supervisor under the shipped unit)", DefaultStateDir)
		}
		return
	}
	for _, p := range []*string{
		&c.Journal.Dir, &c.Journal.Retention.ArchiveDir,
		&c.MQTT.PasswordFile, &c.MQTT.TLS.CAFile, &c.MQTT.TLS.CertFile, &c.MQTT.TLS.KeyFile,
		&c.MQTT.Auth.PasswordFile, &c.MQTT.Auth.CredentialsDir,
		&c.HTTP.ResetTokenFile, &c.HTTP.ViewerTokenFile, &c.HTTP.TLS.CertFile, &c.HTTP.TLS.KeyFile, &c.Sim.World,
	} {
		*p = ResolvePath(c.StateDir, *p)
	}
	for i, k := range c.Approvals.PublicKeys {
		c.Approvals.PublicKeys[i] = ResolvePath(c.StateDir, k)
	}
}

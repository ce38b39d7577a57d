// Package config reads the supervisor's YAML configuration: the device name,
// journal, unwind and lease settings, the MQTT and HTTP endpoints, the
// simulated world, and every supply and actuator with its limits and safe
// policy. It is pure data and validation: it builds no drivers and opens no
// files but the config itself and the secret files it names. Each driver
// kind's own section (pca9685:, gpio:, ...) is decoded and checked through
// the registry of driver kinds (Register, Check); package supervisor/wiring
// registers them and opens their drivers. Package supervisor composes the
// daemon from a *Config.
//
// # Strict
//
// A config that means something other than what its author thinks is a
// safety fault, so parsing is strict and says where: an unknown key, a key
// written twice, a value of the wrong type (a string where a number belongs,
// a bare 200 where a duration belongs), a NaN or infinity, an alias, or a
// second YAML document is an error. Every error names file:line:col and the
// key's dotted path, e.g.
//
//	arm.yaml:14:5: actuators.elbow: unknown key "slew" (known keys: kind, driver, gpio, ...)
//
// and Parse reports all of them at once (errors.Join of *Error, sorted by
// line), so one edit-run cycle fixes a file. The node tree is walked by this
// package rather than decoded by yaml.v3 into structs for exactly that:
// the library's own errors name a line but neither the column nor the key's
// path, and its checks end at types — it cannot say that the initial value
// at line 17 lies outside [min, max].
//
// # Defaults and validation
//
// Omitted keys take defaults (see default.yaml, the embedded default, which
// documents every key). Validation refuses what could not be enforced or
// would be enforced differently from what the file says: min above max,
// negative step or rate limits, an initial value or a safe value outside
// [min, max] (never clamped: a start-up that guesses where the arm is is worse
// than one that refuses), a pulse with a safe value, an unknown supply or
// driver, durations out of their bounds (lease TTLs within 50ms..60s), names
// that are not usable as MQTT topic levels, broker URLs paho cannot dial,
// TLS settings for a plain broker, a password both inline and in a file.
//
// # Hardware
//
// board: names the computer (Board; a Raspberry Pi by default), and pins
// are checked against it: GPIO9999 is refused, not found missing at
// start-up. Each driver kind declares the hardware its actuators and
// supplies take (Driver.Claims: Resource), the configuration its e-stop's
// pin and its boards' serial ports; a pin, PWM channel, I2C address, serial
// port or board channel taken twice is refused at the later key, naming
// the earlier and its line.
//
// # Secrets
//
// password_file and reset_token_file are read at load (one line; the
// trailing newline is trimmed). A secret file must be a regular file that
// group and others cannot access (mode 0600 or 0400, as systemd services
// keep credentials); anything else is refused. The reset token must be at
// least MinResetTokenLen (32) bytes, without spaces or control characters.
// mqtt.tls.key_file is mode-checked the same way (the transport reads it).
// Secrets are held as Secret, which prints as "[redacted]".
//
// The operator token is generated unless the config says otherwise:
// reset_token_file defaults to ./saga-data/operator-token and
// generate_reset_token to true. A generated token's file is read at load
// when it exists; when it does not, the daemon creates it at start
// (daemon.EnsureResetToken), and Default reads nothing at all.
// HTTP.OperatorTokenFile is where the token is kept, for the daemon and
// `ctl reset` alike.
//
// Relative paths (journal.dir, sim.world, secret files) are relative to
// state_dir (default ".", the process's working directory), never to the
// config file, so the embedded default and a copy of it behave alike
// (ResolvePath).
package config

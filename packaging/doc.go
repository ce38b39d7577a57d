// Package packaging holds saga-supervisor's Debian packaging and its test:
// nfpm.yaml describes the .deb that `make deb` builds for amd64, arm64 and
// armhf, scripts/ its maintainer scripts, sysusers.conf and tmpfiles.conf
// the saga user, its device groups and its directories, and debversion.sh
// turns git describe into a Debian version. The udev rules are
// configs/99-saga-supervisor.rules. The package has no Go code but its tests,
// which build the packages with the real Makefile and inspect them, and
// install the one for this machine in a throw-away copy of it, walking the
// install path README.md and docs/HARDWARE.md print (TestInstallPath) —
// `make deb-test`, run by CI after `make test`.
package packaging

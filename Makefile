# saga-supervisor — build, test and measure.
GO      ?= go
BIN     ?= bin/saga-supervisor
PKG     := ./cmd/saga-supervisor
FUZZTIME ?= 10s

# What internal/buildinfo reports (`saga-supervisor version`, /metrics'
# saga_supervisor_build_info), from git. DATE is the commit's time, not the
# build's, so one commit builds to the same bytes. Outside a git checkout:
# dev, unknown.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE    ?= $(shell TZ=UTC0 git log -1 --date=format-local:%Y-%m-%dT%H:%M:%SZ --format=%cd 2>/dev/null || echo unknown)
EPOCH   ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILDINFO := github.com/saga-supervisor/saga-supervisor/internal/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) -X $(BUILDINFO).date=$(DATE)

.PHONY: build test test-long test-arm test-arm64 test-armv6 lint fuzz check bench bench-pi cross clean hil hil-avr avr-figures soak \
	install install-files deb deb-test size avr-rig python-test python-bench firmware firmware-test firmware-fuzz

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) $(PKG)

# test is the README's test command: formatting, vet, saga-avr-rig, the
# race-enabled suite with -short (each decoder's fuzz corpus runs as a
# test; the long tests run short or are left to test-long; firmware/rig's
# tests run the rig on its test programs and on the firmware), and the
# hardware-in-the-loop scenarios on simulated boards (hil) and on the AVR
# rig with the firmware's ELF (hil-avr: every scenario and the AVR faults,
# ~40 s). It must stay within 10 minutes on a two-core machine.
TESTPKGS = $$($(GO) list ./... | grep -v -e /hil-tests -e /packaging)
test: lint avr-rig
	$(GO) test -race -short -count=1 $(TESTPKGS)
	$(MAKE) firmware firmware-test
	$(MAKE) hil
	$(MAKE) hil-avr
	$(MAKE) python-test

# test-arm runs the same suites as test (-short) on a Raspberry Pi's
# architectures under qemu-user (scripts/qemu-arm.sh, which needs
# qemu-user-static and binfmt_misc): linux/arm64 on a Cortex-A53 (a Pi 3,
# 4 or 5) and linux/arm GOARM=6 on an ARM1176 (a Pi Zero: 32-bit ints,
# 8-byte alignment for 64-bit atomics, no ARMv7 instructions). Without
# -race: Go has none for linux/arm, and qemu-user cannot give linux/arm64's
# the address space it needs; test has it on x86-64. The hardware-in-the-
# loop scenarios are not run here: emulated, both ends of the sim rig's
# serial link are slow, not the Pi's; on a Pi they are make hil (with
# HIL_CONFIG=rig.yaml on a real rig). CI runs test-arm after test.
ARM_TIMEOUT ?= 20m
test-arm: test-arm64 test-armv6

test-arm64 test-armv6: test-%:
	GO=$(GO) bash scripts/qemu-arm.sh test $* -short -count=1 -timeout $(ARM_TIMEOUT) $(TESTPKGS)

# LONG_TESTS run short (or not at all) under -short, and in full here; the
# list is kept whole by internal/longtest (TestLongTestsAreListed).
LONG_TESTS := TestTorture TestHostile TestRSSBackNearIdleAfterAFlood \
	TestRepliesInOrderAcrossSIGSTOP TestBenchMQTT TestFleetOfTwentyOnMosquitto \
	TestEncodeMaxReports TestCrashRandomSeeds TestCheckProperties TestSuiteCatchesMutants \
	TestDifferentialRandom TestFigures
empty :=
space := $(empty) $(empty)

# test-long is the rest of what CI runs (.ci/run runs test, then this):
# the long tests in full, every fuzz target for FUZZTIME, and the model
# check to its full bound.
test-long:
	$(GO) test -race -count=1 -timeout 30m -run '^($(subst $(space),|,$(strip $(LONG_TESTS))))$$' $(TESTPKGS)
	$(MAKE) fuzz
	$(MAKE) firmware-fuzz
	$(MAKE) check

# firmware builds the MCU firmware (firmware/saga_mcu, docs/SERIAL.md
# section 10) for the ATmega328P with Debian's gcc-avr and avr-libc into
# firmware/build/, prints its flash and RAM use and fails over budget (12
# KiB flash, 1 KiB static RAM). firmware-test builds its protocol core for
# the host with gcc, clang and ASan+UBSan (-Werror) and runs the
# differential test (drivers/sim/mcu) against the sanitised build.
# firmware-fuzz runs the core under libFuzzer for FIRMWARE_FUZZ_SECONDS.
FIRMWARE_FUZZ_SECONDS ?= 30
firmware:
	$(MAKE) -C firmware all

firmware-test:
	$(MAKE) -C firmware test GO=$(GO)

firmware-fuzz:
	$(MAKE) -C firmware fuzz FUZZ_SECONDS=$(FIRMWARE_FUZZ_SECONDS)

# check model-checks the real engine, journal and recovery (docs/PROOF.md):
# every case up to 6 steps, two interleaved sagas, a power cut before every
# journal file-system call and one during each recovery, in both durability
# modes.
check:
	$(GO) run ./cmd/saga-modelcheck --max-steps 6 --sagas 2 --durability both

lint:
	@bash scripts/no-binaries.sh
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

# fuzz runs each fuzz target for FUZZTIME (scripts/fuzz.sh: a failing
# input fails at once; a failure without one — Go 1.26's end-of-fuzztime
# coordinator race — is retried once). Minimising a new input is capped:
# uncapped, it can eat the whole budget.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# bench measures the journal against the device's fsync floor and tidwall/wal,
# the engine step, and the gate, all in one run so the ratios are comparable.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./wal/ ./limits/ ./rollback/ ./recovery/ ./supervisor/

# bench-pi is the Pi-class profile (docs/PROOF.md, "A Pi-class board,
# measured"): the daemon as a process of its own under a CPU quota of 0.25
# and 0.5 of a core beside the whole machine, every fsync it makes slowed to
# an SD card's, in one run. Linux and root (a cgroup, a seccomp filter).
# Not in test: it takes about 5 minutes a build and its figures are the machine's;
# TestBenchPi runs it small. BENCH_PI_FLAGS adds flags (--daemon OLD
# --daemon NEW compares builds side by side).
BENCH_PI_FLAGS ?=
bench-pi: build
	$(BIN) bench pi $(BENCH_PI_FLAGS)

cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-arm64 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-armv7 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-armv6 $(PKG)

# size builds the release binaries (cross, and amd64 alike), prints their
# sizes and where the arm64 one's bytes go by module and package (from an
# unstripped twin), and fails if the stripped arm64 binary is over
# SIZE_BUDGET bytes (docs/DESIGN.md, "Memory": what it is made of, and why
# no templates and no client_golang).
SIZE_BUDGET ?= 13000000
size: cross
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-amd64 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -o bin/saga-supervisor-linux-arm64.unstripped $(PKG)
	GO=$(GO) SIZE_BUDGET=$(SIZE_BUDGET) bash scripts/size.sh

# python-test checks the Python client (clients/python) with Debian's
# Python: mypy --strict over the package, its tests and the example, then
# its tests (pytest) against the binary built here, on the embedded broker
# and on mosquitto. Under CI=true a missing tool fails them, never skips.
# python-bench measures a step's round trip through the Python client and
# through the Go client in one run, and prints their ratio.
PYTHON ?= /usr/bin/python3
python-test: build
	cd clients/python && $(PYTHON) -m mypy --strict src tests bench.py ../../examples/python
	cd clients/python && SAGA_BIN=$(abspath $(BIN)) PYTHONPATH=src $(PYTHON) -m pytest -q -p no:cacheprovider tests

python-bench: build
	SAGA_BIN=$(abspath $(BIN)) PYTHONPATH=clients/python/src $(PYTHON) clients/python/bench.py

# hil runs the hardware-in-the-loop scenarios of hil-tests/ (docs/HIL.md)
# against the real binary, which the tests build: on simulated boards over
# socat ptys (and a mosquitto of their own), or on a real rig with
# HIL_CONFIG=rig.yaml.
# The soak (TestSoak) is not among them: it is `make soak`.
HIL_CONFIG ?=
hil:
	$(GO) test -count=1 -v -timeout 10m -skip '^TestSoak$$|^TestAVR' ./hil-tests/ $(if $(HIL_CONFIG),-hil.config=$(abspath $(HIL_CONFIG)))

# hil-avr runs the same scenarios, and the AVR rig's own (TestAVR*), on the
# firmware's ELF in saga-avr-rig (docs/HIL.md, "The emulated AVR rig"):
# `make firmware` builds it (in a tree without that rule, `firmware` is just
# the directory and make has nothing to do); HIL_AVR_ELF names another.
# Without the ELF the scenarios skip — and fail when CI is set. Two at a
# time: each runs a rig, a supervisor and a test on the machine's clock.
# Part of `make test`.
HIL_AVR_ELF ?=
hil-avr:
	$(MAKE) --no-print-directory firmware
	HIL_RIG=avr $(if $(HIL_AVR_ELF),HIL_AVR_ELF=$(abspath $(HIL_AVR_ELF))) \
		$(GO) test -count=1 -v -timeout 10m -parallel 2 -skip '^TestSoak$$' ./hil-tests/

# avr-figures prints the rig's measurements (docs/HIL.md, "Figures"): SET
# to SET_ACK and SET to pin, p50/p99, and the watchdog trip at the pins —
# on the stand-in firmware (firmware/rig/testdata/standin.c), then on the
# firmware's ELF (skipped without it, as hil-avr).
avr-figures:
	$(GO) test -count=1 -v -run '^TestFigures$$' ./firmware/rig/
	HIL_RIG=avr $(if $(HIL_AVR_ELF),HIL_AVR_ELF=$(abspath $(HIL_AVR_ELF))) \
		$(GO) test -count=1 -v -run '^TestAVRFigures$$' ./hil-tests/

# soak runs the supervisor on the sim rig under random faults for
# SOAK_DURATION, checking the invariants after each, and prints a table
# per fault (docs/HIL.md, "The soak"). SOAK_SEED=N replays a run's faults;
# SOAK_KINDS=a,b (in the environment) runs only those fault kinds.
# Not in test: it takes minutes. It needs root (mount) for the disk faults.
# The test has its own hang guard (SOAK_DURATION + 15m), hence -timeout 0.
SOAK_DURATION ?= 10m
SOAK_SEED ?=
soak:
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) $(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./hil-tests/

# avr-rig builds saga-avr-rig (firmware/rig/src/, docs/HIL.md "The emulated
# AVR rig"): the firmware's ELF in simavr, in real time, its UART0 on a pty,
# its pins measured. It needs cc, libsimavr-dev and libelf (Debian: simavr
# libsimavr-dev libsimavrparts1); its tests also gcc-avr and avr-libc.
AVR_RIG ?= bin/saga-avr-rig
AVR_RIG_SRC := $(wildcard firmware/rig/src/*.c)
AVR_RIG_CFLAGS ?= -std=c99 -Wall -Wextra -Werror -O2
avr-rig:
	@mkdir -p $(dir $(AVR_RIG))
	$(CC) $(AVR_RIG_CFLAGS) -I/usr/include/simavr -o $(AVR_RIG) $(AVR_RIG_SRC) -lsimavr

# install puts the binary, the systemd unit, the udev rules, the sysusers.d
# and tmpfiles.d entries and the default config (never over an existing one)
# under DESTDIR and PREFIX; the unit's ExecStart follows BINDIR. Run as root
# with no DESTDIR it also creates the saga user and groups and the state
# directory, and reloads systemd and udev: then `systemctl enable --now
# saga-supervisor`. The .deb is the same files with PREFIX=/usr.
PREFIX       ?= /usr/local
DESTDIR      ?=
BINDIR       ?= $(PREFIX)/bin
UNITDIR      ?= $(PREFIX)/lib/systemd/system
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d
TMPFILESDIR  ?= $(PREFIX)/lib/tmpfiles.d
DOCDIR       ?= $(PREFIX)/share/doc/saga-supervisor
CONFIG       := $(DESTDIR)/etc/saga-supervisor/config.yaml
# The unit's StateDirectory=: the installed config's state_dir, so that
# the tools given it (ctl --config, credentials, mosquitto-config) find the
# daemon's files from any directory.
STATEDIR     := /var/lib/saga-supervisor

install: build
	@$(MAKE) --no-print-directory install-files

install-files:
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/saga-supervisor
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed 's|/usr/local/bin/saga-supervisor|$(BINDIR)/saga-supervisor|g' configs/saga-supervisor.service > $(DESTDIR)$(UNITDIR)/saga-supervisor.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/saga-supervisor.service
	install -D -m 0644 configs/99-saga-supervisor.rules $(DESTDIR)$(UDEVRULESDIR)/99-saga-supervisor.rules
	install -D -m 0644 packaging/sysusers.conf $(DESTDIR)$(SYSUSERSDIR)/saga-supervisor.conf
	install -D -m 0644 packaging/tmpfiles.conf $(DESTDIR)$(TMPFILESDIR)/saga-supervisor.conf
	install -D -m 0644 configs/raspberry-pi.yaml $(DESTDIR)$(DOCDIR)/examples/raspberry-pi.yaml
	install -d -m 0755 $(DESTDIR)/etc/saga-supervisor
	@if [ -e $(CONFIG) ]; then echo "kept the existing $(CONFIG) (the default is configs/default.yaml)"; \
	else echo "install -m 0640 configs/default.yaml $(CONFIG) (state_dir: $(STATEDIR))"; \
		(umask 077 && sed 's|^state_dir: \.$$|state_dir: $(STATEDIR)|' configs/default.yaml > $(CONFIG)) && chmod 0640 $(CONFIG) && \
		grep -qx 'state_dir: $(STATEDIR)' $(CONFIG) || { echo "configs/default.yaml has no line 'state_dir: .' to set"; rm -f $(CONFIG); exit 1; }; fi
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then \
		set -x; systemd-sysusers $(SYSUSERSDIR)/saga-supervisor.conf && \
		systemd-tmpfiles --create $(TMPFILESDIR)/saga-supervisor.conf && \
		{ ! [ -d /run/systemd/system ] || systemctl daemon-reload; } && \
		{ ! [ -d /run/udev ] || { udevadm control --reload-rules && \
			udevadm trigger --action=add --subsystem-match=gpio --subsystem-match=i2c-dev --subsystem-match=tty --subsystem-match=pwm; }; }; \
	fi

# deb builds .deb packages for DEB_ARCHES into DIST with nfpm
# (packaging/nfpm.yaml), run at a pinned version through `go run` so that it
# is no dependency of the module. deb-test builds them and inspects them
# (packaging/deb_test.go), and walks the documented install path with this
# machine's package in a throw-away copy of the machine (TestInstallPath,
# as root); CI runs it after test.
DIST         ?= dist
DEB_ARCHES   ?= amd64 arm64 armhf
NFPM_VERSION := v2.48.0
NFPM         ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)
DEB_VERSION  ?= $(shell sh packaging/debversion.sh '$(VERSION)' '$(EPOCH)')
goenv.amd64  := GOARCH=amd64
goenv.arm64  := GOARCH=arm64
goenv.armhf  := GOARCH=arm GOARM=7

deb: $(addprefix deb-,$(DEB_ARCHES))

deb-%:
	@test -n '$(goenv.$*)' || { echo "deb-$*: no such architecture (DEB_ARCHES: amd64 arm64 armhf)"; exit 2; }
	rm -rf $(DIST)/stage/$* $(DIST)/saga-supervisor_$(DEB_VERSION)_$*.deb
	GOOS=linux $(goenv.$*) $(MAKE) --no-print-directory build BIN=$(DIST)/build/$*/saga-supervisor VERSION=$(VERSION) COMMIT=$(COMMIT) DATE=$(DATE)
	$(MAKE) --no-print-directory install-files BIN=$(DIST)/build/$*/saga-supervisor DESTDIR=$(abspath $(DIST))/stage/$* PREFIX=/usr
	DEB_ARCH=$* DEB_VERSION=$(DEB_VERSION) STAGE=$(abspath $(DIST))/stage/$* SOURCE_DATE_EPOCH=$(EPOCH) \
		$(NFPM) package --config packaging/nfpm.yaml --packager deb --target $(DIST)/saga-supervisor_$(DEB_VERSION)_$*.deb

deb-test:
	$(GO) test -count=1 -v -timeout 15m ./packaging/

# print-VAR prints a variable as this Makefile computes it (the package
# test reads DEB_VERSION and VERSION this way).
print-%:
	@echo '$($*)'

clean:
	rm -rf bin $(DIST)
	$(MAKE) -C firmware clean

# saga-supervisor — build, test and measure.
GO      ?= go
BIN     ?= bin/saga-supervisor
PKG     := ./cmd/saga-supervisor
LDFLAGS := -s -w
FUZZTIME ?= 10s

.PHONY: build test lint fuzz check bench cross size clean hil soak

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) $(PKG)

# test is what CI runs (through .ci/run): formatting, vet, the race-enabled
# suite, every fuzz target for a bounded time, the model check to its full
# bound, and the hardware-in-the-loop scenarios on simulated boards.
test: lint
	$(GO) test -race -count=1 $$($(GO) list ./... | grep -v /hil-tests)
	$(MAKE) fuzz
	$(MAKE) check
	$(MAKE) hil

# check model-checks the real engine, journal and recovery (docs/PROOF.md):
# every case up to 6 steps, two interleaved sagas, a power cut before every
# journal file-system call and one during each recovery, in both durability
# modes.
check:
	$(GO) run ./cmd/saga-supervisor check --max-steps 6 --sagas 2 --durability both

lint:
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

cross:
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-arm64 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=7 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-armv7 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm GOARM=6 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-armv6 $(PKG)

# size builds the release binaries (cross, and amd64 alike), prints their
# sizes and where the arm64 one's bytes go by module and package (from an
# unstripped twin), and fails if the stripped arm64 binary is over
# SIZE_BUDGET bytes (docs/DESIGN.md, "Memory": what it is made of, and why
# no templates and no client_golang).
SIZE_BUDGET ?= 12000000
size: cross
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/saga-supervisor-linux-amd64 $(PKG)
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -o bin/saga-supervisor-linux-arm64.unstripped $(PKG)
	GO=$(GO) SIZE_BUDGET=$(SIZE_BUDGET) bash scripts/size.sh

# hil runs the hardware-in-the-loop scenarios of hil-tests/ (docs/HIL.md)
# against the real binary, which the tests build: on simulated boards over
# socat ptys (and a mosquitto of their own), or on a real rig with
# HIL_CONFIG=rig.yaml.
# The soak (TestSoak) is not among them: it is `make soak`.
HIL_CONFIG ?=
hil:
	$(GO) test -count=1 -v -timeout 10m -skip '^TestSoak$$' ./hil-tests/ $(if $(HIL_CONFIG),-hil.config=$(abspath $(HIL_CONFIG)))

# soak runs the supervisor on the sim rig under random faults for
# SOAK_DURATION, checking the invariants after each, and prints a table
# per fault (docs/HIL.md, "The soak"). SOAK_SEED=N replays a run's faults.
# Not in test: it takes minutes. It needs root (mount) for the disk faults.
# The test has its own hang guard (SOAK_DURATION + 15m), hence -timeout 0.
SOAK_DURATION ?= 10m
SOAK_SEED ?=
soak:
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) $(GO) test -count=1 -v -timeout 0 -run '^TestSoak$$' ./hil-tests/

clean:
	rm -rf bin

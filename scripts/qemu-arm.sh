#!/usr/bin/env bash
# qemu-arm.sh runs the test suites for a Raspberry Pi's architecture on
# another machine, under qemu-user (Debian's qemu-user-static):
#
#   qemu-arm.sh register               as root: enable qemu's binfmt_misc
#                                      handlers for ARM, mounting binfmt_misc
#                                      if absent (.ci/run does, with sudo)
#   qemu-arm.sh test ARCH [ARGS...]    go test ARGS for ARCH: arm64 (a Pi 3,
#                                      4 or 5) or armv6 (a Pi Zero or 1)
#
# arm64 is GOARCH=arm64 on a Cortex-A53 (ARMv8.0, the oldest 64-bit Pi);
# armv6 is GOARCH=arm GOARM=6 on an ARM1176, the Pi Zero's CPU, on which an
# ARMv7 instruction is illegal, as it is on the board. armv6 is the 32-bit
# one: int is 32 bits and 64-bit atomics need 8-byte alignment.
#
# The tests run ARM binaries of their own: the test binary, the daemon a
# test builds and kills -9, a test that runs itself again, the demo's
# children. The kernel runs each through binfmt_misc. qemu-user cannot
# follow an execve by itself, so `go test -exec qemu-...` alone would run
# only the test binary. So `test` needs the handlers:
#
#   1. ARM binaries already run (the handlers are enabled, e.g. by
#      `register`, or by the qemu-user-static package where binfmt_misc was
#      mounted at its install): go test runs them as they are;
#   2. otherwise (no root, or a container that may not change the host's
#      handlers), go test runs in a user and mount namespace of its own
#      (unshare -Urm) with a binfmt_misc instance of its own, where it
#      registers the handlers: Linux 6.7 or later, and a system that allows
#      unprivileged user namespaces;
#   3. otherwise it fails and says what to do.
#
# The race detector is not used: Go has none for linux/arm, and linux/arm64
# needs cgo and a 48-bit address space, which qemu-user cannot give on an
# x86-64 host ("ThreadSanitizer: unsupported VMA range"). The x86-64 suite
# runs with -race (make test). SAGA_TEST_NO_RACE=1 makes the tests build
# the binaries they run without -race too.
set -euo pipefail
GO=${GO:-go}
BINFMT=/proc/sys/fs/binfmt_misc

# Each handler's name, qemu binary, and the ELF header it matches (kernel
# hex escapes), as in Debian's /usr/share/binfmts: machine AArch64 (0xb7)
# and ARM (0x28), little-endian, executables and shared objects.
declare -A qemu=([qemu-aarch64]=qemu-aarch64-static [qemu-arm]=qemu-arm-static)
declare -A magic=(
	[qemu-aarch64]='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
	[qemu-arm]='\x7f\x45\x4c\x46\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00'
)
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'

die() { echo "qemu-arm.sh: $*" >&2; exit 1; }

# register_handlers enables both handlers in the binfmt_misc at $BINFMT,
# mounting it if absent (own: a new instance, in a namespace of our own):
# through update-binfmts where it knows them, else written to the register
# file. F: the kernel opens qemu now, so it is found from any mount
# namespace or chroot.
register_handlers() {
	if [ "${1:-}" = own ] || ! [ -e "$BINFMT/register" ]; then
		mount -t binfmt_misc binfmt_misc "$BINFMT" || { echo "cannot mount binfmt_misc on $BINFMT" >&2; return 1; }
	fi
	local h q
	for h in qemu-aarch64 qemu-arm; do
		if [ -e "$BINFMT/$h" ]; then
			grep -qx enabled "$BINFMT/$h" || echo 1 >"$BINFMT/$h"
			continue
		fi
		if [ "${1:-}" != own ] && command -v update-binfmts >/dev/null && [ -e "/usr/share/binfmts/$h" ]; then
			update-binfmts --import "$h" >/dev/null 2>&1 || true
			update-binfmts --enable "$h" 2>/dev/null && [ -e "$BINFMT/$h" ] && continue
		fi
		q=$(command -v "${qemu[$h]}") || { echo "${qemu[$h]} not found: apt-get install qemu-user-static" >&2; return 1; }
		printf '%s' ":$h:M::${magic[$h]}:$mask:$q:F" >"$BINFMT/register"
	done
}

# probe builds a program for the architecture in the environment and runs
# it directly, as a test runs its daemon.
probe() {
	local dir rc=0
	dir=$(mktemp -d)
	printf 'module probe\n\ngo 1.21\n' >"$dir/go.mod"
	printf 'package main\n\nimport "runtime"\n\nfunc main() { println(runtime.GOARCH) }\n' >"$dir/main.go"
	if (cd "$dir" && GOFLAGS= "$GO" build -o probe .); then
		"$dir/probe" >/dev/null 2>&1 || rc=1
	else
		rc=2
	fi
	rm -rf "$dir"
	return "$rc"
}

case "${1:-}" in
register)
	[ "$(id -u)" = 0 ] || die "register needs root"
	register_handlers
	exit
	;;
in-namespace)
	# Internal: run by `test` under unshare -Urm.
	shift
	register_handlers own || exit 1
	probe || die "ARM binaries do not run even with a binfmt_misc of our own"
	exec "$GO" test "$@"
	;;
test) ;;
*) die "usage: qemu-arm.sh register | qemu-arm.sh test arm64|armv6 [go test args]" ;;
esac

shift
arch=${1:-}
case "$arch" in
arm64) export GOOS=linux GOARCH=arm64 QEMU_CPU=${QEMU_CPU:-cortex-a53} ;;
armv6) export GOOS=linux GOARCH=arm GOARM=6 QEMU_CPU=${QEMU_CPU:-arm1176} ;;
*) die "test: want arm64 or armv6, not '${1:-}'" ;;
esac
shift
export SAGA_TEST_NO_RACE=1
# An emulated ARM binary runs 10 to 40 times slower than the host's on
# the CPU (floating point most), but what most tests wait on is the
# kernel's (the disk, the network, timers): times a test picks only for
# the program to beat are stretched twice (internal/testtool Slow).
export SAGA_TEST_SLOW=${SAGA_TEST_SLOW:-2}
echo "qemu-arm.sh: GOARCH=$GOARCH${GOARM:+ GOARM=$GOARM} QEMU_CPU=$QEMU_CPU SAGA_TEST_SLOW=$SAGA_TEST_SLOW"

rc=0
probe || rc=$?
[ "$rc" = 2 ] && die "cannot build for $GOARCH"
start=$SECONDS
if [ "$rc" = 0 ] && [ -z "${QEMU_ARM_NAMESPACE:-}" ]; then # set: try path 2 where 1 works
	rc=0
	"$GO" test "$@" || rc=$?
elif unshare -Urm true 2>/dev/null; then
	echo "qemu-arm.sh: $GOARCH binaries do not run directly here; using a binfmt_misc of our own (unshare -Urm)"
	rc=0
	unshare -Urm bash "$0" in-namespace "$@" || rc=$?
else
	rc=unrunnable
fi
if [ "$rc" != unrunnable ]; then
	echo "qemu-arm.sh: $arch: $((SECONDS - start)) s, exit $rc"
	exit "$rc"
fi
die "$GOARCH binaries do not run here, and no user namespace could be made for a binfmt_misc of our own.
  Enable the handlers as root: apt-get install qemu-user-static binfmt-support && $0 register
  (in a container: on the host, or run it privileged)."

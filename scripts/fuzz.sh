#!/usr/bin/env bash
# fuzz.sh runs every fuzz target in the module for FUZZTIME each
# (go test -fuzz takes one target at a time).
#
# A target that writes a failing input (testdata/fuzz/<target>/...) fails
# the run at once. A target that fails *without* writing one is retried
# once: Go 1.26's fuzzing coordinator can report "context deadline
# exceeded" at the end of -fuzztime when its stop races its workers
# (go.dev/issue/75804, fixed in Go 1.27) — not a finding. A second such
# failure fails the run.
set -uo pipefail
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

run() { # dir target
	$GO test -run '^$' -fuzz "^$2\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$1"
}

corpus() { # dir target: the failing inputs written so far
	ls "$1/testdata/fuzz/$2" 2>/dev/null | sort
}

for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //'); do
		echo "fuzz $dir $target"
		before=$(corpus "$dir" "$target")
		if run "$dir" "$target"; then
			continue
		fi
		if [ "$(corpus "$dir" "$target")" != "$before" ]; then
			echo "fuzz: $dir $target found a failing input (testdata/fuzz/$target)" >&2
			exit 1
		fi
		echo "fuzz: $dir $target failed without a failing input (go.dev/issue/75804?); running it again" >&2
		run "$dir" "$target" || exit 1
	done
done

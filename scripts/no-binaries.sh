#!/usr/bin/env bash
# Fails when git tracks a built executable (ELF, Mach-O, PE or a script-less
# binary with the executable bit): binaries are built by make, never
# committed. Run by `make lint`, and so by `make test` and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r -d '' f; do
	[ -f "$f" ] || continue
	magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
	case "$magic" in
	7f454c46 | cffaedfe | cefaedfe | feedface | feedfacf | cafebabe | 4d5a*)
		echo "tracked executable: $f (magic $magic): remove it and build it with make" >&2
		bad=1
		;;
	esac
	if [ -x "$f" ] && [ "$(head -c 2 "$f")" != "#!" ]; then
		echo "tracked file with the executable bit and no #! line: $f" >&2
		bad=1
	fi
done < <(git ls-files -z)
exit $bad

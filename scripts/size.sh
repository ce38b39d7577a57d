#!/usr/bin/env bash
# size.sh reports the release binaries' sizes and where the arm64 one's
# bytes go, and fails when the stripped arm64 binary is over its budget
# (make size; docs/DESIGN.md, "Memory"). It takes the binaries make cross
# and make size built: bin/saga-supervisor-linux-{arm64,armv7,armv6,amd64},
# and bin/saga-supervisor-linux-arm64.unstripped, the same build with its
# symbol table, which internal/tools/binsize reads.
set -euo pipefail
GO=${GO:-go}
BUDGET=${SIZE_BUDGET:-13000000}   # bytes: 13 MB
TOP=${SIZE_TOP:-15}

printf '%-36s %12s %9s\n' binary bytes MB
for arch in arm64 armv7 armv6 amd64; do
	f=bin/saga-supervisor-linux-$arch
	n=$(stat -c %s "$f")
	awk -v f="$f" -v n="$n" 'BEGIN { printf "%-36s %12d %9.2f\n", f, n, n / 1e6 }'
done
echo
$GO run ./internal/tools/binsize -top "$TOP" bin/saga-supervisor-linux-arm64.unstripped
echo
n=$(stat -c %s bin/saga-supervisor-linux-arm64)
if [ "$n" -gt "$BUDGET" ]; then
	echo "size: the stripped arm64 binary is $n bytes, over its budget of $BUDGET (see docs/DESIGN.md, \"Memory\")" >&2
	exit 1
fi
echo "size: arm64 stripped $n bytes, within the budget of $BUDGET ($((BUDGET - n)) to spare)"

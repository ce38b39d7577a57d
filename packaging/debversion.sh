#!/bin/sh
# debversion.sh VERSION EPOCH: a Debian package version from what
# `git describe --tags --always --dirty` said (VERSION) and the commit's time
# in Unix seconds (EPOCH). Debian versions must start with a digit and sort
# in release order, which a bare commit hash does neither of:
#   v1.2.3                  1.2.3
#   v1.2.3-4-gabc1234       1.2.3+git4.abc1234      (after 1.2.3)
#   v1.3.0-rc1              1.3.0~rc1               (before 1.3.0)
#   abc1234 (no tag)        0~git20250401100000.abc1234
#   …-dirty                 …+dirty, or ….dirty after a + or ~
set -eu
v=${1:?usage: debversion.sh VERSION EPOCH}
epoch=${2:-0}
dirty=
case $v in
*-dirty) dirty=1 v=${v%-dirty} ;;
esac
case $v in
v[0-9]* | [0-9]*.*)
	v=$(printf '%s\n' "${v#v}" | sed -E 's/-([0-9]+)-g([0-9a-f]+)$/+git\1.\2/; s/-/~/g')
	;;
*)
	when=$(date -u -d "@$epoch" +%Y%m%d%H%M%S)
	v=0~git$when.$(printf '%s' "$v" | tr -c 'A-Za-z0-9.\n' '.')
	;;
esac
if [ -n "$dirty" ]; then
	case $v in
	*[+~]*) v=$v.dirty ;;
	*) v=$v+dirty ;;
	esac
fi
printf '%s\n' "$v"

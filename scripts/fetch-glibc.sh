#!/usr/bin/env bash
# Fetch a newer glibc than the machine's (Debian 13's, 2.41 or later) into
# DIR (default /var/cache/tprec/glibc), unpacked, not installed: the
# end-to-end tests run Debian's own python3 on it through its loader, since
# glibc 2.41 and later call the vDSO's getrandom, which Debian 12's does not.
# It uses an apt configuration of its own (lists under DIR), so the
# machine's package sources and state are left alone. Needs network.
set -euo pipefail
DIR=${1:-/var/cache/tprec/glibc}
SUITE=${SUITE:-trixie}
work=$DIR/apt
. "$(dirname "$0")/lib/apt-suite.sh"
aptSuite "$work" "$SUITE"
rm -f "$work/deb"/libc6_*.deb
(cd "$work/deb" && apt-get "${APT_OPTS[@]}" download -qq libc6)
rm -rf "$DIR/root"
dpkg-deb -x "$work/deb"/libc6_*.deb "$DIR/root"
lib=$DIR/root/usr/lib/x86_64-linux-gnu
test -x "$lib/ld-linux-x86-64.so.2"
echo "glibc of $SUITE in $lib: $("$lib/ld-linux-x86-64.so.2" --version | head -1)"

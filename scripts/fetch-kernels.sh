#!/usr/bin/env bash
# Fetch the kernels of other Debian releases than the machine's into DIR
# (default /var/cache/tprec/kernels), as DIR/vmlinuz-VERSION: Debian 12's
# 6.1 and Debian 11's 5.10 ("cloud" flavour, which boots under qemu with no
# module). The end-to-end tests TestReplayOnOtherKernels,
# TestRecordOnOtherKernels and TestRecordUnderLockdownAndYama boot them
# under qemu.
# Each suite gets an apt configuration of its own (lists under DIR,
# scripts/lib/apt-suite.sh). Needs network.
set -euo pipefail
DIR=${1:-/var/cache/tprec/kernels}
SUITES=${SUITES:-bookworm bullseye}
mkdir -p "$DIR"
. "$(dirname "$0")/lib/apt-suite.sh"
for suite in $SUITES; do
	work=$DIR/apt/$suite
	aptSuite "$work" "$suite"
	# The metapackage names the newest kernel package of the suite.
	pkg=$(apt-cache "${APT_OPTS[@]}" depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
	[ -n "$pkg" ] || { echo "fetch-kernels: no cloud kernel in $suite" >&2; exit 1; }
	version=${pkg#linux-image-}
	if [ -s "$DIR/vmlinuz-$version" ]; then
		echo "kernel of $suite: $DIR/vmlinuz-$version (already there)"
		continue
	fi
	rm -f "$work/deb"/*.deb
	(cd "$work/deb" && apt-get "${APT_OPTS[@]}" download -qq "$pkg")
	rm -rf "$work/root"
	dpkg-deb -x "$work/deb"/"$pkg"_*.deb "$work/root"
	cp "$work/root/boot/vmlinuz-$version" "$DIR/vmlinuz-$version.part"
	mv "$DIR/vmlinuz-$version.part" "$DIR/vmlinuz-$version"
	rm -rf "$work/root" "$work/deb"/*.deb
	echo "kernel of $suite: $DIR/vmlinuz-$version"
done

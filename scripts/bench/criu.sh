# criu_find: finds a CRIU that works on this kernel, for the checkpoints'
# comparison with a full image (scripts/bench/checkpoints.sh sources this).
# It sets CRIU to the command that runs it (empty when there is none) and
# CRIU_NOTE to what was used, or why nothing was. CRIU_DIR must hold no
# space (CRIU is a command line to be split into words).
#
# Debian 12's criu (3.17.1) cannot start on the 6.x kernels of this
# project's machines ("vdso: Unexpected rt vDSO area bounds"). Debian
# 13's (4.1.1) can, but needs its own C library (2.38 or later, where
# Debian 12 has 2.36). So, when the installed criu fails its check, the
# packages of trixie's criu and of its dependencies are downloaded (apt, with
# a configuration of its own: the machine's sources and state are left
# alone), unpacked in CRIU_DIR (default /opt/criu-trixie) and run through
# their own loader. Nothing is installed in the system's directories. Needs
# network the first time. Run from the top of the source tree.
CRIU_DIR=${CRIU_DIR:-/opt/criu-trixie}

# criu_error: the first error in CRIU's output (standard input) that says
# what went wrong, without its source location. Left out: the exit
# statuses of CRIU's helpers, and its own open-file limit (a warning).
criu_error() {
	grep '^Error' | grep -v -E 'exited, status|RLIMIT_NOFILE' | head -1 | sed -E 's/^Error \([^)]*\): //'
}

# criu_fetch: unpacks trixie's criu and the packages it needs into
# CRIU_DIR (with the apt configuration of scripts/lib/apt-suite.sh); fails
# when the repository cannot be reached.
criu_fetch() {
	local work=$CRIU_DIR.apt pkgs d
	. scripts/lib/apt-suite.sh
	aptSuite "$work" trixie >/dev/null 2>&1 &&
		pkgs=$(apt-cache "${APT_OPTS[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
			--no-breaks --no-replaces --no-enhances criu 2>/dev/null | grep '^[a-z0-9]' | sort -u) &&
		[ -n "$pkgs" ] && rm -f "$work"/deb/*.deb &&
		(cd "$work/deb" && apt-get "${APT_OPTS[@]}" download -qq $pkgs >/dev/null 2>&1) || {
		rm -rf "$work"
		return 1
	}
	rm -rf "$CRIU_DIR" && mkdir -p "$CRIU_DIR" || return 1
	for d in "$work"/deb/*.deb; do
		dpkg-deb -x "$d" "$CRIU_DIR" || return 1
	done
	rm -rf "$work"
}

criu_find() {
	CRIU=
	local why="CRIU is not installed" out
	if command -v criu >/dev/null; then
		if out=$(criu check 2>&1); then
			CRIU=criu
			CRIU_NOTE="CRIU $(criu --version | awk '/Version/ {print $2}') (installed)"
			return
		fi
		why="\`criu check\` ($(criu --version | awk '/Version/ {print $2}')) fails: $(criu_error <<<"$out")"
	fi
	if [ ! -x "$CRIU_DIR/usr/sbin/criu" ] && ! criu_fetch; then
		CRIU_NOTE="$why, and Debian 13's criu could not be downloaded"
		return
	fi
	local c version
	c="$CRIU_DIR/usr/lib64/ld-linux-x86-64.so.2 --library-path $CRIU_DIR/usr/lib/x86_64-linux-gnu $CRIU_DIR/usr/sbin/criu"
	version=$($c --version 2>/dev/null | awk '/Version/ {print $2}')
	if out=$($c check 2>&1); then
		CRIU=$c
		CRIU_NOTE="CRIU $version from Debian 13, run with its own C library ($why)"
		return
	fi
	CRIU_NOTE="$why; Debian 13's criu $version fails too: $(criu_error <<<"$out")"
}

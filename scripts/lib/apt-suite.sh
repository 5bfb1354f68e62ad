# Shared by scripts/fetch-glibc.sh and scripts/fetch-kernels.sh: an apt
# configuration of their own for one Debian suite, so that the machine's
# package sources and state are left alone. aptSuite WORK SUITE writes its
# sources and lists under WORK, updates them, and sets APT_OPTS, the options
# that make apt-get and apt-cache use them.
aptSuite() {
	local work=$1 suite=$2
	mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial" "$work/deb"
	cat >"$work/parts/$suite.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	APT_OPTS=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$work/parts"
		-o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
	apt-get "${APT_OPTS[@]}" update -qq
}

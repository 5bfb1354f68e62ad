# redis_load PORT [CLIENTS]: redis-server on PORT (SRV), once it answers,
# under redis-benchmark's set and get over 100,000 keys (REDIS_KEYS, when
# set, keys) from CLIENTS connections (default 10) (LOAD). Shared by scripts/lib/targets.sh,
# scripts/bench/builds.sh and scripts/bench/cpushare.sh. With LOAD_CPUS set
# (a taskset CPU list) the server and its client run on those CPUs only.
redis_load() {
	local pin=()
	[ -z "${LOAD_CPUS:-}" ] || pin=(taskset -c "$LOAD_CPUS")
	"${pin[@]}" redis-server --port "$1" --save "" --appendonly no >/dev/null 2>&1 &
	SRV=$!
	local i
	for i in $(seq 200); do
		redis-cli -p "$1" ping >/dev/null 2>&1 && break
		sleep 0.05
	done
	"${pin[@]}" redis-benchmark -p "$1" -n 100000000 -c "${2:-10}" -r "${REDIS_KEYS:-100000}" -t set,get -q >/dev/null 2>&1 &
	LOAD=$!
}

# redis_requests PORT: the commands the server on PORT has processed so far.
redis_requests() {
	redis-cli -p "$1" info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p'
}

#!/usr/bin/env bash
# run.sh: extauthz in Redis mode against envoyproxy/ratelimit, side by side, on one redis-server:
# 50 calls in flight ask ShouldRateLimit for one hot value, for SECONDS each (default 10), in three
# scenarios: under the limit (every check takes a token in Redis), over it (most refused), and
# over it on VALUES values (default 100) asked for in turn, each over its own limit of
# VALUE_LIMIT a second (default 20: 2,000 tokens a second for 100 values, well under what the
# slowest load here sends): there Redis takes tokens for all of them and is rarely idle, as a
# Redis serving many hot values is, where with one value it sleeps between tokens and each
# wakeup costs more than the call it carries. A scenario over the limit in which no check was
# refused says so: its figures are not those of a refusal.
#
# It fetches and builds nothing of envoyproxy/ratelimit: build it yourself from its public source
# and name the binary, e.g.
#   git clone <envoyproxy/ratelimit> /tmp/rl && (cd /tmp/rl && go build -o ratelimit ./src/service_cmd)
#   RL_BIN=/tmp/rl/ratelimit bench/rlcompare/run.sh
# Unpinned, the service, redis-server and the load generator share both cores. With PIN=1
# (taskset) the service and redis-server run on CPU 0 and the load generator on CPU 1: the
# throughput is what one core gives the service and its Redis. With PIN=2 the service runs on
# CPU 0 and redis-server with the load generator on CPU 1: what one core gives the service,
# with Redis elsewhere as in production.
#
# The load generator (rlcompare's -load h2) sends pre-encoded HTTP/2 frames and checks every
# answer; it takes a fraction of the CPU per call that grpc-go's client does, so more of the
# shared cores is left to the services. LOAD=grpc drives them with grpc-go's client instead;
# GRPC_WINDOWS=static gives it fixed flow-control windows, as Envoy's are (grpc-go's default
# windows grow by BDP estimation, a ping a round trip that each server must answer).
#
# Under the limit it also runs bench/envoy's no-op gRPC server (extauthz's server options, every
# call answered OK without a look): what a service on grpc-go that did no work at all would
# reach against envoyproxy/ratelimit on this machine with this load generator, the ceiling of
# extauthz's ratio.
#
# BOOK_AHEAD sets extauthz's store.redis.book_ahead (default 0, off): over the limit a replica
# then books the tokens of that span in one script call and gives them out itself, where
# envoyproxy/ratelimit's local cache (its run "rl+cache") caches the keys over their limit.
#
# BEFORE_BIN names another extauthz binary (say, an earlier revision's), run after this tree's in
# each scenario as "extauthz0", with its ratios to this tree's: a change measured side by side.
#
# It needs redis-server on PATH; ports REDIS_PORT (16379), EXTAUTHZ_PORT (18001), NOOP_PORT
# (18002) and RL_PORT (18081, with 18080 and 16070 for its HTTP and debug listeners) must be free.
set -euo pipefail
cd "$(dirname "$0")"
: "${RL_BIN:?set RL_BIN to an envoyproxy/ratelimit binary}"
seconds="${1:-10}"
rport="${REDIS_PORT:-16379}"
eport="${EXTAUTHZ_PORT:-18001}"
lport="${RL_PORT:-18081}"
nport="${NOOP_PORT:-18002}"
clients="${CLIENTS:-50}"
server=() redis=() client=()
case "${PIN:-0}" in
1) server=(taskset -c 0) redis=(taskset -c 0) client=(taskset -c 1) ;;
2) server=(taskset -c 0) redis=(taskset -c 1) client=(taskset -c 1) ;;
esac
work="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

(cd ../.. && go build -o "$work/extauthz" ./cmd/extauthz && go build -o "$work/envoybench" ./bench/envoy)
go build -o "$work/rlcompare" .

"${redis[@]}" redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done

# wait_port waits until something listens on 127.0.0.1:$1.
wait_port() { for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; echo "nothing on port $1" >&2; exit 1; }

# measure NAME PORT PID: rlcompare's load on the service at PORT (process PID), its line kept
# as NAME's result.
measure() {
	"${client[@]}" "$work/rlcompare" -addr "127.0.0.1:$2" -redis "127.0.0.1:$rport" -clients "$clients" \
		-duration "${seconds}s" -name "$1" -pid "$3" -values "${values:-1}" -load "${LOAD:-h2}" -grpc-windows "${GRPC_WINDOWS:-dynamic}" |
		tee "$work/$1.out"
}

# run_extauthz NAME BIN LIMIT: extauthz binary BIN in Redis mode with a cluster rule of LIMIT a
# second on item_id, its result kept as NAME's.
run_extauthz() {
	local name=$1 bin=$2
	shift 2
	mkdir -p "$work/rules" # a directory of its own: extauthz watches it, and the logs are in $work
	cat >"$work/rules/rules.yaml" <<RULES
param_flow:
  - {resource: "POST:/order", param: item_id, grade: qps, count: $1, duration: 1s, cluster: true}
RULES
	EXTAUTHZ_GRPC_ADDR="127.0.0.1:$eport" EXTAUTHZ_ADMIN_ADDR="127.0.0.1:0" EXTAUTHZ_RULES_FILE="$work/rules/rules.yaml" \
		EXTAUTHZ_STORE_REDIS_ADDRS="127.0.0.1:$rport" EXTAUTHZ_STORE_REDIS_TIMEOUT=1s EXTAUTHZ_STORE_REDIS_FALLBACK=deny \
		EXTAUTHZ_STORE_REDIS_BOOK_AHEAD="${BOOK_AHEAD:-0s}" EXTAUTHZ_LOG_LEVEL=error "${server[@]}" "$bin" >"$work/$name.log" 2>&1 &
	local pid=$!
	wait_port "$eport"
	measure "$name" "$eport" "$pid"
	kill "$pid"; wait "$pid" 2>/dev/null || true
}

# run_ratelimit LIMIT [LOCAL_CACHE_BYTES]: envoyproxy/ratelimit with the same limit, fixed window.
run_ratelimit() {
	mkdir -p "$work/runtime/ratelimit/config"
	cat >"$work/runtime/ratelimit/config/config.yaml" <<CONF
domain: edge
descriptors:
  - key: resource
    value: "POST:/order"
    descriptors:
      - key: origin
        value: serviceA
        descriptors:
          - key: item_id
            rate_limit: {unit: second, requests_per_unit: $1}
CONF
	local name=ratelimit
	[ "${2:-0}" != 0 ] && name=rl+cache
	USE_STATSD=false LOG_LEVEL=error REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
		RUNTIME_ROOT="$work/runtime" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		GRPC_HOST=127.0.0.1 GRPC_PORT="$lport" HOST=127.0.0.1 PORT="$((lport - 1))" DEBUG_HOST=127.0.0.1 DEBUG_PORT=16070 \
		LOCAL_CACHE_SIZE_IN_BYTES="${2:-0}" "${server[@]}" "$RL_BIN" >"$work/ratelimit.log" 2>&1 &
	local pid=$!
	wait_port "$lport"
	measure "$name" "$lport" "$pid"
	kill "$pid"; wait "$pid" 2>/dev/null || true
}

# run_noop: the no-op gRPC server, as the service is run (pinned the same way).
run_noop() {
	"${server[@]}" "$work/envoybench" noop -addr "127.0.0.1:$nport" >"$work/noop.log" 2>&1 &
	local pid=$!
	wait_port "$nport"
	measure no-op "$nport" "$pid"
	kill "$pid"; wait "$pid" 2>/dev/null || true
}

# ratio A NAME [NOTE]: A's throughput over NAME's in the scenario just run, and NOTE.
ratio() {
	awk -v a="$1" -v name="$2" -v note="${3:-}" 'FNR == 1 { n[FILENAME] = $2 } END {
		printf "%s / %s: %.2fx the checks a second%s\n", a, name, n[ARGV[1]] / n[ARGV[2]], note }' \
		"$work/$1.out" "$work/$2.out"
}

# redis_ratio A NAME [NOTE]: A's Redis CPU a check over NAME's in the scenario just run (no ratio
# when NAME's rounds to nothing), and NOTE.
redis_ratio() {
	awk -v a="$1" -v name="$2" -v note="${3:-}" '{ for (i = 1; i < NF; i++) if ($i == "redis" && $(i + 1) == "cpu") c[FILENAME] = $(i + 2) }
		END { x = c[ARGV[1]]; y = c[ARGV[2]]; r = "-"; if (y > 0) r = sprintf("%.2fx", x / y)
			printf "%s / %s: %s the Redis CPU a check (%s against %s us%s)\n", a, name, r, x, y, note }' \
		"$work/$1.out" "$work/$2.out"
}

# over_check NAME: warn when NAME's run, meant to be over the limit, refused nothing.
over_check() {
	awk -v name="$1" '{ for (i = 1; i < NF; i++) if ($i == "over") n = $(i + 1) }
		END { if (n == 0) printf "warning: %s refused no check: the load did not reach the limit\n", name }' "$work/$1.out"
}

for scenario in "under 1000000 1" "over 100 1" "over ${VALUE_LIMIT:-20} ${VALUES:-100}"; do
	set -- $scenario
	values=$3
	what="one value"
	[ "$values" != 1 ] && what="$values values in turn, each"
	echo "== $1 the limit: $what $2 a second, $clients clients, ${seconds}s each"
	redis-cli -p "$rport" flushall >/dev/null
	run_extauthz extauthz "$work/extauthz" "$2"
	[ "$1" = over ] && over_check extauthz
	if [ -n "${BEFORE_BIN:-}" ]; then
		redis-cli -p "$rport" flushall >/dev/null
		run_extauthz extauthz0 "$BEFORE_BIN" "$2"
		ratio extauthz extauthz0
		redis_ratio extauthz extauthz0
	fi
	redis-cli -p "$rport" flushall >/dev/null
	run_ratelimit "$2"
	ratio extauthz ratelimit " (target >= 2x)"
	if [ "$1" = under ]; then
		run_noop
		ratio no-op ratelimit " (the ceiling: a service that does nothing)"
		ratio extauthz no-op
	fi
	if [ "$1" = over ]; then
		redis-cli -p "$rport" flushall >/dev/null
		run_ratelimit "$2" 1048576
		ratio extauthz rl+cache
		redis_ratio extauthz rl+cache "; target <= 1"
	fi
done

#!/usr/bin/env bash
# run.sh: the service CPU of a ShouldRateLimit call of N descriptors (DESCRIPTORS, default 64,
# the most a request may carry) in extauthz against the no-op gRPC server built with extauthz's
# server options (bench/envoy's noop), side by side through real processes: h2load (Debian's
# nghttp2-client, installed when missing) sends the same call to each at RATE calls a second
# (default 2,000) over 4 HTTP/2 connections, in turns, ROUNDS times; CPU per call is read from
# /proc/PID/stat (user + system, 10ms ticks). h2load decodes no answer, so only the servers'
# work is counted. extauthz runs the shipped extauthz.yaml with one rule that applies to every
# descriptor and never refuses: every descriptor takes a token of its own value.
#
#   bench/descriptors/run.sh                        # 64 descriptors, 5 rounds of 5s
#   DESCRIPTORS=10 ROUNDS=3 bench/descriptors/run.sh
#   BEFORE_BIN=/tmp/extauthz-before bench/descriptors/run.sh   # that binary too ("before")
#   API=check bench/descriptors/run.sh              # an allowed Check of GET /reports instead
set -euo pipefail
# extauthz runs under a soft memory limit, as in a container with a 1GiB limit (memory_limit,
# whose collector target follows the live heap); EXTAUTHZ_MEMORY_LIMIT=off measures Go's default.
export EXTAUTHZ_MEMORY_LIMIT="${EXTAUTHZ_MEMORY_LIMIT:-1GiB}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! command -v h2load >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y nghttp2-client >/dev/null || { apt-get update >/dev/null && apt-get install -y nghttp2-client >/dev/null; }
	else
		echo "run.sh needs h2load: apt-get install nghttp2-client" >&2
		exit 1
	fi
fi
n="${DESCRIPTORS:-64}" rounds="${ROUNDS:-5}" seconds="${SECONDS_PER_RUN:-5}" rate="${RATE:-2000}"
work="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$work/extauthz" ./cmd/extauthz && go build -o "$work/envoybench" ./bench/envoy &&
	go run ./bench/throttle -descriptors "$n" $([ "${API:-}" = check ] && echo -check) >"$work/body")
# the rules file in a directory of its own, as in a deployment: extauthz watches its directory,
# and each write there (h2load's latency log, the servers' logs) would wake the watcher
mkdir "$work/rules"
cat >"$work/rules/rules.yaml" <<'RULES'
param_flow:
  - {resource: "POST:/orders", param: user, grade: qps, count: 1000000000, duration: 1s}
  - {resource: "GET:/reports", param: api_key, grade: qps, count: 1000000000, duration: 1s}
RULES
method=envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
[ "${API:-}" = check ] && method=envoy.service.auth.v3.Authorization/Check
declare -A addr pid
"$work/extauthz" serve --config "$root/envoy-config/extauthz.yaml" --rules "$work/rules/rules.yaml" \
	--grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --log-format json >"$work/extauthz.log" 2>&1 &
pid[extauthz]=$! pids+=($!)
"$work/envoybench" noop -addr 127.0.0.1:0 >"$work/noop.log" 2>&1 &
pid[noop]=$! pids+=($!)
servers=(noop extauthz)
if [ -n "${BEFORE_BIN:-}" ]; then
	"$BEFORE_BIN" serve --config "$root/envoy-config/extauthz.yaml" --rules "$work/rules/rules.yaml" \
		--grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --log-format json >"$work/before.log" 2>&1 &
	pid[before]=$! pids+=($!)
	servers+=(before)
	for _ in $(seq 300); do grep -q '"serving"' "$work/before.log" && break; sleep 0.1; done
	addr[before]="$(sed -n 's/.*"msg":"serving".*"grpc_addr":"\([^"]*\)".*/\1/p' "$work/before.log")"
fi
for _ in $(seq 300); do grep -q '"serving"' "$work/extauthz.log" && [ -s "$work/noop.log" ] && break; sleep 0.1; done
addr[extauthz]="$(sed -n 's/.*"msg":"serving".*"grpc_addr":"\([^"]*\)".*/\1/p' "$work/extauthz.log")"
addr[noop]="$(head -1 "$work/noop.log")"
[ -n "${addr[extauthz]}" ] && [ -n "${addr[noop]}" ] || { echo "a server did not start" >&2; cat "$work"/*.log >&2; exit 1; }

cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"
load() {
	h2load -d "$work/body" -H 'content-type: application/grpc' -H 'te: trailers' -c 4 -m 16 \
		--rps $((rate / 4)) -D "$2" --log-file "$work/latency" "http://${addr[$1]}/$method"
}
# p99 is the 99th percentile of the last run's latencies (h2load's log: microseconds from a
# call's start to the end of its answer, the third column).
p99() { cut -f3 "$work/latency" | sort -n | awk '{ v[NR] = $1 } END { i = int(NR * 0.99); if (i < 1) i = 1; print v[i] }'; }
echo "# $(uptime)"
if [ "${API:-}" = check ]; then
	echo "# an allowed Check a call, $rate calls a second, ${seconds}s a run"
	n=1 # the target of a call of a few entries
else
	echo "# $n descriptors a call, $rate calls a second, ${seconds}s a run"
fi
printf '%-6s %-9s %10s %14s %10s\n' round server "calls/s" "cpu-us/call" "p99-us"
k=${#servers[@]}
for r in $(seq "$rounds"); do
	for i in $(seq 0 $((k - 1))); do
		j=$(((i + r) % k)) # the order rotated each round
		s="${servers[$j]}"
		load "$s" 1 >/dev/null
		c0="$(cpu_ticks "${pid[$s]}")"
		out="$(load "$s" "$seconds")"
		c1="$(cpu_ticks "${pid[$s]}")"
		calls="$(sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' <<<"$out")"
		awk -v r="$r" -v s="$s" -v n="$calls" -v sec="$seconds" -v c="$((c1 - c0))" -v hz="$hz" -v p="$(p99)" \
			'BEGIN { printf "%-6s %-9s %10.0f %14.1f %10d\n", r, s, n / sec, c * 1e6 / hz / n, p }' | tee -a "$work/results"
	done
done
# the target: 64 descriptors within 1.2x of the no-op's CPU, a call of a few within 1.05x
target="$([ "$n" -ge 64 ] && echo 1.2 || echo 1.05)"
awk -v target="$target" '{ v[$2, $1] = $4; q[$2, $1] = $5 } END {
	for (r = 1; r <= '"$rounds"'; r++) {
		s = s " " sprintf("%.2f", v["extauthz", r] / v["noop", r])
		p = p " " sprintf("%.2f", q["extauthz", r] / q["noop", r])
		if (("before", r) in v) b = b " " sprintf("%.2f", v["before", r] / v["noop", r])
	}
	print "extauthz / noop CPU per call, by round:" s "   (target <= " target ")"
	print "extauthz / noop p99, by round:" p "   (target <= 1.1)"
	if (b != "") print "before / noop CPU per call, by round:" b }' "$work/results"
echo "extauthz: $(curl -s "http://$(sed -n 's/.*"msg":"serving".*"admin_addr":"\([^"]*\)".*/\1/p' "$work/extauthz.log")/metrics" | grep '^extauthz_decisions_total' | tr '\n' ' ')"
echo "# $(uptime)"

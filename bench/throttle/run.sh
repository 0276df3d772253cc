#!/usr/bin/env bash
# run.sh: the CPU extauthz spends per throttled request at 10,000 held requests a second,
# against the same calls answered at once at the same rate, side by side.
#
# Two extauthz processes run at once, on the shipped extauthz.yaml: "held" with a throttle rule
# that spaces the calls of one value 100µs apart (10,000 a second; 1,024 calls in flight from
# h2load over 4 HTTP/2 connections, each asked again as soon as it is answered, so that every
# call waits about 100ms for its turn), "free" with a limit no call reaches and h2load sending
# 10,000 calls a second open loop over 4 connections. h2load (Debian's nghttp2-client,
# installed when missing) sends the same ShouldRateLimit (throttlebody) to each in turn, ROUNDS
# times, and the script reports each one's calls a second and its CPU per call (from
# /proc/PID/stat, user + system, in 10ms ticks), and what holding adds.
#
#   bench/throttle/run.sh                 # 5 rounds of 5s each
#   ROUNDS=3 SECONDS_PER_RUN=10 bench/throttle/run.sh
#   SERVICE_BIN=/tmp/extauthz-after BEFORE_BIN=/tmp/extauthz-before bench/throttle/run.sh   # that binary's held and free too,
#                                                           # side by side (cases held0, free0)
#   OPEN_LOOP=1 bench/throttle/run.sh     # and case "open": held calls sent open loop, 10,000 a
#                                         # second as for "free" (each held until its turn, a
#                                         # few ms), not each sent again as one is answered
#
# Beside them run the floor, bench/envoy's no-op gRPC server (extauthz's server options): "nheld"
# paced at 10,000 calls a second, each held until its turn and answered with the others of its
# millisecond, one timer a millisecond, as extauthz answers held calls (and "nopen" with
# OPEN_LOOP), under the load of "held" ("open"), and "nfree" answering at once under free's, with
# the collector's target extauthz sets for a small state (GOGC 400). What holding adds to the
# no-op is what it costs a service on grpc-go that does nothing else.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if ! command -v h2load >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y nghttp2-client >/dev/null || { apt-get update >/dev/null && apt-get install -y nghttp2-client >/dev/null; }
	else
		echo "run.sh needs h2load: apt-get install nghttp2-client" >&2
		exit 1
	fi
fi
rounds="${ROUNDS:-5}"
seconds="${SECONDS_PER_RUN:-5}"
work="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go run ./bench/throttle >"$work/body" && go build -o "$work/envoybench" ./bench/envoy)
this="${SERVICE_BIN:-}" # a binary already built, or this tree's
if [ -z "$this" ]; then
	this="$work/extauthz"
	(cd "$root" && go build -o "$this" ./cmd/extauthz)
fi
cases=(held free nheld nfree)
declare -A bin=([held]="$this" [free]="$this")
if [ -n "${BEFORE_BIN:-}" ]; then
	cases+=(held0 free0)
	bin[held0]="$BEFORE_BIN" bin[free0]="$BEFORE_BIN"
fi
if [ -n "${OPEN_LOOP:-}" ]; then
	cases+=(open nopen)
	bin[open]="$this"
fi

# the rules files in a directory of their own, as in a deployment: extauthz watches the
# directory, and each write there (the servers' logs) would wake the watcher
mkdir "$work/rules"
cat >"$work/rules/held.yaml" <<'RULES'
param_flow:
  - {resource: "POST:/orders", param: user, grade: qps, count: 10000, duration: 1s, behavior: throttle, max_queueing_time: 1s}
RULES
cat >"$work/rules/free.yaml" <<'RULES'
param_flow:
  - {resource: "POST:/orders", param: user, grade: qps, count: 1000000000, duration: 1s}
RULES

# rules_of CASE: the rules file of a case (held0 and open run the held rules, free0 the free ones)
rules_of() { case "$1" in open | held0) echo held ;; *) echo "${1%0}" ;; esac; }

# noop CASE: whether the case runs the no-op (its name starts with n)
noop() { [ "${1#n}" != "$1" ]; }

declare -A grpc admin pid
for s in "${cases[@]}"; do
	if noop "$s"; then
		pace=()
		[ "$s" != nfree ] && pace=(-pace 10000)
		# with the collector's target extauthz sets for a state this small (memory_limit's
		# largest, GOGC 400), where Go's default would collect four times as often
		GOGC=400 "$work/envoybench" noop -addr 127.0.0.1:0 "${pace[@]}" >"$work/$s.log" 2>&1 &
		pid[$s]=$!
		pids+=($!)
		continue
	fi
	"${bin[$s]}" serve --config "$root/envoy-config/extauthz.yaml" --rules "$work/rules/$(rules_of "$s").yaml" \
		--grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --log-format json >"$work/$s.log" 2>&1 &
	pid[$s]=$!
	pids+=($!)
done
for s in "${cases[@]}"; do
	if noop "$s"; then # it prints its address first
		for _ in $(seq 300); do [ -s "$work/$s.log" ] && break; sleep 0.1; done
		grpc[$s]="$(head -1 "$work/$s.log")"
		continue
	fi
	for _ in $(seq 300); do grep -q '"serving"' "$work/$s.log" && break; sleep 0.1; done
	line="$(grep '"serving"' "$work/$s.log")" || { echo "extauthz ($s) did not start:" >&2; cat "$work/$s.log" >&2; exit 1; }
	grpc[$s]="$(sed -n 's/.*"grpc_addr":"\([^"]*\)".*/\1/p' <<<"$line")"
	admin[$s]="$(sed -n 's/.*"admin_addr":"\([^"]*\)".*/\1/p' <<<"$line")"
done

# cpu_ticks PID: the process's user + system time so far, in clock ticks.
cpu_ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"

# load SCENARIO SECONDS: h2load's calls to that scenario's extauthz.
load() {
	local url="http://${grpc[$1]}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	local args=(-d "$work/body" -H 'content-type: application/grpc' -H 'te: trailers' -c 4 -D "$2")
	case "$1" in
	held | held0 | nheld) args+=(-m 256) ;;
	open | nopen) args+=(-m 256 --rps 2500) ;; # as free's rate, with room for the calls held
	*) args+=(-m 16 --rps 2500) ;;
	esac
	h2load "${args[@]}" "$url"
}

echo "# $(uptime)"
printf '%-6s %-6s %10s %14s\n' round case "calls/s" "cpu-us/call"
n=${#cases[@]}
for r in $(seq "$rounds"); do
	for i in $(seq 0 $((n - 1))); do
		k=$(((i + r) % n)) # the order rotated each round
		s="${cases[$k]}"
		load "$s" 1 >/dev/null # warm-up: connections open, the queue filled
		c0="$(cpu_ticks "${pid[$s]}")"
		out="$(load "$s" "$seconds")"
		c1="$(cpu_ticks "${pid[$s]}")"
		calls="$(sed -n 's/^status codes: \([0-9]*\) 2xx.*/\1/p' <<<"$out")"
		awk -v r="$r" -v s="$s" -v n="$calls" -v sec="$seconds" -v c="$((c1 - c0))" -v hz="$hz" \
			'BEGIN { printf "%-6s %-6s %10.0f %14.1f\n", r, s, n / sec, c * 1e6 / hz / n }' | tee -a "$work/results"
	done
done
awk '{ cpu[$2] = cpu[$2] " " $4; v[$2, $1] = $4 }
	END {
		for (c in cpu) print c " cpu-us/call by round:" cpu[c]
		for (r = 1; r <= '"$rounds"'; r++) {
			add = add " " sprintf("%.1f", v["held", r] - v["free", r])
			if (("held0", r) in v) {
				ratio = ratio " " sprintf("%.2f", v["held", r] / v["held0", r])
				add0 = add0 " " sprintf("%.1f", v["held0", r] - v["free0", r])
			}
			if (("open", r) in v) addo = addo " " sprintf("%.1f", v["open", r] - v["free", r])
			n = v["nheld", r] - v["nfree", r]
			addn = addn " " sprintf("%.1f", n)
			over = over " " sprintf("%.1f", v["held", r] - v["free", r] - n)
			if (("nopen", r) in v) {
				n = v["nopen", r] - v["nfree", r]
				addno = addno " " sprintf("%.1f", n)
				overo = overo " " sprintf("%.1f", v["open", r] - v["free", r] - n)
			}
		}
		print "what holding adds, us/call, by round:" add "   (target <= 15)"
		print "what holding adds to the no-op (the floor):" addn
		print "extauthz'"'"'s over the floor'"'"'s:" over
		if (addo != "") {
			print "the same, the held calls sent open loop:" addo
			print "to the no-op, open loop:" addno
			print "extauthz'"'"'s over the floor'"'"'s, open loop:" overo
		}
		if (ratio != "") {
			print "the same with BEFORE_BIN:" add0
			print "held cpu/call, this build over BEFORE_BIN, by round:" ratio
		}
	}' "$work/results"
# Every call decided, none failed: the service's own count of outcomes.
for s in "${cases[@]}"; do
	noop "$s" && continue
	echo "$s: $(curl -s "http://${admin[$s]}/metrics" | grep '^extauthz_decisions_total' | tr '\n' ' ')"
done
echo "# $(uptime)"

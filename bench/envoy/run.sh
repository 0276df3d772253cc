#!/usr/bin/env bash
# run.sh: the shipped Envoy bootstrap (envoy-config/envoy.yaml, on loopback) in a real Envoy,
# once per variant of its HTTP filters, side by side: no auth filter; ext_authz to a no-op gRPC
# server (built with extauthz's server options) and to extauthz; the rate-limit filter to the
# no-op, to extauthz and, when RL_BIN names an envoyproxy/ratelimit binary, to it (on a
# redis-server of its own); and Envoy's own local_ratelimit. h2load (Debian's nghttp2-client,
# installed when missing) sends each the same open-loop HTTP/2 load, the order rotated every
# round. It prints requests a second, p50/p99 and the CPU per request of Envoy and of the
# service (from /proc), then what extauthz adds to Envoy against what the no-op adds
# (target <= 1.1x).
#
#   bench/envoy/run.sh                      # 5 rounds of 6s per variant, 2000 req/s offered
#   ROUNDS=3 SECONDS_PER_RUN=10 CLIENTS=20 RATE=100 bench/envoy/run.sh
#   RL_BIN=/tmp/rl/ratelimit bench/envoy/run.sh
#
# envoyproxy/ratelimit is fetched and built by no one here: build it from its public source,
# e.g. git clone <envoyproxy/ratelimit> /tmp/rl && (cd /tmp/rl && go build -o ratelimit ./src/service_cmd).
# Everything listens on 127.0.0.1 at ports the kernel picks; the whole run is bounded by
# ROUNDS x variants x (SECONDS_PER_RUN + 1s of warm-up).
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
command -v "${ENVOY_BIN:-envoy}" >/dev/null || { echo "run.sh needs Envoy 1.40 on PATH (or ENVOY_BIN)" >&2; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/extauthz" ./cmd/extauthz && go build -o "$work/envoybench" ./bench/envoy)
args=(run -root "$root" -extauthz "$work/extauthz" -envoy "${ENVOY_BIN:-envoy}"
	-rounds "${ROUNDS:-5}" -duration "${SECONDS_PER_RUN:-6}s" -clients "${CLIENTS:-20}" -rate "${RATE:-100}"
	-workers "${WORKERS:-2}")
[ -n "${RL_BIN:-}" ] && args+=(-ratelimit "$RL_BIN")
[ -n "${ONLY:-}" ] && args+=(-only "$ONLY")
echo "# $(uptime)"
"$work/envoybench" "${args[@]}"
echo "# $(uptime)"

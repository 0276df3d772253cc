#!/usr/bin/env bash
# Brings the docker-compose stack up, checks it through Envoy with curl, and tears it down.
# Needs Docker with the compose plugin, and curl. Usage: e2e/compose.sh
# With EXTAUTHZ_COMPOSE_RUNNING=1 the stack is already up (e2e/compose runs docker-compose.yml's
# services as local processes and calls this script): only the checks run, against BASE_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

compose=(docker compose)
base=${BASE_URL:-http://127.0.0.1:8080}
hdrs=$(mktemp)
body=$(mktemp)
failures=0

running=${EXTAUTHZ_COMPOSE_RUNNING:-0}

cleanup() {
	if [ "$running" != 1 ]; then
		if [ "$failures" -ne 0 ]; then "${compose[@]}" logs --tail=50 extauthz envoy || true; fi
		"${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
	fi
	rm -f "$hdrs" "$body"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }

# code URL [curl args...]: the status of one request; its headers land in $hdrs, its body in
# $body.
code() {
	local url=$1
	shift
	curl -s -o "$body" -D "$hdrs" -w '%{http_code}' "$@" "$base$url" || true
}

# header NAME: the value of NAME in the last answer, spaces removed.
header() { grep -i "^$1:" "$hdrs" | head -n1 | cut -d: -f2- | tr -d ' \r'; }

# expect_header NAME REGEX: the last answer's NAME matches REGEX (extended, whole value).
expect_header() {
	local v
	v=$(header "$1")
	if [[ $v =~ ^$2$ ]]; then pass "$1: $v"; else fail "$1: got '$v', want /$2/"; fi
}

# expect_body TEXT...: the last answer's body contains every TEXT.
expect_body() {
	local t
	for t in "$@"; do
		if grep -qF -- "$t" "$body"; then pass "body has $t"; else fail "body $(head -c 300 "$body") lacks $t"; fi
	done
}

[ "$running" = 1 ] || "${compose[@]}" up -d --build --wait --wait-timeout 120

# Authority: GET:/items lets web and mobile in, nobody else.
c=$(code '/items?item_id=sh-a' -H 'x-origin: stranger')
[ "$c" = 403 ] && pass "unlisted origin gets 403" || fail "unlisted origin: got $c, want 403"
expect_header content-type 'application/json'
expect_body '"blocked":"authority"' '"resource":"GET:/items"' '"origin":"stranger"'
c=$(code '/items?item_id=sh-a')
[ "$c" = 403 ] && pass "missing origin gets 403" || fail "missing origin: got $c, want 403"
c=$(code '/items?item_id=sh-a' -H 'x-origin: web')
[ "$c" = 200 ] && pass "listed origin gets 200" || fail "listed origin: got $c, want 200"

# Spellings of a path are one path: Envoy normalises it (normalize_path, merge_slashes) before
# routing, so the white list of GET:/items holds for each; an encoded slash is refused (400).
for p in '/x/../items?item_id=sh-a' '//items?item_id=sh-a' '/it%65ms?item_id=sh-a' '/./items?item_id=sh-a'; do
	c=$(code "$p" --path-as-is -H 'x-origin: stranger')
	[ "$c" = 403 ] && pass "$p from an unlisted origin gets 403" || fail "$p: got $c, want 403"
done
c=$(code '/items%2Fx?item_id=sh-a' --path-as-is -H 'x-origin: web')
[ "$c" = 400 ] && pass "encoded slash gets 400" || fail "encoded slash: got $c, want 400"

# Per-item limit: 5 a second plus a burst of 2. Quick requests must hit the limit after the
# bucket (7) and what refilled while they ran (5 a second: on a slow machine the requests take
# a while), and the 429 must say when to retry and what the limit is.
ok=0 last= began=$(date +%s%N)
for _ in $(seq 40); do
	last=$(code '/items?item_id=sh-b' -H 'x-origin: web')
	[ "$last" = 200 ] || break
	ok=$((ok + 1))
done
elapsed_ms=$((($(date +%s%N) - began) / 1000000))
most=$((7 + (5 * elapsed_ms + 999) / 1000))
if [ "$last" = 429 ] && [ "$ok" -ge 7 ] && [ "$ok" -le "$most" ]; then
	pass "item over its limit gets 429 after $ok (at most $most in ${elapsed_ms}ms)"
else
	fail "item limit: $ok admitted, last status $last; want 7 to $most admitted in ${elapsed_ms}ms, then 429"
fi
# Envoy states the limit of the status with the fewest remaining (XRateLimitHeaderUtils::
# populateHeaders): "N, N;w=1;name=..." for a 1s rule, 0 remaining on a refusal, the reset in whole
# seconds (a bucket of 5 a second with a burst of 2 is full within 1.4s). The body and
# retry-after are the service's own (raw_body, response_headers_to_add).
expect_header x-ratelimit-limit '(5|7),(5|7);w=1(;name="[^"]*")?'
lim=$(header x-ratelimit-limit)
[ "${lim%%,*}" = "$(echo "$lim" | sed -E 's/^[0-9]+,([0-9]+);w=1.*/\1/')" ] && pass "one limit stated" || fail "x-ratelimit-limit $lim states two limits"
expect_header x-ratelimit-remaining '0'
expect_header x-ratelimit-reset '[0-2]'
expect_header retry-after '[12]'
expect_body '"blocked":"param_flow"' '"param":"item_id"' '"value":"sh-b"' '"resource":"GET:/items"'
c=$(code '/items?item_id=sh-c' -H 'x-origin: web')
[ "$c" = 200 ] && pass "another item is not limited" || fail "another item: got $c, want 200"

# The exception item "vip" has 50 a second: twenty quick requests all pass.
ok=0
for _ in $(seq 20); do
	[ "$(code '/items?item_id=vip' -H 'x-origin: web')" = 200 ] && ok=$((ok + 1))
done
[ "$ok" = 20 ] && pass "exception item admitted 20 of 20" || fail "exception item: $ok of 20 admitted"

# Concurrency: two downloads of one user in flight at most. Hold two for 3s, a third is refused;
# once they complete (and Envoy sends the releases), the user may download again.
dl() { code '/downloads/f.bin' -H 'x-origin: web' -H 'x-user-id: sh-u' "$@"; }
out1=$(mktemp) out2=$(mktemp)
dl -H 'x-set-response-delay-ms: 3000' >"$out1" &
p1=$!
dl -H 'x-set-response-delay-ms: 3000' >"$out2" &
p2=$!
sleep 1
c=$(dl)
[ "$c" = 429 ] && pass "third download in flight gets 429" || fail "third download in flight: got $c, want 429"
expect_body '"blocked":"param_flow"' '"param":"user"' '"value":"sh-u"'
wait "$p1" "$p2"
[ "$(cat "$out1")$(cat "$out2")" = 200200 ] && pass "two downloads in flight admitted" || fail "held downloads: got $(cat "$out1") and $(cat "$out2"), want 200 and 200"
rm -f "$out1" "$out2"
sleep 1
c=$(dl)
[ "$c" = 200 ] && pass "slots released on completion" || fail "after completion: got $c, want 200"

if [ "$failures" -ne 0 ]; then
	echo "$failures check(s) failed" >&2
	exit 1
fi
echo "all checks passed"

package envoyapi

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/policy"
)

// Header names of the answers.
const (
	HeaderRetryAfter  = "retry-after"
	HeaderLimit       = "x-ratelimit-limit"
	HeaderRemaining   = "x-ratelimit-remaining"
	HeaderReset       = "x-ratelimit-reset"
	HeaderContentType = "content-type"
	contentJSON       = "application/json"
)

// appendBody appends the JSON body that tells the client what blocked it:
// {"blocked":..,"rule":..,"resource":..,"origin":..,"param":..,"value":..,"reason":..};
// param and value are left out for authority blocks.
func appendBody(b []byte, bl *policy.Block) []byte {
	b = append(b, `{"blocked":`...)
	b = appendJSONString(b, bl.Kind.Label())
	b = append(b, `,"rule":`...)
	b = strconv.AppendInt(b, int64(bl.Rule), 10)
	b = append(b, `,"resource":`...)
	b = appendJSONString(b, bl.Resource)
	b = append(b, `,"origin":`...)
	b = appendJSONString(b, bl.Origin)
	if bl.Kind == policy.ParamFlow {
		b = append(b, `,"param":`...)
		b = appendJSONString(b, bl.Param)
		b = append(b, `,"value":`...)
		b = appendJSONString(b, bl.Value)
	}
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, bl.Reason)
	return append(b, '}')
}

// errorBody is the JSON body of a request denied as malformed: {"error":..}.
func errorBody(msg string) string {
	b := append(make([]byte, 0, len(msg)+16), `{"error":`...)
	b = appendJSONString(b, msg)
	return string(append(b, '}'))
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// ceilSeconds is d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retryAfter is the retry-after of a block in seconds: rounded up, at least 1.
func retryAfter(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// headerOption is a header that overwrites one of the same name, or is added.
func headerOption(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// quota is what the x-ratelimit-* headers say of one limit, the same on both APIs (see
// Envoy's XRateLimitHeaderUtils::populateHeaders, ratelimit filter, for what Envoy builds from a
// rate-limit answer):
//
//   - limit is the rule's count for the value (an exception item applied): its sustained rate
//     per its duration, or its most in flight for a concurrency rule. A burst is headroom the
//     headers do not advertise.
//   - remaining is what is left, never more than limit: with a burst the bucket holds more
//     than count, and the headers show at most count of it.
//   - unit is the duration when it is exactly one second, minute, hour or day; for any other
//     duration (5 per 2s, 90 per 90s) and for concurrency it is UNKNOWN, so that Envoy states
//     the limit without a w= window rather than a rate the remaining count does not follow.
//   - reset is the time until the value is full again, rounded up to whole seconds (the one
//     rounding: Envoy reads only the seconds of duration_until_reset, so the rate-limit answer
//     carries the rounded-up value).
type quota struct {
	limit, remaining uint32
	unit             rlsv3.RateLimitResponse_RateLimit_Unit
	window           int64 // seconds of unit; 0 for UNKNOWN
	reset            int64 // seconds
}

func quotaOf(st *policy.Limit) quota {
	q := quota{limit: clamp32(st.Limit), reset: ceilSeconds(st.Reset)}
	q.remaining = min(clamp32(st.Remaining), q.limit)
	for _, u := range units {
		if st.Duration == u.d {
			q.unit, q.window = u.unit, int64(u.d/time.Second)
			break
		}
	}
	return q
}

// appendLimit appends the x-ratelimit-limit value Envoy builds for a single limit (no name):
// "N" or, with a window, "N, N;w=W".
func (q *quota) appendLimit(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(q.limit), 10)
	if q.window > 0 {
		b = append(b, ", "...)
		b = strconv.AppendUint(b, uint64(q.limit), 10)
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, q.window, 10)
	}
	return b
}

// rateHeaders appends the x-ratelimit-* headers of st, allocated together.
func rateHeaders(h []*corev3.HeaderValueOption, st *policy.Limit) []*corev3.HeaderValueOption {
	hs := new(struct {
		opts [3]corev3.HeaderValueOption
		vals [3]corev3.HeaderValue
	})
	rateHeaderValues(&hs.vals, st)
	for i := range hs.opts {
		hs.opts[i].Header = &hs.vals[i]
		hs.opts[i].AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		h = append(h, &hs.opts[i])
	}
	return h
}

// rateHeaderValues sets vals to the x-ratelimit-limit, -remaining and -reset headers of st,
// their three values slices of one string.
func rateHeaderValues(vals *[3]corev3.HeaderValue, st *policy.Limit) {
	q := quotaOf(st)
	var buf [96]byte // the longest: 45 + 10 + 20 bytes
	b := q.appendLimit(buf[:0])
	limitEnd := len(b)
	b = strconv.AppendUint(b, uint64(q.remaining), 10)
	remainingEnd := len(b)
	b = strconv.AppendInt(b, q.reset, 10)
	all := string(b)
	vals[0] = corev3.HeaderValue{Key: HeaderLimit, Value: all[:limitEnd]}
	vals[1] = corev3.HeaderValue{Key: HeaderRemaining, Value: all[limitEnd:remainingEnd]}
	vals[2] = corev3.HeaderValue{Key: HeaderReset, Value: all[remainingEnd:]}
}

// units are the rate-limit units a limit is stated in.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
}

func clamp32(n int64) uint32 {
	if n > math.MaxUint32 {
		return math.MaxUint32
	}
	if n < 0 {
		return 0
	}
	return uint32(n)
}

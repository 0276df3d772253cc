package envoyapi

import (
	"math"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/hotparam"
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
	b = appendJSONString(b, bl.Kind)
	b = append(b, `,"rule":`...)
	b = strconv.AppendInt(b, int64(bl.Rule), 10)
	b = append(b, `,"resource":`...)
	b = appendJSONString(b, bl.Resource)
	b = append(b, `,"origin":`...)
	b = appendJSONString(b, bl.Origin)
	if bl.Kind == ResultParamFlow {
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

// rateHeaders appends the x-ratelimit-* headers of st, allocated together.
func rateHeaders(h []*corev3.HeaderValueOption, st *hotparam.Status) []*corev3.HeaderValueOption {
	opts := make([]corev3.HeaderValueOption, 3)
	vals := make([]corev3.HeaderValue, 3)
	vals[0] = corev3.HeaderValue{Key: HeaderLimit, Value: strconv.FormatInt(st.Limit, 10)}
	vals[1] = corev3.HeaderValue{Key: HeaderRemaining, Value: strconv.FormatInt(max(st.Remaining, 0), 10)}
	vals[2] = corev3.HeaderValue{Key: HeaderReset, Value: strconv.FormatInt(ceilSeconds(st.ResetAfter), 10)}
	for i := range opts {
		opts[i].Header = &vals[i]
		opts[i].AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		h = append(h, &opts[i])
	}
	return h
}

// units are the rate-limit units a limit is stated in, smallest first.
var units = [...]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
}

// currentLimit states count per d in a rate-limit unit, the closest honest one: exactly when d
// is one second, minute, hour or day; otherwise the smallest unit in which the rate is a whole
// number of at least 1 (5 per 2s is 150 per MINUTE, 90 per 90s is 1 per SECOND); failing that, the rate in the smallest unit at least as long as d, rounded down
// (3 per 700ms is 4 per SECOND), so the stated limit never exceeds the real one. A duration
// over a day is stated per DAY, rounded down (a rate under one per day is 0 per DAY). A limit
// with no duration (a concurrency limit) is count with the unit UNKNOWN.
func currentLimit(count int64, d time.Duration) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
	count = max(count, 0)
	if d <= 0 {
		return clamp32(count), rlsv3.RateLimitResponse_RateLimit_UNKNOWN
	}
	first := len(units) - 1 // the smallest unit at least as long as d
	for i := len(units) - 1; i >= 0 && units[i].d >= d; i-- {
		first = i
	}
	for _, u := range units {
		n, rem, ok := perUnit(count, u.d, d)
		if ok && rem == 0 && n >= 1 && n <= math.MaxUint32 {
			return clamp32(int64(n)), u.unit
		}
	}
	n, _, ok := perUnit(count, units[first].d, d)
	if !ok {
		return math.MaxUint32, units[first].unit
	}
	return clamp32(int64(min(n, math.MaxInt64))), units[first].unit
}

// perUnit returns count*unit/d and its remainder, exactly in 128 bits; ok is false when the
// quotient does not fit in 64 bits.
func perUnit(count int64, unit, d time.Duration) (n, rem uint64, ok bool) {
	hi, lo := bits.Mul64(uint64(count), uint64(unit))
	if hi >= uint64(d) {
		return 0, 0, false
	}
	n, rem = bits.Div64(hi, lo, uint64(d))
	return n, rem, true
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

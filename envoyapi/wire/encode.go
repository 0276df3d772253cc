package wire

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/extauthz/extauthz/descriptors"
)

// marshalAnswer encodes an answer of Codec.Answer (see answerPool.take) directly, to
// the same bytes as proto.Marshal: fields in number order, zero values left out. It takes the
// answers made when nothing blocks (overall_code, raw_body, and statuses of code,
// current_limit, limit_remaining and duration_until_reset), at a fraction of the generic
// encoder's cost for many statuses, and reports false, encoding nothing, for an answer holding
// any other field (headers); that one takes the generic path. It does not look for unknown
// fields: the handler never sets any, in the answer or in the messages it points to. Strings
// are written as they are, as the lenient fallback of Codec.Marshal would write them.
func marshalAnswer(r *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(r.ResponseHeadersToAdd) > 0 || len(r.RequestHeadersToAdd) > 0 || r.DynamicMetadata != nil ||
		r.Quota != nil || len(r.Statuses) > len(statusSizes{}) {
		return nil, false
	}
	var sizes statusSizes
	size := sizeVarintField(uint64(int64(r.OverallCode)))
	for i, s := range r.Statuses {
		n, ok := statusSize(s)
		if !ok {
			return nil, false
		}
		sizes[i] = int32(n)
		size += 1 + protowire.SizeBytes(n)
	}
	if len(r.RawBody) > 0 {
		size += 1 + protowire.SizeBytes(len(r.RawBody))
	}
	b := make([]byte, 0, size)
	b = appendVarintField(b, 1, uint64(int64(r.OverallCode)))
	var seen shared
	for i, s := range r.Statuses {
		b = append(b, 2<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(sizes[i]))
		b = appendStatus(b, s, &seen)
	}
	if len(r.RawBody) > 0 {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, r.RawBody)
	}
	return b, true
}

// statusSizes holds the encoded size of each status of an answer, up to MaxDescriptors.
type statusSizes [descriptors.MaxDescriptors]int32

// sizeVarintField is the size of a varint field of number below 16 holding v, 0 when v is 0.
func sizeVarintField(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

// appendVarintField appends the varint field num (below 16) holding v, nothing when v is 0.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(append(b, byte(num)<<3|byte(protowire.VarintType)), v)
}

// appendVarint appends v as a varint; a value below 128, the most common, without a call.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// statusSize is the encoded size of s, false when s holds a field marshalAnswer leaves to the
// generic encoder.
func statusSize(s *rlsv3.RateLimitResponse_DescriptorStatus) (int, bool) {
	if s == nil {
		return 0, true // an empty message, as proto.Marshal writes a nil element of a list
	}
	if s.Quota != nil {
		return 0, false
	}
	n := sizeVarintField(uint64(int64(s.Code))) + sizeVarintField(uint64(s.LimitRemaining))
	if l := s.CurrentLimit; l != nil {
		ln, ok := limitSize(l)
		if !ok {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(ln)
	}
	if d := s.DurationUntilReset; d != nil {
		n += 1 + protowire.SizeBytes(durationSize(d))
	}
	return n, true
}

// shared remembers where the last current_limit and duration_until_reset messages were
// written (tag included): the handler shares them between statuses, so a status pointing to
// the same message copies those bytes instead of encoding it again.
type shared struct {
	limit             *rlsv3.RateLimitResponse_RateLimit
	limitAt, limitEnd int
	reset             *durationpb.Duration
	resetAt, resetEnd int
}

func appendStatus(b []byte, s *rlsv3.RateLimitResponse_DescriptorStatus, seen *shared) []byte {
	if s == nil {
		return b
	}
	b = appendVarintField(b, 1, uint64(int64(s.Code)))
	if l := s.CurrentLimit; l != nil && l == seen.limit {
		b = append(b, b[seen.limitAt:seen.limitEnd]...)
	} else if l != nil {
		at := len(b)
		n, _ := limitSize(l)
		b = append(b, 2<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(n))
		b = appendVarintField(b, 1, uint64(l.RequestsPerUnit))
		b = appendVarintField(b, 2, uint64(int64(l.Unit)))
		if l.Name != "" {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
		}
		seen.limit, seen.limitAt, seen.limitEnd = l, at, len(b)
	}
	b = appendVarintField(b, 3, uint64(s.LimitRemaining))
	if d := s.DurationUntilReset; d != nil && d == seen.reset {
		b = append(b, b[seen.resetAt:seen.resetEnd]...)
	} else if d != nil {
		at := len(b)
		b = append(b, 4<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(durationSize(d)))
		b = appendVarintField(b, 1, uint64(d.Seconds))
		b = appendVarintField(b, 2, uint64(int64(d.Nanos)))
		seen.reset, seen.resetAt, seen.resetEnd = d, at, len(b)
	}
	return b
}

func limitSize(l *rlsv3.RateLimitResponse_RateLimit) (int, bool) {
	if l.UnitMultiplier != nil {
		return 0, false
	}
	n := sizeVarintField(uint64(l.RequestsPerUnit)) + sizeVarintField(uint64(int64(l.Unit)))
	if l.Name != "" {
		n += 1 + protowire.SizeBytes(len(l.Name))
	}
	return n, true
}

func durationSize(d *durationpb.Duration) int {
	return sizeVarintField(uint64(d.Seconds)) + sizeVarintField(uint64(int64(d.Nanos)))
}

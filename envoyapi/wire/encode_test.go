package wire

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// randomAnswer is an answer of the fields marshalAnswer encodes, each present or not, with
// edge values (zero, large, negative enums and nanos, empty and invalid UTF-8 names, nil
// statuses).
func randomAnswer(rng *rand.Rand) *rlsv3.RateLimitResponse {
	u32 := func() uint32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MaxUint32
		}
		return rng.Uint32() >> rng.IntN(32)
	}
	enum := func() int32 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return -1
		}
		return rng.Int32N(3)
	}
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(enum())}
	if rng.IntN(2) == 0 {
		r.RawBody = []byte(`{"code":429}`)
	}
	names := []string{"", "param_flow[0] order item", "param_flow[12] r p"}
	if rng.IntN(10) == 0 {
		names = append(names, "n\xff") // now and then, invalid UTF-8
	}
	for range rng.IntN(12) {
		if rng.IntN(8) == 0 {
			r.Statuses = append(r.Statuses, nil)
			continue
		}
		s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(enum()), LimitRemaining: u32()}
		if rng.IntN(3) > 0 {
			s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: names[rng.IntN(len(names))],
				RequestsPerUnit: u32(), Unit: rlsv3.RateLimitResponse_RateLimit_Unit(enum())}
		}
		if rng.IntN(3) > 0 {
			s.DurationUntilReset = &durationpb.Duration{Seconds: int64(u32()) - int64(rng.IntN(2))*math.MaxInt32, Nanos: enum() * 999}
		}
		if prev := last(r.Statuses); prev != nil && rng.IntN(2) == 0 {
			// The handler shares these messages between statuses.
			s.CurrentLimit, s.DurationUntilReset = prev.CurrentLimit, prev.DurationUntilReset
		}
		r.Statuses = append(r.Statuses, s)
	}
	return r
}

func last(ss []*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse_DescriptorStatus {
	if len(ss) == 0 {
		return nil
	}
	return ss[len(ss)-1]
}

// marshalAnswer writes the bytes proto.Marshal writes, for every answer it takes.
func TestMarshalAnswerMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	codec := NewCodec()
	exact := 0
	for i := range 5000 {
		r := randomAnswer(rng)
		got, ok := marshalAnswer(r)
		if !ok {
			t.Fatalf("answer %d refused: %v", i, r)
		}
		want, err := proto.MarshalOptions{}.Marshal(r)
		if err != nil {
			// Invalid UTF-8 in a name: proto.Marshal refuses it (the codec's lenient fallback
			// writes it in another field order); decoded leniently, it is the same answer.
			dec := new(rlsv3.RateLimitResponse)
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(got)}, dec); err != nil || !proto.Equal(dec, r) {
				t.Fatalf("answer %d %v: decoded %v, %v", i, r, dec, err)
			}
			continue
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("answer %d %v:\n got %x\nwant %x", i, r, got, want)
		}
		exact++
	}
	if exact < 4000 {
		t.Fatalf("only %d answers compared byte for byte", exact)
	}
}

// An answer holding a field marshalAnswer does not encode is left to the generic encoder,
// and the codec still encodes it whole, whether it made the answer or not.
func TestMarshalAnswerLeavesOthers(t *testing.T) {
	others := []*rlsv3.RateLimitResponse{
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}}},
		{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "v"}}},
		{DynamicMetadata: &structpb.Struct{}},
		{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{Requests: 1}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{
			UnitMultiplier: wrapperspb.UInt32(2)}}}},
	}
	for i, r := range others {
		if _, ok := marshalAnswer(r); ok {
			t.Errorf("answer %d taken: %v", i, r)
		}
		data, err := NewCodec().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got := new(rlsv3.RateLimitResponse)
		if err := proto.Unmarshal(data.Materialize(), got); err != nil || !proto.Equal(got, r) {
			t.Errorf("answer %d: encoded %v (%v), want %v", i, got, err, r)
		}
		// The same fields in an answer of the handler's pool.
		codec := NewCodec()
		own := codec.Answer(len(r.Statuses))
		want := proto.Clone(r).(*rlsv3.RateLimitResponse)
		for j, s := range r.Statuses {
			own.Statuses[j].Code, own.Statuses[j].CurrentLimit, own.Statuses[j].Quota = s.Code, s.CurrentLimit, s.Quota
		}
		own.ResponseHeadersToAdd, own.RequestHeadersToAdd = r.ResponseHeadersToAdd, r.RequestHeadersToAdd
		own.DynamicMetadata, own.Quota, own.OverallCode = r.DynamicMetadata, r.Quota, r.OverallCode
		if data, err = codec.Marshal(own); err != nil {
			t.Fatal(err)
		}
		got.Reset()
		if err := proto.Unmarshal(data.Materialize(), got); err != nil || !proto.Equal(got, want) {
			t.Errorf("own answer %d: encoded %v (%v), want %v", i, got, err, want)
		}
	}
}

// BenchmarkMarshalAnswer encodes the answer of 10 descriptors that the handler makes when
// nothing blocks, by the generic encoder and by marshalAnswer, side by side.
func BenchmarkMarshalAnswer(b *testing.B) {
	r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	limit := &rlsv3.RateLimitResponse_RateLimit{Name: "param_flow[1] order item", RequestsPerUnit: 1 << 30, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND}
	for i := range 10 {
		r.Statuses = append(r.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
			CurrentLimit: limit, LimitRemaining: uint32(1<<30 - i), DurationUntilReset: &durationpb.Duration{Seconds: 1}})
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := marshalAnswer(r); !ok {
				b.Fatal("refused")
			}
		}
	})
}

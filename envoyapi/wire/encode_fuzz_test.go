package wire

import (
	"bytes"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// FuzzMarshalAnswer: whatever the values, marshalAnswer writes what proto.Marshal writes (or,
// for a name that is not UTF-8, bytes that decode leniently to the same answer).
func FuzzMarshalAnswer(f *testing.F) {
	f.Add(int32(1), uint32(7), uint32(100), int32(1), "param_flow[0] order item", int64(1), int32(0), uint8(10), []byte(nil))
	f.Add(int32(-1), uint32(0), uint32(1<<31), int32(-3), "n\xff", int64(-5), int32(-999), uint8(3), []byte(`{"x":1}`))
	codec := NewCodec()
	f.Fuzz(func(t *testing.T, code int32, remaining, perUnit uint32, unit int32, name string, sec int64, nanos int32, n uint8, raw []byte) {
		r := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(code), RawBody: raw}
		limit := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: perUnit, Unit: rlsv3.RateLimitResponse_RateLimit_Unit(unit)}
		reset := &durationpb.Duration{Seconds: sec, Nanos: nanos}
		for i := range int(n % 70) {
			s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(code + int32(i%3)), LimitRemaining: remaining >> (i % 33)}
			switch i % 4 {
			case 0:
				s.CurrentLimit, s.DurationUntilReset = limit, reset
			case 1:
				s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: name[:len(name)/2], RequestsPerUnit: perUnit / 2}
				s.DurationUntilReset = reset
			case 2:
				s.CurrentLimit = limit
			case 3:
				s = nil
			}
			r.Statuses = append(r.Statuses, s)
		}
		got, ok := marshalAnswer(r)
		if len(r.Statuses) > len(statusSizes{}) {
			if ok {
				t.Fatal("answer of more statuses than MaxDescriptors taken")
			}
			return
		}
		if !ok {
			t.Fatalf("answer refused: %v", r)
		}
		want, err := proto.Marshal(r)
		if err == nil {
			if !bytes.Equal(got, want) {
				t.Fatalf("%v:\n got %x\nwant %x", r, got, want)
			}
			return
		}
		dec := new(rlsv3.RateLimitResponse)
		if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(got)}, dec); err != nil || !proto.Equal(dec, r) {
			t.Fatalf("%v: decoded %v, %v", r, dec, err)
		}
	})
}

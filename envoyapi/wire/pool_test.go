package wire

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// An answer handed out by Answer is encoded whole by the codec, then reset and reused;
// any other answer is encoded and left as it was.
func TestCodecRecyclesAnswers(t *testing.T) {
	codec := NewCodec()
	fill := func(resp *rlsv3.RateLimitResponse) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[1].Code = rlsv3.RateLimitResponse_OVER_LIMIT
		resp.Statuses[2].LimitRemaining = 7
		resp.Statuses[2].CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: "r", RequestsPerUnit: 9}
		resp.RawBody = []byte(`{"x":1}`)
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{{Key: "retry-after", Value: "1"}}
	}

	resp := codec.Answer(3)
	fill(resp)
	want := proto.Clone(resp)
	data, err := codec.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	got := new(rlsv3.RateLimitResponse)
	if err := proto.Unmarshal(data.Materialize(), got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("encoded %v, want %v", got, want)
	}
	if len(resp.Statuses) != 0 || resp.RawBody != nil || resp.OverallCode != 0 {
		t.Fatalf("answer not reset after encoding: %v", resp)
	}
	// Reused, it is a fresh OK answer, whatever the previous one held.
	again := codec.Answer(3)
	for i, ds := range again.Statuses {
		if ds.Code != rlsv3.RateLimitResponse_OK || ds.CurrentLimit != nil || ds.LimitRemaining != 0 {
			t.Fatalf("status %d of a reused answer = %v", i, ds)
		}
	}
	if again.OverallCode != rlsv3.RateLimitResponse_OK || again.RawBody != nil || again.ResponseHeadersToAdd != nil {
		t.Fatalf("reused answer = %v", again)
	}
	codec.Release(again)

	// Encoding an answer twice, or one made elsewhere, leaves it alone.
	other := &rlsv3.RateLimitResponse{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{}, {}, {}}}
	fill(other)
	before := proto.Clone(other)
	for range 2 {
		if _, err := codec.Marshal(other); err != nil {
			t.Fatal(err)
		}
	}
	if !proto.Equal(other, before) {
		t.Fatalf("foreign answer changed to %v", other)
	}
}

// Past maxOut answers handed out and not encoded (the handler called without the codec), the
// pool forgets them and goes on reusing: a forgotten answer is never taken, so never reset.
func TestAnswersOutBounded(t *testing.T) {
	var p answerPool
	var first *rlsv3.RateLimitResponse
	for i := range maxOut {
		r := p.get(2)
		if r == nil {
			t.Fatal("get = nil")
		}
		if i == 0 {
			first = r
		}
	}
	if len(p.out) != maxOut {
		t.Fatalf("%d answers out, want %d", len(p.out), maxOut)
	}
	r := p.get(2)
	if r == nil {
		t.Fatal("get past maxOut = nil, want an answer")
	}
	if len(p.out) != 1 {
		t.Fatalf("%d answers out after the pool forgot them, want 1", len(p.out))
	}
	first.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	p.put(first) // forgotten: not the pool's to reset any more
	if first.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(first.Statuses) != 2 {
		t.Fatalf("a forgotten answer was reset: %v", first)
	}
	if _, ok := p.take(r); !ok {
		t.Fatal("the answer handed out after forgetting is not tracked")
	}
}

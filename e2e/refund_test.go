package e2e

import (
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// refundRules limit downloads to 3 an hour per user with refund: a download's stream-done
// release (negative hits, carrying the request's x-request-id as its lease id) gives its token
// back.
const refundRules = `
authority:
  - resource: "GET:/downloads"
    strategy: white
    origins: [web]
param_flow:
  - resource: "GET:/downloads"
    param: user
    grade: qps
    count: 3
    duration: 1h
    refund: true
`

// TestRefundOnlyWhatTheLeaseConsumed is issue 8's first case through the binary: Envoy sends
// the stream-done release for every request, the refused ones included. 20 sequential
// over-limit requests, each followed by its own release, must admit none: a release gives
// back only what the acquire of its lease id consumed.
func TestRefundOnlyWhatTheLeaseConsumed(t *testing.T) {
	s := newService(t, []byte(refundRules))
	ok := rlsv3.RateLimitResponse_OK
	acquire := func(user, id string) rlsv3.RateLimitResponse_Code {
		return s.limit(t, limitRequest(t, downloadReq(user, id), false)).GetOverallCode()
	}
	release := func(user, id string) {
		if got := s.limit(t, limitRequest(t, downloadReq(user, id), true)).GetOverallCode(); got != ok {
			t.Fatalf("release of %s answered %v", id, got)
		}
	}
	for i := range 3 {
		if got := acquire("refund-1", "in-"+strconv.Itoa(i)); got != ok {
			t.Fatalf("download %d within the allowance: %v", i, got)
		}
	}
	admitted := 0
	for i := range 20 {
		id := "over-" + strconv.Itoa(i)
		if acquire("refund-1", id) == ok {
			admitted++
		}
		release("refund-1", id)
	}
	if admitted != 0 {
		t.Fatalf("%d of 20 over-limit downloads admitted, each after a refused one's release; want 0", admitted)
	}
	// A download that did take a token gives it back once.
	release("refund-1", "in-0")
	release("refund-1", "in-0")
	if got := acquire("refund-1", "again-1"); got != ok {
		t.Fatalf("after its own release, a download was refused: %v", got)
	}
	if got := acquire("refund-1", "again-2"); got == ok {
		t.Fatal("a lease released twice gave two tokens back")
	}
}

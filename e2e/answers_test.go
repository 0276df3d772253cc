package e2e

import (
	"strconv"
	"sync"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestReusedAnswersCarryNothingOver: the service reuses its rate-limit answers once encoded.
// Concurrent callers alternate refused answers (a body, headers) with allowed answers of 10
// descriptors; every answer must be exactly its own: an allowed one with 10 OK statuses, each
// stating the rule's limit, and no body or header; a refused one with one status and its body.
func TestReusedAnswersCarryNothingOver(t *testing.T) {
	s := newService(t, []byte(`
param_flow:
  - {resource: "GET:/items", param: item_id, count: 1, duration: 1h}
`))
	req := func(values ...string) *rlsv3.RateLimitRequest {
		r := &rlsv3.RateLimitRequest{Domain: "d"}
		for _, v := range values {
			r.Descriptors = append(r.Descriptors, rlDesc("resource", "GET:/items", "item_id", v))
		}
		return r
	}
	if got := s.limit(t, req("hot")).GetOverallCode(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("first use of hot: %v", got)
	}
	const callers, rounds = 8, 40
	var wg sync.WaitGroup
	errs := make(chan string, callers*rounds*2)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				blocked, err := s.limitErr(req("hot"))
				switch {
				case err != nil:
					errs <- err.Error()
				case blocked.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || len(blocked.GetStatuses()) != 1 ||
					len(blocked.GetRawBody()) == 0 || len(blocked.GetResponseHeadersToAdd()) == 0:
					errs <- "refused answer: " + blocked.String()
				}
				values := make([]string, 10)
				for j := range values {
					values[j] = "c" + strconv.Itoa(c) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
				}
				ok, err := s.limitErr(req(values...))
				if err != nil {
					errs <- err.Error()
					continue
				}
				if ok.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(ok.GetStatuses()) != 10 ||
					len(ok.GetRawBody()) != 0 || len(ok.GetResponseHeadersToAdd()) != 0 {
					errs <- "allowed answer: " + ok.String()
					continue
				}
				for _, st := range ok.GetStatuses() {
					if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit().GetRequestsPerUnit() != 1 {
						errs <- "allowed answer's status: " + st.String()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

package envoy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// upRequest is what reached the upstream.
type upRequest = envoytest.Request

// edited is the shipped file at path with each old string replaced by its new one: a variant
// of a shipped config that differs from it by the named edits only. Each old string must occur
// exactly once, so that an edit cannot silently stop applying when the file changes.
func edited(t *testing.T, path string, oldNew ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(oldNew); i += 2 {
		if n := strings.Count(s, oldNew[i]); n != 1 {
			t.Fatalf("%s: %q occurs %d times, want exactly once", path, oldNew[i], n)
		}
		s = strings.Replace(s, oldNew[i], oldNew[i+1], 1)
	}
	return []byte(s)
}

// outcome is what a client saw of one request: a status, or the error of a request that got
// none (its own cancel included).
type outcome struct {
	status int
	err    error
}

// send sends method path over c with header pairs in the background and delivers what the
// client saw; cancelling ctx resets the request (RST_STREAM over HTTP/2, a closed connection
// over HTTP/1.1).
func (s *stack) send(ctx context.Context, c *http.Client, method, path string, kv ...string) <-chan outcome {
	out := make(chan outcome, 1)
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, nil)
	if err != nil {
		out <- outcome{err: err}
		return out
	}
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	go func() {
		resp, err := c.Do(req)
		if err != nil {
			out <- outcome{err: err}
			return
		}
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		out <- outcome{status: resp.StatusCode, err: err}
	}()
	return out
}

// tally counts outcomes by status ("200", "429", ...) or by error class ("canceled", "error").
type tally struct {
	mu     sync.Mutex
	counts map[string]int
	errs   []string // the first few errors, for the report
}

func (ta *tally) add(o outcome) string {
	k := strconv.Itoa(o.status)
	switch {
	case errors.Is(o.err, context.Canceled):
		k = "canceled"
	case o.err != nil:
		k = "error"
	}
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if ta.counts == nil {
		ta.counts = map[string]int{}
	}
	ta.counts[k]++
	if k == "error" && len(ta.errs) < 5 {
		ta.errs = append(ta.errs, o.err.Error())
	}
	return k
}

func (ta *tally) get(k string) int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return ta.counts[k]
}

func (ta *tally) String() string {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return fmt.Sprintf("%v %q", ta.counts, ta.errs)
}

// metric sums the samples of the Prometheus metric name on the service's /metrics whose labels
// contain every one of labels (like `resource="GET:/downloads"`).
func metric(t *testing.T, get func(testing.TB, string) (int, string), name string, labels ...string) float64 {
	t.Helper()
	code, body := get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		for _, l := range labels {
			if !strings.Contains(line[:sp], l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// eventually polls cond every 50ms until it holds or limit passes, and reports which.
func eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

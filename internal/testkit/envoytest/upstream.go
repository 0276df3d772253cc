package envoytest

import (
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// DelayHeader makes the upstream answer late: its value is a delay in milliseconds (the
// compose stack's echo server reads the same header).
const DelayHeader = "x-set-response-delay-ms"

// StatusHeader makes the upstream answer with its value as the status code.
const StatusHeader = "x-set-response-status"

// ResponseHeader makes the upstream add a response header: each of its values is "name: value"
// (an upstream reporting what a request used, e.g. "x-usage-tokens: 120").
const ResponseHeader = "x-set-response-header"

// Request is what reached the upstream.
type Request struct {
	Method, Path, Host string
	Header             http.Header
	// Canceled is true when the caller went away before the answer (a reset or a timeout in
	// Envoy while the upstream held the request).
	Canceled bool
}

// Upstream is an HTTP/1.1 server on loopback that records every request reaching it and
// answers 200 with a JSON echo of it. It is safe for concurrent use.
type Upstream struct {
	Addr string // host:port

	mu       sync.Mutex
	reqs     []Request
	inflight int
	changes  changes // notified on every change
}

// StartUpstream starts an Upstream, closed when t ends.
func StartUpstream(t testing.TB) *Upstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &Upstream{Addr: ln.Addr().String()}
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

// ServeHTTP records r and answers it.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := Request{Method: r.Method, Path: r.RequestURI, Host: r.Host, Header: r.Header.Clone()}
	u.change(func() { u.inflight++ })
	defer u.change(func() { u.inflight--; u.reqs = append(u.reqs, rec) })
	if ms, err := strconv.Atoi(r.Header.Get(DelayHeader)); err == nil && ms > 0 {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			rec.Canceled = true
			return
		}
	}
	status := http.StatusOK
	if s, err := strconv.Atoi(r.Header.Get(StatusHeader)); err == nil && s >= 200 && s < 600 {
		status = s
	}
	w.Header().Set("content-type", "application/json")
	for _, kv := range r.Header.Values(ResponseHeader) {
		if name, value, ok := strings.Cut(kv, ":"); ok && strings.TrimSpace(name) != "" {
			w.Header().Add(strings.TrimSpace(name), strings.TrimSpace(value))
		}
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.RequestURI, "headers": r.Header})
}

func (u *Upstream) change(f func()) {
	u.mu.Lock()
	f()
	u.changes.notify()
	u.mu.Unlock()
}

// Requests returns the requests answered (or abandoned) so far, in the order they ended.
func (u *Upstream) Requests() []Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Request(nil), u.reqs...)
}

// Reset forgets the requests recorded so far.
func (u *Upstream) Reset() {
	u.change(func() { u.reqs = nil })
}

// InFlight is how many requests the upstream holds now.
func (u *Upstream) InFlight() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.inflight
}

// Wait waits up to limit for cond, checked on every change of the upstream's state, and
// reports whether it became true.
func (u *Upstream) Wait(limit time.Duration, cond func(reqs []Request, inflight int) bool) bool {
	return u.changes.waitFor(&u.mu, limit, func() bool { return cond(u.reqs, u.inflight) })
}

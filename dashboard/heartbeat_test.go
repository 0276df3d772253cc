package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeDashboard records the heartbeats it takes and answers as the dashboard does.
type fakeDashboard struct {
	mu     sync.Mutex
	forms  []url.Values
	answer string // the body; "" is the dashboard's success
	got    chan url.Values
}

func (f *fakeDashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != HeartbeatPath || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.forms = append(f.forms, r.PostForm)
	answer := f.answer
	f.mu.Unlock()
	if answer == "" {
		answer = `{"success":true,"code":0,"msg":"success","data":null}`
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(answer))
	if f.got != nil {
		f.got <- r.PostForm
	}
}

func (f *fakeDashboard) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.forms)
}

func TestHeartbeatFields(t *testing.T) {
	fd := &fakeDashboard{}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	at := time.Date(2025, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	h := &Heartbeat{
		Addrs:   []string{strings.TrimPrefix(srv.URL, "http://")},
		Machine: Machine{App: "gw", AppType: 0, Hostname: "node-1", IP: "10.1.2.3", Port: 8719, PID: 42},
		Now:     func() time.Time { return at },
	}
	if err := h.Send(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := fd.forms[0]
	want := map[string]string{"app": "gw", "app_type": "0", "hostname": "node-1", "ip": "10.1.2.3",
		"port": "8719", "pid": "42", "v": Version, "version": "1740830400123"}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want exactly %v", got, want)
	}
}

func TestHeartbeatFailover(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	fd := &fakeDashboard{}
	up := httptest.NewServer(fd)
	defer up.Close()
	h := &Heartbeat{Addrs: []string{down.URL, up.URL}, Machine: Machine{App: "a", IP: "127.0.0.1", Port: 1}}
	for range 3 {
		if err := h.Send(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := fd.count(); n != 3 {
		t.Fatalf("the dashboard that answers took %d heartbeats, want 3", n)
	}
	if h.next != 1 {
		t.Fatalf("next = %d, want the dashboard that answered (1)", h.next)
	}
}

func TestHeartbeatRefused(t *testing.T) {
	fd := &fakeDashboard{answer: `{"success":false,"code":-1,"msg":"invalid ip: node-1","data":null}`}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	h := &Heartbeat{Addrs: []string{srv.URL}, Machine: Machine{App: "a", IP: "node-1", Port: 1}}
	err := h.Send(context.Background())
	if err == nil || !strings.Contains(err.Error(), "invalid ip: node-1") {
		t.Fatalf("Send = %v, want the dashboard's refusal", err)
	}
}

func TestHeartbeatRunEveryTick(t *testing.T) {
	fd := &fakeDashboard{got: make(chan url.Values, 8)}
	srv := httptest.NewServer(fd)
	defer srv.Close()
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	h := &Heartbeat{Addrs: []string{srv.URL}, Machine: Machine{App: "a", IP: "127.0.0.1", Port: 1},
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.Run(ctx, ticks); close(done) }()
	for i, want := range []string{"1000000", "1010000", "1020000"} {
		if i > 0 {
			mu.Lock()
			now = now.Add(10 * time.Second)
			mu.Unlock()
			ticks <- now
		}
		if got := (<-fd.got).Get("version"); got != want {
			t.Fatalf("heartbeat %d: version %s, want %s", i, got, want)
		}
	}
	cancel()
	<-done
}

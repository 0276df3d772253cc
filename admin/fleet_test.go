package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/policy"
)

// memFleet is a FleetStore in memory; err, when set, fails every call.
type memFleet struct {
	mu      sync.Mutex
	records map[string][]byte
	err     error
}

var _ FleetStore = (*memFleet)(nil)

func (m *memFleet) PublishReplica(_ context.Context, id string, record []byte, _ time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return m.err
	}
	if m.records == nil {
		m.records = map[string][]byte{}
	}
	m.records[id] = append([]byte(nil), record...)
	return nil
}

func (m *memFleet) Replicas(context.Context, int) (map[string][]byte, int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, 0, m.err
	}
	out := make(map[string][]byte, len(m.records))
	for id, r := range m.records {
		out[id] = r
	}
	return out, 0, nil
}

// replicaFixture is one replica's metrics on its own fixed clock, and its Fleet.
type replicaFixture struct {
	now   time.Time
	m     *metrics.Metrics
	fleet *Fleet
}

var fleetT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newReplica(host string, store FleetStore) *replicaFixture {
	r := &replicaFixture{now: fleetT0}
	r.m = metrics.New(metrics.Options{NoRuntime: true, Now: func() time.Time { return r.now }})
	r.m.SetResources([]string{"GET:/items", "POST:/orders"})
	r.fleet = &Fleet{Store: store, Replica: NewReplica(host, 7, "127.0.0.1:9002"), Traffic: r.m.Snapshot}
	if store == nil {
		r.fleet.Store = nil // a nil *memFleet is not a nil FleetStore
	}
	return r
}

// at records n decisions of resource with result at t0+sec.
func (r *replicaFixture) at(sec int, resource string, result policy.Outcome, n int) {
	r.now = fleetT0.Add(time.Duration(sec) * time.Second)
	for range n {
		r.m.Decision("ratelimit", "edge", resource, result, 0)
	}
}

// sec is the element of a view's series at t0+s.
func sec(v FleetView, s int) int {
	return int(fleetT0.Unix()) + s - int(v.End) + FleetSeconds - 1
}

func TestFleetViewSumsReplicas(t *testing.T) {
	store := &memFleet{}
	a, b := newReplica("pod-a", store), newReplica("pod-b", store)
	a.at(10, "GET:/items", policy.Allowed, 3)
	a.at(12, "GET:/items", policy.Authority, 1)
	b.at(11, "GET:/items", policy.Allowed, 2)
	b.at(13, "POST:/orders", policy.ParamFlow, 4)
	b.at(14, "POST:/orders", policy.Shadow, 1)
	b.now = fleetT0.Add(15 * time.Second)
	if err := b.fleet.Publish(context.Background(), b.now); err != nil {
		t.Fatal(err)
	}
	a.now = fleetT0.Add(16 * time.Second)
	v := a.fleet.View(context.Background(), a.now)

	if !v.Shared || v.Error != "" || v.Seconds != FleetSeconds || v.IntervalSeconds != 5 {
		t.Errorf("shared, error, seconds, interval = %v, %q, %d, %d; want true, \"\", 60, 5", v.Shared, v.Error, v.Seconds, v.IntervalSeconds)
	}
	// b published at t0+15: its last complete second is t0+14, the oldest of the two.
	if want := fleetT0.Unix() + 14; v.End != want {
		t.Errorf("end = %d, want %d (b's last publication)", v.End, want)
	}
	if len(v.Replicas) != 2 || v.Replicas[0].ID != "pod-a/7" || !v.Replicas[0].Self || v.Replicas[1].ID != "pod-b/7" || v.Replicas[1].Self {
		t.Fatalf("replicas = %+v, want pod-a/7 (self) then pod-b/7", v.Replicas)
	}
	ra, rb := v.Replicas[0].Counts, v.Replicas[1].Counts
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"a allowed", ra.AllowedTotal, 3}, {"a blocked", ra.BlockedTotal, 1},
		{"b allowed", rb.AllowedTotal, 3}, {"b blocked", rb.BlockedTotal, 4},
		{"fleet allowed", v.Total.AllowedTotal, 6}, {"fleet blocked", v.Total.BlockedTotal, 5},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		series []uint32
		at     int
		want   uint32
	}{
		{"fleet allowed", v.Total.Allowed, 10, 3}, {"fleet allowed", v.Total.Allowed, 11, 2},
		{"fleet blocked", v.Total.Blocked, 12, 1}, {"fleet blocked", v.Total.Blocked, 13, 4},
		{"fleet allowed", v.Total.Allowed, 14, 1}, {"b allowed", rb.Allowed, 11, 2},
	} {
		if got := c.series[sec(v, c.at)]; got != c.want {
			t.Errorf("%s at t0+%d = %d, want %d", c.name, c.at, got, c.want)
		}
	}
	if v.Total.AllowedRate != 0.6 || v.Total.BlockedRate != 0.5 {
		t.Errorf("fleet rates = %v, %v; want 0.6, 0.5 (the last 10 seconds)", v.Total.AllowedRate, v.Total.BlockedRate)
	}
	wantRes := []FleetResource{{"GET:/items", 5, 1}, {"POST:/orders", 1, 4}}
	if got := v.Total.Resources; len(got) != 2 || got[0] != wantRes[0] || got[1] != wantRes[1] {
		t.Errorf("fleet resources = %+v, want %+v", got, wantRes)
	}
}

// A replica's seconds after the oldest publication are left out of every series and total, so
// that each second shown counts every replica.
func TestFleetViewEndsAtOldestPublication(t *testing.T) {
	store := &memFleet{}
	a, b := newReplica("pod-a", store), newReplica("pod-b", store)
	b.now = fleetT0.Add(10 * time.Second)
	if err := b.fleet.Publish(context.Background(), b.now); err != nil {
		t.Fatal(err)
	}
	a.at(8, "GET:/items", policy.Allowed, 2)
	a.at(12, "GET:/items", policy.Allowed, 5) // after b's last second
	a.now = fleetT0.Add(13 * time.Second)
	v := a.fleet.View(context.Background(), a.now)
	if want := fleetT0.Unix() + 9; v.End != want {
		t.Fatalf("end = %d, want %d", v.End, want)
	}
	if got := v.Replicas[0].Counts.AllowedTotal; got != 2 {
		t.Errorf("self's allowed in the window = %d, want 2 (the 5 after b's publication are not shown yet)", got)
	}
	if v.Total.AllowedTotal != 2 || v.Total.Allowed[FleetSeconds-1] != 0 || v.Total.Allowed[sec(v, 8)] != 2 {
		t.Errorf("fleet allowed = %d (%v), want 2 at t0+8", v.Total.AllowedTotal, v.Total.Allowed[FleetSeconds-5:])
	}
}

// Without a store, the view is this replica alone and says so; a store that fails leaves it
// alone with the error; a record that is not one is counted, not shown.
func TestFleetViewAlone(t *testing.T) {
	alone := newReplica("pod-a", nil)
	alone.at(3, "GET:/items", policy.Allowed, 1)
	alone.now = fleetT0.Add(5 * time.Second)
	v := alone.fleet.View(context.Background(), alone.now)
	if v.Shared || len(v.Replicas) != 1 || !v.Replicas[0].Self || v.Total.AllowedTotal != 1 {
		t.Errorf("no store: shared %v, replicas %+v, allowed %d; want false, self alone, 1", v.Shared, v.Replicas, v.Total.AllowedTotal)
	}
	if err := alone.fleet.Publish(context.Background(), alone.now); err != nil {
		t.Errorf("Publish without a store = %v, want nil (nothing to do)", err)
	}

	store := &memFleet{err: errors.New("redis down")}
	a := newReplica("pod-a", store)
	v = a.fleet.View(context.Background(), fleetT0)
	if !v.Shared || !strings.Contains(v.Error, "redis down") || len(v.Replicas) != 1 {
		t.Errorf("failing store: shared %v, error %q, %d replicas; want true, the error, self alone", v.Shared, v.Error, len(v.Replicas))
	}

	store = &memFleet{records: map[string][]byte{
		"pod-x/1": []byte(`not json`),
		"pod-y/1": []byte(`{"id":"pod-z/1","end":1,"allowed":[],"blocked":[]}`), // another's id
		"pod-w/1": []byte(`{"id":"pod-w/1","end":1,"allowed":[1,2],"blocked":[1]}`),
	}}
	a = newReplica("pod-a", store)
	v = a.fleet.View(context.Background(), fleetT0)
	if v.Unreadable != 3 || len(v.Replicas) != 1 {
		t.Errorf("bad records: unreadable %d, %d replicas; want 3, self alone", v.Unreadable, len(v.Replicas))
	}
}

// A record stays within MaxFleetRecordBytes, however many and however long the resources.
func TestFleetRecordBounded(t *testing.T) {
	r := &replicaFixture{now: fleetT0}
	r.m = metrics.New(metrics.Options{NoRuntime: true, Now: func() time.Time { return r.now }})
	var names []string
	for i := range 100 {
		names = append(names, strings.Repeat("é", 300)+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	r.m.SetResources(names)
	r.fleet = &Fleet{Store: &memFleet{}, Replica: NewReplica(strings.Repeat("h", 1000), 1, ""), Traffic: r.m.Snapshot}
	for s := range FleetPublished {
		r.now = fleetT0.Add(time.Duration(s) * time.Second)
		for _, n := range names {
			r.m.Decision("ratelimit", "", n, policy.Allowed, 0)
		}
	}
	rec := r.fleet.record(r.now.Add(time.Second))
	body, err := encodeRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > MaxFleetRecordBytes {
		t.Errorf("record of %d bytes, want at most %d", len(body), MaxFleetRecordBytes)
	}
	if len(rec.Resources)+rec.MoreResources != len(names) || len(rec.Resources) == 0 {
		t.Errorf("resources %d + more %d, want %d in all", len(rec.Resources), rec.MoreResources, len(names))
	}
	if len(rec.ID) > maxFleetName || len(rec.Resources[0].Resource) > maxFleetName {
		t.Errorf("id of %d bytes, resource of %d: want at most %d", len(rec.ID), len(rec.Resources[0].Resource), maxFleetName)
	}
	back, ok := decodeRecord(rec.ID, body)
	if !ok || back.End != rec.End || back.Allowed[FleetPublished-1] != 100 {
		t.Errorf("decoded record: ok %v, end %d, last second %v", ok, back.End, back.Allowed[FleetPublished-1])
	}
}

// OnPublish hears of the first failure and of the recovery, once each.
func TestFleetOnPublish(t *testing.T) {
	store := &memFleet{}
	a := newReplica("pod-a", store)
	var told []string
	a.fleet.OnPublish = func(err error) { told = append(told, fmtErr(err)) }
	for _, fail := range []bool{false, true, true, false, false} {
		store.err = nil
		if fail {
			store.err = errors.New("down")
		}
		_ = a.fleet.Publish(context.Background(), fleetT0)
	}
	if got, want := strings.Join(told, ","), "down,ok"; got != want {
		t.Errorf("told %s, want %s", got, want)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// /console/fleet serves the view, with the console's headers.
func TestConsoleFleetEndpoint(t *testing.T) {
	store := &memFleet{}
	a, b := newReplica("pod-a", store), newReplica("pod-b", store)
	b.at(2, "GET:/items", policy.Allowed, 4)
	b.now = fleetT0.Add(3 * time.Second)
	if err := b.fleet.Publish(context.Background(), b.now); err != nil {
		t.Fatal(err)
	}
	a.at(2, "GET:/items", policy.Allowed, 1)
	a.now = fleetT0.Add(4 * time.Second)
	h := New(Options{Traffic: a.m.Snapshot, Fleet: a.fleet, Now: func() time.Time { return a.now }})
	code, ctype, body := get(t, h, "/console/fleet")
	if code != http.StatusOK || ctype != "application/json" {
		t.Fatalf("GET /console/fleet = %d %s: %s", code, ctype, body)
	}
	var v FleetView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Replicas) != 2 || v.Total.AllowedTotal != 5 {
		t.Errorf("replicas %d, fleet allowed %d; want 2, 5", len(v.Replicas), v.Total.AllowedTotal)
	}

	alone := New(Options{Traffic: a.m.Snapshot, Now: func() time.Time { return a.now }})
	_, _, body = get(t, alone, "/console/fleet")
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	if v.Shared || len(v.Replicas) != 1 || v.Total.AllowedTotal != 1 {
		t.Errorf("without Fleet: shared %v, %d replicas, allowed %d; want false, 1, 1", v.Shared, len(v.Replicas), v.Total.AllowedTotal)
	}
}

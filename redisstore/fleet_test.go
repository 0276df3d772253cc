package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// Two replicas publish; a read gets both records, the latest first within its cap, and the
// count of those past it; a replica whose record's ttl ran out is gone from the read and from
// the set.
func TestFleetPublishAndRead(t *testing.T) {
	s, srv, _ := newTestStore(t)
	ctx := context.Background()
	if err := s.PublishReplica(ctx, "a/1", []byte(`{"id":"a/1"}`), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // a later millisecond: b is the latest
	if err := s.PublishReplica(ctx, "b/2", []byte(`{"id":"b/2"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	got, more, err := s.Replicas(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got["a/1"]) != `{"id":"a/1"}` || string(got["b/2"]) != `{"id":"b/2"}` || more != 0 {
		t.Fatalf("Replicas = %q, more %d; want both records, none more", got, more)
	}
	if got, more, _ := s.Replicas(ctx, 1); len(got) != 1 || got["b/2"] == nil || more != 1 {
		t.Errorf("Replicas(1) = %q, more %d; want b/2 (the latest), 1 more", got, more)
	}
	for _, key := range []string{"extauthz:{fleet}:r:a/1", "extauthz:{fleet}:r:b/2"} {
		if ttl := srv.CLI("PTTL", key); strings.HasPrefix(ttl, "-") {
			t.Errorf("PTTL %s = %s, want a ttl", key, ttl)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _, err = s.Replicas(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got["a/1"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a/1's record still read 10s after its ttl of 300ms")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(got) != 1 || got["b/2"] == nil {
		t.Errorf("Replicas after a/1 expired = %q, want b/2 alone", got)
	}
	if n := srv.CLI("ZCARD", "extauthz:{fleet}:replicas"); n != "1" {
		t.Errorf("ZCARD of the set after a read found a/1 gone = %s, want 1", n)
	}
}

// The set keeps the latest 1000 replicas, however many publish, and lives ten ttls.
func TestFleetSetBounded(t *testing.T) {
	s, srv, _ := newTestStore(t)
	ctx := context.Background()
	for i := range maxFleetMembers + 20 {
		if err := s.PublishReplica(ctx, fmt.Sprintf("r/%d", i), []byte("{}"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.CLI("ZCARD", "extauthz:{fleet}:replicas"); n != fmt.Sprint(maxFleetMembers) {
		t.Errorf("ZCARD = %s, want %d", n, maxFleetMembers)
	}
	if ttl := srv.CLI("PTTL", "extauthz:{fleet}:replicas"); ttl == "-1" || strings.HasPrefix(ttl, "-") {
		t.Errorf("PTTL of the set = %s, want one", ttl)
	}
	_, more, err := s.Replicas(ctx, 100)
	if err != nil || more != maxFleetMembers-100 {
		t.Errorf("Replicas(100): more %d, %v; want %d", more, err, maxFleetMembers-100)
	}
}

// In a cluster, the set and every record share a slot: the read is one MGET.
func TestFleetCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	s, err := New(Config{Addrs: c.Addrs(), Mode: ModeCluster, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	for _, id := range []string{"a/1", "b/2", "c/3"} {
		if err := s.PublishReplica(ctx, id, []byte(id), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := s.Replicas(ctx, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("Replicas = %q, %v; want 3", got, err)
	}
}

// A closed store fails both calls with ErrUnavailable.
func TestFleetClosed(t *testing.T) {
	s, _, _ := newTestStore(t)
	s.Close()
	if err := s.PublishReplica(context.Background(), "a", nil, time.Second); err != ErrUnavailable {
		t.Errorf("PublishReplica after Close = %v, want ErrUnavailable", err)
	}
	if _, _, err := s.Replicas(context.Background(), 1); err != ErrUnavailable {
		t.Errorf("Replicas after Close = %v, want ErrUnavailable", err)
	}
}

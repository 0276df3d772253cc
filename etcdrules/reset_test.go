package etcdrules

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// observe gives w a log that the test reads.
func observe(w *Watcher) *observer.ObservedLogs {
	core, logs := observer.New(zapcore.InfoLevel)
	w.Log = zap.New(core)
	return logs
}

// logged is the number of lines of logs whose message starts with prefix.
func logged(logs *observer.ObservedLogs, prefix string) int {
	n := 0
	for _, e := range logs.All() {
		if strings.HasPrefix(e.Message, prefix) {
			n++
		}
	}
	return n
}

// TestWipedEtcd: etcd stopped, its data deleted, started again empty on the same address (its
// revision back at 1, its cluster and member ids the same). While the key is missing the rules
// in force stay and LastError says so; a put after that is applied, though its revision is
// below every revision the watch had seen. The reset is logged once.
func TestWipedEtcd(t *testing.T) {
	srv, cli, store, w, _ := setup(t, "/extauthz/rules.yaml")
	logs := observe(w)
	for i := range 20 {
		put(t, cli, "/extauthz/rules.yaml", rules(100+i))
	}
	if err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	put(t, cli, "/extauthz/rules.yaml", rules(5))
	waitFor(t, "the put before the wipe applied", func() bool { return count(store) == 5 })
	before := store.Current().Version

	srv.Wipe()
	srv.Restart()
	waitFor(t, "the missing key reported", func() bool {
		e := store.LastError()
		return e != nil && strings.Contains(e.Message, "not found")
	})
	if count(store) != 5 {
		t.Errorf("a missing key changed the rules in force: count %d, want 5", count(store))
	}
	rev := put(t, cli, "/extauthz/rules.yaml", rules(6))
	waitFor(t, "the put after the wipe applied", func() bool { return count(store) == 6 })
	if rev >= int64(before) {
		t.Fatalf("revision after the wipe %d, want below the version before it (%d)", rev, before)
	}
	if v := store.Current().Version; v != before+1 {
		t.Errorf("version after the wipe %d, want the next one, %d", v, before+1)
	}
	if e := store.LastError(); e != nil {
		t.Errorf("LastError after the put = %q, want nil", e.Message)
	}
	if n := logged(logs, "etcd revision went back"); n != 1 {
		t.Errorf("%d lines logged the revision going back, want 1\n%v", n, logs.All())
	}
	if w.Resets() != 1 {
		t.Errorf("Resets = %d, want 1", w.Resets())
	}
	// watched again: the next put comes through the watch
	put(t, cli, "/extauthz/rules.yaml", rules(7))
	waitFor(t, "the next put applied", func() bool { return count(store) == 7 })
}

// TestMissedChange: etcd recreated empty and written past the revision the watch waits for
// before any check: the key's change is older than that revision, so no watch event will ever
// tell it. The check finds the keys differ from what was loaded, logs it, and loads them.
func TestMissedChange(t *testing.T) {
	srv, cli, store, w, _ := setup(t, "/extauthz/rules.yaml")
	w.cfg.CheckInterval = time.Hour // checks only when the test says
	w.checkNow = make(chan struct{})
	logs := observe(w)
	for i := range 10 {
		put(t, cli, "/extauthz/rules.yaml", rules(100+i))
	}
	if err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	// Run's first read done and its watch set: a change comes through the watch
	put(t, cli, "/extauthz/rules.yaml", rules(50))
	waitFor(t, "the put before the wipe applied", func() bool { return count(store) == 50 })
	old := int64(store.Current().Version)

	srv.Wipe()
	srv.Restart()
	put(t, cli, "/extauthz/rules.yaml", rules(6))
	var rev int64
	for rev <= old+1 {
		rev = put(t, cli, "/other", "x")
	}
	if count(store) == 6 {
		t.Fatalf("the change was applied without a check: the test does not test the check\n%v", logs.All())
	}
	w.checkNow <- struct{}{}
	waitFor(t, "the missed change applied", func() bool { return count(store) == 6 })
	// The check found the keys changed, not yet applied: had a watch event or a read after the
	// watch ended applied them first, whenever it came, the check would have found nothing to
	// say, and no line.
	if n := logged(logs, "etcd rules keys changed without a watch event"); n != 1 {
		t.Errorf("%d lines logged the missed change, want 1\n%v", n, logs.All())
	}
	put(t, cli, "/extauthz/rules.yaml", rules(7))
	waitFor(t, "the next put applied", func() bool { return count(store) == 7 })
}

// TestCompactedWatch: etcd compacted past the revision a watch resumes from (etcd down while
// the keys changed and were compacted is the real case; here the watch starts from a compacted
// revision): the watch ends, the end is logged, and the keys are read again.
func TestCompactedWatch(t *testing.T) {
	_, cli, store, w, _ := setup(t, "/extauthz/rules.yaml")
	logs := observe(w)
	put(t, cli, "/extauthz/rules.yaml", rules(1))
	var rev int64
	for i := range 5 {
		rev = put(t, cli, "/extauthz/rules.yaml", rules(2+i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if err := w.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { w.watch(ctx, 2); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a watch from a compacted revision did not end")
	}
	if n := logged(logs, "etcd watch ended"); n != 1 {
		t.Fatalf("%d lines logged the watch ending, want 1\n%v", n, logs.All())
	}
	if got := logs.All()[0].ContextMap()["compact_revision"]; got != rev {
		t.Errorf("compact_revision logged %v, want %d", got, rev)
	}
	if count(store) != 6 {
		t.Errorf("count %d, want 6", count(store))
	}
}

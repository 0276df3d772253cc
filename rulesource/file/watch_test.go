package file

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extauthz/extauthz/rulestore"
)

// These tests run Run against a real directory and the real clock: they wait for the watcher
// with generous deadlines instead of fixed sleeps.

const waitFor = 5 * time.Second

// runStore starts the Watcher of s and returns a stop func that cancels it and checks that
// Run returns.
func runStore(t *testing.T, s *testStore) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w := New(s.Store, s.watch)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(waitFor):
			t.Errorf("Run did not return within %v of cancel", waitFor)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitVersion polls Current until its version is want or the deadline passes.
func waitVersion(t *testing.T, s *testStore, want uint64) *rulestore.Set {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		set := s.Current()
		if set.Version == want {
			return set
		}
		if set.Version > want || time.Now().After(deadline) {
			t.Fatalf("version %d, want %d within %v", set.Version, want, waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLastError polls LastError until it is set or the deadline passes.
func waitLastError(t *testing.T, s *testStore) *rulestore.LoadError {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if le := s.LastError(); le != nil {
			return le
		}
		if time.Now().After(deadline) {
			t.Fatalf("no LastError within %v", waitFor)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// firstCount is the count of the set's first param-flow rule, or -1 when it has none.
func firstCount(set *rulestore.Set) int64 {
	if len(set.Rules.ParamFlow) == 0 {
		return -1
	}
	return set.Rules.ParamFlow[0].Count
}

// renameWrite replaces path atomically, as editors and atomic writers do.
func renameWrite(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestRunRenameWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Debounce: 10 * time.Millisecond})
	stop := runStore(t, s)

	// An editor's save: write a temporary file, rename it over the rules file.
	tmp := filepath.Join(dir, ".rules.yaml.swp")
	writeFile(t, tmp, orderRules(7, 1))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	set := waitVersion(t, s, 2)
	if got := firstCount(set); got != 7 {
		t.Errorf("count %d after rename, want 7", got)
	}

	// A second save through the new inode is seen too (the directory is watched, not the file).
	writeFile(t, tmp, orderRules(8, 1))
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if got := firstCount(waitVersion(t, s, 3)); got != 8 {
		t.Errorf("count %d after second rename, want 8", got)
	}

	// An invalid save keeps the rules in force.
	writeFile(t, path, "param_flow: [{resource: r}]\n")
	le := waitLastError(t, s)
	if got := s.Current(); got.Version != 3 || firstCount(got) != 8 {
		t.Errorf("after invalid save: version %d, count %d; want 3, 8", got.Version, firstCount(got))
	}
	if le.Message == "" {
		t.Error("LastError has no message")
	}
	stop()
}

func TestRunConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	// The layout of a mounted ConfigMap: rules.yaml -> ..data/rules.yaml, ..data -> ..2026_x.
	mkData := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "rules.yaml"), content)
	}
	mkData("..2026_x", orderRules(1, 1))
	if err := os.Symlink("..2026_x", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), path); err != nil {
		t.Fatal(err)
	}
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Debounce: 10 * time.Millisecond})
	runStore(t, s)

	// The update: a new timestamped directory, a new ..data_tmp symlink renamed over ..data,
	// then the old directory removed.
	swap := func(from, to, content string) {
		t.Helper()
		mkData(to, content)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(to, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(dir, from)); err != nil {
			t.Fatal(err)
		}
	}
	swap("..2026_x", "..2026_y", orderRules(4, 1))
	if got := firstCount(waitVersion(t, s, 2)); got != 4 {
		t.Errorf("count %d after the first swap, want 4", got)
	}
	swap("..2026_y", "..2026_z", orderRules(5, 1))
	if got := firstCount(waitVersion(t, s, 3)); got != 5 {
		t.Errorf("count %d after the second swap, want 5", got)
	}
}

func TestRunSymlinkToFileElsewhere(t *testing.T) {
	target := filepath.Join(t.TempDir(), "real.yaml")
	writeFile(t, target, orderRules(1, 1))
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Debounce: 50 * time.Millisecond})
	runStore(t, s)
	// Once a rename of the target is seen, Run is watching the target's directory.
	renameWrite(t, target, orderRules(2, 1))
	if got := firstCount(waitVersion(t, s, 2)); got != 2 {
		t.Fatalf("count %d after renaming the target, want 2", got)
	}
	// Edit the target in place: only the target's directory sees that event.
	writeFile(t, target, orderRules(6, 1))
	if got := firstCount(waitVersion(t, s, 3)); got != 6 {
		t.Errorf("count %d after editing the target, want 6", got)
	}
}

func TestRunDebouncesBursts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	s, ev := newTestStore(t, rulestore.Options{File: path}, Options{Debounce: 300 * time.Millisecond})
	runStore(t, s)
	renameWrite(t, path, orderRules(2, 1))
	waitVersion(t, s, 2) // Run is watching
	for n := 3; n <= 7; n++ {
		writeFile(t, path, orderRules(n, 1))
	}
	if got := firstCount(waitVersion(t, s, 3)); got != 7 {
		t.Errorf("count %d after the burst, want the last write's 7", got)
	}
	// One more change, waited for: a second load for the burst, had there been one, comes
	// before it (the watcher takes its events in order).
	renameWrite(t, path, orderRules(8, 1))
	waitVersion(t, s, 4)
	var versions []uint64
	for _, e := range ev.all() {
		versions = append(versions, e.Version)
	}
	if !slices.Equal(versions, []uint64{1, 2, 3, 4}) {
		t.Errorf("loads of versions %v, want [1 2 3 4] (New, the rename, one for the burst, the last change)", versions)
	}
}
func TestRunWithoutFile(t *testing.T) {
	s, _ := newTestStore(t, rulestore.Options{}, Options{})
	stop := runStore(t, s)
	stop()
}

func TestRunMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone", "rules.yaml")
	s, _ := newTestStore(t, rulestore.Options{File: path, Optional: true}, Options{})
	if err := New(s.Store, s.watch).Run(context.Background()); err == nil {
		t.Error("Run with a missing directory = nil, want an error")
	}
}

func TestRunWaitsOutATruncatedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Debounce: 400 * time.Millisecond})
	runStore(t, s)
	renameWrite(t, path, orderRules(2, 1))
	waitVersion(t, s, 2) // Run is watching
	// Truncate, and complete the write a little after one debounce period.
	writeFile(t, path, "")
	time.Sleep(550 * time.Millisecond)
	writeFile(t, path, orderRules(3, 1))
	if got := firstCount(waitVersion(t, s, 3)); got != 3 {
		t.Fatalf("count %d in version 3, want 3 (-1: the empty file was applied)", got)
	}
	// A file that stays empty is a rejected load after the extra wait: the rules stay.
	writeFile(t, path, "")
	if le := waitLastError(t, s); !strings.Contains(le.Message, "the file is empty") {
		t.Errorf("LastError after the file stayed empty = %q, want it to say the file is empty", le.Message)
	}
	if got := s.Current(); got.Version != 3 || firstCount(got) != 3 {
		t.Errorf("after the file stayed empty: version %d, count %d; want 3, 3 (kept)", got.Version, firstCount(got))
	}
}

// TestRunPollsWhenEventsAreLost: the rules directory is deleted and made again (its watch is
// gone with it); the poll sees the new file and renews the watch, so later edits are seen too.
func TestRunPollsWhenEventsAreLost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rules")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Poll: 50 * time.Millisecond})
	runStore(t, s)
	renameWrite(t, path, orderRules(2, 1))
	waitVersion(t, s, 2) // Run is watching

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, orderRules(3, 1))
	if got := firstCount(waitVersion(t, s, 3)); got != 3 {
		t.Fatalf("count %d after the directory came back, want 3", got)
	}
	renameWrite(t, path, orderRules(4, 1))
	if got := firstCount(waitVersion(t, s, 4)); got != 4 {
		t.Fatalf("count %d after an edit in the new directory, want 4", got)
	}
}

// Changes to other files in the rules file's directory wake the watcher: many of them in a
// poll period make a warning (once within BusyWarnEvery), a few none.
func TestRunWarnsOfABusyDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	core, logs := observer.New(zap.WarnLevel)
	const poll = 200 * time.Millisecond // more than BusyRate*0.2 = 20 changes a period is busy
	s, _ := newTestStore(t, rulestore.Options{File: path}, Options{Poll: poll, Log: zap.New(core)})
	runStore(t, s)
	renameWrite(t, path, orderRules(2, 1))
	waitVersion(t, s, 2) // Run is watching

	for i := range 3 { // a few changes a period: quiet
		writeFile(t, filepath.Join(dir, fmt.Sprintf("quiet-%d.log", i)), "x")
		time.Sleep(poll)
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings for a few changes to other files: %v", n, logs.All())
	}
	// a log written next to the rules file, many lines a period, until the warning comes
	f, err := os.Create(filepath.Join(dir, "access.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	deadline := time.Now().Add(waitFor)
	for logs.Len() == 0 && time.Now().Before(deadline) {
		if _, err := f.WriteString("GET /items 200\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	all := logs.All()
	if len(all) != 1 {
		t.Fatalf("%d warnings while a log next to the rules file was written, want 1", len(all))
	}
	fields := all[0].ContextMap()
	if fields["dir"] != dir || fields["changes_to_other_files"].(int64) <= 20 || !strings.Contains(all[0].Message, "directory of its own") {
		t.Errorf("warning %q %v: want the directory, more than 20 changes, and what to do", all[0].Message, fields)
	}
	// still busy for two more periods: no second warning within BusyWarnEvery
	for end := time.Now().Add(2 * poll); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if _, err := f.WriteString("GET /items 200\n"); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.Len(); n != 1 {
		t.Errorf("%d warnings within BusyWarnEvery, want 1", n)
	}
	if got := s.Current().Version; got != 2 {
		t.Errorf("version %d after changes to other files only, want 2 (no reload)", got)
	}
}

func TestStampSame(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	writeFile(t, a, "one")
	writeFile(t, b, "one")
	missing := stampOf(filepath.Join(dir, "missing"))
	tests := []struct {
		name string
		x, y stamp
		want bool
	}{
		{"same file", stampOf(a), stampOf(a), true},
		{"both missing", missing, missing, true},
		{"appeared", missing, stampOf(a), false},
		{"vanished", stampOf(a), missing, false},
		{"another file", stampOf(a), stampOf(b), false},
	}
	for _, tt := range tests {
		if got := tt.x.same(tt.y); got != tt.want {
			t.Errorf("%s: same = %v, want %v", tt.name, got, tt.want)
		}
	}
	before := stampOf(a)
	writeFile(t, a, "one, longer")
	if before.same(stampOf(a)) {
		t.Error("a file written again (new size) counts as the same")
	}
}

package rulestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// t0 is the fixed instant of the Store tests' clock and limiter checks.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)

// events records OnLoad calls.
type events struct {
	mu   sync.Mutex
	list []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) all() []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Event(nil), e.list...)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// orderRules is a rules file with a param-flow rule of count n on POST:/order and a second rule
// of count m on GET:/item.
func orderRules(n, m int) string {
	return fmt.Sprintf(`authority:
  - resource: "GET:/hello"
    strategy: white
    origins: [serviceA]
param_flow:
  - resource: "POST:/order"
    param: item_id
    count: %d
  - resource: "GET:/item"
    param: item_id
    count: %d
`, n, m)
}

func newTestStore(t *testing.T, opts Options) (*Store, *events) {
	t.Helper()
	ev := &events{}
	opts.OnLoad = ev.add
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, ev
}

func TestStoreReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, orderRules(2, 5))
	s, ev := newTestStore(t, Options{File: path})

	first := s.Current()
	if first.Version != 1 || !first.LoadedAt.Equal(t0) || first.File != path {
		t.Errorf("first set: version %d, loaded %v, file %q; want 1, %v, %q", first.Version, first.LoadedAt, first.File, t0, path)
	}
	if got, want := len(first.Rules.ParamFlow), 2; got != want {
		t.Fatalf("%d param-flow rules, want %d", got, want)
	}
	if first.Authority == nil || first.ParamFlow == nil {
		t.Fatalf("set not compiled: %+v", first)
	}
	if rule, ok := first.Authority.Check("GET:/hello", "serviceB"); ok || rule != 0 {
		t.Errorf("authority Check(serviceB) = %d, %v; want 0, false", rule, ok)
	}

	// Unchanged content: no new version, no event.
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload unchanged: %v", err)
	}
	if got := s.Current(); got != first {
		t.Errorf("unchanged reload replaced the set: version %d", got.Version)
	}

	// A valid edit is applied as the next version.
	writeFile(t, path, orderRules(3, 5))
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload valid edit: %v", err)
	}
	second := s.Current()
	if second.Version != 2 || second.Rules.ParamFlow[0].Count != 3 {
		t.Errorf("after edit: version %d, count %d; want 2, 3", second.Version, second.Rules.ParamFlow[0].Count)
	}
	if s.LastError() != nil {
		t.Errorf("LastError = %+v, want nil", s.LastError())
	}

	// An invalid edit is rejected whole: the rules in force stay, the error is recorded.
	writeFile(t, path, orderRules(3, 5)+"    burst: -1\n")
	err := s.Reload()
	var verrs decode.Errors
	if !errors.As(err, &verrs) || len(verrs) != 1 || verrs[0].Field != "burst" || verrs[0].Index != 1 {
		t.Fatalf("Reload invalid edit = %v; want one burst error in param_flow[1]", err)
	}
	if got := s.Current(); got != second {
		t.Errorf("invalid edit replaced the set: version %d", got.Version)
	}
	le := s.LastError()
	if le == nil || !le.Time.Equal(t0) || le.Message != err.Error() {
		t.Errorf("LastError = %+v; want time %v and message %q", le, t0, err)
	}
	if !strings.Contains(le.Message, path+`:12:5: param_flow[1] (resource "GET:/item"): burst:`) {
		t.Errorf("LastError message %q does not name file, rule and field", le.Message)
	}

	// A missing file after start is a bad load too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Reload missing file = %v, want fs.ErrNotExist", err)
	}
	if got := s.Current(); got != second {
		t.Errorf("missing file replaced the set: version %d", got.Version)
	}

	// Restoring the content in force recompiles nothing, clears the failure, and tells OnLoad
	// that the last load succeeded (once).
	writeFile(t, path, orderRules(3, 5))
	if err := s.Reload(); err != nil || s.Current() != second {
		t.Errorf("Reload restored content = %v, version %d; want nil, 2", err, s.Current().Version)
	}
	if s.LastError() != nil {
		t.Errorf("LastError after restoring the content in force = %+v, want nil", s.LastError())
	}
	if err := s.Reload(); err != nil {
		t.Errorf("Reload unchanged = %v", err)
	}

	want := []struct {
		version uint64
		applied bool
		failed  bool
	}{{1, true, false}, {2, true, false}, {2, false, true}, {2, false, true}, {2, true, false}}
	got := ev.all()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got), len(want), got)
	}
	if !got[4].Restored || got[1].Restored {
		t.Errorf("Restored set on events %+v and %+v; want only on the last", got[1], got[4])
	}
	for i, w := range want {
		g := got[i]
		if g.Version != w.version || g.Applied != w.applied || (g.Err != nil) != w.failed || g.Rules != 3 || g.File != path {
			t.Errorf("event %d = %+v; want version %d, applied %v, error %v, 3 rules", i, g, w.version, w.applied, w.failed)
		}
		if g.Set == nil || g.Set.Version != g.Version {
			t.Errorf("event %d carries set %+v; want the set in force, version %d", i, g.Set, g.Version)
		}
	}
}

func TestStoreKeepsLimiterState(t *testing.T) {
	ctx := context.Background()
	order := []hotparam.Entry{{Resource: "POST:/order", Params: []hotparam.Param{{Name: "item_id", Values: []string{"42"}}}}}
	allowed := func(s *Store) bool {
		return s.Current().ParamFlow.Check(ctx, t0, order, hotparam.CheckOptions{}, nil).Allowed
	}
	tests := []struct {
		name        string
		edit        string
		wantAllowed bool // right after the reload, at the same instant
	}{
		{"another rule changed", orderRules(2, 9), false},
		{"count of the rule changed", strings.Replace(orderRules(2, 5), "count: 2\n", "count: 3\n", 1), false},
		{"duration of the rule changed", strings.Replace(orderRules(2, 5), "count: 2\n", "count: 2\n    duration: 2s\n", 1), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			writeFile(t, path, orderRules(2, 5))
			s, _ := newTestStore(t, Options{File: path})
			for i := range 2 {
				if !allowed(s) {
					t.Fatalf("request %d blocked; want the bucket of 2 to allow it", i)
				}
			}
			if allowed(s) {
				t.Fatal("third request allowed; want the bucket empty")
			}
			writeFile(t, path, tt.edit)
			if err := s.Reload(); err != nil {
				t.Fatalf("Reload: %v", err)
			}
			if got := s.Current().Version; got != 2 {
				t.Fatalf("version %d after reload, want 2", got)
			}
			if got := allowed(s); got != tt.wantAllowed {
				t.Errorf("after reload: allowed = %v, want %v", got, tt.wantAllowed)
			}
		})
	}
}

func TestNewOptions(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "param_flow: [{resource: r, param: p, count: -1}]\n")

	if _, err := New(Options{File: missing}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("New(missing) = %v, want fs.ErrNotExist", err)
	}
	var verrs decode.Errors
	if _, err := New(Options{File: bad}); !errors.As(err, &verrs) || verrs[0].Field != "count" {
		t.Errorf("New(bad) = %v, want a count error", err)
	}
	for _, opts := range []Options{{}, {File: missing, Optional: true}} {
		s, ev := newTestStore(t, opts)
		set := s.Current()
		if set.Version != 1 || len(set.Rules.Authority)+len(set.Rules.ParamFlow) != 0 || set.ParamFlow == nil {
			t.Errorf("New(%+v): set %+v; want version 1, empty, compiled", opts, set)
		}
		if err := s.Reload(); err != nil || s.Current() != set {
			t.Errorf("Reload with nothing to load = %v; set replaced: %v", err, s.Current() != set)
		}
		if got := ev.all(); len(got) != 1 || !got[0].Applied || got[0].Version != 1 {
			t.Errorf("events = %+v; want one applied load of version 1", got)
		}
	}
}

func TestOptionalFileAppearsAndGoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	s, _ := newTestStore(t, Options{File: path, Optional: true})
	writeFile(t, path, orderRules(1, 1))
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload created file: %v", err)
	}
	if set := s.Current(); set.Version != 2 || len(set.Rules.ParamFlow) != 2 {
		t.Fatalf("after create: version %d, %d rules; want 2, 2", set.Version, len(set.Rules.ParamFlow))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.Is(err, fs.ErrNotExist) || s.LastError() == nil {
		t.Errorf("Reload removed file = %v, LastError %+v; want a recorded fs.ErrNotExist", err, s.LastError())
	}
	if set := s.Current(); set.Version != 2 {
		t.Errorf("after remove: version %d, want 2 kept", set.Version)
	}
}

func TestStoreEventWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, "param_flow: [{resource: r, param: p, grade: concurrency, count: 2}]\n")
	_, ev := newTestStore(t, Options{File: path})
	want := path + `:1:14: param_flow[0] (resource "r"): ` + ConcurrencyWarning
	if got := ev.all(); len(got) != 1 || len(got[0].Warnings) != 1 || got[0].Warnings[0] != want {
		t.Errorf("events = %+v; want one with warning %q", got, want)
	}
}

// TestStoreReadersSeeWholeSets checks, under the race detector, that a reader never sees a set
// whose parts disagree while reloads run.
func TestStoreReadersSeeWholeSets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, orderRules(1, 1))
	s, _ := newTestStore(t, Options{File: path})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				set := s.Current()
				// Load n (1-based version) writes count n into both rules.
				rules := set.ParamFlow.Rules()
				if int64(set.Version) != set.Rules.ParamFlow[0].Count || rules[1].Count != set.Rules.ParamFlow[1].Count {
					errs <- fmt.Sprintf("version %d with counts %d/%d", set.Version, set.Rules.ParamFlow[0].Count, rules[1].Count)
					return
				}
			}
		})
	}
	for n := 2; n <= 50; n++ {
		writeFile(t, path, orderRules(n, n))
		if err := s.Reload(); err != nil {
			t.Fatalf("Reload %d: %v", n, err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := s.Current().Version; got != 50 {
		t.Errorf("version %d after 49 reloads, want 50", got)
	}
}

// TestReload50kKeepsState: a reload of a 50,000-rule file whose thresholds changed keeps the
// state of a tracked value (its bucket stays spent).
func TestReload50kKeepsState(t *testing.T) {
	if testing.Short() {
		t.Skip("50,000 rules; skipped under -short")
	}
	// JSON, as generated rule sets of this size are: the race detector makes YAML slow.
	path := filepath.Join(t.TempDir(), "rules.json")
	if err := os.WriteFile(path, rulesJSON(t, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{File: path})
	if err != nil {
		t.Fatal(err)
	}
	entry := []hotparam.Entry{{Resource: "GET:/r49999", Params: []hotparam.Param{{Name: "user", Values: []string{"u1"}}}}}
	check := func() bool {
		return s.Current().ParamFlow.Check(context.Background(), t0, entry, hotparam.CheckOptions{}, nil).Allowed
	}
	admitted := 0
	for check() {
		admitted++
		if admitted > 100 {
			t.Fatal("the bucket never ran out")
		}
	}
	if admitted != 12 { // count 10 + burst 2
		t.Fatalf("%d admitted before the reload, want 12", admitted)
	}
	if err := os.WriteFile(path, rulesJSON(t, 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if s.Current().Version != 2 || s.Current().Rules.ParamFlow[49999].Count != 11 {
		t.Fatalf("reload not applied: version %d", s.Current().Version)
	}
	if check() {
		t.Error("a value's spent bucket was refilled by the reload")
	}
}

// rulesJSON is rulesN(50000, bump) in JSON.
func rulesJSON(t *testing.T, bump int) []byte {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"param_flow": [`)
	for i := range 50000 {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"resource": "GET:/r%d", "param": "user", "count": %d, "duration": "1s", "burst": 2`, i, 10+bump)
		if i%10 == 0 {
			b.WriteString(`, "items": [{"value": "vip", "count": 100}]`)
		}
		b.WriteString("}")
	}
	b.WriteString("]}\n")
	return []byte(b.String())
}

// A YAML file's reload converts only the list items that changed; what it applies is what the
// whole file parses to, and a file that does not parse is reported with its line, as a file
// converted whole is.
func TestStoreYAMLReloadConvertsChangedItems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, string(rulesN(500, 0)))
	s, err := New(Options{File: path})
	if err != nil {
		t.Fatal(err)
	}
	changed := rulesN(500, 1) // every 50th rule's count bumped: 10 rules
	writeFile(t, path, string(changed))
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := s.opts.Parse.yamlItems.Converted(); got != 10 {
		t.Errorf("the reload converted %d items, want the 10 that changed", got)
	}
	want, err := Parse(path, changed, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Current().Rules; !reflect.DeepEqual(got.ParamFlow, want.ParamFlow) {
		t.Error("the rules applied differ from the file's")
	}

	broken := bytes.Replace(changed, []byte(`resource: "GET:/r7"`), []byte(`resource: "GET:/r7`), 1)
	writeFile(t, path, string(broken))
	err = s.Reload()
	_, whole := Parse(path, broken, ParseOptions{})
	if err == nil || whole == nil || err.Error() != whole.Error() || !strings.Contains(err.Error(), "line 9") {
		t.Errorf("reload of a broken file: %v\nparsed whole: %v", err, whole)
	}
	if s.Current().Version != 2 {
		t.Errorf("version %d after a rejected reload, want 2", s.Current().Version)
	}
}

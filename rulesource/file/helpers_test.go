package file

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/extauthz/extauthz/rulestore"
)

// testStore is a Store under test and the options of the Watcher the test runs over it.
type testStore struct {
	*rulestore.Store
	watch Options
}

// events records OnLoad calls.
type events struct {
	mu   sync.Mutex
	list []rulestore.Event
}

func (e *events) add(ev rulestore.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) all() []rulestore.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]rulestore.Event(nil), e.list...)
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

// newTestStore builds a Store of opts that records its loads, for a Watcher of watch.
func newTestStore(t *testing.T, opts rulestore.Options, watch Options) (*testStore, *events) {
	t.Helper()
	ev := &events{}
	opts.OnLoad = ev.add
	s, err := rulestore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &testStore{Store: s, watch: watch}, ev
}

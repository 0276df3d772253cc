// Package sourcetest is the test suite every rules source passes (see CONTRIBUTING.md, "Adding
// a rules source"): its first load, an update, a broken update (the rules in force stay and the
// error is reported), the source down and back, an empty document and an oversized one. A
// source's own tests call Run with an Env of theirs.
package sourcetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/wait"
	"github.com/extauthz/extauthz/rulestore"
)

// Source is a rules source as the service runs it: built loaded, then Run until ctx ends.
type Source interface {
	Run(ctx context.Context) error
}

// Env is one case's world for a source: where its rules are kept, and the source over them.
// Each case gets a new one; its methods fail t (t.Fatal) when they cannot do what they say.
type Env interface {
	// Put makes data the rules the source holds: the file written, the keys put.
	Put(t *testing.T, data []byte)
	// Down takes the source's rules away (the file removed, etcd stopped); Up brings them
	// back as they were.
	Down(t *testing.T)
	Up(t *testing.T)
	// Start builds a Store of opts, with the source's name (Options.File or Options.Source)
	// filled in, and the source over it, and makes the source's first load. It returns the
	// Store and the source, or the first load's error.
	Start(t *testing.T, opts rulestore.Options) (*rulestore.Store, Source, error)
}

// Timeout is how long a case waits for the source to see a change.
const Timeout = 15 * time.Second

// Rules is a rules document of one param-flow rule whose count is count.
func Rules(count int) []byte {
	return fmt.Appendf(nil, "param_flow:\n  - {resource: \"GET:/items\", param: item_id, count: %d}\n", count)
}

// broken is a rules document the Store refuses, naming the field.
const broken = "param_flow:\n  - {resource: \"GET:/items\", param: item_id, count: -1}\n"

// Run runs every case with an Env from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	t.Run("load", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, Rules(1))
		c := start(t, env)
		if got := count(c.store); got != 1 {
			t.Errorf("count after the first load = %d, want 1", got)
		}
		if le := c.store.LastError(); le != nil {
			t.Errorf("LastError after the first load = %q, want nil", le.Message)
		}
	})
	t.Run("broken first load", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, []byte(broken))
		if _, _, err := env.Start(t, rulestore.Options{}); err == nil || !strings.Contains(err.Error(), "count") {
			t.Errorf("first load of a broken document = %v, want an error naming count", err)
		}
	})
	t.Run("update", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, Rules(1))
		c := start(t, env)
		c.run(t)
		env.Put(t, Rules(2))
		c.waitCount(t, 2)
	})
	t.Run("broken update", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, Rules(1))
		c := start(t, env)
		c.run(t)
		version := c.store.Current().Version
		env.Put(t, []byte(broken))
		le := c.waitError(t, "must not be negative")
		if !strings.Contains(le.Message, "count") {
			t.Errorf("LastError = %q, want it to name the field count", le.Message)
		}
		if got := c.store.Current(); count(c.store) != 1 || got.Version != version {
			t.Errorf("after a broken update: count %d, version %d; want the rules in force kept (1, %d)", count(c.store), got.Version, version)
		}
		if !c.sawError("must not be negative") {
			t.Error("no OnLoad event reported the refused load")
		}
		env.Put(t, Rules(3))
		c.waitCount(t, 3)
		c.waitCleared(t)
	})
	t.Run("down and back", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, Rules(1))
		c := start(t, env)
		c.run(t)
		env.Down(t)
		c.waitError(t, "")
		if got := count(c.store); got != 1 {
			t.Errorf("count while the source is down = %d, want 1 (kept)", got)
		}
		env.Up(t)
		c.waitCleared(t)
		env.Put(t, Rules(4))
		c.waitCount(t, 4)
	})
	t.Run("empty", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, nil)
		if _, _, err := env.Start(t, rulestore.Options{}); err == nil || !strings.Contains(err.Error(), rulestore.EmptyFileReason) {
			t.Errorf("first load of an empty document = %v, want %q", err, rulestore.EmptyFileReason)
		}
		env.Put(t, Rules(1))
		c := start(t, env)
		c.run(t)
		env.Put(t, nil)
		c.waitError(t, rulestore.EmptyFileReason)
		if got := count(c.store); got != 1 {
			t.Errorf("count after an empty document = %d, want 1 (kept)", got)
		}
	})
	t.Run("oversize", func(t *testing.T) {
		env := newEnv(t)
		env.Put(t, Rules(1))
		c := start(t, env)
		c.run(t)
		env.Put(t, Oversize())
		c.waitError(t, fmt.Sprintf("larger than %d bytes", rulestore.MaxFileSize))
		if got := count(c.store); got != 1 {
			t.Errorf("count after an oversized document = %d, want 1 (kept)", got)
		}
	})
}

// Oversize is a valid rules document larger than rulestore.MaxFileSize: Rules(5) padded with
// comment lines.
func Oversize() []byte {
	pad := bytes.Repeat([]byte("# padding\n"), rulestore.MaxFileSize/10+1)
	return append(Rules(5), pad...)
}

// running is one case's Store and source, and the loads it recorded.
type running struct {
	store *rulestore.Store
	src   Source

	mu     sync.Mutex
	events []rulestore.Event
}

func start(t *testing.T, env Env) *running {
	t.Helper()
	c := &running{}
	store, src, err := env.Start(t, rulestore.Options{OnLoad: c.add})
	if err != nil {
		t.Fatalf("first load: %v", err)
	}
	c.store, c.src = store, src
	return c
}

func (c *running) add(e rulestore.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, e)
}

// sawError reports whether a load event carried an error containing msg.
func (c *running) sawError(msg string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Err != nil && !e.Applied && strings.Contains(e.Err.Error(), msg) {
			return true
		}
	}
	return false
}

// run runs the source until the case ends, and checks that Run then returns nil.
func (c *running) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(Timeout):
			t.Errorf("Run did not return within %v of its context's end", Timeout)
		}
	})
}

func (c *running) waitCount(t *testing.T, want int64) {
	t.Helper()
	err := wait.Until(Timeout, 10*time.Millisecond, func() error {
		if got := count(c.store); got != want {
			return fmt.Errorf("count %d, want %d", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitError waits for LastError to be set and to contain msg.
func (c *running) waitError(t *testing.T, msg string) *rulestore.LoadError {
	t.Helper()
	var le *rulestore.LoadError
	err := wait.Until(Timeout, 10*time.Millisecond, func() error {
		le = c.store.LastError()
		switch {
		case le == nil:
			return errors.New("no LastError")
		case !strings.Contains(le.Message, msg):
			return fmt.Errorf("LastError %q, want it to contain %q", le.Message, msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return le
}

func (c *running) waitCleared(t *testing.T) {
	t.Helper()
	err := wait.Until(Timeout, 10*time.Millisecond, func() error {
		if le := c.store.LastError(); le != nil {
			return fmt.Errorf("LastError %q, want nil", le.Message)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// count is the count of the first param-flow rule in force, or -1 without one.
func count(s *rulestore.Store) int64 {
	set := s.Current()
	if len(set.Rules.ParamFlow) == 0 {
		return -1
	}
	return set.Rules.ParamFlow[0].Count
}

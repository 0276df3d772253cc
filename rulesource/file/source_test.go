package file

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/sourcetest"
	"github.com/extauthz/extauthz/rulestore"
)

// fileEnv is the shared suite's world for the file source: a rules file in a temporary
// directory.
type fileEnv struct {
	path string
	last []byte // the content last put, for Up
}

// Put replaces the file by a rename, as editors, atomic writers and Kubernetes do: the watcher
// never sees a file half written (a large one written in place could be read part way, and
// that part loaded).
func (e *fileEnv) Put(t *testing.T, data []byte) {
	t.Helper()
	e.last = data
	tmp := e.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, e.path); err != nil {
		t.Fatal(err)
	}
}

// Down removes the file; Up writes it back.
func (e *fileEnv) Down(t *testing.T) {
	t.Helper()
	if err := os.Remove(e.path); err != nil {
		t.Fatal(err)
	}
}

func (e *fileEnv) Up(t *testing.T) { e.Put(t, e.last) }

func (e *fileEnv) Start(t *testing.T, opts rulestore.Options) (*rulestore.Store, sourcetest.Source, error) {
	opts.File = e.path
	store, err := rulestore.New(opts)
	if err != nil {
		return nil, nil, err
	}
	return store, New(store, Options{Debounce: 10 * time.Millisecond, Poll: 100 * time.Millisecond}), nil
}

func TestSourceSuite(t *testing.T) {
	sourcetest.Run(t, func(t *testing.T) sourcetest.Env {
		return &fileEnv{path: filepath.Join(t.TempDir(), "rules.yaml")}
	})
}

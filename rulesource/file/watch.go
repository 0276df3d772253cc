// Package file is the rules file as a rules source: it watches the file a rulestore.Store reads
// (rulestore.Options.File) and has the Store reload it when it changes.
package file

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/rulestore"
)

// Options tune a Watcher.
type Options struct {
	// Debounce is how long Run waits after the last change event of a burst before it
	// reloads; 0 means DefaultDebounce.
	Debounce time.Duration
	// Poll is how often Run also looks at the file's size, modification time and identity, and
	// watches its directory again, in case change events were missed (a directory deleted and
	// made again, a file system without inotify); 0 means DefaultPoll.
	Poll time.Duration
	// Log, when not nil, is told when the file's directory is busy (see Run).
	Log *zap.Logger
}

// Watcher keeps a Store loaded from its rules file. Run is called at most once at a time;
// Reload may be called from any goroutine.
type Watcher struct {
	store *rulestore.Store
	opts  Options
}

// New returns a Watcher of store's file. The Store has loaded the file once already (see
// rulestore.New): the first load, whose failure is fatal at start, is the Store's.
func New(store *rulestore.Store, opts Options) *Watcher {
	return &Watcher{store: store, opts: opts}
}

// Reload reads the file again at once, as a change would (see rulestore.Store.Reload).
func (s *Watcher) Reload() error { return s.store.Reload() }

// Run watches the file and reloads it on change until ctx ends; it then closes the watcher and
// returns nil. It returns an error only if the watch cannot be set up or the watcher stops on
// its own. Call it at most once at a time; with no File it just waits for ctx.
//
// Run watches the file's directory, not the file, so that it sees the file replaced by a
// rename (as editors and atomic writers do) and a Kubernetes ConfigMap update, which swaps the
// directory's "..data" symlink. It reacts to events on the file's name, on "..data", and on the
// file the name resolves to when that lies elsewhere (whose directory it watches too). A burst
// of events is reloaded once, Options.Debounce after its last event; the reload itself compares
// content, so an event that changed nothing changes nothing. Run also reloads once when it
// starts, to catch changes made since New.
//
// A file written in place is empty for a moment (truncated, not yet written). So when the file
// is empty while rules read from it are in force, Run waits one more Debounce period before it
// loads it; a file that stays empty is then a rejected load (the rules in force stay, and
// LastError says the file is empty). Writers that replace
// the file by a rename never show a partial file.
//
// Every Options.Poll, Run also stats the file and reloads it when its size, modification time
// or identity changed (or it appeared or vanished) since the last look, and adds the directory
// watch again: events can be lost (a directory deleted and made again drops its watch; some
// network and overlay file systems send none).
//
// Every change in the directory wakes Run, whatever the file changed: a log written next to the
// rules file wakes it at each write, 14–25 µs of CPU a change when they come a millisecond apart
// (BenchmarkChangesToOtherFiles); a load generator's log of a line a request at 2,000 requests
// a second took a tenth of the service's CPU. When more than BusyRate changes a second to other
// files come in a Poll period, Run warns on Options.Log, at most once every BusyWarnEvery: keep
// the rules file in a directory of its own.
func (s *Watcher) Run(ctx context.Context) error {
	file := s.store.File()
	if file == "" {
		<-ctx.Done()
		return nil
	}
	path, err := filepath.Abs(file)
	if err != nil {
		return fmt.Errorf("cannot watch rules file: %w", err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("cannot watch rules file: %w", err)
	}
	defer w.Close()
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("cannot watch %s: %w", dir, err)
	}
	debounce := s.opts.Debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	wt := watchTarget{w: w, path: path, dir: dir}
	wt.follow()

	timer := time.NewTimer(0) // the start-up reload
	defer timer.Stop()
	pollEvery := s.opts.Poll
	if pollEvery <= 0 {
		pollEvery = DefaultPoll
	}
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	last := stampOf(path)
	retried := false // the current empty file has been given one more debounce period
	busy := busyDir{log: s.opts.Log, dir: dir, period: pollEvery}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("rules file watcher stopped")
			}
			if wt.relevant(ev.Name) {
				timer.Reset(debounce)
			} else {
				busy.others++
			}
		case _, ok := <-w.Errors:
			if !ok {
				return errors.New("rules file watcher stopped")
			}
			// Events may have been lost (a queue overflow): look at the file again.
			timer.Reset(debounce)
		case now := <-poll.C:
			busy.look(now)
			_ = w.Add(dir) // a no-op while the watch holds; renews one the directory lost
			if st := stampOf(path); !st.same(last) {
				last = st
				timer.Reset(debounce)
			}
		case <-timer.C:
			if !retried && s.store.Truncated() {
				retried = true
				timer.Reset(debounce)
				continue
			}
			retried = false
			_ = s.Reload() // recorded by the Store (LastError, OnLoad)
			wt.follow()
		}
	}
}

// DefaultDebounce is the Debounce used when Options leaves it zero.
const DefaultDebounce = 100 * time.Millisecond

// DefaultPoll is the Poll used when Options leaves it zero.
const DefaultPoll = 10 * time.Second

// BusyRate is the rate of changes to other files in the rules file's directory, a second over a
// Poll period, above which Run warns; BusyWarnEvery is how often it may warn at most.
const (
	BusyRate      = 100
	BusyWarnEvery = 10 * time.Minute
)

// busyDir counts the changes to other files in the watched directory over a poll period and
// warns when there were too many.
type busyDir struct {
	log    *zap.Logger
	dir    string
	period time.Duration
	others int       // changes to other files since the last look
	warned time.Time // the last warning
}

// look ends a poll period at now: it warns when the period's changes to other files exceeded
// BusyRate a second (and no warning was given within BusyWarnEvery), and counts anew.
func (b *busyDir) look(now time.Time) {
	n := b.others
	b.others = 0
	if b.log == nil || float64(n) <= BusyRate*b.period.Seconds() {
		return
	}
	if !b.warned.IsZero() && now.Sub(b.warned) < BusyWarnEvery {
		return
	}
	b.warned = now
	b.log.Warn("the rules file's directory is busy: every change there wakes the watcher; keep the rules file in a directory of its own",
		zap.String("dir", b.dir), zap.Int("changes_to_other_files", n), zap.Duration("over", b.period))
}

// stamp is what a poll compares of the file: whether it exists, and its identity, size and
// modification time.
type stamp struct {
	fi os.FileInfo // nil when the file could not be stat'ed
}

func stampOf(path string) stamp {
	fi, err := os.Stat(path) // follows symlinks: a swapped target is a change
	if err != nil {
		return stamp{}
	}
	return stamp{fi: fi}
}

func (a stamp) same(b stamp) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

// watchTarget tracks what Run watches: the file's directory, and the directory of the file the
// path resolves to through symlinks when that is another one.
type watchTarget struct {
	w       *fsnotify.Watcher
	path    string // the file, absolute
	dir     string // its directory, always watched
	real    string // the file the path resolved to at the last follow; "" if it did not resolve
	realDir string // real's directory when watched besides dir; ""
}

// follow resolves the path again and moves the second watch to the resolved file's directory.
// A directory that cannot be watched (it vanished) is left unwatched: events on dir still
// arrive.
func (t *watchTarget) follow() {
	real, err := filepath.EvalSymlinks(t.path)
	if err != nil {
		t.real = ""
		return
	}
	t.real = real
	realDir := filepath.Dir(real)
	if realDir == t.dir || realDir == t.realDir {
		return
	}
	if t.realDir != "" {
		_ = t.w.Remove(t.realDir) // may already be gone with its directory
		t.realDir = ""
	}
	if t.w.Add(realDir) == nil {
		t.realDir = realDir
	}
}

// relevant reports whether an event on name may change the file's content.
func (t *watchTarget) relevant(name string) bool {
	name = filepath.Clean(name)
	switch {
	case name == t.path, t.real != "" && name == t.real:
		return true
	case filepath.Dir(name) == t.dir && filepath.Base(name) == "..data":
		return true
	}
	return false
}

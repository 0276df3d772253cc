// Package rulestore holds the rules in force: it parses rules (YAML, JSON, or Sentinel's
// formats), validates them whole, compiles them, and swaps them in atomically, from its rules
// file or from the documents a rules source hands it (see rulesource/file and etcdrules, which
// say when to load).
package rulestore

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
)

// Set is one compiled, immutable generation of rules.
type Set struct {
	Version   uint64
	LoadedAt  time.Time
	File      string
	Rules     Rules
	Authority *authority.List
	ParamFlow *hotparam.Limiter
}

// LoadError is the last load that was rejected.
type LoadError struct {
	Time    time.Time
	Message string
}

// Event reports one load, applied or rejected.
type Event struct {
	File    string
	Version uint64 // the version in force after the load
	Applied bool
	// Restored: the file is back to the content in force after a rejected load; nothing was
	// recompiled and Version is unchanged. Applied is set too.
	Restored bool
	Err      error
	Rules    int // rules in force after the load
	// Warnings are the applied rules' warnings (Rules.Warnings); nil when not Applied.
	Warnings []string
	// Set is the set in force after the load: the one just applied when Applied, else the
	// one kept (nil when a first load failed). OnLoad may read it while the Store is still
	// being built.
	Set *Set
}

// Options configure a Store.
type Options struct {
	File string // rules file; "" means no rules, or rules given to LoadDocuments
	// Source names the origin of the rules given to LoadDocuments when there is no File (e.g.
	// "etcd:/extauthz/rules"); events and sets carry it as their File.
	Source   string
	Optional bool // a missing File means an empty rule set, not an error
	Parse    ParseOptions
	Limiter  hotparam.Options
	OnLoad   func(Event)      // called after every load attempt; may be nil
	Now      func() time.Time // the clock for LoadedAt; nil means time.Now
}

// Store holds the rules in force. It is safe for concurrent use.
//
// A load reads the file, parses and validates it whole, compiles it (keeping the per-value state
// of every param-flow rule whose identity is unchanged, see hotparam.Limiter.Reload) and swaps
// one pointer: a reader of Current sees the old set or the new one, never a mix. A load that
// fails keeps the set in force and is recorded (LastError) until a load succeeds. A load whose
// file content is byte-identical to the content in force (told by its SHA-256) makes no new
// version; it calls OnLoad (an applied Event with Restored set) only when it follows a rejected
// load, since the file is then back to the rules in force. Loads are serialised; OnLoad is
// called from the loading goroutine and must not call Reload.
type Store struct {
	opts Options
	cur  atomic.Pointer[Set]
	last atomic.Pointer[LoadError]

	mu         sync.Mutex // serialises loads; guards the fields below
	applied    contentSum // stands for the file content in force
	hasApplied bool       // applied is of content read from the file (a missing Optional file has none)
}

// contentSum stands for rules content: its SHA-256 and its length. The Store keeps it rather
// than the content, as large as the rules' compiled form, only to tell a load of the same
// content again.
type contentSum struct {
	sha [sha256.Size]byte
	n   int
}

func sumOf(data []byte) contentSum { return contentSum{sha256.Sum256(data), len(data)} }

// releaseAfter is the garbage a load may leave before the Store, the load done, collects and
// returns the heap's free pages to the system (release): memory_limit's allowance (32 MiB under
// its 1GiB, or with none), the garbage the collector lets stay past the live heap anyway. A
// variable for tests.
var releaseAfter uint64 = 32 << 20

// heapAllocated returns the bytes allocated on the heap since the process started.
func heapAllocated() uint64 {
	s := [1]metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s[:])
	return s[0].Value.Uint64()
}

// release collects the garbage of a load that applied a set and returns the heap's free pages to
// the system (debug.FreeOSMemory), once the load is done and the Store's lock let go; was is the
// set in force when the load began, from its heapAllocated. A load's garbage, the file, its
// conversion and parse, is many times the set it leaves (about 5 KB a rule of YAML on a first
// load), and the set it replaces is garbage too; the collector lets up to its allowance of
// garbage stay past the live heap, and the runtime keeps the pages it frees while the heap is
// under its goal, so a process would stay resident by up to that much more than the rules in
// force take until traffic moved the collector. Only a load that may leave more garbage than
// releaseAfter pays for the collections: one during which the heap allocated that much (the
// load, and the calls served meanwhile), or that dropped as many rules' worth (at 1 KB a rule);
// a first load of fewer than about 6,000 rules or a reload changing a few thousand of 50,000
// collects nothing. A load that applied nothing (rejected, or the content in force again)
// collects nothing.
func (s *Store) release(was *Set, from uint64) {
	now := s.cur.Load()
	if now == was {
		return
	}
	dropped := ruleCount(was) - ruleCount(now) // negative when the set grew
	if heapAllocated()-from < releaseAfter && dropped < int(releaseAfter>>10) {
		return
	}
	runtime.GC() // what the load left in sync.Pools (a JSON encoder's buffer the size of the file) survives one collection
	debug.FreeOSMemory()
}

// New loads the rules once. A file that fails to load is an error here (there is no last good
// set yet), unless it is missing and Optional.
func New(opts Options) (*Store, error) {
	s := &Store{opts: opts}
	defer s.release(nil, heapAllocated())
	s.opts.Parse.dialects = dialects() // registered once for every load
	if opts.File != "" && !decode.IsJSONFile(opts.File) {
		// the file's loads convert only the YAML list items that changed (see decode.YAMLItems)
		s.opts.Parse.yamlItems = new(decode.YAMLItems)
	}
	if s.opts.Now == nil {
		s.opts.Now = time.Now
	}
	if opts.File == "" {
		return s, s.apply(Rules{}, positions{}, contentSum{}, false)
	}
	data, err := load(opts.File)
	switch {
	case errors.Is(err, fs.ErrNotExist) && opts.Optional:
		return s, s.apply(Rules{}, positions{}, contentSum{}, false)
	case err != nil:
		err = fmt.Errorf("cannot read rules: %w", err)
		s.emit(Event{File: opts.File, Err: err})
		return nil, err
	}
	rules, pos, err := parse(opts.File, data, s.opts.Parse)
	if err != nil {
		s.emit(Event{File: opts.File, Err: err})
		return nil, err
	}
	if err := s.apply(rules, pos, sumOf(data), true); err != nil {
		s.emit(Event{File: opts.File, Err: err})
		return nil, err
	}
	return s, nil
}

// Current returns the rules in force; never nil.
func (s *Store) Current() *Set { return s.cur.Load() }

// Reload loads the file again; on failure the rules in force stay and the error is recorded.
// A missing file counts as a failure once content from it has been applied; while an Optional
// file has never existed, its absence leaves the empty set in force without an error.
func (s *Store) Reload() error {
	if s.opts.File == "" {
		return nil
	}
	defer s.release(s.cur.Load(), heapAllocated())
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := load(s.opts.File)
	switch {
	case errors.Is(err, fs.ErrNotExist) && s.opts.Optional && !s.hasApplied:
		return nil
	case err != nil:
		return s.reject(fmt.Errorf("cannot read rules: %w", err))
	case s.hasApplied && sumOf(data) == s.applied:
		s.restored()
		return nil
	}
	rules, pos, err := parse(s.opts.File, data, s.opts.Parse)
	if err != nil {
		return s.reject(err)
	}
	if err := s.apply(rules, pos, sumOf(data), true); err != nil {
		return s.reject(err)
	}
	return nil
}

// File is the rules file the Store reads (Options.File); "" when it reads none.
func (s *Store) File() string { return s.opts.File }

// Truncated reports whether the file is empty while non-empty content from it is in force: a
// write in place caught between its truncation and its writing, most likely (see
// rulesource/file, which waits such a file out before it reloads).
func (s *Store) Truncated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.applied.n == 0 || s.opts.File == "" {
		return false
	}
	fi, err := os.Stat(s.opts.File)
	return err == nil && fi.Size() == 0
}

// LastError returns the last load when it was rejected, or nil once a load (or a return to the
// content in force) succeeded.
func (s *Store) LastError() *LoadError { return s.last.Load() }

// apply compiles rules and makes them the set in force, with the next version. fromFile says
// sum stands for the file content they were parsed from. It requires mu held, or s
// unpublished.
func (s *Store) apply(rules Rules, pos positions, sum contentSum, fromFile bool) error {
	return s.applyVersion(rules, pos, sum, fromFile, 0)
}

// applyVersion is apply with the version the set gets; 0 (or one not above the version in
// force) means the next one.
func (s *Store) applyVersion(rules Rules, pos positions, sum contentSum, fromFile bool, version uint64) error {
	prev := s.cur.Load()
	if n := ruleCount(prev); n > 0 && len(rules.Authority)+len(rules.ParamFlow) == 0 {
		// an explicit empty set is applied, but seldom meant: a dashboard's "delete all", a
		// half-done publish. The param-flow state stays until it is back to the default (see
		// hotparam.Limiter.Reload), so rules put back soon find their values as they were.
		rules.Warnings = append(rules.Warnings[:len(rules.Warnings):len(rules.Warnings)], fmt.Sprintf(
			"the rules source holds no rule: all %d rules in force are dropped; the state of the param-flow rules' values is kept until it is back to the default, for rules that come back", n))
	}
	set, err := s.compile(rules, pos, prev, version)
	if err != nil {
		return err
	}
	s.cur.Store(set)
	s.last.Store(nil)
	s.applied, s.hasApplied = sum, fromFile
	s.emit(Event{
		File:     s.name(),
		Version:  set.Version,
		Applied:  true,
		Rules:    ruleCount(set),
		Warnings: rules.Warnings,
		Set:      set,
	})
	return nil
}

// compile builds the Set for rules, following prev (nil for the first load).
func (s *Store) compile(rules Rules, pos positions, prev *Set, want uint64) (*Set, error) {
	c, err := compileRules(s.name(), rules, pos, prev, s.opts.Limiter)
	if err != nil {
		return nil, err
	}
	var version uint64 = 1
	if prev != nil {
		version = prev.Version + 1
	}
	if want > version {
		version = want
	}
	return &Set{
		Version:   version,
		LoadedAt:  s.opts.Now(),
		File:      s.name(),
		Rules:     rules,
		Authority: c.authority,
		ParamFlow: c.paramFlow,
	}, nil
}

// restored handles content identical to the content in force: nothing is recompiled. If the
// last load was rejected, the file is back to the rules in force, so the failure is cleared and
// an applied Event (Restored, same version) tells OnLoad that the last load succeeded. It
// requires mu held.
func (s *Store) restored() {
	if s.last.Load() == nil {
		return
	}
	s.last.Store(nil)
	cur := s.cur.Load()
	s.emit(Event{
		File:     s.name(),
		Version:  cur.Version,
		Applied:  true,
		Restored: true,
		Rules:    ruleCount(cur),
		Warnings: cur.Rules.Warnings,
		Set:      cur,
	})
}

// reject records a failed load and returns err. It requires mu held.
func (s *Store) reject(err error) error {
	s.last.Store(&LoadError{Time: s.opts.Now(), Message: err.Error()})
	cur := s.cur.Load()
	s.emit(Event{File: s.name(), Version: cur.Version, Err: err, Rules: ruleCount(cur), Set: cur})
	return err
}

func (s *Store) emit(e Event) {
	if s.opts.OnLoad != nil {
		s.opts.OnLoad(e)
	}
}

// name is what events and sets call the rules' origin: the file, or Options.Source.
func (s *Store) name() string {
	if s.opts.File == "" && s.opts.Source != "" {
		return s.opts.Source
	}
	return s.opts.File
}

func ruleCount(set *Set) int {
	if set == nil {
		return 0
	}
	return len(set.Rules.Authority) + len(set.Rules.ParamFlow)
}

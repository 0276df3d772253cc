// Package rulestore loads rule files (YAML, JSON, or Sentinel's JSON), validates them whole,
// compiles them, swaps them in atomically, and reloads them when the file changes.
package rulestore

import (
	"context"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
)

// Rules is a parsed and validated rules file.
type Rules struct {
	Authority []authority.Rule
	ParamFlow []hotparam.Rule
}

// ParseOptions tune parsing.
type ParseOptions struct {
	// ParamNames resolves Sentinel's paramIdx: index i names param ParamNames[i].
	ParamNames []string
	// ClusterEnabled allows `cluster: true` rules (a shared store is configured).
	ClusterEnabled bool
}

// ValidationError is one problem in a rules file, addressed by file, rule and field.
type ValidationError struct {
	File     string
	Section  string // "authority" or "param_flow"
	Index    int    // -1 when the problem is not in one rule
	Resource string
	Field    string
	Reason   string
}

func (e *ValidationError) Error() string { panic("TODO") }

// Errors is every problem found in one file.
type Errors []*ValidationError

func (e Errors) Error() string { panic("TODO") }

// Parse decodes and validates data, read from file (used in messages and to tell the format by
// extension when the content does not).
func Parse(file string, data []byte, opts ParseOptions) (Rules, error) { panic("TODO") }

// Load reads and parses path.
func Load(path string, opts ParseOptions) (Rules, error) { panic("TODO") }

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
	Err     error
	Rules   int // rules in force after the load
}

// Options configure a Store.
type Options struct {
	File     string // rules file; "" means no rules
	Optional bool   // a missing File means an empty rule set, not an error
	Parse    ParseOptions
	Limiter  hotparam.Options
	OnLoad   func(Event)      // called after every load attempt; may be nil
	Now      func() time.Time // the clock for LoadedAt; nil means time.Now
}

// Store holds the rules in force. It is safe for concurrent use.
type Store struct{}

// New loads the rules once. A file that fails to load is an error here (there is no last good
// set yet), unless it is missing and Optional.
func New(opts Options) (*Store, error) { panic("TODO") }

// Current returns the rules in force; never nil.
func (s *Store) Current() *Set { panic("TODO") }

// Reload loads the file again; on failure the rules in force stay and the error is recorded.
func (s *Store) Reload() error { panic("TODO") }

// LastError returns the last rejected load, or nil.
func (s *Store) LastError() *LoadError { panic("TODO") }

// Run watches the file and reloads it on change until ctx ends.
func (s *Store) Run(ctx context.Context) error { panic("TODO") }

// Package rulestore loads rule files (YAML, JSON, or Sentinel's JSON), validates them whole,
// compiles them, swaps them in atomically, and reloads them when the file changes.
package rulestore

import (
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

// Rules is a parsed and validated rules file.
type Rules struct {
	Authority []authority.Rule
	ParamFlow []hotparam.Rule
	// Warnings are notes about valid rules that the operator should see at load, formatted like
	// a ValidationError: for example, that a concurrency rule applies only to ShouldRateLimit
	// calls (ConcurrencyWarning).
	Warnings []string
}

// ParseOptions tune parsing.
type ParseOptions struct {
	// ParamNames resolves Sentinel's paramIdx: index i names param ParamNames[i].
	ParamNames []string
	// ClusterEnabled allows `cluster: true` rules (a shared store is configured).
	ClusterEnabled bool
	// Mapping, when set, is the service's mapping config: rules that it leaves without the
	// input they need (an origin, a param source, a lease key) get warnings.
	Mapping *descriptors.Config
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

// Errors is every problem found in one file.
type Errors []*ValidationError

// Parse decodes and validates data, read from file (used in messages and to tell the format by
// extension when the content does not). It checks the whole file and returns every problem as
// Errors (each a *ValidationError), or the rules with no error. A file that holds no document
// (0 bytes, blanks, only comments, or null) is an error (EmptyFileReason): an empty rule set is
// written as {} or with empty lists.
//
// A file named *.json must be JSON; any other is read as YAML, which accepts JSON too. Decoding
// is strict everywhere: an unknown or misspelt field, a field given twice, or a value of the
// wrong type is an error that names the field.
//
// The format is told by the shape of the top level:
//
//   - A mapping with the keys authority and param_flow (both optional) is the native format of
//     the design's "Rules file". Durations are Go duration strings ("1s", "500ms").
//   - A list is a list of Sentinel rules, as Sentinel's datasources store them: an element
//     with a strategy field is an authority rule (resource, limitApp, strategy), any other a
//     param-flow rule (resource, limitApp, grade, paramIdx, count, controlBehavior,
//     durationInSec, burstCount, maxQueueingTimeMs, paramFlowItemList, clusterMode,
//     clusterConfig).
//   - A mapping with the key paramFlowRules or authorityRules (each a list of Sentinel rules of
//     that kind) is Sentinel's format too.
//
// In Sentinel's format, grade is 1 (QPS, the default) or 0 (concurrency), controlBehavior 0
// (reject) or 2 (throttle), strategy 0 (white) or 1 (black) and required; durationInSec is in
// whole seconds (default 1) and maxQueueingTimeMs in milliseconds. paramIdx names the param
// ParamNames[paramIdx], counting from the end when negative, as Sentinel does; out of range is
// an error. A param-flow rule's limitApp must be "default" or empty (it applies to every
// origin); an authority rule's limitApp is a comma-separated list of origins whose entries are
// trimmed of spaces. count may be written as a float but must be whole. An item's object must
// be a value of its classType. clusterConfig is accepted and ignored (with a warning). Errors
// in Sentinel rules are still reported under the sections "authority" and "param_flow", with
// Index the rule's position in the list it was read from, and Field the Sentinel field name.
//
// Defaults: duration 1s, grade qps, behavior reject; strategy and count are required. A field
// that does not apply to a rule's grade or behaviour is an error when it is given a non-zero
// value, and accepted when zero (so a template listing every field parses): throttle, burst or
// refund on a concurrency rule (such rules always release on negative hits), lease on a qps
// rule, max_queueing_time on a reject rule, burst on a throttle rule.
//
// Every valid concurrency rule adds ConcurrencyWarning to Rules.Warnings.
//
// Parse also compiles the rules as a load does, so that it refuses exactly what the Store
// refuses at start and on reload (a count, burst and duration too large to count exactly, say),
// with the same message; only the shared store's own checks are left to the Store.
func Parse(file string, data []byte, opts ParseOptions) (Rules, error) {
	return check(file, data, opts)
}

// Load reads and parses path. A file that cannot be read (missing, or larger than MaxFileSize)
// is an error wrapping the cause, so errors.Is(err, fs.ErrNotExist) works.
func Load(path string, opts ParseOptions) (Rules, error) {
	data, err := load(path)
	if err != nil {
		return Rules{}, err
	}
	return Parse(path, data, opts)
}

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
	// Debounce is how long Run waits after the last change event of a burst before it
	// reloads; 0 means DefaultDebounce.
	Debounce time.Duration
	// Poll is how often Run also looks at the file's size, modification time and identity, and
	// watches its directory again, in case change events were missed (a directory deleted and
	// made again, a file system without inotify); 0 means DefaultPoll.
	Poll time.Duration
}

// DefaultDebounce is the Debounce used when Options leaves it zero.
const DefaultDebounce = 100 * time.Millisecond

// DefaultPoll is the Poll used when Options leaves it zero.
const DefaultPoll = 10 * time.Second

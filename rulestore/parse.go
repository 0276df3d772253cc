package rulestore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/native"
	"github.com/extauthz/extauthz/rulestore/sentinel"
)

// MaxFileSize is the largest rules file Load and the Store read, in bytes.
const MaxFileSize = decode.MaxFileSize

// MaxDepth is the deepest nesting a rules file may have: a deeper one is refused before it is
// decoded, by one linear pass.
const MaxDepth = decode.MaxDepth

// EmptyFileReason is the error of a file that holds no rules document: empty, blank, only
// comments, or null. An intentionally empty rule set is written as {} or with empty lists.
const EmptyFileReason = "the file is empty (no rules document); an intentionally empty rule set is written as {} or as empty lists (authority: [], param_flow: [])"

// ConcurrencyWarning is the warning given for every concurrency rule: ext_authz Check has no
// completion signal, so only the rate-limit path applies these rules.
const ConcurrencyWarning = decode.ConcurrencyWarning

// Rules is a parsed and validated rules file.
type Rules struct {
	Authority []authority.Rule
	ParamFlow []hotparam.Rule
	// Warnings are notes about valid rules that the operator should see at load, formatted like
	// a decode.ValidationError: for example, that a concurrency rule applies only to ShouldRateLimit
	// calls (ConcurrencyWarning).
	Warnings []string
}

// ParseOptions tune parsing.
type ParseOptions struct {
	// ParamNames resolves Sentinel's paramIdx: index i names param ParamNames[i].
	ParamNames []string
	// ClusterEnabled allows `cluster: true` rules (a shared store is configured).
	ClusterEnabled bool
	// ClusterFallback is store.redis.fallback (local, allow or deny), for the warnings about
	// Sentinel rules whose clusterConfig asks for another; "" leaves them out.
	ClusterFallback string
	// ClusterClients is store.redis.replicas, the replicas sharing the store: what a Sentinel
	// cluster rule's thresholdType 0 (a count per connected client) multiplies its count by.
	// 0 is 1.
	ClusterClients int
	// Mapping, when set, is the service's mapping config: rules that it leaves without the
	// input they need (an origin, a param source, a lease key) get warnings.
	Mapping *descriptors.Config

	// yamlItems, when set, converts YAML by list items, reusing those of the file it converted
	// before (the Store's loads of one file).
	yamlItems *decode.YAMLItems
	// dialects, when set, are the formats' document types, registered once (the Store's);
	// nil registers them for the one parse.
	dialects *decode.Registry
}

// dialects returns the Registry of the formats a rules file may be in: the native format and
// Sentinel's.
func dialects() *decode.Registry {
	reg := new(decode.Registry)
	native.Register(reg)
	sentinel.Register(reg)
	return reg
}

// decodeOptions are what the dialects read of opts.
func (o ParseOptions) decodeOptions() decode.Options {
	return decode.Options{ParamNames: o.ParamNames, ClusterEnabled: o.ClusterEnabled,
		ClusterFallback: o.ClusterFallback, ClusterClients: o.ClusterClients}
}

// Parse decodes and validates data, read from file (used in messages and to tell the format by
// extension when the content does not). It checks the whole file and returns every problem as
// decode.Errors (each a *decode.ValidationError), or the rules with no error. A file that holds
// no document (0 bytes, blanks, only comments, or null) is an error (EmptyFileReason): an empty
// rule set is written as {} or with empty lists.
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
//     with a strategy field is an authority rule (resource, limitApp, strategy); the others
//     are told apart by their fields (see package sentinel): Sentinel's param-flow rules
//     (resource, limitApp, grade, paramIdx, count, controlBehavior, durationInSec, burstCount,
//     maxQueueingTimeMs, paramFlowItemList, clusterMode, clusterConfig), sentinel-golang's
//     hotspot rules, and Sentinel's gateway rules and API definitions. Dashboard entities are
//     unwrapped.
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
// Index the rule's number among the rules of its kind (as the service numbers the rules in
// force), and Field the Sentinel field name.
//
// Every problem, and every warning about a rule, says where it is: the line and column of the
// field's key, or of the rule (see decode.Locator).
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

// parse is Parse's implementation, without the compile check. Besides the rules it
// returns where each was in the file.
func parse(file string, data []byte, opts ParseOptions) (Rules, positions, error) {
	top := &decode.Problems{File: file, Index: -1}
	var errs decode.Errors
	reg := opts.dialects
	if reg == nil {
		reg = dialects()
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	js, err := decode.ToJSON(file, data, opts.yamlItems, reg)
	if err != nil {
		top.Add("", "%v", err)
		var se *decode.SyntaxError
		if errors.As(err, &se) {
			top.Errs[0].Line, top.Errs[0].Column = decode.LineCol(data, se.Offset)
		}
		top.Done(&errs, "")
		return Rules{}, positions{}, errs
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || decode.IsNull(js) {
		// A truncated file (a half-done write, a broken ConfigMap) must not remove every rule.
		top.Add("", "%s", EmptyFileReason)
		top.Done(&errs, "")
		return Rules{}, positions{}, errs
	}
	f := decode.NewFile(file, data, opts.decodeOptions(), reg)
	switch js[0] {
	case '[':
		sentinel.List(f, js)
	case '{':
		ms, err := f.Members(js)
		if err != nil {
			top.Add("", "cannot parse: %v", err)
			break
		}
		if sentinel.IsObject(ms) {
			sentinel.Object(f, ms)
		} else {
			native.Decode(f, ms)
		}
	default:
		top.Add("", "the file must hold a mapping with authority and param_flow lists, or a list of Sentinel rules; got %s", decode.Kind(js))
	}
	top.Done(&f.Errs, "")
	crossCheck(f, opts.Mapping)
	f.Place()
	if len(f.Errs) > 0 {
		return Rules{}, positions{}, f.Errs
	}
	rules := Rules{Authority: f.Authority, ParamFlow: f.ParamFlow, Warnings: f.Warnings}
	return rules, positions{authority: f.AuthPos, paramFlow: f.ParamPos, loc: f.Loc}, nil
}

// positions say where in the file each parsed rule was: authority[i] is the index, in its
// list, of Rules.Authority[i]; paramFlow likewise. loc, when set, finds their lines.
type positions struct {
	authority, paramFlow []int
	loc                  *decode.Locator
}

// where returns where field of rule i of section (its number in force) is in the file: 0, 0
// when not known.
func (p positions) where(section string, i int, field string) (line, col int) {
	elems := p.paramFlow
	if section == decode.SectionAuthority {
		elems = p.authority
	}
	if i < 0 || i >= len(elems) {
		return 0, 0
	}
	return p.loc.Rule(section, elems[i], field)
}

// Place returns "file:line:col" for rule i of section (its number in force), or file when
// the file does not say where it is.
func (p positions) place(file, section string, i int) string {
	line, col := p.where(section, i, "")
	if line == 0 {
		return file
	}
	return file + ":" + strconv.Itoa(line) + ":" + strconv.Itoa(col)
}

// load reads path, refusing files larger than MaxFileSize. The buffer is sized from the file's
// size, so a large file is read with one allocation.
func load(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(512)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		if fi.Size() > MaxFileSize {
			return nil, fmt.Errorf("%s: the file is larger than %d bytes", path, MaxFileSize)
		}
		size = fi.Size() + 1 // the extra byte sees EOF without growing
	}
	// Read into the buffer by hand: bytes.Buffer.ReadFrom wants 512 bytes free before each read
	// and would double a buffer sized to the file on its last read.
	buf := make([]byte, 0, size)
	r := io.LimitReader(f, MaxFileSize+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(buf) > MaxFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d bytes", path, MaxFileSize)
	}
	return buf, nil
}

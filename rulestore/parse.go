package rulestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
)

// MaxFileSize is the largest rules file Load and the Store read, in bytes.
const MaxFileSize = 16 << 20

// The top-level keys of Sentinel's object form.
const (
	sentinelParamKey     = "paramFlowRules"
	sentinelAuthorityKey = "authorityRules"
)

// EmptyFileReason is the error of a file that holds no rules document: empty, blank, only
// comments, or null. An intentionally empty rule set is written as {} or with empty lists.
const EmptyFileReason = "the file is empty (no rules document); an intentionally empty rule set is written as {} or as empty lists (authority: [], param_flow: [])"

// ConcurrencyWarning is the warning given for every concurrency rule: ext_authz Check has no
// completion signal, so only the rate-limit path applies these rules.
const ConcurrencyWarning = "concurrency rules apply only to ShouldRateLimit calls (ext_authz Check has no completion signal)"

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
	yamlItems *yamlItems
}

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
//     with a strategy field is an authority rule (resource, limitApp, strategy); the others
//     are told apart by their fields (see classify): Sentinel's param-flow rules (resource,
//     limitApp, grade, paramIdx, count, controlBehavior, durationInSec, burstCount,
//     maxQueueingTimeMs, paramFlowItemList, clusterMode, clusterConfig), sentinel-golang's
//     hotspot rules (goHotspot), and Sentinel's gateway rules and API definitions
//     (gatewayRule). Dashboard entities are unwrapped (unwrapEntity).
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
// force, see ruleNumbers), and Field the Sentinel field name.
//
// Every problem, and every warning about a rule, says where it is: the line and column of the
// field's key, or of the rule (see locator).
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
	top := ruleErrs{file: file, index: -1}
	var errs Errors
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	js, err := toJSON(file, data, opts.yamlItems)
	if err != nil {
		top.add("", "%v", err)
		var se *syntaxError
		if errors.As(err, &se) {
			top.errs[0].Line, top.errs[0].Column = textLineCol(data, se.offset)
		}
		top.done(&errs, "")
		return Rules{}, positions{}, errs
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || isNull(js) {
		// A truncated file (a half-done write, a broken ConfigMap) must not remove every rule.
		top.add("", "%s", EmptyFileReason)
		top.done(&errs, "")
		return Rules{}, positions{}, errs
	}
	p := parser{file: file, opts: opts, yaml: !isJSONFile(file)}
	p.loc = newLocator(data, !p.yaml, formNative)
	switch js[0] {
	case '[':
		p.loc.form = formList
		p.sentinelList(js)
	case '{':
		ms, err := members(js)
		if err != nil {
			top.add("", "cannot parse: %v", err)
			break
		}
		if isSentinelObject(ms) {
			p.loc.form = formSentinel
			p.sentinelObject(ms)
		} else {
			p.native(ms)
		}
	default:
		top.add("", "the file must hold a mapping with authority and param_flow lists, or a list of Sentinel rules; got %s", jsonKind(js))
	}
	top.done(&p.errs, "")
	p.configWarnings()
	p.sourceNotes()
	p.place()
	if len(p.errs) > 0 {
		return Rules{}, positions{}, p.errs
	}
	return p.rules, positions{authority: p.authPos, paramFlow: p.paramPos, loc: p.loc}, nil
}

// positions say where in the file each parsed rule was: authority[i] is the index, in its
// list, of Rules.Authority[i]; paramFlow likewise. loc, when set, finds their lines.
type positions struct {
	authority, paramFlow []int
	loc                  *locator
}

// where returns where field of rule i of section (its number in force) is in the file: 0, 0
// when not known.
func (p positions) where(section string, i int, field string) (line, col int) {
	elems := p.paramFlow
	if section == sectionAuthority {
		elems = p.authority
	}
	if i < 0 || i >= len(elems) {
		return 0, 0
	}
	return p.loc.rule(section, elems[i], field)
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

// place gives the problems (or, when there are none, the warnings) their line and column and
// the number of their rule (see ruleNumbers), and formats the warnings into p.rules.Warnings.
func (p *parser) place() {
	at := func(e *ValidationError) {
		switch {
		case e.Line > 0:
		case e.Index >= 0:
			e.Line, e.Column = p.loc.rule(e.Section, e.Index, e.Field)
			e.Index = p.number(e.Section, e.Index)
		case e.Section == "":
			e.Line, e.Column = p.loc.top(e.Field)
		}
	}
	if len(p.errs) > 0 {
		for _, e := range p.errs {
			at(e)
		}
		return
	}
	for _, w := range p.warnings {
		at(w)
		p.rules.Warnings = append(p.rules.Warnings, w.Error())
	}
	p.warnings = nil
}

// toJSON converts the file's content to JSON: a .json file must be JSON already, anything else
// is read as YAML (of which JSON is a subset). Duplicate keys are an error either way.
//
// The nesting depth is checked first, by one linear pass (MaxDepth), and again on the JSON a
// YAML file converts to, so that no decoding step costs more than linear time. With items set,
// YAML is converted by list items when it can be (see yamlItems), and whole otherwise.
func toJSON(file string, data []byte, items *yamlItems) ([]byte, error) {
	if isJSONFile(file) {
		if err := checkJSONDepth(data); err != nil {
			return nil, fmt.Errorf("cannot parse JSON: %v", err)
		}
		// json.Valid checks without copying; Unmarshal runs only to explain invalid input.
		var v json.RawMessage
		if json.Valid(data) {
			v = bytes.TrimSpace(data)
		} else if err := json.Unmarshal(data, &v); err != nil && len(bytes.TrimSpace(data)) > 0 {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				// encoding/json's offset is just past the byte it refused
				return nil, &syntaxError{offset: max(int(se.Offset)-1, 0), msg: "cannot parse JSON: " + err.Error()}
			}
			return nil, fmt.Errorf("cannot parse JSON: %v", err)
		}
		if err := checkDuplicates(v); err != nil {
			return nil, err
		}
		return data, nil
	}
	if err := checkYAMLDepth(data); err != nil {
		return nil, fmt.Errorf("cannot parse YAML: %v", err)
	}
	js, ok := []byte(nil), false
	if items != nil {
		js, ok = items.convert(data)
	}
	if !ok {
		var err error
		if js, err = yaml.YAMLToJSONStrict(data); err != nil {
			msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
			return nil, fmt.Errorf("cannot parse YAML: %s", msg)
		}
	}
	if err := checkJSONDepth(js); err != nil { // aliases, or text the line scan misread
		return nil, fmt.Errorf("cannot parse YAML: %v", err)
	}
	return js, nil
}

// syntaxError is a JSON file's syntax error, at offset in the file.
type syntaxError struct {
	offset int
	msg    string
}

func (e *syntaxError) Error() string { return e.msg }

func isJSONFile(file string) bool { return strings.EqualFold(filepath.Ext(file), ".json") }

// checkDuplicates reports the first object key given twice anywhere in raw (encoding/json would
// silently keep the last one). raw must be valid JSON; it is read in one pass, and the keys of
// the objects open at one time are kept in one list (a set only for objects with many keys).
func checkDuplicates(raw []byte) error {
	type frame struct {
		object, wantKey bool
		from            int                 // where the object's keys start in keys
		set             map[string]struct{} // its keys, once it has many
	}
	var stack []frame
	var keys []string
	const small = 16
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end, esc := skipString(raw, i)
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				top := &stack[n-1]
				top.wantKey = false
				key := jsonString(raw[i:end], esc)
				dup := false
				if top.set != nil {
					_, dup = top.set[key]
					top.set[key] = struct{}{}
				} else {
					for _, k := range keys[top.from:] {
						if k == key {
							dup = true
							break
						}
					}
					keys = append(keys, key)
					if len(keys)-top.from > small {
						top.set = make(map[string]struct{}, 2*small)
						for _, k := range keys[top.from:] {
							top.set[k] = struct{}{}
						}
						keys = keys[:top.from]
					}
				}
				if dup {
					return fmt.Errorf("cannot parse JSON: key %q given twice in one object", key)
				}
			}
			i = end - 1
		case '{':
			stack = append(stack, frame{object: true, wantKey: true, from: len(keys)})
		case '[':
			stack = append(stack, frame{from: len(keys)})
		case '}', ']':
			if n := len(stack); n > 0 {
				keys = keys[:stack[n-1].from]
				stack = stack[:n-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].wantKey = true
			}
		}
	}
	return nil
}

// isSentinelObject reports whether a top-level object uses Sentinel's list names.
func isSentinelObject(ms []member) bool {
	for _, m := range ms {
		if m.name == sentinelParamKey || m.name == sentinelAuthorityKey {
			return true
		}
	}
	return false
}

// parser accumulates the rules and problems of one file.
type parser struct {
	file  string
	opts  ParseOptions
	yaml  bool // the file was read as YAML
	rules Rules
	errs  Errors
	// authPos and paramPos are the position in the file of each rule kept in rules.Authority
	// and rules.ParamFlow, for the messages of the compile check.
	authPos, paramPos []int
	numbers           ruleNumbers         // how the rules are numbered in their sections
	warnings          []*ValidationError  // addressed by list element until place
	loc               *locator            // where the rules are in the file
	sawMeta           bool                // Sentinel dashboard metadata was set aside
	sentinelAuth      map[string]int      // resources of the Sentinel authority rules kept: the rule's index
	apis              map[string][]string // ApiDefinitions by name: their paths, for messages
	sources           map[string]string   // params read from mapping sources, by param: the source
	paramDoc          paramFlowDoc        // the param_flow rule being decoded
}

// rule starts the problem list of one rule.
func (p *parser) rule(section string, index int) *ruleErrs {
	return &ruleErrs{file: p.file, section: section, index: index, p: p}
}

// warn records a warning about one rule (index its element in its list), or about the file
// (index -1).
func (p *parser) warn(section string, index int, resource, msg string) {
	p.warnings = append(p.warnings, &ValidationError{File: p.file, Section: section, Index: index, Resource: resource, Reason: msg})
}

// list splits the value of a top-level key that must be a list.
func (p *parser) list(key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if isNull(raw) {
		return nil, true
	}
	elems, err := scanElements(raw)
	if err != nil {
		top := ruleErrs{file: p.file, index: -1}
		top.add(key, "must be a list of rules, got %s", jsonKind(raw))
		top.done(&p.errs, "")
		return nil, false
	}
	return elems, true
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

package rulestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
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

// parse is Parse's implementation; the exported doc is on Parse in api.go. Besides the rules it
// returns where each was in the file.
func parse(file string, data []byte, opts ParseOptions) (Rules, positions, error) {
	top := ruleErrs{file: file, index: -1}
	var errs Errors
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	js, err := toJSON(file, data)
	if err != nil {
		top.add("", "%v", err)
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
	switch js[0] {
	case '[':
		p.sentinelList(js)
	case '{':
		ms, err := members(js)
		if err != nil {
			top.add("", "cannot parse: %v", err)
			break
		}
		if isSentinelObject(ms) {
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
	if len(p.errs) > 0 {
		return Rules{}, positions{}, p.errs
	}
	return p.rules, positions{authority: p.authPos, paramFlow: p.paramPos}, nil
}

// positions say where in the file each parsed rule was: authority[i] is the index, in its
// list, of Rules.Authority[i]; paramFlow likewise.
type positions struct {
	authority, paramFlow []int
}

// toJSON converts the file's content to JSON: a .json file must be JSON already, anything else
// is read as YAML (of which JSON is a subset). Duplicate keys are an error either way.
//
// The nesting depth is checked first, by one linear pass (MaxDepth), and again on the JSON a
// YAML file converts to, so that no decoding step costs more than linear time.
func toJSON(file string, data []byte) ([]byte, error) {
	if isJSONFile(file) {
		if err := checkJSONDepth(data); err != nil {
			return nil, fmt.Errorf("cannot parse JSON: %v", err)
		}
		var v json.RawMessage
		if err := json.Unmarshal(data, &v); err != nil && len(bytes.TrimSpace(data)) > 0 {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
				return nil, fmt.Errorf("cannot parse JSON: line %d: %v", line, err)
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
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		return nil, fmt.Errorf("cannot parse YAML: %s", msg)
	}
	if err := checkJSONDepth(js); err != nil { // aliases, or text the line scan misread
		return nil, fmt.Errorf("cannot parse YAML: %v", err)
	}
	return js, nil
}

func isJSONFile(file string) bool { return strings.EqualFold(filepath.Ext(file), ".json") }

// checkDuplicates reports the first object key given twice anywhere in raw (encoding/json would
// silently keep the last one). raw must be valid JSON; it is read in one pass.
func checkDuplicates(raw []byte) error {
	type frame struct {
		object, wantKey bool
		keys            map[string]struct{}
	}
	var stack []frame
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			end := i + 1
			for end < len(raw) && raw[end] != '"' {
				if raw[end] == '\\' {
					end++
				}
				end++
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				top := &stack[n-1]
				top.wantKey = false
				key := string(raw[i+1 : min(end, len(raw))])
				if bytes.IndexByte(raw[i:min(end+1, len(raw))], '\\') >= 0 {
					_ = json.Unmarshal(raw[i:min(end+1, len(raw))], &key)
				}
				if top.keys == nil {
					top.keys = make(map[string]struct{})
				}
				if _, dup := top.keys[key]; dup {
					return fmt.Errorf("cannot parse JSON: key %q given twice in one object", key)
				}
				top.keys[key] = struct{}{}
			}
			i = end
		case '{':
			stack = append(stack, frame{object: true, wantKey: true})
		case '[':
			stack = append(stack, frame{})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
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
	sawMeta           bool                // Sentinel dashboard metadata was set aside
	apis              map[string][]string // ApiDefinitions by name: their paths, for messages
	sources           map[string]string   // params read from mapping sources, by param: the source
}

// rule starts the problem list of one rule.
func (p *parser) rule(section string, index int) *ruleErrs {
	return &ruleErrs{file: p.file, section: section, index: index}
}

// warn records a warning about one rule.
func (p *parser) warn(section string, index int, resource, msg string) {
	w := &ValidationError{File: p.file, Section: section, Index: index, Resource: resource, Reason: msg}
	p.rules.Warnings = append(p.rules.Warnings, w.Error())
}

// list splits the value of a top-level key that must be a list.
func (p *parser) list(key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if isNull(raw) {
		return nil, true
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		top := ruleErrs{file: p.file, index: -1}
		top.add(key, "must be a list of rules, got %s", jsonKind(raw))
		top.done(&p.errs, "")
		return nil, false
	}
	return elems, true
}

// load reads path, refusing files larger than MaxFileSize.
func load(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: the file is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

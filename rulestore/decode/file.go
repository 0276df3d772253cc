package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
)

// MaxFileSize is the largest rules document read, in bytes (a file, or all of a source's
// documents together).
const MaxFileSize = 16 << 20

// The sections rules are reported under, in every dialect.
const (
	SectionAuthority = "authority"
	SectionParamFlow = "param_flow"
	// SectionAPI addresses a Sentinel ApiDefinition in a list of gateway rules.
	SectionAPI = "api"
)

// ConcurrencyWarning is the warning given for every concurrency rule: ext_authz Check has no
// completion signal, so only the rate-limit path applies these rules.
const ConcurrencyWarning = "concurrency rules apply only to ShouldRateLimit calls (ext_authz Check has no completion signal)"

// Options are what a dialect may read of the service's config.
type Options struct {
	// ParamNames resolves Sentinel's paramIdx: index i names param ParamNames[i].
	ParamNames []string
	// ClusterEnabled allows `cluster: true` rules (a shared store is configured).
	ClusterEnabled bool
	// ClusterFallback is store.redis.fallback (local, allow or deny); "" leaves out the
	// warnings that compare a rule's own fallback with it.
	ClusterFallback string
	// ClusterClients is store.redis.replicas; 0 is 1.
	ClusterClients int
}

// File accumulates the rules and problems of one rules document as a dialect decodes it: the
// rules kept (Authority, ParamFlow, and where each was in its list), every problem (Errs), and
// the warnings, which Place addresses and formats. It is used by one parse (not safe for
// concurrent use).
type File struct {
	Name string // the file (or key), for messages; its extension tells JSON from YAML
	Opts Options
	YAML bool // the file was read as YAML

	Authority []authority.Rule
	ParamFlow []hotparam.Rule
	// AuthPos and ParamPos are the position in its list of each rule kept in Authority and
	// ParamFlow.
	AuthPos, ParamPos []int
	// Warnings are the warnings formatted by Place (when there is no problem).
	Warnings []string
	Errs     Errors
	// Loc finds where the rules are in the file.
	Loc *Locator
	// Sources are the params the rules read from inputs only the service's mapping config can
	// provide, by param: the source to add, as the config writes it ({from: header, ...}).
	Sources map[string]string

	reg      *Registry
	numbers  ruleNumbers        // how the rules are numbered in their sections
	warnings []*ValidationError // addressed by list element until Place
}

// NewFile starts the decoding of data, read from name, with the document types of reg.
func NewFile(name string, data []byte, opts Options, reg *Registry) *File {
	yml := !IsJSONFile(name)
	return &File{Name: name, Opts: opts, YAML: yml, reg: reg, Loc: newLocator(data, !yml, reg.topKeys())}
}

// Members splits the object raw into its members (see Registry.Members).
func (p *File) Members(raw []byte) ([]Member, error) { return p.reg.Members(raw) }

// Strict decodes the object raw into *dst (see Registry.Strict).
func (p *File) Strict(raw json.RawMessage, dst any, prefix string, add func(field, format string, args ...any)) Fields {
	return p.reg.Strict(raw, dst, prefix, add)
}

// Decode decodes an object split into members into *dst (see Registry.Decode).
func (p *File) Decode(ms []Member, dst any, prefix string, add func(field, format string, args ...any)) Fields {
	return p.reg.Decode(ms, dst, prefix, add)
}

// Top starts the problem list of the file's top level.
func (p *File) Top() *Problems { return &Problems{File: p.Name, Index: -1} }

// Rule starts the problem list of one rule: element index of section's list.
func (p *File) Rule(section string, index int) *Problems {
	return &Problems{File: p.Name, Section: section, Index: index, f: p}
}

// Warn records a warning about one rule (index its element in its list), or about the file
// (index -1).
func (p *File) Warn(section string, index int, resource, msg string) {
	p.warnings = append(p.warnings, &ValidationError{File: p.Name, Section: section, Index: index, Resource: resource, Reason: msg})
}

// NeedSource records that param is read from source, which the service's mapping config must
// provide (a rules file cannot add sources); the cross-check with the mapping says what to
// add, once per param.
func (p *File) NeedSource(param, from, name string) {
	if p.Sources == nil {
		p.Sources = make(map[string]string)
	}
	src := "{from: " + from
	if name != "" {
		src += ", name: " + strconv.Quote(name)
	}
	src += "}"
	p.Sources[param] = src
}

// List splits the value of a top-level key that must be a list.
func (p *File) List(key string, raw json.RawMessage) ([]json.RawMessage, bool) {
	if IsNull(raw) {
		return nil, true
	}
	elems, err := Elements(raw)
	if err != nil {
		top := p.Top()
		top.Add(key, "must be a list of rules, got %s", Kind(raw))
		top.Done(&p.Errs, "")
		return nil, false
	}
	return elems, true
}

// Place gives the problems (or, when there are none, the warnings) their line and column and
// the number of their rule (see ruleNumbers), and formats the warnings into Warnings.
func (p *File) Place() {
	at := func(e *ValidationError) {
		switch {
		case e.Line > 0:
		case e.Index >= 0:
			e.Line, e.Column = p.Loc.Rule(e.Section, e.Index, e.Field)
			e.Index = p.Number(e.Section, e.Index)
		case e.Section == "":
			e.Line, e.Column = p.Loc.top(e.Field)
		}
	}
	if len(p.Errs) > 0 {
		for _, e := range p.Errs {
			at(e)
		}
		return
	}
	for _, w := range p.warnings {
		at(w)
		p.Warnings = append(p.Warnings, w.Error())
	}
	p.warnings = nil
}

// IsJSONFile reports whether file is named *.json: JSON only. Any other is read as YAML.
func IsJSONFile(file string) bool { return strings.EqualFold(filepath.Ext(file), ".json") }

// ToJSON converts the file's content to JSON: a .json file must be JSON already, anything else
// is read as YAML (of which JSON is a subset). Duplicate keys are an error either way.
//
// The nesting depth is checked first, by one linear pass (MaxDepth), and again on the JSON a
// YAML file converts to, so that no decoding step costs more than linear time. With items set,
// YAML is converted by list items when it can be (see YAMLItems), and whole otherwise; items
// split a file only at the top-level keys of reg.
//
// A JSON syntax error is a *SyntaxError, which says where it is.
func ToJSON(file string, data []byte, items *YAMLItems, reg *Registry) ([]byte, error) {
	if IsJSONFile(file) {
		if err := CheckJSONDepth(data); err != nil {
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
				return nil, &SyntaxError{Offset: max(int(se.Offset)-1, 0), msg: "cannot parse JSON: " + err.Error()}
			}
			return nil, fmt.Errorf("cannot parse JSON: %v", err)
		}
		if err := CheckDuplicates(v); err != nil {
			return nil, err
		}
		return data, nil
	}
	if err := CheckYAMLDepth(data); err != nil {
		return nil, fmt.Errorf("cannot parse YAML: %v", err)
	}
	js, ok := []byte(nil), false
	if items != nil {
		js, ok = items.convert(data, reg.topKeys())
	}
	if !ok {
		var err error
		if js, err = yaml.YAMLToJSONStrict(data); err != nil {
			msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
			return nil, fmt.Errorf("cannot parse YAML: %s", msg)
		}
	}
	if err := CheckJSONDepth(js); err != nil { // aliases, or text the line scan misread
		return nil, fmt.Errorf("cannot parse YAML: %v", err)
	}
	return js, nil
}

// SyntaxError is a JSON file's syntax error, at Offset in the file.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string { return e.msg }

// LineCol returns the line and column (from 1, the column in characters) of offset off in
// data.
func LineCol(data []byte, off int) (line, col int) { return textLineCol(data, off) }

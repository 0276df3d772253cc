package rulestore

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// The metadata fields Sentinel's dashboard writes around or beside a rule when it persists it
// (to Nacos, Apollo, ZooKeeper or a file): AbstractRuleEntity's id, app, ip, port, gmtCreate and
// gmtModified. They say where the rule was edited, not what it does, and are ignored.
var dashboardMeta = map[string]bool{"id": true, "app": true, "ip": true, "port": true, "gmtCreate": true, "gmtModified": true}

// unwrapEntity returns the rule's own fields: the "rule" of a dashboard entity
// ({"id", "app", ..., "rule": {...}}), or the fields beside the metadata of a flat entity (gateway
// rules and API definitions are persisted flat). A lone "id" is left in place: it is a field of
// sentinel-golang's rules. It reports problems and returns nil when the element is unusable.
func (p *parser) unwrapEntity(i int, ms []member) []member {
	hasMeta := false
	for _, m := range ms {
		if dashboardMeta[m.name] && m.name != "id" {
			hasMeta = true
		}
	}
	if !hasMeta && !hasMember(ms, "rule") {
		return ms
	}
	var rest []member
	var rule json.RawMessage
	for _, m := range ms {
		switch {
		case m.name == "rule":
			rule = m.value
		case dashboardMeta[m.name]:
			p.sawMeta = true
		default:
			rest = append(rest, m)
		}
	}
	if rule == nil {
		return rest // a flat entity
	}
	r := p.rule(sectionParamFlow, i)
	for _, m := range rest {
		r.add(m.name, "unknown field beside a dashboard entity's rule%s", suggest(m.name, []string{"id", "app", "ip", "port", "gmtCreate", "gmtModified", "rule"}))
	}
	inner, err := members(rule)
	if err != nil {
		r.add("rule", "must be a mapping of fields, got %s", jsonKind(rule))
	}
	if len(r.errs) > 0 {
		r.done(&p.errs, "")
		return nil
	}
	return inner
}

// metadataNote warns, once per file, that dashboard metadata was ignored.
func (p *parser) metadataNote() {
	if p.sawMeta {
		p.warn("", -1, "", "Sentinel dashboard metadata (id, app, ip, port, gmtCreate, gmtModified) is ignored")
	}
}

// noteSource records that param is read from source, which the service's mapping config must
// provide (a rules file cannot add sources); the warning says what to add, once per param.
func (p *parser) noteSource(param, from, name string) {
	if p.sources == nil {
		p.sources = make(map[string]string)
	}
	src := "{from: " + from
	if name != "" {
		src += ", name: " + strconv.Quote(name)
	}
	src += "}"
	p.sources[param] = src
}

// seconds converts a count of whole seconds (at least 1) given for field.
func (p *parser) seconds(r *ruleErrs, field string, n int64) time.Duration {
	switch {
	case n < 1:
		r.add(field, "must be at least 1, got %d", n)
	case n > int64(1<<63-1)/int64(time.Second):
		r.add(field, "must be at most %d, got %d", int64(1<<63-1)/int64(time.Second), n)
	default:
		return time.Duration(n) * time.Second
	}
	return time.Second
}

// millis converts a count of milliseconds given for field.
func (p *parser) millis(r *ruleErrs, field string, n int64) time.Duration {
	if n > int64(1<<63-1)/int64(time.Millisecond) {
		r.add(field, "too large: %d", n)
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// paramNameAt is paramName for a field of another name.
func (p *parser) paramNameAt(r *ruleErrs, field string, idx int) string {
	sub := p.rule(r.section, r.index)
	name := p.paramName(sub, idx)
	for _, e := range sub.errs {
		e.Field = field
		r.errs = append(r.errs, e)
	}
	return name
}

// sourceNotes are the warnings for the params the file's rules read from sources the service's
// mapping config must provide, sorted by param.
func (p *parser) sourceNotes() {
	names := make([]string, 0, len(p.sources))
	for n := range p.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p.warn("", -1, "", fmt.Sprintf("param %q needs a mapping source, which a rules file cannot add: add authz.params.%s: %s to the service config (and send it as the rate-limit descriptor key %q)", n, n, p.sources[n], n))
	}
}

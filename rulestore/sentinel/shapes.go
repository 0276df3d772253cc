package sentinel

import (
	"encoding/json"
	"time"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// The metadata fields Sentinel's dashboard writes around or beside a rule when it persists it
// (to Nacos, Apollo, ZooKeeper or a file): AbstractRuleEntity's id, app, ip, port, gmtCreate and
// gmtModified. They say where the rule was edited, not what it does, and are ignored.
var dashboardMeta = map[string]bool{"id": true, "app": true, "ip": true, "port": true, "gmtCreate": true, "gmtModified": true}

// unwrapEntity returns the rule's own fields: the "rule" of a dashboard entity
// ({"id", "app", ..., "rule": {...}}), or the fields beside the metadata of a flat entity (gateway
// rules and API definitions are persisted flat). A lone "id" is left in place: it is a field of
// sentinel-golang's rules. It reports problems and returns nil when the element is unusable.
func (p *parser) unwrapEntity(i int, ms []decode.Member) []decode.Member {
	hasMeta := false
	for _, m := range ms {
		if dashboardMeta[m.Name] && m.Name != "id" {
			hasMeta = true
		}
	}
	if !hasMeta && !hasMember(ms, "rule") {
		return ms
	}
	var rest []decode.Member
	var rule json.RawMessage
	for _, m := range ms {
		switch {
		case m.Name == "rule":
			rule = m.Value
		case dashboardMeta[m.Name]:
			p.sawMeta = true
		default:
			rest = append(rest, m)
		}
	}
	if rule == nil {
		return rest // a flat entity
	}
	r := p.f.Rule(decode.SectionParamFlow, i)
	for _, m := range rest {
		r.Add(m.Name, "unknown field beside a dashboard entity's rule%s", decode.Suggest(m.Name, []string{"id", "app", "ip", "port", "gmtCreate", "gmtModified", "rule"}))
	}
	inner, err := p.f.Members(rule)
	if err != nil {
		r.Add("rule", "must be a mapping of fields, got %s", decode.Kind(rule))
	}
	if len(r.Errs) > 0 {
		r.Done(&p.f.Errs, "")
		return nil
	}
	return inner
}

// metadataNote warns, once per file, that dashboard metadata was ignored.
func (p *parser) metadataNote() {
	if p.sawMeta {
		p.f.Warn("", -1, "", "Sentinel dashboard metadata (id, app, ip, port, gmtCreate, gmtModified) is ignored")
	}
}

// seconds converts a count of whole seconds (at least 1) given for field.
func (p *parser) seconds(r *decode.Problems, field string, n int64) time.Duration {
	switch {
	case n < 1:
		r.Add(field, "must be at least 1, got %d", n)
	case n > int64(1<<63-1)/int64(time.Second):
		r.Add(field, "must be at most %d, got %d", int64(1<<63-1)/int64(time.Second), n)
	default:
		return time.Duration(n) * time.Second
	}
	return time.Second
}

// millis converts a count of milliseconds given for field.
func (p *parser) millis(r *decode.Problems, field string, n int64) time.Duration {
	if n > int64(1<<63-1)/int64(time.Millisecond) {
		r.Add(field, "too large: %d", n)
		return 0
	}
	return time.Duration(n) * time.Millisecond
}

// paramNameAt is paramName for a field of another name.
func (p *parser) paramNameAt(r *decode.Problems, field string, idx int) string {
	sub := p.f.Rule(r.Section, r.Index)
	name := p.paramName(sub, idx)
	for _, e := range sub.Errs {
		e.Field = field
		r.Errs = append(r.Errs, e)
	}
	return name
}

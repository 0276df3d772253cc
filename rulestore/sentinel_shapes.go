package rulestore

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/hotparam"
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

// ---- sentinel-golang hotspot rules ----

// goHotspotDoc is one of sentinel-golang's hotspot.Rule as its datasources hold it (JSON or
// YAML, with the json tags of core/hotspot/rule.go).
type goHotspotDoc struct {
	ID                string          `json:"id"`
	Resource          string          `json:"resource"`
	MetricType        scalar          `json:"metricType"`
	ControlBehavior   scalar          `json:"controlBehavior"`
	ParamIndex        int             `json:"paramIndex"`
	ParamKey          string          `json:"paramKey"`
	Threshold         float64         `json:"threshold"`
	MaxQueueingTimeMs int64           `json:"maxQueueingTimeMs"`
	BurstCount        int64           `json:"burstCount"`
	DurationInSec     int64           `json:"durationInSec"`
	ParamsMaxCapacity int64           `json:"paramsMaxCapacity"`
	SpecificItems     json.RawMessage `json:"specificItems"`
}

// goSpecificValue is an entry of the older list form of specificItems.
type goSpecificValue struct {
	ValKind   scalar `json:"valKind"`
	ValStr    scalar `json:"valStr"`
	Threshold int64  `json:"threshold"`
}

// goHotspot decodes and checks one sentinel-golang hotspot rule. metricType is 0 (Concurrency)
// or 1 (QPS), controlBehavior 0 (Reject) or 1 (Throttling); their names are accepted too.
// paramKey, when given, names the param; otherwise paramIndex resolves through ParamNames as
// Sentinel's paramIdx does.
func (p *parser) goHotspot(i int, ms []member) {
	r := p.rule(sectionParamFlow, i)
	var d goHotspotDoc
	given := decodeMembers(ms, &d, "", r.add)
	rule := hotparam.Rule{Resource: d.Resource, Burst: d.BurstCount, Duration: time.Second}
	requireResource(r, d.Resource)
	switch mt := strings.ToLower(d.MetricType.text); {
	case fieldFailed(r, "metricType"):
	case !given.has("metricType") || mt == "1" || mt == "qps":
		rule.Grade = hotparam.QPS
	case mt == "0" || mt == "concurrency":
		rule.Grade = hotparam.Concurrency
	default:
		r.add("metricType", "unknown metric type %q (0 = Concurrency, 1 = QPS)", d.MetricType.text)
	}
	switch cb := strings.ToLower(d.ControlBehavior.text); {
	case fieldFailed(r, "controlBehavior"):
	case !given.has("controlBehavior") || cb == "0" || cb == "reject":
		rule.Behavior = hotparam.Reject
	case cb == "1" || cb == "throttling":
		rule.Behavior = hotparam.Throttle
	default:
		r.add("controlBehavior", "unknown behaviour %q (0 = Reject, 1 = Throttling)", d.ControlBehavior.text)
	}
	switch {
	case d.ParamKey != "":
		rule.Param = d.ParamKey
	case !fieldFailed(r, "paramIndex"):
		rule.Param = p.paramNameAt(r, "paramIndex", d.ParamIndex)
	}
	rule.Count = requiredWhole(r, given, "threshold", d.Threshold)
	if given.has("durationInSec") {
		rule.Duration = p.seconds(r, "durationInSec", d.DurationInSec)
	}
	rule.MaxQueueingTime = p.millis(r, "maxQueueingTimeMs", d.MaxQueueingTimeMs)
	if given.has("paramsMaxCapacity") {
		if d.ParamsMaxCapacity < 1 || d.ParamsMaxCapacity > 1<<31-1 {
			r.add("paramsMaxCapacity", "must be from 1 to %d, got %d", 1<<31-1, d.ParamsMaxCapacity)
		} else {
			rule.Capacity = int(d.ParamsMaxCapacity)
		}
	}
	if given.has("specificItems") {
		rule.Items = p.goSpecificItems(r, d.SpecificItems)
	}
	p.checkParamFlow(r, &rule, ruleFields{
		grade: "metricType", behavior: "controlBehavior", count: "threshold", burst: "burstCount",
		maxQueueing: "maxQueueingTimeMs",
	})
	p.addParamFlow(r, i, rule)
}

// goSpecificItems reads specificItems in either form: a map from value to threshold, or the
// older list of {valKind, valStr, threshold} (valKind 0 int, 1 string, 2 bool, 3 float64, or
// their names KindInt, KindString, KindBool, KindFloat64).
func (p *parser) goSpecificItems(r *ruleErrs, raw json.RawMessage) map[string]int64 {
	if ms, err := members(raw); err == nil {
		items := make(map[string]int64, len(ms))
		for _, m := range ms {
			field := "specificItems." + m.name
			var n int64
			if err := json.Unmarshal(m.value, &n); err != nil {
				r.add(field, "must be a whole number, got %s", jsonKind(m.value))
				continue
			}
			if _, dup := items[m.name]; dup {
				r.add(field, "given twice")
				continue
			}
			if m.name == "" {
				r.add("specificItems", "a value must not be empty")
				continue
			}
			if n < 0 {
				r.add(field, "must not be negative, got %d", n)
				continue
			}
			items[m.name] = n
		}
		return items
	}
	list, err := scanElements(raw)
	if err != nil {
		r.add("specificItems", "must be a mapping of value to threshold or a list of {valKind, valStr, threshold}, got %s", jsonKind(raw))
		return nil
	}
	return p.items(r, "specificItems", list, func(raw json.RawMessage, prefix string) (string, int64, bool) {
		var it goSpecificValue
		g := decodeStrict(raw, &it, prefix, r.add)
		if !g.ok() {
			return "", 0, false
		}
		for _, f := range []string{"valStr", "threshold"} {
			if !g.has(f) && !fieldFailed(r, prefix+f) {
				r.add(prefix+f, "required")
			}
		}
		value := it.ValStr.text
		if !g.has("valStr") || !g.has("threshold") {
			return "", 0, false
		}
		if value == "" {
			r.add(prefix+"valStr", "must not be empty")
			return "", 0, false
		}
		var err error
		switch kind := strings.ToLower(it.ValKind.text); kind {
		case "", "0", "kindint":
			_, err = strconv.ParseInt(value, 10, 64)
		case "1", "kindstring":
		case "2", "kindbool":
			_, err = strconv.ParseBool(value)
		case "3", "kindfloat64":
			_, err = strconv.ParseFloat(value, 64)
		default:
			r.add(prefix+"valKind", "unknown kind %q (0 = KindInt, 1 = KindString, 2 = KindBool, 3 = KindFloat64)", it.ValKind.text)
			return "", 0, false
		}
		if err != nil {
			r.add(prefix+"valStr", "%q is not a value of valKind %s", value, it.ValKind.text)
			return "", 0, false
		}
		return value, it.Threshold, true
	})
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

package rulestore

import (
	"encoding/json"
	"fmt"
	"regexp"
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
	if d.Resource == "" && !fieldFailed(r, "resource") {
		r.add("resource", "must not be empty")
	}
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

// ---- Sentinel gateway rules ----

// gatewayDoc is Sentinel's GatewayFlowRule (sentinel-api-gateway-adapter-common), or the
// dashboard's GatewayFlowRuleEntity once its metadata is set aside.
type gatewayDoc struct {
	Resource             string          `json:"resource"`
	ResourceMode         int             `json:"resourceMode"`
	Grade                int             `json:"grade"`
	Count                float64         `json:"count"`
	IntervalSec          int64           `json:"intervalSec"`
	Interval             int64           `json:"interval"`
	IntervalUnit         int             `json:"intervalUnit"`
	ControlBehavior      int             `json:"controlBehavior"`
	Burst                int64           `json:"burst"`
	MaxQueueingTimeoutMs int64           `json:"maxQueueingTimeoutMs"`
	ParamItem            json.RawMessage `json:"paramItem"`
}

// gatewayItemDoc is a GatewayParamFlowItem.
type gatewayItemDoc struct {
	Index         int    `json:"index"`
	ParseStrategy int    `json:"parseStrategy"`
	FieldName     string `json:"fieldName"`
	Pattern       string `json:"pattern"`
	MatchStrategy int    `json:"matchStrategy"`
}

// apiDoc is Sentinel's ApiDefinition (or the dashboard's ApiDefinitionEntity).
type apiDoc struct {
	ApiName        string            `json:"apiName"`
	PredicateItems []json.RawMessage `json:"predicateItems"`
}

// apiPredicateDoc is an ApiPathPredicateItem.
type apiPredicateDoc struct {
	Pattern       string `json:"pattern"`
	MatchStrategy int    `json:"matchStrategy"`
}

// GatewayRouteParam is the param a gateway rule without a paramItem limits: the route's own
// resource name, one value per route, so that the whole route shares one bucket as in Sentinel.
const GatewayRouteParam = "gateway_route"

// apiDefinitions reads the ApiDefinitions of a list first, so that the gateway rules naming
// them can say which paths they cover.
func (p *parser) apiDefinitions(elems []json.RawMessage) {
	for i, e := range elems {
		ms, err := members(e)
		if err != nil {
			continue
		}
		var inner []member
		for _, m := range ms {
			if !dashboardMeta[m.name] {
				inner = append(inner, m)
			}
		}
		if classify(inner) != shapeAPI {
			continue
		}
		if !hasMember(ms, "apiName") && !hasMember(ms, "predicateItems") {
			continue
		}
		for _, m := range ms {
			if dashboardMeta[m.name] && m.name != "id" {
				p.sawMeta = true
			}
		}
		p.apiDefinition(i, inner)
	}
}

func (p *parser) apiDefinition(i int, ms []member) {
	r := p.rule(sectionAPI, i)
	var d apiDoc
	decodeMembers(ms, &d, "", r.add)
	if d.ApiName == "" && !fieldFailed(r, "apiName") {
		r.add("apiName", "must not be empty")
	}
	var paths []string
	for j, raw := range d.PredicateItems {
		prefix := fmt.Sprintf("predicateItems[%d].", j)
		var it apiPredicateDoc
		g := decodeStrict(raw, &it, prefix, r.add)
		if !g.ok() {
			continue
		}
		if it.Pattern == "" && !fieldFailed(r, prefix+"pattern") {
			r.add(prefix+"pattern", "must not be empty")
			continue
		}
		switch it.MatchStrategy {
		case 0:
			paths = append(paths, "path "+strconv.Quote(it.Pattern))
		case 1:
			paths = append(paths, "path prefix "+strconv.Quote(strings.TrimSuffix(it.Pattern, "**")))
		case 2:
			if _, err := regexp.Compile(it.Pattern); err != nil {
				r.add(prefix+"pattern", "invalid regex (RE2 syntax): %v", err)
				continue
			}
			paths = append(paths, "path regex "+strconv.Quote(it.Pattern))
		default:
			r.add(prefix+"matchStrategy", "unknown strategy %d (0 = exact, 1 = prefix, 2 = regex)", it.MatchStrategy)
		}
	}
	if len(d.PredicateItems) == 0 && !fieldFailed(r, "predicateItems") {
		r.add("predicateItems", "must list at least one path predicate")
	}
	if len(r.errs) == 0 {
		if p.apis == nil {
			p.apis = make(map[string][]string)
		}
		p.apis[d.ApiName] = paths
		p.warn(sectionAPI, i, d.ApiName, fmt.Sprintf("custom API %q (%s): give the Envoy routes of these paths the context_extensions resource: %q; its gateway rules limit that resource", d.ApiName, strings.Join(paths, ", "), d.ApiName))
	}
	r.done(&p.errs, d.ApiName)
}

// gatewayRule decodes a GatewayFlowRule into a param-flow rule. resourceMode 0 names a route, 1
// a custom API (an ApiDefinition); both become the resource of the routes that carry it as
// context_extensions resource. grade 1 is QPS, 0 concurrency; controlBehavior 0 reject, 2
// throttle; the interval is intervalSec, or interval in intervalUnit (0 s, 1 min, 2 h, 3 days)
// as the dashboard writes it. maxQueueingTimeoutMs applies to throttle rules only (Sentinel
// defaults it to 500 on every rule, so it is ignored on others). The paramItem's parseStrategy
// (0 client IP, 1 host, 2 header, 3 URL param, 4 cookie) and fieldName name the param, which the
// service's mapping config must provide; its pattern and matchStrategy (0 exact, 1 prefix, 2
// regex, 3 contains) become the rule's match. Without a paramItem, the rule limits the whole
// route, through GatewayRouteParam.
func (p *parser) gatewayRule(i int, ms []member) {
	r := p.rule(sectionParamFlow, i)
	var d gatewayDoc
	given := decodeMembers(ms, &d, "", r.add)
	rule := hotparam.Rule{Resource: d.Resource, Burst: d.Burst, Duration: time.Second}
	if d.Resource == "" && !fieldFailed(r, "resource") {
		r.add("resource", "must not be empty")
	}
	switch d.ResourceMode {
	case 0:
	case 1:
		if _, ok := p.apis[d.Resource]; !ok && len(r.errs) == 0 {
			p.warn(sectionParamFlow, i, d.Resource, fmt.Sprintf("custom API %q is not defined in this file: give the Envoy routes of its paths the context_extensions resource: %q", d.Resource, d.Resource))
		}
	default:
		r.add("resourceMode", "unknown mode %d (0 = route id, 1 = custom API)", d.ResourceMode)
	}
	switch {
	case !given.has("grade") || d.Grade == 1:
		rule.Grade = hotparam.QPS
	case d.Grade == 0:
		rule.Grade = hotparam.Concurrency
	default:
		r.add("grade", "unknown grade %d (1 = QPS, 0 = thread count)", d.Grade)
	}
	rule.Count = requiredWhole(r, given, "count", d.Count)
	switch d.ControlBehavior {
	case 0:
		rule.Behavior = hotparam.Reject
	case 2:
		rule.Behavior = hotparam.Throttle
		rule.MaxQueueingTime = 500 * time.Millisecond
		if given.has("maxQueueingTimeoutMs") {
			rule.MaxQueueingTime = p.millis(r, "maxQueueingTimeoutMs", d.MaxQueueingTimeoutMs)
		}
	default:
		r.add("controlBehavior", "unknown behaviour %d (0 = reject, 2 = throttle)", d.ControlBehavior)
	}
	if rule.Grade == hotparam.Concurrency {
		rule.MaxQueueingTime = 0
	}
	switch {
	case given.has("interval"):
		unit := map[int]int64{0: 1, 1: 60, 2: 3600, 3: 86400}
		mul, ok := unit[d.IntervalUnit]
		if !ok {
			r.add("intervalUnit", "unknown unit %d (0 = second, 1 = minute, 2 = hour, 3 = day)", d.IntervalUnit)
		} else if d.Interval > int64(1<<62)/mul/int64(time.Second) {
			r.add("interval", "too large: %d", d.Interval)
		} else {
			rule.Duration = p.seconds(r, "interval", d.Interval*mul)
		}
	case given.has("intervalSec"):
		rule.Duration = p.seconds(r, "intervalSec", d.IntervalSec)
	}
	if given.has("paramItem") {
		p.gatewayItem(r, &rule, d.ParamItem)
	} else {
		rule.Param = GatewayRouteParam
		p.noteSource(GatewayRouteParam, "context_extension", "resource")
	}
	p.checkParamFlow(r, &rule, ruleFields{
		grade: "grade", behavior: "controlBehavior", count: "count", burst: "burst",
		maxQueueing: "maxQueueingTimeoutMs",
	})
	p.addParamFlow(r, i, rule)
}

// gatewayItem reads a gateway rule's paramItem into rule's param and match.
func (p *parser) gatewayItem(r *ruleErrs, rule *hotparam.Rule, raw json.RawMessage) {
	var it gatewayItemDoc
	g := decodeStrict(raw, &it, "paramItem.", r.add)
	if !g.ok() {
		return
	}
	name := strings.ToLower(it.FieldName)
	needName := func() bool {
		if it.FieldName == "" && !fieldFailed(r, "paramItem.fieldName") {
			r.add("paramItem.fieldName", "required for parseStrategy %d", it.ParseStrategy)
			return false
		}
		return true
	}
	switch it.ParseStrategy {
	case 0:
		rule.Param = "client_ip"
		p.noteSource(rule.Param, "client_ip", "")
	case 1:
		rule.Param = "host"
		p.noteSource(rule.Param, "host", "")
	case 2:
		if needName() {
			rule.Param = "header_" + name
			p.noteSource(rule.Param, "header", name)
		}
	case 3:
		if needName() {
			rule.Param = "query_" + it.FieldName
			p.noteSource(rule.Param, "query", it.FieldName)
		}
	case 4:
		if needName() {
			rule.Param = "cookie_" + it.FieldName
			p.noteSource(rule.Param, "cookie", it.FieldName)
		}
	default:
		r.add("paramItem.parseStrategy", "unknown strategy %d (0 = client IP, 1 = host, 2 = header, 3 = URL param, 4 = cookie)", it.ParseStrategy)
	}
	if it.Pattern == "" {
		return
	}
	var kind MatchKind
	pattern := it.Pattern
	switch it.MatchStrategy {
	case 0:
		kind = MatchExact
	case 1:
		kind = MatchPrefix
	case 2:
		kind, pattern = MatchRegex, "^(?:"+it.Pattern+")$"
	case 3:
		kind = MatchContains
	default:
		r.add("paramItem.matchStrategy", "unknown strategy %d (0 = exact, 1 = prefix, 2 = regex, 3 = contains)", it.MatchStrategy)
		return
	}
	m, err := NewMatch(kind, pattern)
	if err != nil {
		r.add("paramItem.pattern", "%v", err)
		return
	}
	rule.Match = m
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

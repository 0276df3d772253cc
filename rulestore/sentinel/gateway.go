package sentinel

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// Sentinel's gateway rules and API definitions, as its API-gateway adapter and dashboard store
// them.

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
		ms, err := p.f.Members(e)
		if err != nil {
			continue
		}
		var inner []decode.Member
		for _, m := range ms {
			if !dashboardMeta[m.Name] {
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
			if dashboardMeta[m.Name] && m.Name != "id" {
				p.sawMeta = true
			}
		}
		p.apiDefinition(i, inner)
	}
}

func (p *parser) apiDefinition(i int, ms []decode.Member) {
	r := p.f.Rule(decode.SectionAPI, i)
	var d apiDoc
	p.f.Decode(ms, &d, "", r.Add)
	if d.ApiName == "" && !r.Failed("apiName") {
		r.Add("apiName", "must not be empty")
	}
	var paths []string
	for j, raw := range d.PredicateItems {
		prefix := fmt.Sprintf("predicateItems[%d].", j)
		var it apiPredicateDoc
		g := p.f.Strict(raw, &it, prefix, r.Add)
		if !g.OK() {
			continue
		}
		if it.Pattern == "" && !r.Failed(prefix+"pattern") {
			r.Add(prefix+"pattern", "must not be empty")
			continue
		}
		switch it.MatchStrategy {
		case 0:
			paths = append(paths, "path "+strconv.Quote(it.Pattern))
		case 1:
			paths = append(paths, "path prefix "+strconv.Quote(strings.TrimSuffix(it.Pattern, "**")))
		case 2:
			if _, err := regexp.Compile(it.Pattern); err != nil {
				r.Add(prefix+"pattern", "invalid regex (RE2 syntax): %v", err)
				continue
			}
			paths = append(paths, "path regex "+strconv.Quote(it.Pattern))
		default:
			r.Add(prefix+"matchStrategy", "unknown strategy %d (0 = exact, 1 = prefix, 2 = regex)", it.MatchStrategy)
		}
	}
	if len(d.PredicateItems) == 0 && !r.Failed("predicateItems") {
		r.Add("predicateItems", "must list at least one path predicate")
	}
	if len(r.Errs) == 0 {
		if p.apis == nil {
			p.apis = make(map[string][]string)
		}
		p.apis[d.ApiName] = paths
		p.f.Warn(decode.SectionAPI, i, d.ApiName, fmt.Sprintf("custom API %q (%s): give the Envoy routes of these paths the context_extensions resource: %q; its gateway rules limit that resource", d.ApiName, strings.Join(paths, ", "), d.ApiName))
	}
	r.Done(&p.f.Errs, d.ApiName)
}

// gatewayRule decodes a GatewayFlowRule into a param-flow rule. resourceMode 0 names a route, 1
// a custom API (an ApiDefinition); both become the resource of the routes that carry it as
// context_extensions resource. grade 1 is QPS, 0 concurrency; controlBehavior 0 reject, 2
// throttle; the interval is intervalSec, or interval in intervalUnit (0 s, 1 min, 2 h, 3 days)
// as the dashboard writes it. maxQueueingTimeoutMs applies to throttle rules only (Sentinel
// defaults it to 500 on every rule, so it is ignored on others). The paramItem's parseStrategy
// (0 client IP, 1 host, 2 header, 3 URL param, 4 cookie) and fieldName name the param, which the
// service's mapping config must provide; its pattern and matchStrategy (0 exact, 2 regex, 3
// contains) become the rule's match. Sentinel does not implement matchStrategy 1 (prefix) nor
// any higher value: it limits every value then, and so does the imported rule, with a warning. Without a paramItem, the rule limits the whole
// route, through GatewayRouteParam.
func (p *parser) gatewayRule(i int, ms []decode.Member) {
	r := p.f.Rule(decode.SectionParamFlow, i)
	var d gatewayDoc
	given := p.f.Decode(ms, &d, "", r.Add)
	rule := hotparam.Rule{Resource: d.Resource, Burst: d.Burst, Duration: time.Second}
	decode.RequireResource(r, d.Resource)
	switch d.ResourceMode {
	case 0:
	case 1:
		if _, ok := p.apis[d.Resource]; !ok && len(r.Errs) == 0 {
			p.f.Warn(decode.SectionParamFlow, i, d.Resource, fmt.Sprintf("custom API %q is not defined in this file: give the Envoy routes of its paths the context_extensions resource: %q", d.Resource, d.Resource))
		}
	default:
		r.Add("resourceMode", "unknown mode %d (0 = route id, 1 = custom API)", d.ResourceMode)
	}
	rule.Grade = sentinelGrade(r, given, d.Grade)
	rule.Count = decode.RequiredWhole(r, given, "count", d.Count)
	switch d.ControlBehavior {
	case 0:
		rule.Behavior = hotparam.Reject
	case 2:
		rule.Behavior = hotparam.Throttle
		rule.MaxQueueingTime = 500 * time.Millisecond
		if given.Has("maxQueueingTimeoutMs") {
			rule.MaxQueueingTime = p.millis(r, "maxQueueingTimeoutMs", d.MaxQueueingTimeoutMs)
		}
	default:
		r.Add("controlBehavior", "unknown behaviour %d (0 = reject, 2 = throttle)", d.ControlBehavior)
	}
	if rule.Grade == hotparam.Concurrency {
		rule.MaxQueueingTime = 0
	}
	switch {
	case given.Has("interval"):
		unit := map[int]int64{0: 1, 1: 60, 2: 3600, 3: 86400}
		mul, ok := unit[d.IntervalUnit]
		if !ok {
			r.Add("intervalUnit", "unknown unit %d (0 = second, 1 = minute, 2 = hour, 3 = day)", d.IntervalUnit)
		} else if d.Interval > int64(1<<62)/mul/int64(time.Second) {
			r.Add("interval", "too large: %d", d.Interval)
		} else {
			rule.Duration = p.seconds(r, "interval", d.Interval*mul)
		}
	case given.Has("intervalSec"):
		rule.Duration = p.seconds(r, "intervalSec", d.IntervalSec)
	}
	if given.Has("paramItem") {
		p.gatewayItem(r, &rule, d.ParamItem)
	} else {
		rule.Param = GatewayRouteParam
		p.f.NeedSource(GatewayRouteParam, "context_extension", "resource")
	}
	p.f.CheckParamFlow(r, &rule, decode.RuleFields{
		Grade: "grade", Behavior: "controlBehavior", Count: "count", Burst: "burst",
		MaxQueueing: "maxQueueingTimeoutMs",
	})
	p.f.AddParamFlow(r, i, rule)
}

// gatewayItem reads a gateway rule's paramItem into rule's param and match.
func (p *parser) gatewayItem(r *decode.Problems, rule *hotparam.Rule, raw json.RawMessage) {
	var it gatewayItemDoc
	g := p.f.Strict(raw, &it, "paramItem.", r.Add)
	if !g.OK() {
		return
	}
	name := strings.ToLower(it.FieldName)
	needName := func() bool {
		if it.FieldName == "" && !r.Failed("paramItem.fieldName") {
			r.Add("paramItem.fieldName", "required for parseStrategy %d", it.ParseStrategy)
			return false
		}
		return true
	}
	switch it.ParseStrategy {
	case 0:
		rule.Param = "client_ip"
		p.f.NeedSource(rule.Param, "client_ip", "")
	case 1:
		rule.Param = "host"
		p.f.NeedSource(rule.Param, "host", "")
	case 2:
		if needName() {
			rule.Param = "header_" + name
			p.f.NeedSource(rule.Param, "header", name)
		}
	case 3:
		if needName() {
			rule.Param = "query_" + it.FieldName
			p.f.NeedSource(rule.Param, "query", it.FieldName)
		}
	case 4:
		if needName() {
			rule.Param = "cookie_" + it.FieldName
			p.f.NeedSource(rule.Param, "cookie", it.FieldName)
		}
	default:
		r.Add("paramItem.parseStrategy", "unknown strategy %d (0 = client IP, 1 = host, 2 = header, 3 = URL param, 4 = cookie)", it.ParseStrategy)
	}
	if it.Pattern == "" {
		return
	}
	var kind match.MatchKind
	pattern := it.Pattern
	switch it.MatchStrategy {
	case 0:
		kind = match.MatchExact
	case 2:
		kind, pattern = match.MatchRegex, "^(?:"+it.Pattern+")$"
	case 3:
		kind = match.MatchContains
	default:
		if it.MatchStrategy < 0 {
			r.Add("paramItem.matchStrategy", "unknown strategy %d (0 = exact, 1 = prefix, 2 = regex, 3 = contains); Sentinel skips such a rule", it.MatchStrategy)
			return
		}
		// Sentinel's GatewayParamParser has no case for prefix (nor for any other value): the
		// pattern is not applied, and every value of the param is limited.
		name := "prefix"
		if it.MatchStrategy != 1 {
			name = "unknown"
		}
		p.f.Warn(decode.SectionParamFlow, r.Index, rule.Resource, fmt.Sprintf("paramItem.matchStrategy %d (%s) is not implemented by Sentinel, which then limits every value of the param whatever the pattern: so does this rule; to limit only the values starting with %q, write a native rule with match: {prefix: %q}", it.MatchStrategy, name, it.Pattern, it.Pattern))
		return
	}
	m, err := match.NewMatch(kind, pattern)
	if err != nil {
		r.Add("paramItem.pattern", "%v", err)
		return
	}
	rule.Match = m
}

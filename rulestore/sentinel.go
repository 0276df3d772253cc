package rulestore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
)

// sentinelFile is the object form of Sentinel's rules.
type sentinelFile struct {
	ParamFlowRules json.RawMessage `json:"paramFlowRules"`
	AuthorityRules json.RawMessage `json:"authorityRules"`
}

// sentinelParamDoc is one of Sentinel's param-flow rules as its datasources store it.
type sentinelParamDoc struct {
	Resource          string            `json:"resource"`
	LimitApp          string            `json:"limitApp"`
	Grade             int               `json:"grade"`
	ParamIdx          int               `json:"paramIdx"`
	Count             float64           `json:"count"`
	ControlBehavior   int               `json:"controlBehavior"`
	DurationInSec     int64             `json:"durationInSec"`
	BurstCount        int64             `json:"burstCount"`
	MaxQueueingTimeMs int64             `json:"maxQueueingTimeMs"`
	ParamFlowItemList []json.RawMessage `json:"paramFlowItemList"`
	ClusterMode       bool              `json:"clusterMode"`
	ClusterConfig     json.RawMessage   `json:"clusterConfig"`
	Regex             bool              `json:"regex"`
}

// sentinelItemDoc is one entry of paramFlowItemList.
type sentinelItemDoc struct {
	Object    scalar `json:"object"`
	ClassType string `json:"classType"`
	Count     int64  `json:"count"`
}

// sentinelAuthorityDoc is one of Sentinel's authority rules.
type sentinelAuthorityDoc struct {
	Resource string `json:"resource"`
	LimitApp string `json:"limitApp"`
	Strategy int    `json:"strategy"`
	Regex    bool   `json:"regex"`
}

// sentinelList reads a top-level list of Sentinel rules of any shape (see classify).
func (p *parser) sentinelList(js []byte) {
	elems, err := scanElements(js)
	if err != nil {
		top := ruleErrs{file: p.file, index: -1}
		top.add("", "cannot parse: %v", err)
		top.done(&p.errs, "")
		return
	}
	p.apiDefinitions(elems)
	p.rules.ParamFlow = slices.Grow(p.rules.ParamFlow, len(elems))
	p.paramPos = slices.Grow(p.paramPos, len(elems))
	for i, e := range elems {
		ms, err := members(e)
		if err != nil {
			r := p.rule(sectionParamFlow, i)
			r.add("", "must be a mapping of fields, got %s", jsonKind(e))
			r.done(&p.errs, "")
			continue
		}
		p.sentinelRule(i, ms, "")
	}
	p.metadataNote()
}

// The shapes of Sentinel rules one list may hold.
const (
	shapeParam     = "param"     // Sentinel's ParamFlowRule
	shapeAuthority = "authority" // Sentinel's AuthorityRule
	shapeGo        = "go"        // sentinel-golang's hotspot.Rule
	shapeGateway   = "gateway"   // Sentinel's GatewayFlowRule
	shapeAPI       = "api"       // Sentinel's ApiDefinition
)

// classify tells a Sentinel rule's shape by its fields: strategy makes an authority rule, and
// apiName or predicateItems an ApiDefinition; otherwise the shape with the most fields only it
// has wins (a misspelt field then still reads as the shape the others say, and is reported with
// did-you-mean), a param-flow rule on a tie:
//   - param-flow: grade, count, paramIdx, paramFlowItemList, limitApp, clusterMode, clusterConfig,
//     burstCount, durationInSec (sentinel-golang has the last two too);
//   - sentinel-golang: threshold, metricType, paramIndex, paramKey, specificItems,
//     paramsMaxCapacity;
//   - gateway: resourceMode, paramItem, intervalSec, interval, intervalUnit,
//     maxQueueingTimeoutMs, burst.
//
// A gateway rule that gives only resource and count (no paramItem) reads as a param-flow rule
// without paramIdx: give it resourceMode (0 for a route) to tell it apart.
func classify(ms []member) string {
	score := map[string]int{}
	for _, m := range ms {
		switch m.name {
		case "strategy":
			return shapeAuthority
		case "apiName", "predicateItems":
			return shapeAPI
		case "resourceMode", "paramItem", "intervalSec", "interval", "intervalUnit", "maxQueueingTimeoutMs", "burst":
			score[shapeGateway]++
		case "threshold", "metricType", "paramIndex", "paramKey", "specificItems", "paramsMaxCapacity":
			score[shapeGo]++
		case "paramIdx", "paramFlowItemList", "limitApp", "clusterMode", "clusterConfig":
			score[shapeParam] += 2 // only Sentinel's param-flow rules have these
		case "grade", "count", "controlBehavior":
			score[shapeParam]++
			score[shapeGateway]++
		}
	}
	best := shapeParam
	for _, shape := range []string{shapeGo, shapeGateway} {
		if score[shape] > score[best] {
			best = shape
		}
	}
	return best
}

// sentinelRule reads list element i of any shape; want, when not "", is the shape its list
// holds (a key of the object form).
func (p *parser) sentinelRule(i int, ms []member, want string) {
	ms = p.unwrapEntity(i, ms)
	if ms == nil {
		return
	}
	shape := want
	if shape == "" {
		shape = classify(ms)
	}
	switch shape {
	case shapeAuthority:
		p.sentinelAuthority(i, ms)
	case shapeAPI:
		// read first by apiDefinitions, for the gateway rules that name them
	case shapeGo:
		p.goHotspot(i, ms)
	case shapeGateway:
		p.gatewayRule(i, ms)
	default:
		p.sentinelParam(i, ms)
	}
}

// sentinelObject reads {"paramFlowRules": [...], "authorityRules": [...]}.
func (p *parser) sentinelObject(ms []member) {
	var f sentinelFile
	top := ruleErrs{file: p.file, index: -1}
	decodeMembers(ms, &f, "", top.add)
	top.done(&p.errs, "")
	if elems, ok := p.list(sentinelAuthorityKey, f.AuthorityRules); ok {
		for i, e := range elems {
			if ms := p.object(sectionAuthority, i, e); ms != nil {
				p.sentinelRule(i, ms, shapeAuthority)
			}
		}
	}
	if elems, ok := p.list(sentinelParamKey, f.ParamFlowRules); ok {
		for i, e := range elems {
			if ms := p.object(sectionParamFlow, i, e); ms != nil {
				p.sentinelRule(i, ms, shapeParam)
			}
		}
	}
	p.metadataNote()
}

// object splits a rule that must be an object; it reports the problem and returns nil if not.
func (p *parser) object(section string, i int, raw json.RawMessage) []member {
	ms, err := members(raw)
	if err != nil {
		r := p.rule(section, i)
		r.add("", "must be a mapping of fields, got %s", jsonKind(raw))
		r.done(&p.errs, "")
		return nil
	}
	return ms
}

func hasMember(ms []member, name string) bool {
	for _, m := range ms {
		if m.name == name {
			return true
		}
	}
	return false
}

// sentinelAuthority decodes and checks one Sentinel authority rule. limitApp is read as
// Sentinel reads it: split on "," and each entry compared as it is written (a Literal rule: no
// trimming, no address matching); empty entries match nothing and are dropped. A limitApp that
// is blank is refused (Sentinel skips such a rule). A second rule on a resource is ignored with
// a warning, as Sentinel keeps the first (see literalNotes for the other warnings).
func (p *parser) sentinelAuthority(i int, ms []member) {
	if ms == nil {
		return
	}
	r := p.rule(sectionAuthority, i)
	var d sentinelAuthorityDoc
	given := decodeMembers(ms, &d, "", r.add)
	rule := authority.Rule{Resource: d.Resource, Literal: true}
	requireResource(r, d.Resource)
	if d.Regex {
		r.add("regex", "resource patterns are not supported; name each resource")
	}
	switch {
	case fieldFailed(r, "strategy"):
	case !given.has("strategy"):
		r.add("strategy", "required: 0 (white list) or 1 (black list)")
	case d.Strategy == 0:
		rule.Strategy = authority.White
	case d.Strategy == 1:
		rule.Strategy = authority.Black
	default:
		r.add("strategy", "unknown strategy %d (0 = white, 1 = black)", d.Strategy)
	}
	if strings.TrimSpace(d.LimitApp) == "" && !fieldFailed(r, "limitApp") {
		r.add("limitApp", "must list at least one origin (comma-separated); Sentinel skips a rule whose limitApp is blank")
	}
	for o := range strings.SplitSeq(d.LimitApp, ",") {
		if o != "" {
			rule.Origins = append(rule.Origins, o)
		}
	}
	if len(r.errs) == 0 {
		if first, dup := p.sentinelAuth[d.Resource]; dup {
			p.warn(sectionAuthority, i, d.Resource, fmt.Sprintf("a second authority rule on this resource is ignored, as Sentinel ignores it: %s[%d] is the one in force (join the lists into one rule if both were meant)", sectionAuthority, p.number(sectionAuthority, first)))
			r.done(&p.errs, d.Resource)
			return
		}
		if p.sentinelAuth == nil {
			p.sentinelAuth = make(map[string]int)
		}
		p.sentinelAuth[d.Resource] = i
		p.literalNotes(i, d.Resource, d.LimitApp, rule.Origins)
	}
	p.addAuthority(r, rule)
}

// literalNotes warns about the entries of an imported limitApp that Sentinel's literal
// comparison gives a meaning their writer probably did not intend: spaces around a name (the
// caller must send them too), a CIDR range (it matches only an origin of that very text), and a
// list that names no origin at all.
func (p *parser) literalNotes(i int, resource, limitApp string, origins []string) {
	var spaced, ranges []string
	for _, o := range origins {
		switch {
		case strings.TrimSpace(o) != o:
			spaced = append(spaced, strconv.Quote(o))
		case strings.Contains(o, "/") && authority.LooksLikeIP(o):
			ranges = append(ranges, strconv.Quote(o))
		}
	}
	if len(origins) == 0 {
		p.warn(sectionAuthority, i, resource, fmt.Sprintf("limitApp %q names no origin: as in Sentinel, the rule matches no caller", limitApp))
	}
	if len(spaced) > 0 {
		p.warn(sectionAuthority, i, resource, fmt.Sprintf("limitApp entries %s have spaces around them: as in Sentinel, they match only an origin with the same spaces (write the list without spaces after the commas)", strings.Join(spaced, ", ")))
	}
	if len(ranges) > 0 {
		p.warn(sectionAuthority, i, resource, fmt.Sprintf("limitApp entries %s are compared as text, as in Sentinel: a range matches only an origin written the same, not the addresses in it (a native rule matches addresses: origins: [...])", strings.Join(ranges, ", ")))
	}
}

// sentinelParam decodes and checks one Sentinel param-flow rule.
func (p *parser) sentinelParam(i int, ms []member) {
	if ms == nil {
		return
	}
	r := p.rule(sectionParamFlow, i)
	var d sentinelParamDoc
	given := decodeMembers(ms, &d, "", r.add)
	rule := hotparam.Rule{
		Resource: d.Resource,
		Burst:    d.BurstCount,
		Duration: time.Second,
	}
	requireResource(r, d.Resource)
	if d.Regex {
		r.add("regex", "resource patterns are not supported; name each resource")
	}
	if app := strings.TrimSpace(d.LimitApp); app != "" && app != "default" {
		r.add("limitApp", "only \"default\" is supported: a param-flow rule applies to every origin, got %q", d.LimitApp)
	}
	switch {
	case fieldFailed(r, "paramIdx"):
	case !given.has("paramIdx"):
		r.add("paramIdx", "required")
	default:
		rule.Param = p.paramName(r, d.ParamIdx)
	}
	rule.Count = sentinelCount(r, given, d.Count)
	rule.Grade = sentinelGrade(r, given, d.Grade)
	var ignored []string // fields Sentinel's param checker ignores in this rule's mode
	switch {
	case d.ControlBehavior == 2:
		rule.Behavior = hotparam.Throttle
	case d.ControlBehavior < 0:
		r.add("controlBehavior", "must not be negative, got %d (Sentinel skips such a rule)", d.ControlBehavior)
	default:
		// Sentinel's param checker runs every behaviour but the rate limiter (2) as the
		// default: warm-up (1, 3) is not applied to param-flow rules.
		rule.Behavior = hotparam.Reject
		if d.ControlBehavior != 0 {
			ignored = append(ignored, fmt.Sprintf("controlBehavior %d (run as 0, reject)", d.ControlBehavior))
		}
	}
	if given.has("durationInSec") {
		if d.DurationInSec < 1 {
			r.add("durationInSec", "must be at least 1, got %d", d.DurationInSec)
		} else if d.DurationInSec > int64(1<<63-1)/int64(time.Second) {
			r.add("durationInSec", "must be at most %d, got %d", int64(1<<63-1)/int64(time.Second), d.DurationInSec)
		} else {
			rule.Duration = time.Duration(d.DurationInSec) * time.Second
		}
	}
	if d.MaxQueueingTimeMs > int64(1<<63-1)/int64(time.Millisecond) {
		r.add("maxQueueingTimeMs", "too large: %d", d.MaxQueueingTimeMs)
	} else {
		rule.MaxQueueingTime = time.Duration(d.MaxQueueingTimeMs) * time.Millisecond
	}
	if rule.Behavior != hotparam.Throttle || rule.Grade != hotparam.QPS {
		if rule.MaxQueueingTime > 0 {
			ignored = append(ignored, "maxQueueingTimeMs")
		}
		rule.MaxQueueingTime = 0
	}
	if rule.Behavior == hotparam.Throttle || rule.Grade != hotparam.QPS {
		if rule.Burst > 0 {
			ignored = append(ignored, "burstCount")
		}
		rule.Burst = 0
	}
	var num *Number
	rule.Items, num = p.sentinelItems(r, d.Resource, d.ParamFlowItemList)
	if num != nil {
		rule.Match = num
	}
	cluster := p.sentinelCluster(r, &rule, d, given)
	if len(ignored) > 0 && len(r.errs) == 0 && !rule.Cluster {
		p.warn(sectionParamFlow, i, d.Resource, fmt.Sprintf("%s: ignored in this rule's mode, as Sentinel's param checker ignores it", strings.Join(ignored, ", ")))
	}
	p.checkParamFlow(r, &rule, ruleFields{
		grade: "grade", behavior: "controlBehavior", count: "count", burst: "burstCount",
		maxQueueing: "maxQueueingTimeMs", cluster: "clusterMode",
	})
	if len(r.errs) == 0 {
		for _, w := range cluster.notes {
			p.warn(sectionParamFlow, i, rule.Resource, w)
		}
		if cluster.skip {
			r.done(&p.errs, rule.Resource)
			return
		}
	}
	p.addParamFlow(r, i, rule)
}

// paramName resolves Sentinel's paramIdx through ParseOptions.ParamNames; a negative index counts
// from the end, as in Sentinel.
func (p *parser) paramName(r *ruleErrs, idx int) string {
	names := p.opts.ParamNames
	i := idx
	if i < 0 {
		i += len(names)
	}
	if i < 0 || i >= len(names) {
		if len(names) == 0 {
			r.add("paramIdx", "index %d is out of range: no param names are configured to resolve it", idx)
		} else {
			r.add("paramIdx", "index %d is out of range: %d param names are configured (%s)", idx, len(names), strings.Join(names, ", "))
		}
		return ""
	}
	if names[i] == "" {
		r.add("paramIdx", "index %d names an empty param", idx)
	}
	return names[i]
}

// sentinelCount is a Sentinel rule's count as its checker uses it: (long) count, a fraction cut
// off. Negative counts are refused (Sentinel skips such a rule).
func sentinelCount(r *ruleErrs, given fieldSet, f float64) int64 {
	switch {
	case fieldFailed(r, "count"):
		return 0
	case !given.has("count"):
		r.add("count", "required")
		return 0
	case f < 0:
		r.add("count", "must not be negative, got %s (Sentinel skips such a rule)", formatNumber(f))
		return 0
	case f > 1<<62:
		r.add("count", "too large: %s (at most 2^62)", formatNumber(f))
		return 0
	}
	return int64(f)
}

// sentinelGrade is the grade of a Sentinel rule: 1 (QPS, also when not given) or 0 (thread
// count, the service's concurrency); any other is reported.
func sentinelGrade(r *ruleErrs, given fieldSet, grade int) hotparam.Grade {
	switch {
	case !given.has("grade") || grade == 1:
		return hotparam.QPS
	case grade == 0:
		return hotparam.Concurrency
	}
	r.add("grade", "unknown grade %d (1 = QPS, 0 = thread count)", grade)
	return hotparam.QPS
}

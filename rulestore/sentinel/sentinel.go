// Package sentinel reads rules in Sentinel's formats, with Sentinel's meaning: a list of rules
// of any shape (Sentinel's param-flow and authority rules, sentinel-golang's hotspot rules,
// Sentinel's gateway rules and API definitions, dashboard entities unwrapped), or Sentinel's
// object with the lists paramFlowRules and authorityRules.
package sentinel

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// The top-level keys of Sentinel's object form.
const (
	paramKey     = "paramFlowRules"
	authorityKey = "authorityRules"
)

// Register registers the document types of Sentinel's formats, and the keys of its object
// form, with reg.
func Register(reg *decode.Registry) {
	reg.Register([]string{paramKey, authorityKey},
		sentinelFile{}, sentinelParamDoc{}, sentinelItemDoc{}, sentinelClusterDoc{}, sentinelAuthorityDoc{},
		goHotspotDoc{}, goSpecificValue{}, gatewayDoc{}, gatewayItemDoc{}, apiDoc{}, apiPredicateDoc{})
}

// IsObject reports whether a top-level object, split into ms, uses Sentinel's list names.
func IsObject(ms []decode.Member) bool {
	for _, m := range ms {
		if m.Name == paramKey || m.Name == authorityKey {
			return true
		}
	}
	return false
}

// List reads js, a top-level list of Sentinel rules of any shape (see classify), into f.
func List(f *decode.File, js []byte) {
	f.Loc.SectionKey = func(string) string { return "" }
	p := parser{f: f}
	p.sentinelList(js)
}

// Object reads Sentinel's object form, whose top level f has split into ms, into f.
func Object(f *decode.File, ms []decode.Member) {
	f.Loc.SectionKey = func(section string) string {
		if section == decode.SectionAuthority {
			return authorityKey
		}
		return paramKey
	}
	p := parser{f: f}
	p.sentinelObject(ms)
}

// parser reads one file of Sentinel's formats into f.
type parser struct {
	f            *decode.File
	sawMeta      bool                // Sentinel dashboard metadata was set aside
	sentinelAuth map[string]int      // resources of the Sentinel authority rules kept: the rule's index
	apis         map[string][]string // ApiDefinitions by name: their paths, for messages
}

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
	Object    decode.Scalar `json:"object"`
	ClassType string        `json:"classType"`
	Count     int64         `json:"count"`
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
	elems, err := decode.Elements(js)
	if err != nil {
		top := decode.Problems{File: p.f.Name, Index: -1}
		top.Add("", "cannot parse: %v", err)
		top.Done(&p.f.Errs, "")
		return
	}
	p.apiDefinitions(elems)
	p.f.ParamFlow = slices.Grow(p.f.ParamFlow, len(elems))
	p.f.ParamPos = slices.Grow(p.f.ParamPos, len(elems))
	for i, e := range elems {
		ms, err := p.f.Members(e)
		if err != nil {
			r := p.f.Rule(decode.SectionParamFlow, i)
			r.Add("", "must be a mapping of fields, got %s", decode.Kind(e))
			r.Done(&p.f.Errs, "")
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
func classify(ms []decode.Member) string {
	score := map[string]int{}
	for _, m := range ms {
		switch m.Name {
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
func (p *parser) sentinelRule(i int, ms []decode.Member, want string) {
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
func (p *parser) sentinelObject(ms []decode.Member) {
	var f sentinelFile
	top := decode.Problems{File: p.f.Name, Index: -1}
	p.f.Decode(ms, &f, "", top.Add)
	top.Done(&p.f.Errs, "")
	if elems, ok := p.f.List(authorityKey, f.AuthorityRules); ok {
		for i, e := range elems {
			if ms := p.object(decode.SectionAuthority, i, e); ms != nil {
				p.sentinelRule(i, ms, shapeAuthority)
			}
		}
	}
	if elems, ok := p.f.List(paramKey, f.ParamFlowRules); ok {
		for i, e := range elems {
			if ms := p.object(decode.SectionParamFlow, i, e); ms != nil {
				p.sentinelRule(i, ms, shapeParam)
			}
		}
	}
	p.metadataNote()
}

// object splits a rule that must be an object; it reports the problem and returns nil if not.
func (p *parser) object(section string, i int, raw json.RawMessage) []decode.Member {
	ms, err := p.f.Members(raw)
	if err != nil {
		r := p.f.Rule(section, i)
		r.Add("", "must be a mapping of fields, got %s", decode.Kind(raw))
		r.Done(&p.f.Errs, "")
		return nil
	}
	return ms
}

func hasMember(ms []decode.Member, name string) bool {
	for _, m := range ms {
		if m.Name == name {
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
func (p *parser) sentinelAuthority(i int, ms []decode.Member) {
	if ms == nil {
		return
	}
	r := p.f.Rule(decode.SectionAuthority, i)
	var d sentinelAuthorityDoc
	given := p.f.Decode(ms, &d, "", r.Add)
	rule := authority.Rule{Resource: d.Resource, Literal: true}
	decode.RequireResource(r, d.Resource)
	if d.Regex {
		r.Add("regex", "resource patterns are not supported; name each resource")
	}
	switch {
	case r.Failed("strategy"):
	case !given.Has("strategy"):
		r.Add("strategy", "required: 0 (white list) or 1 (black list)")
	case d.Strategy == 0:
		rule.Strategy = authority.White
	case d.Strategy == 1:
		rule.Strategy = authority.Black
	default:
		r.Add("strategy", "unknown strategy %d (0 = white, 1 = black)", d.Strategy)
	}
	if strings.TrimSpace(d.LimitApp) == "" && !r.Failed("limitApp") {
		r.Add("limitApp", "must list at least one origin (comma-separated); Sentinel skips a rule whose limitApp is blank")
	}
	for o := range strings.SplitSeq(d.LimitApp, ",") {
		if o != "" {
			rule.Origins = append(rule.Origins, o)
		}
	}
	if len(r.Errs) == 0 {
		if first, dup := p.sentinelAuth[d.Resource]; dup {
			p.f.Warn(decode.SectionAuthority, i, d.Resource, fmt.Sprintf("a second authority rule on this resource is ignored, as Sentinel ignores it: %s[%d] is the one in force (join the lists into one rule if both were meant)", decode.SectionAuthority, p.f.Number(decode.SectionAuthority, first)))
			r.Done(&p.f.Errs, d.Resource)
			return
		}
		if p.sentinelAuth == nil {
			p.sentinelAuth = make(map[string]int)
		}
		p.sentinelAuth[d.Resource] = i
		p.literalNotes(i, d.Resource, d.LimitApp, rule.Origins)
	}
	p.f.AddAuthority(r, rule)
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
		p.f.Warn(decode.SectionAuthority, i, resource, fmt.Sprintf("limitApp %q names no origin: as in Sentinel, the rule matches no caller", limitApp))
	}
	if len(spaced) > 0 {
		p.f.Warn(decode.SectionAuthority, i, resource, fmt.Sprintf("limitApp entries %s have spaces around them: as in Sentinel, they match only an origin with the same spaces (write the list without spaces after the commas)", strings.Join(spaced, ", ")))
	}
	if len(ranges) > 0 {
		p.f.Warn(decode.SectionAuthority, i, resource, fmt.Sprintf("limitApp entries %s are compared as text, as in Sentinel: a range matches only an origin written the same, not the addresses in it (a native rule matches addresses: origins: [...])", strings.Join(ranges, ", ")))
	}
}

// sentinelParam decodes and checks one Sentinel param-flow rule.
func (p *parser) sentinelParam(i int, ms []decode.Member) {
	if ms == nil {
		return
	}
	r := p.f.Rule(decode.SectionParamFlow, i)
	var d sentinelParamDoc
	given := p.f.Decode(ms, &d, "", r.Add)
	rule := hotparam.Rule{
		Resource: d.Resource,
		Burst:    d.BurstCount,
		Duration: time.Second,
	}
	decode.RequireResource(r, d.Resource)
	if d.Regex {
		r.Add("regex", "resource patterns are not supported; name each resource")
	}
	if app := strings.TrimSpace(d.LimitApp); app != "" && app != "default" {
		r.Add("limitApp", "only \"default\" is supported: a param-flow rule applies to every origin, got %q", d.LimitApp)
	}
	switch {
	case r.Failed("paramIdx"):
	case !given.Has("paramIdx"):
		r.Add("paramIdx", "required")
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
		r.Add("controlBehavior", "must not be negative, got %d (Sentinel skips such a rule)", d.ControlBehavior)
	default:
		// Sentinel's param checker runs every behaviour but the rate limiter (2) as the
		// default: warm-up (1, 3) is not applied to param-flow rules.
		rule.Behavior = hotparam.Reject
		if d.ControlBehavior != 0 {
			ignored = append(ignored, fmt.Sprintf("controlBehavior %d (run as 0, reject)", d.ControlBehavior))
		}
	}
	if given.Has("durationInSec") {
		if d.DurationInSec < 1 {
			r.Add("durationInSec", "must be at least 1, got %d", d.DurationInSec)
		} else if d.DurationInSec > int64(1<<63-1)/int64(time.Second) {
			r.Add("durationInSec", "must be at most %d, got %d", int64(1<<63-1)/int64(time.Second), d.DurationInSec)
		} else {
			rule.Duration = time.Duration(d.DurationInSec) * time.Second
		}
	}
	if d.MaxQueueingTimeMs > int64(1<<63-1)/int64(time.Millisecond) {
		r.Add("maxQueueingTimeMs", "too large: %d", d.MaxQueueingTimeMs)
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
	var num *match.Number
	rule.Items, num = p.sentinelItems(r, d.Resource, d.ParamFlowItemList)
	if num != nil {
		rule.Match = num
	}
	cluster := p.sentinelCluster(r, &rule, d, given)
	if len(ignored) > 0 && len(r.Errs) == 0 && !rule.Cluster {
		p.f.Warn(decode.SectionParamFlow, i, d.Resource, fmt.Sprintf("%s: ignored in this rule's mode, as Sentinel's param checker ignores it", strings.Join(ignored, ", ")))
	}
	p.f.CheckParamFlow(r, &rule, decode.RuleFields{
		Grade: "grade", Behavior: "controlBehavior", Count: "count", Burst: "burstCount",
		MaxQueueing: "maxQueueingTimeMs", Cluster: "clusterMode",
	})
	if len(r.Errs) == 0 {
		for _, w := range cluster.notes {
			p.f.Warn(decode.SectionParamFlow, i, rule.Resource, w)
		}
		if cluster.skip {
			r.Done(&p.f.Errs, rule.Resource)
			return
		}
	}
	p.f.AddParamFlow(r, i, rule)
}

// paramName resolves Sentinel's paramIdx through ParseOptions.ParamNames; a negative index counts
// from the end, as in Sentinel.
func (p *parser) paramName(r *decode.Problems, idx int) string {
	names := p.f.Opts.ParamNames
	i := idx
	if i < 0 {
		i += len(names)
	}
	if i < 0 || i >= len(names) {
		if len(names) == 0 {
			r.Add("paramIdx", "index %d is out of range: no param names are configured to resolve it", idx)
		} else {
			r.Add("paramIdx", "index %d is out of range: %d param names are configured (%s)", idx, len(names), strings.Join(names, ", "))
		}
		return ""
	}
	if names[i] == "" {
		r.Add("paramIdx", "index %d names an empty param", idx)
	}
	return names[i]
}

// sentinelCount is a Sentinel rule's count as its checker uses it: (long) count, a fraction cut
// off. Negative counts are refused (Sentinel skips such a rule).
func sentinelCount(r *decode.Problems, given decode.Fields, f float64) int64 {
	switch {
	case r.Failed("count"):
		return 0
	case !given.Has("count"):
		r.Add("count", "required")
		return 0
	case f < 0:
		r.Add("count", "must not be negative, got %s (Sentinel skips such a rule)", decode.FormatNumber(f))
		return 0
	case f > 1<<62:
		r.Add("count", "too large: %s (at most 2^62)", decode.FormatNumber(f))
		return 0
	}
	return int64(f)
}

// sentinelGrade is the grade of a Sentinel rule: 1 (QPS, also when not given) or 0 (thread
// count, the service's concurrency); any other is reported.
func sentinelGrade(r *decode.Problems, given decode.Fields, grade int) hotparam.Grade {
	switch {
	case !given.Has("grade") || grade == 1:
		return hotparam.QPS
	case grade == 0:
		return hotparam.Concurrency
	}
	r.Add("grade", "unknown grade %d (1 = QPS, 0 = thread count)", grade)
	return hotparam.QPS
}

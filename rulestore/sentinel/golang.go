package sentinel

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// sentinel-golang hotspot rules are read as sentinel-golang's rule manager reads them
// (core/hotspot: IsValidRule, newBaseTrafficShapingController, PerformChecking, and the
// datasource's parseSpecificItems):
//   - a missing metricType is its zero value, Concurrency;
//   - a QPS rule needs a durationInSec above 0, and a rule may not give both a paramIndex above
//     0 and a paramKey: sentinel-golang refuses such a rule, and so is it refused here;
//   - a Concurrency rule counts values in flight whatever its controlBehavior, burstCount,
//     maxQueueingTimeMs and durationInSec say, a Reject rule ignores maxQueueingTimeMs, a
//     Throttling rule burstCount: such fields are accepted and ignored, with a warning;
//   - specificItems are typed by valKind: items that are one value after parsing are resolved
//     as sentinel-golang's map resolves them, the last one winning, with a warning; int and
//     float64 items make the rule compare its values as numbers (match.Number).

// goHotspotDoc is one of sentinel-golang's hotspot.Rule as its datasources hold it (JSON or
// YAML, with the json tags of core/hotspot/rule.go).
type goHotspotDoc struct {
	ID                string          `json:"id"`
	Resource          string          `json:"resource"`
	MetricType        decode.Scalar   `json:"metricType"`
	ControlBehavior   decode.Scalar   `json:"controlBehavior"`
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
	ValKind   decode.Scalar `json:"valKind"`
	ValStr    decode.Scalar `json:"valStr"`
	Threshold int64         `json:"threshold"`
}

// goHotspot decodes and checks one sentinel-golang hotspot rule. metricType is 0 (Concurrency,
// the default) or 1 (QPS), controlBehavior 0 (Reject) or 1 (Throttling); their names are
// accepted too. paramKey, when given, names the param; otherwise paramIndex resolves through
// ParamNames as Sentinel's paramIdx does.
func (p *parser) goHotspot(i int, ms []decode.Member) {
	r := p.f.Rule(decode.SectionParamFlow, i)
	var d goHotspotDoc
	given := p.f.Decode(ms, &d, "", r.Add)
	rule := hotparam.Rule{Resource: d.Resource, Burst: d.BurstCount, Duration: time.Second}
	decode.RequireResource(r, d.Resource)
	qps := false
	switch mt := strings.ToLower(d.MetricType.Text); {
	case r.Failed("metricType"):
	case !given.Has("metricType") || mt == "0" || mt == "concurrency":
		rule.Grade = hotparam.Concurrency
	case mt == "1" || mt == "qps":
		rule.Grade, qps = hotparam.QPS, true
	default:
		r.Add("metricType", "unknown metric type %q (0 = Concurrency, the default; 1 = QPS); sentinel-golang ignores such a rule", d.MetricType.Text)
	}
	throttling := false
	switch cb := strings.ToLower(d.ControlBehavior.Text); {
	case r.Failed("controlBehavior"):
	case !given.Has("controlBehavior") || cb == "0" || cb == "reject":
	case cb == "1" || cb == "throttling":
		throttling = true
	default:
		r.Add("controlBehavior", "unknown behaviour %q (0 = Reject, 1 = Throttling); sentinel-golang ignores such a rule", d.ControlBehavior.Text)
	}
	var ignored []string // fields sentinel-golang ignores in this rule's mode
	switch {
	case d.ParamKey != "" && d.ParamIndex > 0:
		r.Add("paramKey", "given with paramIndex %d: sentinel-golang refuses a rule with both (give paramKey alone, or paramIndex alone)", d.ParamIndex)
	case d.ParamKey != "":
		rule.Param = d.ParamKey
		if d.ParamIndex < 0 {
			ignored = append(ignored, fmt.Sprintf("paramIndex %d (paramKey names the param)", d.ParamIndex))
		}
	case !r.Failed("paramIndex"):
		rule.Param = p.paramNameAt(r, "paramIndex", d.ParamIndex)
	}
	rule.Count = decode.RequiredWhole(r, given, "threshold", d.Threshold)
	// checkControlBehaviorField: burstCount is checked on a Reject rule, maxQueueingTimeMs on a
	// Throttling one, whatever the metric type; the other is not read.
	if d.BurstCount < 0 && !throttling {
		r.Add("burstCount", "must not be negative, got %d (sentinel-golang refuses such a rule)", d.BurstCount)
	}
	if d.MaxQueueingTimeMs < 0 && throttling {
		r.Add("maxQueueingTimeMs", "must not be negative, got %d (sentinel-golang refuses such a rule)", d.MaxQueueingTimeMs)
	}
	rule.Burst = max(rule.Burst, 0)
	if qps && !r.Failed("durationInSec") {
		if given.Has("durationInSec") && d.DurationInSec > 0 {
			rule.Duration = p.seconds(r, "durationInSec", d.DurationInSec)
		} else {
			r.Add("durationInSec", "required on a QPS rule, at least 1, got %d: sentinel-golang refuses a QPS rule without it", d.DurationInSec)
		}
	}
	switch {
	case rule.Grade == hotparam.Concurrency:
		// PerformChecking counts a Concurrency rule's values in flight, whatever the rest says.
		if throttling {
			ignored = append(ignored, "controlBehavior 1 (Throttling)")
		}
		if given.Has("durationInSec") {
			ignored = append(ignored, "durationInSec")
		}
		if d.BurstCount > 0 {
			ignored = append(ignored, "burstCount")
		}
		if d.MaxQueueingTimeMs > 0 {
			ignored = append(ignored, "maxQueueingTimeMs")
		}
		rule.Burst = 0
	case throttling:
		rule.Behavior = hotparam.Throttle
		rule.MaxQueueingTime = p.millis(r, "maxQueueingTimeMs", max(d.MaxQueueingTimeMs, 0))
		if d.BurstCount > 0 {
			ignored = append(ignored, "burstCount")
		}
		rule.Burst = 0
	default:
		if d.MaxQueueingTimeMs > 0 {
			ignored = append(ignored, "maxQueueingTimeMs")
		}
	}
	if len(ignored) > 0 && len(r.Errs) == 0 {
		p.f.Warn(decode.SectionParamFlow, i, d.Resource, fmt.Sprintf("%s: ignored in this rule's mode, as sentinel-golang ignores it", strings.Join(ignored, ", ")))
	}
	// paramsMaxCapacity 0 or below is sentinel-golang's default capacity, and so the service's.
	if d.ParamsMaxCapacity > 1<<31-1 {
		r.Add("paramsMaxCapacity", "must be at most %d, got %d", 1<<31-1, d.ParamsMaxCapacity)
	} else if d.ParamsMaxCapacity > 0 {
		rule.Capacity = int(d.ParamsMaxCapacity)
	}
	if given.Has("specificItems") {
		var num *match.Number
		rule.Items, num = p.goSpecificItems(r, d.Resource, d.SpecificItems)
		if num != nil {
			rule.Match = num
		}
	}
	p.f.CheckParamFlow(r, &rule, decode.RuleFields{
		Grade: "metricType", Behavior: "controlBehavior", Count: "threshold", Burst: "burstCount",
		MaxQueueing: "maxQueueingTimeMs",
	})
	p.f.AddParamFlow(r, i, rule)
}

// goSpecificItems reads specificItems in either form: a map from value to threshold, or the
// older list of {valKind, valStr, threshold} (valKind 0 int, 1 string, 2 bool, 3 float64, or
// their names KindInt, KindString, KindBool, KindFloat64), read as the datasource's
// parseSpecificItems reads it. It returns the items by key and the rule's Matcher (a match.Number
// when the list's items are numbers; nil otherwise).
func (p *parser) goSpecificItems(r *decode.Problems, resource string, raw json.RawMessage) (map[string]int64, *match.Number) {
	if ms, err := p.f.Members(raw); err == nil {
		items := make(map[string]int64, len(ms))
		for _, m := range ms {
			field := "specificItems." + m.Name
			var n int64
			if err := json.Unmarshal(m.Value, &n); err != nil {
				r.Add(field, "must be a whole number, got %s", decode.Kind(m.Value))
				continue
			}
			if _, dup := items[m.Name]; dup {
				r.Add(field, "given twice")
				continue
			}
			if m.Name == "" {
				r.Add("specificItems", "a value must not be empty")
				continue
			}
			if n < 0 {
				r.Add(field, "must not be negative, got %d", n)
				continue
			}
			items[m.Name] = n
		}
		return items, nil
	}
	list, err := decode.Elements(raw)
	if err != nil {
		r.Add("specificItems", "must be a mapping of value to threshold or a list of {valKind, valStr, threshold}, got %s", decode.Kind(raw))
		return nil, nil
	}
	type item struct {
		text, key string
		count     int64
		at        int
	}
	var kept []item
	var num *match.Number
	kinds := map[string]bool{}
	for j, raw := range list {
		prefix := fmt.Sprintf("specificItems[%d].", j)
		var it goSpecificValue
		g := p.f.Strict(raw, &it, prefix, r.Add)
		if !g.OK() {
			continue
		}
		for _, f := range []string{"valStr", "threshold"} {
			if !g.Has(f) && !r.Failed(prefix+f) {
				r.Add(prefix+f, "required")
			}
		}
		value := it.ValStr.Text
		if !g.Has("valStr") || !g.Has("threshold") {
			continue
		}
		if it.Threshold < 0 {
			r.Add(prefix+"threshold", "must not be negative, got %d", it.Threshold)
			continue
		}
		key, kind, ok := goItemKey(it.ValKind.Text, value)
		switch {
		case kind == "":
			r.Add(prefix+"valKind", "unknown kind %q (0 = KindInt, 1 = KindString, 2 = KindBool, 3 = KindFloat64)", it.ValKind.Text)
			continue
		case value == "":
			r.Add(prefix+"valStr", "must not be empty")
			continue
		case !ok:
			r.Add(prefix+"valStr", "%q is not a value of valKind %s; sentinel-golang drops such an item, and the value would lose its threshold", value, it.ValKind.Text)
			continue
		}
		if kind == "int" || kind == "float" {
			if num == nil {
				num = &match.Number{Kind: kind, Bits: 64}
			}
			kinds[kind] = true
		} else if key != value {
			p.f.Warn(decode.SectionParamFlow, r.Index, resource, fmt.Sprintf("%svalStr %q of valKind %s is the value %q to sentinel-golang, and so here", prefix, value, it.ValKind.Text, key))
		}
		kept = append(kept, item{value, key, it.Threshold, j})
	}
	if len(kinds) > 1 {
		p.f.Warn(decode.SectionParamFlow, r.Index, resource, "specificItems mixes int and float64 items: values are compared as the first item's kind (in sentinel-golang an argument matches only the items of its own Go type)")
	}
	items := make(map[string]int64, len(kept))
	last := make(map[string]item, len(kept))
	for _, it := range kept {
		if num != nil {
			it.key = num.Key(it.key)
		}
		if prev, dup := last[it.key]; dup {
			p.f.Warn(decode.SectionParamFlow, r.Index, resource, fmt.Sprintf("specificItems[%d] (%q) and specificItems[%d] (%q) are one value (%s) to sentinel-golang: the last one's threshold, %d, applies, as in sentinel-golang", prev.at, prev.text, it.at, it.text, it.key, it.count))
		}
		last[it.key] = it
		items[it.key] = it.count
	}
	return items, num
}

// goItemKey is the key of a specificItems entry of valKind kindText: the value as
// parseSpecificItems parses it (strconv.Atoi, ParseBool, ParseFloat rounded to five decimals),
// written canonically. kind is "int", "string", "bool" or "float", or "" for an unknown
// valKind; ok is false when value is no value of its kind.
func goItemKey(kindText, value string) (key, kind string, ok bool) {
	switch strings.ToLower(kindText) {
	case "", "0", "kindint":
		n, err := strconv.ParseInt(value, 10, 64)
		return strconv.FormatInt(n, 10), "int", err == nil
	case "1", "kindstring":
		return value, "string", true
	case "2", "kindbool":
		b, err := strconv.ParseBool(value)
		return strconv.FormatBool(b), "bool", err == nil
	case "3", "kindfloat64":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return "", "float", false
		}
		f, err = strconv.ParseFloat(strconv.FormatFloat(f, 'f', 5, 64), 64)
		return strconv.FormatFloat(f, 'g', -1, 64), "float", err == nil
	}
	return "", "", false
}

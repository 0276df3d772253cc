package sentinel

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/extauthz/extauthz/rulestore/decode"
	"github.com/extauthz/extauthz/rulestore/match"
)

// sentinelItems reads a paramFlowItemList as Sentinel's parseHotItems does: each object parsed
// by its classType, an item whose object is no value of its class refused (Sentinel would drop
// it, and its value would lose its exception), and items equal after parsing resolved as
// Sentinel's map resolves them: the last one wins, with a warning. It returns the items by key
// and the rule's Matcher (a match.Number when the items are numbers; nil otherwise).
func (p *parser) sentinelItems(r *decode.Problems, resource string, raws []json.RawMessage) (map[string]int64, *match.Number) {
	if len(raws) == 0 {
		return nil, nil
	}
	type item struct {
		object, key string
		count       int64
		at          int
	}
	var kept []item
	var num *match.Number
	classes := map[string]bool{}
	for j, raw := range raws {
		prefix := fmt.Sprintf("paramFlowItemList[%d].", j)
		var it sentinelItemDoc
		g := p.f.Strict(raw, &it, prefix, r.Add)
		if !g.OK() {
			continue
		}
		for _, f := range []string{"object", "count"} {
			if !g.Has(f) && !r.Failed(prefix+f) {
				r.Add(prefix+f, "required")
			}
		}
		object, ok := p.f.Text(r, prefix+"object", it.Object)
		if !ok || !g.Has("object") || !g.Has("count") {
			continue
		}
		if it.Count < 0 {
			r.Add(prefix+"count", "must not be negative, got %d (Sentinel drops such an item)", it.Count)
			continue
		}
		kind, bits := match.ItemClass(it.ClassType)
		key, reason := object, ""
		switch kind {
		case "int", "float":
			n := &match.Number{Kind: kind, Bits: bits}
			if k, ok := n.Canonical(object); ok {
				key = k
			} else {
				reason = fmt.Sprintf("%q is not a value of classType %s; Sentinel drops such an item, and the value would lose its exception", object, it.ClassType)
			}
			if num == nil {
				num = n
			}
			classes[kind+strconv.Itoa(bits)] = true
		case "bool":
			key = strconv.FormatBool(strings.EqualFold(object, "true")) // Boolean.parseBoolean
		case "char":
			if object == "" {
				reason = "must not be empty"
			} else {
				c, _ := utf8.DecodeRuneInString(object)
				key = string(c)
			}
		default:
			if object == "" {
				reason = "must not be empty"
			}
			if c := it.ClassType; c != "" && c != "String" && c != "java.lang.String" {
				p.f.Warn(decode.SectionParamFlow, r.Index, resource, fmt.Sprintf("%sclassType %q is read as String by Sentinel (its typed classes are int, long, short, byte, double, float, boolean, char and java.lang.Integer, ...): the item is compared as text, and so here", prefix, c))
			}
		}
		if reason != "" {
			r.Add(prefix+"object", "%s", reason)
			continue
		}
		if key != object && kind != "int" && kind != "float" {
			p.f.Warn(decode.SectionParamFlow, r.Index, resource, fmt.Sprintf("%sobject %q of classType %s is the value %q to Sentinel, and so here", prefix, object, it.ClassType, key))
		}
		kept = append(kept, item{object, key, it.Count, j})
	}
	if len(classes) > 1 {
		p.f.Warn(decode.SectionParamFlow, r.Index, resource, "paramFlowItemList mixes number types: values are compared as the first item's type (in Sentinel an argument matches only the items of its own Java type)")
	}
	items := make(map[string]int64, len(kept))
	last := make(map[string]item, len(kept))
	for _, it := range kept {
		if prev, dup := last[it.key]; dup {
			p.f.Warn(decode.SectionParamFlow, r.Index, resource, fmt.Sprintf("paramFlowItemList[%d] (%q) and paramFlowItemList[%d] (%q) are one value (%s) to Sentinel: the last one's count, %d, applies, as in Sentinel", prev.at, prev.object, it.at, it.object, it.key, it.count))
		}
		last[it.key] = it
		items[it.key] = it.count
	}
	if num == nil && len(items) > 0 {
		return items, nil
	}
	return items, num
}

package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
	sentinelrules "github.com/extauthz/extauthz/rulestore/sentinel"
)

// Verdict is extauthz's answer to one request.
type Verdict struct {
	Allow bool
	Block string        // "authority" or "param_flow" when !Allow
	Wait  time.Duration // a throttle rule's wait before the answer
}

// Start is the instant a case's trace starts at (on extauthz's side; Sentinel's has its own).
var Start = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// Document is the case's rules as one extauthz rules file in Sentinel's format: the object
// form {"authorityRules", "paramFlowRules"} when the case has no gateway rules, a list of
// every rule otherwise.
func (c *Case) Document() []byte {
	if len(c.GatewayRules) == 0 {
		doc := map[string]json.RawMessage{}
		if len(c.AuthorityRules) > 0 {
			doc["authorityRules"] = c.AuthorityRules
		}
		if len(c.ParamFlowRules) > 0 {
			doc["paramFlowRules"] = c.ParamFlowRules
		}
		b, _ := json.Marshal(doc)
		return b
	}
	var all []json.RawMessage
	for _, list := range []json.RawMessage{c.AuthorityRules, c.ParamFlowRules, c.GatewayRules} {
		var elems []json.RawMessage
		if len(list) > 0 {
			_ = json.Unmarshal(list, &elems)
		}
		all = append(all, elems...)
	}
	b, _ := json.Marshal(all)
	return b
}

// ParamNames are the names extauthz resolves paramIdx with: c.Params, or p0, p1, ... for
// every position the trace or the arg types use.
func (c *Case) ParamNames() []string {
	if len(c.Params) > 0 {
		return c.Params
	}
	n := len(c.ArgTypes)
	for _, r := range c.Trace {
		n = max(n, len(r.Args))
	}
	n = max(n, 1)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%d", i)
	}
	return names
}

// Extauthz decides c's trace with extauthz's rule engines, on c's clock: the rules parsed as
// the service loads the file, then each request through the authority list and the limiter
// as the decision path runs them (authority first; a request either passes every rule or
// takes nothing). A case with Cluster is parsed as with a shared store of that many replicas,
// and its cluster rules run on one limiter, whose counts are the shared counts.
func Extauthz(c *Case) ([]Verdict, rulestore.Rules, error) {
	opts := rulestore.ParseOptions{ParamNames: c.ParamNames()}
	if c.Cluster != nil {
		opts.ClusterEnabled, opts.ClusterClients = true, c.Cluster.Clients
	}
	rules, err := rulestore.Parse(c.Name+".json", c.Document(), opts)
	if err != nil {
		return nil, rules, err
	}
	for i := range rules.ParamFlow {
		rules.ParamFlow[i].Cluster = false
	}
	list, err := authority.New(rules.Authority)
	if err != nil {
		return nil, rules, err
	}
	lim, err := hotparam.New(rules.ParamFlow, hotparam.Options{})
	if err != nil {
		return nil, rules, err
	}
	names := c.ParamNames()
	out := make([]Verdict, len(c.Trace))
	for i, r := range c.Trace {
		if _, ok := list.Check(r.Resource, r.Origin); !ok {
			out[i] = Verdict{Block: "authority"}
			continue
		}
		e := hotparam.Entry{Resource: r.Resource, Hits: int64(max(r.Hits, 1))}
		if r.Gateway != nil {
			e.Params = gatewayParams(r.Resource, r.Gateway)
		}
		for j, vs := range r.Args {
			if vs != nil && j < len(names) {
				e.Params = append(e.Params, hotparam.Param{Name: names[j], Values: vs})
			}
		}
		now := Start.Add(time.Duration(r.T) * time.Millisecond)
		d := lim.Check(context.Background(), now, []hotparam.Entry{e}, hotparam.CheckOptions{}, nil)
		out[i] = Verdict{Allow: d.Allowed, Wait: d.Wait}
		if !d.Allowed {
			out[i].Block = "param_flow"
		}
	}
	return out, rules, nil
}

// gatewayParams are the params the service's mapping produces for a gateway request, named as
// imported gateway rules name them.
func gatewayParams(resource string, g *GatewayRequest) []hotparam.Param {
	ps := []hotparam.Param{{Name: sentinelrules.GatewayRouteParam, Values: []string{resource}}}
	add := func(name, v string) { ps = append(ps, hotparam.Param{Name: name, Values: []string{v}}) }
	if g.IP != "" {
		add("client_ip", g.IP)
	}
	if g.Host != "" {
		add("host", g.Host)
	}
	for _, k := range sortedKeys(g.Headers) {
		add("header_"+strings.ToLower(k), g.Headers[k])
	}
	for _, k := range sortedKeys(g.Query) {
		add("query_"+k, g.Query[k])
	}
	for _, k := range sortedKeys(g.Cookies) {
		add("cookie_"+k, g.Cookies[k])
	}
	return ps
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// compact is raw JSON without insignificant spaces, for messages.
func compact(raw []byte) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

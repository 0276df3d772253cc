package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
	"github.com/extauthz/extauthz/rulestore/match"
)

// Kind is a kind of rules the dashboard reads and pushes.
type Kind string

// The kinds of rules the commands carry.
const (
	ParamFlow Kind = "paramFlowRules" // Sentinel's ParamFlowRule: getParamFlowRules, setParamFlowRules
	Authority Kind = "authorityRules" // Sentinel's AuthorityRule: getRules, setRules type=authority
)

// The JSON of Sentinel's rules as its command center writes them: fastjson's order (by name),
// every field of the rule's getters.

type paramRuleJSON struct {
	BurstCount        int64        `json:"burstCount"`
	ClusterConfig     *clusterJSON `json:"clusterConfig,omitempty"`
	ClusterMode       bool         `json:"clusterMode"`
	ControlBehavior   int          `json:"controlBehavior"`
	Count             float64      `json:"count"`
	DurationInSec     int64        `json:"durationInSec"`
	Grade             int          `json:"grade"`
	LimitApp          string       `json:"limitApp"`
	MaxQueueingTimeMs int64        `json:"maxQueueingTimeMs"`
	ParamFlowItemList []itemJSON   `json:"paramFlowItemList"`
	ParamIdx          int          `json:"paramIdx"`
	Regex             bool         `json:"regex"`
	Resource          string       `json:"resource"`
}

type itemJSON struct {
	ClassType string `json:"classType"`
	Count     int64  `json:"count"`
	Object    string `json:"object"`
}

type clusterJSON struct {
	FallbackToLocalWhenFail bool  `json:"fallbackToLocalWhenFail"`
	FlowID                  int64 `json:"flowId"`
	ThresholdType           int   `json:"thresholdType"`
}

type authorityJSON struct {
	LimitApp string `json:"limitApp"`
	Regex    bool   `json:"regex"`
	Resource string `json:"resource"`
	Strategy int    `json:"strategy"`
}

// javaString is the class of a string item, as Sentinel names it.
const javaString = "java.lang.String"

// Inexpressible is a rule in force that Sentinel's format cannot carry: the dashboard shows an
// approximation of it, and a push of its kind is refused, since the rule would come back as
// another rule.
type Inexpressible struct {
	Kind     Kind
	Resource string
	Reason   string
}

func (e *Inexpressible) Error() string {
	return fmt.Sprintf("the %s rule on %q %s, which Sentinel's format cannot carry: edit it in the rules source", kindWord(e.Kind), e.Resource, e.Reason)
}

func kindWord(k Kind) string {
	if k == Authority {
		return "authority"
	}
	return "param-flow"
}

// Format says how the rules in force are written in Sentinel's format.
type Format struct {
	// ParamNames resolve paramIdx both ways: index i is param ParamNames[i].
	ParamNames []string
	// FallbackLocal is store.redis.fallback == "local", a cluster rule's
	// fallbackToLocalWhenFail.
	FallbackLocal bool
}

// paramRule writes r as Sentinel's ParamFlowRule; i is its position, the flowId of a cluster
// rule. err (an *Inexpressible) says what of r the result lacks.
func (f Format) paramRule(i int, r hotparam.Rule) (paramRuleJSON, error) {
	v := paramRuleJSON{
		Resource:          r.Resource,
		LimitApp:          "default",
		Grade:             1,
		Count:             float64(r.Count),
		DurationInSec:     int64(r.Duration / time.Second),
		BurstCount:        r.Burst,
		MaxQueueingTimeMs: r.MaxQueueingTime.Milliseconds(),
		ClusterMode:       r.Cluster,
		ParamFlowItemList: []itemJSON{},
		ParamIdx:          slices.Index(f.ParamNames, r.Param),
	}
	var lacks []string
	if v.ParamIdx < 0 {
		v.ParamIdx = 0
		lacks = append(lacks, fmt.Sprintf("limits param %q, which param_names does not list (paramIdx names a position of param_names)", r.Param))
	}
	if r.Grade == hotparam.Concurrency {
		v.Grade = 0
	}
	if r.Behavior == hotparam.Throttle {
		v.ControlBehavior = 2
	}
	if r.Duration%time.Second != 0 || r.Duration < time.Second {
		lacks = append(lacks, fmt.Sprintf("has a duration of %s (durationInSec is whole seconds)", r.Duration))
		v.DurationInSec = max(1, v.DurationInSec)
	}
	if r.MaxQueueingTime%time.Millisecond != 0 {
		lacks = append(lacks, fmt.Sprintf("has a max_queueing_time of %s (maxQueueingTimeMs is whole milliseconds)", r.MaxQueueingTime))
	}
	if r.Cluster {
		v.ClusterConfig = &clusterJSON{FlowID: int64(i) + 1, ThresholdType: 1, FallbackToLocalWhenFail: f.FallbackLocal}
	}
	class := javaString
	switch m := r.Match.(type) {
	case nil:
	case *match.Number:
		class = m.Class()
	default:
		lacks = append(lacks, fmt.Sprintf("limits only the values that match %v", m))
	}
	for _, x := range []struct {
		set  bool
		what string
	}{
		{r.Lease != 0, "has a lease"},
		{r.Capacity != 0, "has a capacity"},
		{r.StateBudget != 0, "has a state_budget"},
		{r.Overflow != hotparam.OverflowDefault, "has an overflow"},
		{r.Refund, "refunds"},
		{r.Shadow, "is a shadow rule"},
	} {
		if x.set {
			lacks = append(lacks, x.what)
		}
	}
	keys := make([]string, 0, len(r.Items))
	for k := range r.Items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.ParamFlowItemList = append(v.ParamFlowItemList, itemJSON{ClassType: class, Count: r.Items[k], Object: k})
	}
	if len(lacks) > 0 {
		return v, &Inexpressible{Kind: ParamFlow, Resource: r.Resource, Reason: strings.Join(lacks, ", ")}
	}
	return v, nil
}

// authorityRule writes r as Sentinel's AuthorityRule; err (an *Inexpressible) says what of r
// the result lacks.
func authorityRule(r authority.Rule) (authorityJSON, error) {
	v := authorityJSON{Resource: r.Resource, LimitApp: strings.Join(r.Origins, ",")}
	if r.Strategy == authority.Black {
		v.Strategy = 1
	}
	var lacks []string
	if !r.Literal {
		for _, o := range r.Origins {
			if authority.LooksLikeIP(o) {
				lacks = append(lacks, fmt.Sprintf("matches origin %q as addresses (Sentinel compares limitApp as text)", o))
			}
		}
	}
	for _, o := range r.Origins {
		if strings.Contains(o, ",") {
			lacks = append(lacks, fmt.Sprintf("names origin %q, which has a comma (limitApp is a comma-separated list)", o))
		}
	}
	if r.MissingOrigin != authority.MissingDefault {
		lacks = append(lacks, fmt.Sprintf("sets missing_origin %s", r.MissingOrigin))
	}
	if r.Shadow {
		lacks = append(lacks, "is a shadow rule")
	}
	if len(lacks) > 0 {
		return v, &Inexpressible{Kind: Authority, Resource: r.Resource, Reason: strings.Join(lacks, ", ")}
	}
	return v, nil
}

// Sentinel writes the rules of kind k in set as Sentinel's command center lists them. err is
// the first rule that the list only approximates (an *Inexpressible); the list is complete
// either way.
func (f Format) Sentinel(set *rulestore.Set, k Kind) (list any, err error) {
	keep := func(e error) {
		if err == nil {
			err = e
		}
	}
	if k == Authority {
		out := make([]authorityJSON, 0, len(set.Rules.Authority))
		for _, r := range set.Rules.Authority {
			v, e := authorityRule(r)
			keep(e)
			out = append(out, v)
		}
		return out, err
	}
	out := make([]paramRuleJSON, 0, len(set.Rules.ParamFlow))
	for i, r := range set.Rules.ParamFlow {
		v, e := f.paramRule(i, r)
		keep(e)
		out = append(out, v)
	}
	return out, err
}

package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/rulestore"
)

// The relations a case may declare (none: every decision identical) between extauthz's decisions and Sentinel's, where they
// differ on purpose (README, "Coming from Sentinel"). Whatever the case declares, two
// differences are recognised request by request: an empty origin on a white list (extauthz
// refuses, Sentinel lets it through) and a throttled wait equal to maxQueueingTimeMs
// (extauthz lets it through, Sentinel refuses; that value's later requests are not compared,
// since the two schedules differ from then on).
const (
	// relSuperset: all or nothing. Sentinel's checks of a request's values and rules run in
	// turn, and those before a refusal keep what they took; extauthz's take nothing from a
	// refused request. Every request Sentinel admits, extauthz admits; extauthz never admits
	// more than each rule's bucket allows (count + burst, refilled at count per duration).
	relSuperset = "superset"
	// relRefill: continuous refill. Sentinel refills a value's bucket only when a whole
	// duration has passed since its last refill, then credits the whole time since (up to the
	// bucket), even time during which extauthz's bucket was full; extauthz refills
	// continuously. At every point of the trace extauthz has admitted at least as many
	// requests of each value as Sentinel less one, and never more than the bucket allows.
	relRefill = "refill"
	// relSpacing: throttle spacing. Sentinel spaces requests round(1000 * duration / count)
	// whole milliseconds apart (none at all once that rounds to 0); extauthz exactly
	// duration / count apart. Under a request every millisecond, each admits what its spacing
	// says.
	relSpacing = "spacing"
)

var sentinel Sentinel

// tally counts what one run compared.
type tally struct {
	cases, compared, identical, skipped int
	byDesign                            map[string]int
	findings                            []string
	shown                               map[string]bool // cases whose rules a finding showed
	spacing                             []string        // what the spacing cases admitted
	throttleHits                        [][2]int64      // hits admitted per value of the throttle-hits cases: Sentinel, extauthz
}

func (t *tally) design(what string) {
	if t.byDesign == nil {
		t.byDesign = map[string]int{}
	}
	t.byDesign[what]++
}

func (t *tally) finding(c *Case, i int, format string, args ...any) {
	where := c.Name
	if i >= 0 {
		b, _ := json.Marshal(c.Trace[i])
		where = fmt.Sprintf("%s request %d %s", c.Name, i, b)
	}
	msg := where + ": " + fmt.Sprintf(format, args...)
	if !t.shown[c.Name] {
		if t.shown == nil {
			t.shown = map[string]bool{}
		}
		t.shown[c.Name] = true
		msg += "\n\trules: " + compact(c.Document())
		if len(c.ArgTypes) > 0 {
			msg += fmt.Sprintf(" argTypes %v", c.ArgTypes)
		}
	}
	t.findings = append(t.findings, msg)
}

func (t *tally) report(tb testing.TB) {
	tb.Helper()
	var kinds []string
	total := 0
	for k, n := range t.byDesign {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	tb.Logf("cases %d, decisions compared %d: identical %d, different by design %d (%s), not compared after a by-design difference %d, findings %d",
		t.cases, t.compared, t.identical, total, strings.Join(kinds, ", "), t.skipped, len(t.findings))
	for _, s := range t.spacing {
		tb.Logf("throttle spacing, %s", s)
	}
	if len(t.throttleHits) > 0 {
		var hs, he int64
		for _, h := range t.throttleHits {
			hs, he = hs+h[0], he+h[1]
		}
		tb.Logf("throttled requests of 1 to 4 hits, %d values: Sentinel admitted %d hits, extauthz %d, each within its bounds", len(t.throttleHits), hs, he)
	}
	for _, f := range t.findings {
		tb.Error(f)
	}
}

// runCases decides cases with Sentinel and with extauthz and compares them.
func runCases(t *testing.T, cases []Case) *tally {
	t.Helper()
	if testing.Short() {
		t.Skip("runs Sentinel's Java code; skipped under -short")
	}
	res, err := sentinel.Run(cases, t.TempDir())
	if errors.Is(err, ErrNoJava) {
		t.Fatalf("%v", err) // never a silent skip: CI installs them
	}
	if err != nil {
		t.Fatal(err)
	}
	var tl tally
	for i := range cases {
		c := &cases[i]
		tl.cases++
		compareCase(&tl, c, res[c.Name])
	}
	return &tl
}

func compareCase(tl *tally, c *Case, res *Result) {
	got, rules, err := Extauthz(c)
	if err != nil {
		tl.finding(c, -1, "extauthz refuses the rules Sentinel loads (%+v): %v", res.Loaded, err)
		return
	}
	whiteOn := map[string]bool{}
	for _, r := range rules.Authority {
		if r.Strategy == authority.White {
			whiteOn[r.Resource] = true
		}
	}
	maxQ := map[string][]time.Duration{}
	for _, r := range rules.ParamFlow {
		if r.Behavior == hotparam.Throttle {
			maxQ[r.Resource] = append(maxQ[r.Resource], r.MaxQueueingTime)
		}
	}
	diverged := map[string]bool{}
	for i, r := range c.Trace {
		s, e := res.Decisions[i], got[i]
		keys := valueKeys(r)
		if anyIn(diverged, keys) {
			tl.skipped++
			continue
		}
		tl.compared++
		if s.Allow == e.Allow && s.Waited == (e.Wait > 0) && (s.Allow || s.Block == e.Block) {
			tl.identical++
			continue
		}
		switch {
		case c.Relation == relSpacing:
			tl.design("throttle spacing") // checked as a whole: checkSpacing
		case c.Relation == relThrottleHits:
			tl.design("throttle hits") // checked as a whole: checkThrottleHits
		case !e.Allow && e.Block == "authority" && s.Allow && r.Origin == "" && whiteOn[r.Resource]:
			tl.design("empty origin on a white list")
		case e.Allow && !s.Allow && s.Block == "param_flow" && e.Wait > 0 && hasDuration(maxQ[r.Resource], e.Wait):
			tl.design("wait equal to maxQueueingTimeMs")
			addAll(diverged, keys)
		case c.Relation == relSuperset && e.Allow && !s.Allow && s.Block == "param_flow":
			// Sentinel refused after an earlier check of the request, or of one before it,
			// took from a value; extauthz took nothing then, so it admits this one, and the
			// values' states differ from here on.
			tl.design("all or nothing")
			addAll(diverged, keys)
		case c.Relation == relRefill:
			tl.design("continuous refill")
		default:
			tl.finding(c, i, "Sentinel %+v, extauthz %+v", s, e)
		}
	}
	switch c.Relation {
	case relSuperset:
		checkEnvelope(tl, c, rules, got)
	case relRefill:
		checkEnvelope(tl, c, rules, got)
		checkDominance(tl, c, res.Decisions, got)
	case relSpacing:
		checkSpacing(tl, c, rules, res.Decisions, got)
	case relThrottleHits:
		checkThrottleHits(tl, c, rules, res.Decisions, got)
	}
}

func hasDuration(ds []time.Duration, d time.Duration) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// valueKey names a request's resource and values.
func valueKey(r Request) string {
	b, _ := json.Marshal([]any{r.Resource, r.Args, r.Gateway})
	return string(b)
}

// valueKeys name each value a request asks for (resource, position, value), for the values
// whose states diverged by design.
func valueKeys(r Request) []string {
	if r.Gateway != nil {
		return []string{valueKey(r)}
	}
	var keys []string
	for j, vs := range r.Args {
		for _, v := range vs {
			keys = append(keys, fmt.Sprintf("%q %d %q", r.Resource, j, v))
		}
	}
	return keys
}

func anyIn(set map[string]bool, keys []string) bool {
	for _, k := range keys {
		if set[k] {
			return true
		}
	}
	return false
}

func addAll(set map[string]bool, keys []string) {
	for _, k := range keys {
		set[k] = true
	}
}

// checkEnvelope checks that, for every reject rule and value, extauthz's admitted requests
// never ask more than the rule's bucket holds: in any span [s, t] between admitted requests,
// hits ≤ count + burst + count·(t − s)/duration.
func checkEnvelope(tl *tally, c *Case, rules rulestore.Rules, got []Verdict) {
	names := c.ParamNames()
	for ri, rule := range rules.ParamFlow {
		if rule.Behavior != hotparam.Reject || rule.Grade != hotparam.QPS {
			continue
		}
		type hit struct {
			t    int64
			hits int64
		}
		byValue := map[string][]hit{}
		for i, r := range c.Trace {
			if !got[i].Allow || r.Resource != rule.Resource {
				continue
			}
			for j, vs := range r.Args {
				if j < len(names) && names[j] == rule.Param {
					for _, v := range vs {
						if k, ok := rule.Match.(hotparam.Keyer); ok {
							v = k.Key(v)
						}
						byValue[v] = append(byValue[v], hit{r.T, int64(max(r.Hits, 1))})
					}
				}
			}
		}
		for v, hs := range byValue {
			count := rule.Count
			if n, ok := rule.Items[v]; ok {
				count = n
			}
			for a := range hs {
				var sum int64
				for b := a; b < len(hs); b++ {
					sum += hs[b].hits
					span := time.Duration(hs[b].t-hs[a].t) * time.Millisecond
					// sum ≤ count + burst + count·span/duration, in integers.
					if (sum-count-rule.Burst)*int64(rule.Duration) > count*int64(span) {
						tl.finding(c, -1, "rule %d value %q: extauthz admitted %d hits in %v, more than the bucket allows", ri, v, sum, span)
						return
					}
				}
			}
		}
	}
}

// checkDominance checks that at every point of the trace extauthz has admitted at least as
// many requests of each resource and value as Sentinel, less one (see relRefill).
func checkDominance(tl *tally, c *Case, s []Decision, e []Verdict) {
	have := map[string][2]int{}
	for i, r := range c.Trace {
		k := valueKey(r)
		n := have[k]
		if s[i].Allow {
			n[0]++
		}
		if e[i].Allow {
			n[1]++
		}
		have[k] = n
		if n[1] < n[0]-1 {
			tl.finding(c, i, "by this request Sentinel admitted %d of this value, extauthz %d: continuous refill must admit at least as many, less one", n[0], n[1])
			return
		}
	}
}

// checkSpacing checks a spacing case (one throttle rule, requests of one value arriving
// faster than it lets through): each side admits what its spacing gives, up to what its queue
// holds at the end (maxQueueingTimeMs of spacing) and one slot of rounding.
func checkSpacing(tl *tally, c *Case, rules rulestore.Rules, s []Decision, e []Verdict) {
	if len(rules.ParamFlow) != 1 || len(c.Trace) == 0 {
		tl.finding(c, -1, "a spacing case has one throttle rule and a trace")
		return
	}
	rule := rules.ParamFlow[0]
	span := c.Trace[len(c.Trace)-1].T - c.Trace[0].T // ms
	n := int64(len(c.Trace))
	var ns, ne int64
	for i := range c.Trace {
		if s[i].Allow {
			ns++
		}
		if e[i].Allow {
			ne++
		}
	}
	durMs := int64(rule.Duration / time.Millisecond)
	maxQ := int64(rule.MaxQueueingTime / time.Millisecond)
	// Sentinel: Math.round(1000.0 * duration / count) whole milliseconds (half rounds up).
	step := (2*durMs + rule.Count) / (2 * rule.Count)
	loS, hiS := n, n
	if step > 0 {
		loS, hiS = min(n, span/step), min(n, span/step+maxQ/step+2)
	}
	// extauthz: exactly duration / count apart.
	loE := min(n, span*rule.Count/durMs)
	hiE := min(n, loE+maxQ*rule.Count/durMs+2)
	if ns < loS || ns > hiS {
		tl.finding(c, -1, "Sentinel admitted %d in %d ms, its %d ms spacing gives %d to %d", ns, span, step, loS, hiS)
	}
	if ne < loE || ne > hiE {
		tl.finding(c, -1, "extauthz admitted %d in %d ms, a spacing of %v gives %d to %d", ne, span, rule.Duration/time.Duration(rule.Count), loE, hiE)
	}
	tl.spacing = append(tl.spacing, fmt.Sprintf("%d/s: Sentinel %d, extauthz %d in %d ms", rule.Count, ns, ne, span))
}

// loadCases reads every case under testdata/cases.
func loadCases(t *testing.T) []Case {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "cases", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cases under testdata/cases: %v", err)
	}
	var cases []Case
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []Case
		if err := json.Unmarshal(data, &cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range cs {
			cs[i].Name = strings.TrimSuffix(filepath.Base(f), ".json") + "/" + cs[i].Name
		}
		cases = append(cases, cs...)
	}
	return cases
}

// TestSentinelConformance replays the cases under testdata/cases and the seeded random ones
// through Sentinel's Java code and through extauthz, on the same clock, and requires identical
// decisions, or the relation a case declares.
func TestSentinelConformance(t *testing.T) {
	cases := loadCases(t)
	cases = append(cases, spacingCases()...)
	cases = append(cases, randomCases(seed(t), 120)...)
	tl := runCases(t, cases)
	tl.report(t)
}

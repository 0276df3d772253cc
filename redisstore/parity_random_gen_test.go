package redisstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// The calls of the randomized parity test (parity_random_test.go) and their generator.

// rpEntry is one entry of a call.
type rpEntry struct {
	res     string
	params  []hotparam.Param
	hits    int64
	probe   bool
	release bool
	lease   string
}

// rpCall is one Check at t0+at, with CheckOptions.Deadline at t0+at+deadline when hasDeadline.
type rpCall struct {
	at          time.Duration
	deadline    time.Duration
	hasDeadline bool
	entries     []rpEntry
}

// ent is an entry of res asking hits under lease id lease; params reads "name=v1,v2 name=v3".
func ent(res, params string, hits int64, lease string) rpEntry {
	e := rpEntry{res: res, hits: hits, lease: lease}
	for _, f := range strings.Fields(params) {
		name, vals, _ := strings.Cut(f, "=")
		e.params = append(e.params, hotparam.Param{Name: name, Values: strings.Split(vals, ",")})
	}
	return e
}

func (e rpEntry) rel() rpEntry { e.release = true; return e }

func (e rpEntry) prb() rpEntry { e.probe = true; return e }

func (c *rpCall) check() ([]hotparam.Entry, hotparam.CheckOptions) {
	es := make([]hotparam.Entry, len(c.entries))
	for i, e := range c.entries {
		es[i] = hotparam.Entry{Resource: e.res, Params: e.params, Hits: e.hits, Probe: e.probe, Release: e.release,
			LeaseID: e.lease}
	}
	var opt hotparam.CheckOptions
	if c.hasDeadline {
		opt.Deadline = t0.Add(c.at + c.deadline)
	}
	return es, opt
}

// String writes c as the Go literal of a table row.
func (c rpCall) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{at: %s", durLit(c.at))
	if c.hasDeadline {
		fmt.Fprintf(&b, ", deadline: %s, hasDeadline: true", durLit(c.deadline))
	}
	b.WriteString(", entries: []rpEntry{")
	for i, e := range c.entries {
		if i > 0 {
			b.WriteString(", ")
		}
		var ps []string
		for _, p := range e.params {
			ps = append(ps, p.Name+"="+strings.Join(p.Values, ","))
		}
		fmt.Fprintf(&b, "ent(%q, %q, %d, %q)", e.res, strings.Join(ps, " "), e.hits, e.lease)
		if e.release {
			b.WriteString(".rel()")
		}
		if e.probe {
			b.WriteString(".prb()")
		}
	}
	b.WriteString("}}")
	return b.String()
}

func durLit(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d%ms == 0:
		return strconv.FormatInt(int64(d/ms), 10) + " * ms"
	default:
		return strconv.FormatInt(int64(d/us), 10) + " * us"
	}
}

// rpGen makes random calls of the rules of rpRules, at instants that only move forward.
type rpGen struct {
	rng       *rand.Rand
	resources []string
	params    map[string][]string // the params of each resource's rules
	releasing map[string]bool     // resources with a rule that takes releases
	conc      map[string]bool     // resources with a concurrency rule
	at        time.Duration
	n         int
	leases    []string // the lease ids of the latest acquisitions, newest last
}

func newRPGen(seed uint64) *rpGen {
	g := &rpGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), params: map[string][]string{},
		releasing: map[string]bool{}, conc: map[string]bool{}}
	for _, r := range rpRules() {
		if _, ok := g.params[r.Resource]; !ok {
			g.resources = append(g.resources, r.Resource)
		}
		if !slices.Contains(g.params[r.Resource], r.Param) {
			g.params[r.Resource] = append(g.params[r.Resource], r.Param)
		}
		if r.Grade == hotparam.Concurrency || r.Refund {
			g.releasing[r.Resource] = true
		}
		if r.Grade == hotparam.Concurrency {
			g.conc[r.Resource] = true
		}
	}
	return g
}

// step is the time to the next call: often none, mostly under a window, sometimes past a
// window or a lease; in whole milliseconds, or in whole microseconds.
func (g *rpGen) step() time.Duration {
	r := g.rng.IntN(100)
	var d time.Duration
	switch {
	case r < 35:
		return 0
	case r < 80:
		d = time.Duration(1+g.rng.Int64N(300)) * ms
	case r < 95:
		d = time.Duration(300+g.rng.Int64N(2700)) * ms
	default:
		d = time.Duration(3000+g.rng.Int64N(12000)) * ms
	}
	if g.rng.IntN(4) == 0 {
		d += time.Duration(g.rng.Int64N(1000)) * us
	}
	return d
}

func (g *rpGen) value() string {
	switch r := g.rng.IntN(100); {
	case r < 8:
		return "vip"
	case r < 11:
		return "zero"
	default:
		return "v" + strconv.Itoa(g.rng.IntN(3))
	}
}

func (g *rpGen) hits() int64 {
	switch r := g.rng.IntN(100); {
	case r < 55:
		return 1
	case r < 70:
		return 2
	case r < 80:
		return 3
	case r < 85:
		return 0 // means 1
	case r < 95:
		return 4 + g.rng.Int64N(5)
	default:
		return 20 // more than any capacity
	}
}

func (g *rpGen) entry(lease string) rpEntry {
	res := g.resources[g.rng.IntN(len(g.resources))]
	e := rpEntry{res: res, hits: g.hits()}
	for _, name := range g.params[res] {
		if g.rng.IntN(10) == 0 {
			continue // a param the request does not carry
		}
		p := hotparam.Param{Name: name, Values: []string{g.value()}}
		for r := g.rng.IntN(100); r >= 75; r -= 20 {
			p.Values = append(p.Values, g.value()) // may repeat a value
		}
		e.params = append(e.params, p)
	}
	e.probe = g.rng.IntN(100) < 15
	rel := 5 // releases of rules that ignore them
	if g.releasing[res] {
		rel = 25
	}
	e.release = g.rng.IntN(100) < rel
	switch r := g.rng.IntN(100); {
	case e.release && r < 60 && len(g.leases) > 0:
		// as Envoy's stream-done release: a recent request's id (acquired, refused, a probe's,
		// released already, of another value)
		e.lease = g.leases[len(g.leases)-1-g.rng.IntN(min(len(g.leases), 12))]
	case r < 25:
		e.lease = ""
	case r < 45 && !g.conc[res]:
		// ids used again and again (not by concurrency acquisitions: README, "Where Redis mode
		// differs")
		e.lease = "p" + strconv.Itoa(g.rng.IntN(3))
	default:
		e.lease = lease
	}
	if !e.release && e.lease != "" {
		g.leases = append(g.leases, e.lease)
		if len(g.leases) > 64 {
			g.leases = slices.Delete(g.leases, 0, 32)
		}
	}
	return e
}

func (g *rpGen) next() rpCall {
	g.at += g.step()
	c := rpCall{at: g.at}
	n := 1
	if r := g.rng.IntN(100); r >= 90 {
		n = 3
	} else if r >= 70 {
		n = 2
	}
	acquired := map[string]bool{} // resources the call acquires on so far
	for i := range n {
		e := g.entry("l" + strconv.Itoa(g.n) + "." + strconv.Itoa(i))
		if e.release && acquired[e.res] {
			// no release after an acquisition of its resource in one call: the script runs a
			// call's releases first (README, "Where Redis mode differs")
			e.release = false
		}
		if !e.release {
			acquired[e.res] = true
		}
		c.entries = append(c.entries, e)
	}
	if g.rng.IntN(100) < 15 {
		// mostly within the queueing limits, sometimes passed already (a call whose deadline
		// was nearer than policy.DeadlineMargin)
		c.hasDeadline = true
		c.deadline = time.Duration(g.rng.Int64N(450_000)-50_000) * us
	}
	g.n++
	return c
}

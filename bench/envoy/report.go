package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// spread is a figure over the rounds: its median, least and greatest.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return spread{med: s[len(s)/2], lo: s[0], hi: s[len(s)-1]}
}

func (s spread) String() string { return fmt.Sprintf("%.1f (%.1f..%.1f)", s.med, s.lo, s.hi) }

// ratioString is a spread of ratios, or n/a when no round gave one.
func ratioString(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	s := spreadOf(xs)
	return fmt.Sprintf("%.2f (%.2f..%.2f)", s.med, s.lo, s.hi)
}

// The per-round figures a comparison reads.
func totalCPU(r result) float64 { return r.perRequest(r.envoyCPU + r.svcCPU) }
func p99us(r result) float64    { return float64(r.p99) / float64(time.Microsecond) }
func svcCPU(r result) float64   { return r.perRequest(r.svcCPU) }
func envoyCPU(r result) float64 { return r.perRequest(r.envoyCPU) }

// comparison is one line of the closing table: what service adds to Envoy's baseline, over what
// floor adds, round by round.
type comparison struct {
	measure    string
	ext, floor string // variants
	base       string // the baseline both add to ("": the figures themselves)
	figure     func(result) float64
	target     string
}

var comparisons = []comparison{
	{"ext_authz: CPU/request added (Envoy + service)", "authz-extauthz", "authz-noop", "none", totalCPU, "<= 1.1"},
	{"ext_authz: service CPU/request alone", "authz-extauthz", "authz-noop", "", svcCPU, "(floor)"},
	{"ext_authz: p99 added", "authz-extauthz", "authz-noop", "none", p99us, "<= 1.1"},
	{"rate-limit filter: CPU/request added (Envoy + service)", "rl-extauthz", "rl-noop", "none", totalCPU, "<= 1.1"},
	{"rate-limit filter: service CPU/request alone", "rl-extauthz", "rl-noop", "", svcCPU, "(floor)"},
	{"rate-limit filter: p99 added", "rl-extauthz", "rl-noop", "none", p99us, "<= 1.1"},
	{"ext_authz: CPU/request added, against the mirror (a no-op answering extauthz's answers)", "authz-extauthz", "authz-mirror", "none", totalCPU, "(answers alike)"},
	{"ext_authz: Envoy's own CPU/request added, behind the mirror vs behind the no-op", "authz-mirror", "authz-noop", "none", envoyCPU, "(Envoy's work on the answer)"},
	{"rate-limit filter: CPU/request added, against the mirror", "rl-extauthz", "rl-mirror", "none", totalCPU, "(answers alike)"},
	{"rate-limit filter: Envoy's own CPU/request added, behind the mirror vs behind the no-op", "rl-mirror", "rl-noop", "none", envoyCPU, "(Envoy's work on the answer)"},
	{"rate-limit filter: CPU/request added, extauthz vs envoyproxy/ratelimit (+ its Redis)", "rl-extauthz", "rl-ratelimit", "none", totalCPU, "(peer)"},
	{"rate-limit filter: p99 added, extauthz vs envoyproxy/ratelimit", "rl-extauthz", "rl-ratelimit", "none", p99us, "(peer)"},
	{"CPU/request added: rate-limit filter to extauthz vs Envoy's local_ratelimit", "rl-extauthz", "local_ratelimit", "none", totalCPU, "(peer)"},
}

// report prints each variant's figures over the rounds, then each comparison's ratio.
func report(w io.Writer, run []variant, results map[string][]result) {
	fmt.Fprintf(w, "\n# median (min..max) over the rounds\n")
	fmt.Fprintf(w, "%-16s %-26s %-26s %-26s %-26s %-26s\n", "variant", "req/s", "p50 us", "p99 us", "envoy us/req", "service us/req")
	for _, v := range run {
		rs := results[v.name]
		col := func(f func(result) float64) string {
			var xs []float64
			for _, r := range rs {
				xs = append(xs, f(r))
			}
			return spreadOf(xs).String()
		}
		fmt.Fprintf(w, "%-16s %-26s %-26s %-26s %-26s %-26s\n", v.name,
			col(func(r result) float64 { return r.rps }),
			col(func(r result) float64 { return float64(r.p50) / float64(time.Microsecond) }),
			col(p99us),
			col(func(r result) float64 { return r.perRequest(r.envoyCPU) }),
			col(func(r result) float64 { return r.perRequest(r.svcCPU) }))
	}
	fmt.Fprintf(w, "\n# what each adds to Envoy with no auth filter (or, alone, the service's own), the ratio per round\n")
	fmt.Fprintf(w, "%-84s %-22s %-22s %-22s %s\n", "measure", "extauthz adds", "other adds", "ratio", "target")
	for _, c := range comparisons {
		ext, floor, base := results[c.ext], results[c.floor], results[c.base]
		n := min(len(ext), len(floor))
		if c.base != "" {
			n = min(n, len(base))
		}
		if n == 0 {
			continue
		}
		var e, f, ratio []float64
		for i := range n {
			var b float64
			if c.base != "" {
				b = c.figure(base[i])
			}
			de, df := c.figure(ext[i])-b, c.figure(floor[i])-b
			e, f = append(e, de), append(f, df)
			if df > 0 {
				ratio = append(ratio, de/df)
			}
		}
		fmt.Fprintf(w, "%-84s %-22s %-22s %-22s %s\n", c.measure, spreadOf(e), spreadOf(f), ratioString(ratio), c.target)
	}
}

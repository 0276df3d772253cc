package metrics

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Totals are the decisions of one resource over a Window, by result.
type Totals struct {
	OK        uint64 // allowed
	Shadow    uint64 // allowed, but a shadow rule would have blocked
	Authority uint64 // blocked by an authority rule
	ParamFlow uint64 // blocked by a hot-param rule
	Invalid   uint64 // malformed requests, refused
	Other     uint64 // any other result, e.g. a call cancelled during its throttle wait
}

// Traffic is one resource's decisions over the Window ending at Snapshot.Time.
type Traffic struct {
	// Resource is the resource; Other for the resources without a label of their own, "" for
	// the decisions no rule applied to.
	Resource string
	// Allowed and Blocked are the decisions per second, oldest first: Allowed counts results
	// ok and shadow, Blocked authority, param_flow and invalid. The last element is the
	// current second, still counting.
	Allowed, Blocked []uint32
	Totals           Totals
}

// Store is the state of the shared store, as the metrics know it.
type Store struct {
	Enabled     bool              // Options.BreakerOpen was given: a shared store may be configured
	BreakerOpen bool              // calls are suspended after failures
	Calls       uint64            // calls made, failed ones included
	Errors      uint64            // calls failed
	Fallbacks   map[string]uint64 // checks answered by each fallback policy
}

// Snapshot is what the console shows of the metrics at one instant.
type Snapshot struct {
	Time   time.Time
	Window time.Duration
	// Resources are the resources with a label of their own, by name, then Other and "" when
	// they counted anything in the Window.
	Resources []Traffic
	Store     Store
}

// Snapshot returns the per-second decision counts of the Window ending at now, and the state
// of the shared store. It may first hand labels of idle resources to busier ones, as a scrape
// does.
func (m *Metrics) Snapshot(now time.Time) Snapshot {
	m.rebalance(now)
	sec := now.Unix()
	s := Snapshot{Time: now, Window: Window}
	for _, r := range *m.resources.Load() {
		if rg := r.ring.Load(); rg != nil {
			t := Traffic{Resource: r.name}
			rg.read(sec, &t)
			s.Resources = append(s.Resources, t)
		}
	}
	slices.SortFunc(s.Resources, func(a, b Traffic) int { return strings.Compare(a.Resource, b.Resource) })
	for _, x := range []struct {
		name string
		rg   *ring
	}{{Other, &m.other}, {"", &m.none}} {
		t := Traffic{Resource: x.name}
		x.rg.read(sec, &t)
		if t.Totals != (Totals{}) {
			s.Resources = append(s.Resources, t)
		}
	}
	s.Store = m.store()
	return s
}

func (m *Metrics) store() Store {
	open := m.source().BreakerOpen
	s := Store{Enabled: open != nil, Fallbacks: map[string]uint64{}}
	if open != nil {
		s.BreakerOpen = open()
	}
	each(m.redisCalls, func(labels map[string]string, v float64) {
		s.Calls += uint64(v)
		if labels["result"] == "error" {
			s.Errors += uint64(v)
		}
	})
	each(m.redisFallback, func(labels map[string]string, v float64) {
		if v > 0 { // the policies' series exist at 0 from the start
			s.Fallbacks[labels["policy"]] += uint64(v)
		}
	})
	return s
}

// each calls f with the labels and value of every series of c.
func each(c prometheus.Collector, f func(labels map[string]string, v float64)) {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if err := pm.Write(&d); err != nil {
			continue
		}
		labels := make(map[string]string, len(d.GetLabel()))
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		f(labels, d.GetCounter().GetValue())
	}
}

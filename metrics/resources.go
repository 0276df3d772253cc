package metrics

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxResources is the most resources given a label value and a ring of their own when
// Options.MaxResources is 0.
const DefaultMaxResources = 100

// RebalanceEvery is how often, at most, a scrape or a Snapshot hands the label of a resource
// idle for a whole Window to a busier resource counted under Other.
const RebalanceEvery = 10 * time.Second

// resource is one resource named by the rules in force.
type resource struct {
	name string
	hits atomic.Uint64        // decisions recorded, to rank resources by traffic
	ring atomic.Pointer[ring] // non-nil while the resource has a label of its own
	seen uint64               // hits at the last rebalance; guarded by Metrics.mu
}

// table is the resources named by the rules in force, by name. It is never changed once
// published: SetResources publishes a new one.
type table map[string]*resource

// label resolves the resource label of a decision and counts it in its ring. Requires nothing
// held; it takes Metrics.mu only to give a label to a resource while fewer than the cap have
// one.
func (m *Metrics) label(resource string, k kind) string {
	sec := m.now().Unix()
	if resource == "" {
		m.none.add(sec, k)
		return "" // no rule applied
	}
	r := (*m.resources.Load())[resource]
	if r == nil {
		m.other.add(sec, k)
		return Other
	}
	r.hits.Add(1)
	rg := r.ring.Load()
	if rg == nil && m.labelled.Load() < int64(m.maxResources) {
		rg = m.admit(r)
	}
	if rg == nil {
		m.other.add(sec, k)
		return Other
	}
	rg.add(sec, k)
	return resource
}

// admit gives r a label of its own if the cap allows, and returns its ring (nil if not).
func (m *Metrics) admit(r *resource) *ring {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rg := r.ring.Load(); rg != nil {
		return rg
	}
	if (*m.resources.Load())[r.name] != r || m.labelled.Load() >= int64(m.maxResources) {
		return nil // dropped by a reload meanwhile, or the cap is reached
	}
	rg := new(ring)
	r.ring.Store(rg)
	m.labelled.Add(1)
	return rg
}

// evict takes r's label away: its series are deleted and its decisions counted under Other
// from now on. Requires mu held.
func (m *Metrics) evict(r *resource) {
	if r.ring.Swap(nil) == nil {
		return
	}
	m.labelled.Add(-1)
	m.decisions.DeletePartialMatch(prometheus.Labels{"resource": r.name})
}

// SetResources sets the resources named by the rules in force. Decisions for any other
// resource are counted under Other; a resource that keeps its name keeps its label and counts.
func (m *Metrics) SetResources(resources []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.resources.Load()
	next := make(table, len(resources))
	for _, name := range resources {
		if _, ok := next[name]; ok {
			continue
		}
		r := old[name]
		if r == nil {
			r = &resource{name: name}
		}
		next[name] = r
	}
	m.resources.Store(&next)
	for name, r := range old {
		if next[name] != r {
			m.evict(r)
		}
	}
}

// rebalance, at most once per RebalanceEvery, gives the labels of resources idle for a whole
// Window, and free labels, to the resources with the most decisions under Other since the last
// rebalance; and, every time, deletes series left by a decision that raced with an eviction.
func (m *Metrics) rebalance(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.nextRebalance) {
		// No rebalance due, but a series left by a decision that raced with an eviction is
		// deleted at every scrape, so that none is exported past the cap.
		m.sweep()
		return
	}
	m.nextRebalance = now.Add(RebalanceEvery)
	sec := now.Unix()
	type candidate struct {
		r     *resource
		delta uint64
	}
	var idle []*resource
	var busy []candidate
	for _, r := range *m.resources.Load() {
		h := r.hits.Load()
		delta := h - r.seen
		r.seen = h
		if rg := r.ring.Load(); rg != nil {
			if rg.idle(sec) {
				idle = append(idle, r)
			}
		} else if delta > 0 {
			busy = append(busy, candidate{r, delta})
		}
	}
	free := int64(m.maxResources) - m.labelled.Load()
	if len(busy) > 0 && (free > 0 || len(idle) > 0) {
		slices.SortFunc(busy, func(a, b candidate) int {
			if a.delta != b.delta {
				return cmp.Compare(b.delta, a.delta)
			}
			return cmp.Compare(a.r.name, b.r.name)
		})
		for _, c := range busy {
			if free <= 0 {
				if len(idle) == 0 {
					break
				}
				m.evict(idle[len(idle)-1])
				idle = idle[:len(idle)-1]
				free++
			}
			c.r.ring.Store(new(ring))
			m.labelled.Add(1)
			free--
		}
	}
	m.sweep()
}

// sweep deletes the decision series of resources without a label of their own: those a
// decision recreated while its resource was being evicted. Requires mu held.
func (m *Metrics) sweep() {
	cur := *m.resources.Load()
	var stale []string
	each(m.decisions, func(labels map[string]string, _ float64) {
		v := labels["resource"]
		if v == "" || v == Other {
			return
		}
		if r := cur[v]; r == nil || r.ring.Load() == nil {
			stale = append(stale, v)
		}
	})
	for _, v := range stale {
		m.decisions.DeletePartialMatch(prometheus.Labels{"resource": v})
	}
}

// rebalancer runs Metrics.rebalance when the registry is gathered; it exports nothing of its
// own but the number of resources counted under Other.
type rebalancer struct {
	m      *Metrics
	hidden *prometheus.Desc
}

func (c rebalancer) Describe(ch chan<- *prometheus.Desc) { ch <- c.hidden }

func (c rebalancer) Collect(ch chan<- prometheus.Metric) {
	c.m.rebalance(c.m.now())
	n := int64(len(*c.m.resources.Load())) - c.m.labelled.Load()
	ch <- prometheus.MustNewConstMetric(c.hidden, prometheus.GaugeValue, float64(max(n, 0)))
}

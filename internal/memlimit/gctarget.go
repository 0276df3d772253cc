package memlimit

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The GC target's bounds, in GOGC percent.
const (
	// MinGCPercent lets garbage reach a quarter of the live heap, at most: a large state is
	// marked at most four times as often as at Go's default, for a resident size close to it.
	MinGCPercent = 25
	// MaxGCPercent lets garbage reach four times the live heap, at most.
	MaxGCPercent = 400
	// AllowanceShare is the share of the soft memory limit that garbage may take beyond the
	// live heap before a collection.
	AllowanceShare = 1.0 / 32
	// NoLimitAllowance is the garbage a heap without a soft limit may hold beyond the live
	// heap (NewGCTarget with no limit), never less than Go's default lets it (NoLimitMin): GOGC
	// 400 for a live heap of up to 8MiB, Go's default from 32MiB on, and at most 24MiB more than
	// Go's default holds.
	NoLimitAllowance = 32 << 20
	// NoLimitMin is the least GOGC percent without a limit: Go's default. With no limit to stay
	// under, nothing calls for collecting more often than it does.
	NoLimitMin = 100
)

// GCTarget sets the collector's target (GOGC) from the live heap and the soft memory limit:
// the heap may grow by Allowance bytes of garbage, a fixed share of the limit, past the live
// heap before a collection, within [MinGCPercent, MaxGCPercent] of the live heap. A service
// with a small state (a few rules, a few thousand values) then spends a fraction of Go
// default's collector time on the garbage of its requests, and one with a large state (a
// million tracked values) holds a resident size close to its live heap instead of up to twice
// it. The heap peaks at live + min(max(Allowance, live/4), 4 × live), and the soft limit still
// bounds it; under a 1GiB limit, Allowance is 32MiB.
//
// The zero value sets Go's default. A GCTarget is used by the goroutine that runs it.
type GCTarget struct {
	// Allowance is the garbage, in bytes, the heap may hold beyond the live heap; 0 keeps
	// Go's default of 100.
	Allowance int64
	// Min is the least GOGC percent set; 0 is MinGCPercent.
	Min int
	// Every is how often the live heap is read; 0 is one second.
	Every time.Duration

	live    func() uint64 // the live heap in bytes; nil reads runtime/metrics
	set     func(int) int // sets GOGC; nil is debug.SetGCPercent
	percent int           // the percent last set, 0 before the first
	sample  []metrics.Sample
}

// NewGCTarget is the target for a soft limit of limit bytes; with none (limit <= 0 or
// math.MaxInt64), NoLimitAllowance never below NoLimitMin: a service with a small state
// collects a fraction as often as at Go's default, a large one as often. It is nil when GOGC
// is set in the environment, which then stays in force.
func NewGCTarget(limit int64, getenv func(string) string) *GCTarget {
	if getenv != nil && getenv("GOGC") != "" {
		return nil
	}
	if limit <= 0 || limit == math.MaxInt64 {
		return &GCTarget{Allowance: NoLimitAllowance, Min: NoLimitMin}
	}
	return &GCTarget{Allowance: int64(float64(limit) * AllowanceShare)}
}

// GCTarget is the collector's target that goes with l, once applied (inForce, the limit
// Apply returned): NewGCTarget's, except with memory_limit off, which keeps Go's defaults (nil).
func (l Limit) GCTarget(inForce int64, getenv func(string) string) *GCTarget {
	if l.From == FromOff {
		return nil
	}
	return NewGCTarget(inForce, getenv)
}

// Percent is the GOGC percent for a live heap of live bytes: Allowance as a share of live,
// rounded down to a multiple of 25 so that small changes of the live heap do not reset it,
// within [Min (MinGCPercent when 0), MaxGCPercent].
func (g *GCTarget) Percent(live uint64) int {
	if g.Allowance <= 0 {
		return 100
	}
	if live == 0 {
		return MaxGCPercent
	}
	p := float64(g.Allowance) * 100 / float64(live)
	if p >= MaxGCPercent {
		return MaxGCPercent
	}
	n := int(p) / 25 * 25
	least := g.Min
	if least <= 0 {
		least = MinGCPercent
	}
	return max(n, least)
}

// Update reads the live heap and sets GOGC when its percent changed; it returns the percent
// in force.
func (g *GCTarget) Update() int {
	p := g.Percent(g.readLive())
	if p != g.percent {
		set := g.set
		if set == nil {
			set = debug.SetGCPercent
		}
		set(p)
		g.percent = p
	}
	return p
}

// Run updates the target now and every Every until ctx ends, then restores Go's default.
func (g *GCTarget) Run(ctx context.Context) {
	every := g.Every
	if every <= 0 {
		every = time.Second
	}
	g.Update()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if g.percent != 0 && g.set == nil {
				debug.SetGCPercent(100)
			}
			return
		case <-t.C:
			g.Update()
		}
	}
}

func (g *GCTarget) readLive() uint64 {
	if g.live != nil {
		return g.live()
	}
	if g.sample == nil {
		g.sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	}
	metrics.Read(g.sample)
	if g.sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return g.sample[0].Value.Uint64()
}

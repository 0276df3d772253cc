package memlimit

import (
	"math"
	"testing"
)

func TestNewGCTarget(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, limit := range []int64{0, math.MaxInt64} { // none, and the runtime's no-limit value
		if g := NewGCTarget(limit, nil); g == nil || g.Allowance != NoLimitAllowance || g.Min != NoLimitMin {
			t.Errorf("no limit (%d): got %+v, want an allowance of %d never below GOGC %d", limit, g, NoLimitAllowance, NoLimitMin)
		}
	}
	if g := NewGCTarget(1<<30, env(map[string]string{"GOGC": "200"})); g != nil {
		t.Errorf("GOGC set: got %+v, want nil (GOGC stays in force)", g)
	}
	if g := NewGCTarget(0, env(map[string]string{"GOGC": "200"})); g != nil {
		t.Errorf("GOGC set, no limit: got %+v, want nil (GOGC stays in force)", g)
	}
	g := NewGCTarget(1<<30, env(nil))
	if g == nil || g.Allowance != 32<<20 || g.Min != 0 {
		t.Fatalf("1GiB limit: got %+v, want an allowance of 32MiB down to MinGCPercent", g)
	}
}

// A limit's target: none with memory_limit off (Go's defaults), the no-limit target when none
// was found, the limit's own otherwise.
func TestLimitGCTarget(t *testing.T) {
	if g := (Limit{From: FromOff}).GCTarget(math.MaxInt64, nil); g != nil {
		t.Errorf("off: got %+v, want none", g)
	}
	if g := (Limit{From: FromNone}).GCTarget(math.MaxInt64, nil); g == nil || g.Allowance != NoLimitAllowance || g.Min != NoLimitMin {
		t.Errorf("none found: got %+v, want the no-limit target", g)
	}
	if g := (Limit{Bytes: 1 << 30, From: FromSetting}).GCTarget(1<<30, nil); g == nil || g.Allowance != 32<<20 {
		t.Errorf("1GiB set: got %+v, want an allowance of 32MiB", g)
	}
}

// Without a limit the target never goes below Go's default: a large state collects as often
// as it would at GOGC 100, a small one up to four times less often.
func TestGCTargetPercentWithoutALimit(t *testing.T) {
	g := NewGCTarget(0, nil)
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, MaxGCPercent},
		{2 << 20, MaxGCPercent},
		{8 << 20, 400},
		{16 << 20, 200},
		{32 << 20, 100},
		{112 << 20, 100}, // under a limit 25: without one, Go's default
		{1 << 30, 100},
	} {
		if got := g.Percent(tc.live); got != tc.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

func TestGCTargetPercent(t *testing.T) {
	g := GCTarget{Allowance: 32 << 20}
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, MaxGCPercent},
		{2 << 20, MaxGCPercent}, // allowance 16x the live heap: capped
		{8 << 20, 400},          // exactly 4x
		{10 << 20, 300},         // 3.2x, rounded down to 25
		{16 << 20, 200},         // 2x
		{32 << 20, 100},         // 1x: Go's default
		{112 << 20, 25},         // a million tracked values: 0.29x, rounded down
		{1 << 30, MinGCPercent}, // a larger state: never below a quarter
	} {
		if got := g.Percent(tc.live); got != tc.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
	var zero GCTarget
	if got := zero.Percent(1 << 20); got != 100 {
		t.Errorf("zero value: Percent = %d, want Go's default 100", got)
	}
}

func TestGCTargetUpdateSetsOnlyOnChange(t *testing.T) {
	live := uint64(8 << 20)
	var sets []int
	g := GCTarget{Allowance: 32 << 20, live: func() uint64 { return live }, set: func(p int) int { sets = append(sets, p); return 0 }}
	g.Update()
	g.Update()
	live = 7 << 20 // still capped: no new call
	g.Update()
	live = 16 << 20
	g.Update()
	if len(sets) != 2 || sets[0] != 400 || sets[1] != 200 {
		t.Fatalf("GOGC set to %v, want [400 200]", sets)
	}
}

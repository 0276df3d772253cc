package hotparam

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// TestFloodCannotResetADepletedValue is issue 8's second case: capacity 1,000, a value limited
// to 3 an hour asked every 200ms while new values flood the rule; the value must get at most
// its 3, at any flood rate.
func TestFloodCannotResetADepletedValue(t *testing.T) {
	for _, perStep := range []int{0, 10, 100, 1000, 5000} {
		t.Run(strconv.Itoa(perStep), func(t *testing.T) {
			t.Parallel()
			r := qps(3, time.Hour)
			r.Capacity = 1000
			l := mustNew(t, r)
			n, admitted := 0, 0
			for i := range 25 {
				now := at(time.Duration(i) * 200 * time.Millisecond)
				if d, _ := check(l, now, one("hot", 1)); d.Allowed {
					admitted++
				}
				for range perStep {
					check(l, now, one("f"+strconv.Itoa(n), 1))
					n++
				}
			}
			if admitted > 3 || (perStep == 0 && admitted != 3) {
				t.Errorf("flood of %d new values per 200ms: %d of 25 admitted, want at most 3", perStep, admitted)
			}
		})
	}
}

// TestEvictingDefaultStateCostsNothing: values back at the default leave nothing behind.
func TestEvictingDefaultStateCostsNothing(t *testing.T) {
	r := qps(10, time.Second)
	r.Capacity = 10
	l := mustNew(t, r)
	for i := range 100 {
		// each value is used, then refills before the next one evicts it
		check(l, at(time.Duration(i)*time.Second), one("v"+strconv.Itoa(i), 1))
	}
	sh := &l.compiled[0].store.current()[0]
	if sh.evicted == 0 {
		t.Fatal("no eviction: the test does not test anything")
	}
	if sh.ledger.tab != nil {
		t.Fatal("evicting values back at a full bucket allocated a ledger")
	}
}

// evictAll pushes n one-off values through l's rule 0 at now.
func evictAll(l *Limiter, now time.Time, n int, prefix string) {
	for i := range n {
		e := one(prefix+strconv.Itoa(i), 1)
		e.Probe = true // tracked, but consuming nothing: back at the default when evicted
		check(l, now, e)
	}
}

func TestEvictedStateComesBack(t *testing.T) {
	t.Run("reject", func(t *testing.T) {
		r := qps(10, time.Second)
		r.Capacity = 8
		l := mustNew(t, r)
		check(l, t0, one("v", 10))
		evictAll(l, at(100*time.Millisecond), 100, "x")
		_, st := check(l, at(300*time.Millisecond), probe("v", 1))
		if st[0].Remaining != 3 {
			t.Fatalf("evicted empty bucket came back with %d tokens after 300ms, want 3", st[0].Remaining)
		}
	})
	t.Run("throttle", func(t *testing.T) {
		r := qps(10, time.Second)
		r.Behavior, r.MaxQueueingTime, r.Capacity = Throttle, 2*time.Second, 8
		l := mustNew(t, r)
		check(l, t0, one("v", 10)) // next slot at 1s
		evictAll(l, at(100*time.Millisecond), 100, "x")
		d, _ := check(l, at(200*time.Millisecond), one("v", 1))
		if !d.Allowed || d.Wait != 800*time.Millisecond {
			t.Fatalf("evicted throttle: %+v, want a wait of 800ms", d)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		r := Rule{Resource: "r", Param: "p", Grade: Concurrency, Count: 2, Capacity: 8, Lease: 10 * time.Second}
		l := mustNew(t, r)
		check(l, t0, one("v", 2))
		for i := range 100 { // values with one in flight each
			check(l, t0, one("x"+strconv.Itoa(i), 1))
		}
		if d, _ := check(l, at(time.Second), one("v", 1)); d.Allowed {
			t.Fatal("evicted value with 2 in flight admitted a third")
		}
		if d, _ := check(l, at(11*time.Second), one("v", 2)); !d.Allowed {
			t.Fatal("leases parked in the ledger outlived their expiry")
		}
	})
}

// floodInput feeds a flood model run from bytes (the fuzzer's) or from a random source.
type floodInput struct {
	data []byte
	rnd  *rand.Rand
}

func (in *floodInput) next(n int) int {
	if n <= 1 {
		return 0
	}
	if in.rnd != nil {
		return in.rnd.IntN(n)
	}
	if len(in.data) < 2 {
		return 0
	}
	v := binary.LittleEndian.Uint16(in.data)
	in.data = in.data[2:]
	return int(v) % n
}

func (in *floodInput) done() bool { return in.rnd == nil && len(in.data) < 2 }

// refValue is the reference model's state of one value: exact, never evicted.
type refValue struct {
	units  int64      // reject: tokens in units of 1/dur token (a token is dur units, refill count/ns)
	at     int64      // reject: when units was counted
	slot   int64      // throttle: the last admitted request's slot (ns)
	hits   int64      // throttle: its hits
	leases []refLease // concurrency: leases; refund: what each acquire took
}

type refLease struct {
	id     string
	n, exp int64
}

// free drops the expired leases and frees up to n hits of those of id, the latest first; it
// returns how many it freed (as the limiter's leases and refund records do).
func (rv *refValue) free(now int64, id string, n int64) int64 {
	rv.expire(now)
	freed := int64(0)
	for j := len(rv.leases) - 1; j >= 0 && n > 0; j-- {
		if l := &rv.leases[j]; l.id == id {
			k := min(n, l.n)
			l.n, n, freed = l.n-k, n-k, freed+k
		}
	}
	return freed
}

func (rv *refValue) expire(now int64) {
	kept := rv.leases[:0]
	for _, l := range rv.leases {
		if l.exp > now && l.n > 0 {
			kept = append(kept, l)
		}
	}
	rv.leases = kept
}

// runFloodModel runs random operations at random times against one rule with a small
// capacity and many values (eviction pressure), and fails t if the limiter admits anything a
// reference that tracks every value exactly, fed with what the limiter admitted, could not:
// more tokens than a bucket has, throttle slots closer than Duration/Count, more in flight
// than Count.
func runFloodModel(t *testing.T, in *floodInput, steps int) {
	kinds := []string{"reject", "refund", "throttle", "concurrency"}
	k := kinds[in.next(len(kinds))]
	count := int64(1 + in.next(5))
	dur := []time.Duration{time.Second, 10 * time.Second, time.Hour}[in.next(3)]
	r := Rule{Resource: "r", Param: "p", Count: count, Duration: dur, Capacity: 1 + in.next(24)}
	switch k {
	case "reject":
		r.Burst = int64(in.next(3))
	case "refund":
		r.Burst, r.Refund, r.Lease = int64(in.next(3)), true, 5*time.Second
	case "throttle":
		r.Behavior, r.MaxQueueingTime = Throttle, time.Duration(in.next(4))*dur/time.Duration(count)
	case "concurrency":
		r.Grade, r.Lease, r.Duration = Concurrency, time.Duration(1+in.next(5))*time.Second, 0
	}
	if in.next(2) == 0 { // a ledger of a few states that refuses once full: still no overadmission
		r.StateBudget, r.Overflow = int64(1+in.next(8))*8*entryBytes, OverflowRefuse
	}
	l := mustNew(t, r)
	pool := 1 + in.next(200)
	full := (count + r.Burst) * int64(dur)
	ref := map[string]*refValue{}
	now := t0.UnixNano()
	lease := int64(r.Lease)
	desc := fmt.Sprintf("%s rule %+v, %d values", k, r, pool)
	for step := 0; step < steps && !in.done(); step++ {
		now += int64(in.next(1000)) * int64(dur) / 500 / max(count, 1)
		v := "v" + strconv.Itoa(in.next(pool))
		hits := int64(1 + in.next(2))
		rv := ref[v]
		if rv == nil {
			rv = &refValue{units: full, at: now}
			ref[v] = rv
		}
		// reject: bring the reference bucket up to now
		if el := now - rv.at; el > 0 {
			rv.units = min(full, rv.units+el*count)
			rv.at = now
		}
		id := "l" + strconv.Itoa(in.next(50))
		release := (k == "concurrency" || k == "refund") && in.next(3) == 0
		e := Entry{Resource: "r", Params: []Param{{Name: "p", Values: []string{v}}}, Hits: hits, LeaseID: id, Release: release}
		d := l.Check(t.Context(), time.Unix(0, now), []Entry{e}, CheckOptions{}, nil)
		if release {
			if !d.Allowed {
				t.Fatalf("%s: step %d: a release was refused", desc, step)
			}
			freed := rv.free(now, id, hits)
			if k == "refund" {
				rv.units = min(full, rv.units+freed*int64(dur))
			}
			continue
		}
		if !d.Allowed {
			continue
		}
		switch k {
		case "reject", "refund":
			if rv.units < hits*int64(dur) {
				t.Fatalf("%s: step %d at +%v: %s admitted %d hits, the reference bucket holds %d/%d tokens",
					desc, step, time.Duration(now-t0.UnixNano()), v, hits, rv.units, int64(dur))
			}
			rv.units -= hits * int64(dur)
			if k == "refund" {
				rv.leases = append(rv.leases, refLease{id, hits, now + lease})
			}
		case "throttle":
			slot := now + int64(d.Wait)
			if gap := slot - rv.slot; rv.hits > 0 && (gap+1)*count < rv.hits*int64(dur) {
				t.Fatalf("%s: step %d: %s admitted at slot +%v, %v after the previous of %d hits; want at least %v",
					desc, step, v, time.Duration(slot-t0.UnixNano()), time.Duration(gap), rv.hits, time.Duration(rv.hits*int64(dur)/count))
			}
			rv.slot, rv.hits = slot, hits
		case "concurrency":
			rv.expire(now)
			inFlight := int64(0)
			for _, l := range rv.leases {
				inFlight += l.n
			}
			if inFlight+hits > count {
				t.Fatalf("%s: step %d: %s admitted %d with %d in flight, limit %d", desc, step, v, hits, inFlight, count)
			}
			rv.leases = append(rv.leases, refLease{id, hits, now + lease})
		}
	}
}

// TestFloodModel runs the flood model on random operation sequences.
func TestFloodModel(t *testing.T) {
	runs := 200
	if testing.Short() {
		runs = 50
	}
	for part := range uint64(2) {
		t.Run(strconv.FormatUint(part, 10), func(t *testing.T) {
			t.Parallel()
			for seed := part; seed < uint64(runs); seed += 2 {
				runFloodModel(t, &floodInput{rnd: rand.New(rand.NewPCG(seed, 8))}, 2000)
			}
		})
	}
}

// FuzzFlood runs the flood model on operation sequences read from the fuzzer's bytes.
func FuzzFlood(f *testing.F) {
	for seed := range uint64(8) {
		rnd := rand.New(rand.NewPCG(seed, 9))
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runFloodModel(t, &floodInput{data: data}, 5000)
	})
}

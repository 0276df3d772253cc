package redisstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// redisCostTarget is the most Redis may spend inside one EVALSHA checking one value against one
// rule (INFO commandstats).
const redisCostTarget = 10 * time.Microsecond

// costCase is a stream of Eval calls; call i gets ops(i).
type costCase struct {
	name string
	ops  func(i int) []hotparam.RemoteOp
}

func costCases() []costCase {
	bucket := func(count int64, d time.Duration, values int) func(int) []hotparam.RemoteOp {
		return func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "q", Value: "u" + strconv.Itoa(i%values), Count: count, Duration: d, Hits: 1}}
		}
	}
	return []costCase{
		// the target row: one value, one rule, every call consumes a token
		{"bucket/one-value-allowed", bucket(1e9, time.Second, 1)},
		{"bucket/one-value-refused", bucket(1, time.Hour, 1)},
		{"bucket/10k-values", bucket(100, time.Second, 10000)},
		{"throttle/one-value", func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "t", Value: "u", Behavior: hotparam.Throttle, Count: 1e9,
				Duration: time.Second, MaxWait: time.Second, Hits: 1}}
		}},
		{"concurrency/acquire-release", func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "c", Value: "u", Grade: hotparam.Concurrency, Count: 1e6,
				Lease: time.Minute, Hits: 1, Release: i%2 == 1, LeaseID: "l" + strconv.Itoa(i/2)}}
		}},
		{"refund/acquire-release", func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "r", Value: "u", Count: 1e9, Duration: time.Second, Refund: true,
				Lease: time.Minute, Hits: 1, Release: i%2 == 1, LeaseID: "l" + strconv.Itoa(i/2)}}
		}},
		{"typical-3-ops", redistest.TypicalOps},
		// checks that consume nothing (hits_addend 0): read, decide, write nothing
		{"probe/bucket-one-value", func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "pq", Value: "u", Count: 1e9, Duration: time.Second, Hits: 1, Probe: true}}
		}},
		{"probe/concurrency-one-value", func(i int) []hotparam.RemoteOp {
			return []hotparam.RemoteOp{{RuleID: "pc", Value: "u", Grade: hotparam.Concurrency, Count: 1e6,
				Lease: time.Minute, Hits: 1, Probe: true}}
		}},
	}
}

// BenchmarkRedisCost measures what Redis spends inside the script per call (INFO commandstats,
// usec per EVALSHA), with the Redis clock. The target row is bucket/one-value-allowed: one value,
// one rule.
func BenchmarkRedisCost(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1}) // every call to Redis
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for _, c := range costCases() {
		b.Run(c.name, func(b *testing.B) {
			ops := c.ops(0)
			if err := s.Eval(ctx, ops, make([]hotparam.RemoteResult, len(ops))); err != nil { // loads the script
				b.Fatal(err)
			}
			srv.CLI("CONFIG", "RESETSTAT")
			// one call at a time: on a small machine, concurrent clients would take the CPU from
			// Redis in the middle of a script, and commandstats counts wall time
			i := 0
			for b.Loop() {
				i++
				ops := c.ops(i)
				if err := s.Eval(ctx, ops, make([]hotparam.RemoteResult, len(ops))); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			calls, usec := srv.CommandUsec("evalsha")
			if calls == 0 {
				b.Fatal("no EVALSHA ran")
			}
			per := float64(usec) / float64(calls)
			b.ReportMetric(per, "redis-us/call")
			if c.name == "bucket/one-value-allowed" {
				b.Logf("Redis-side cost of one check of one value, one rule: %.2f us per EVALSHA (target <= %v)",
					per, redisCostTarget)
			}
		})
	}
}

// BenchmarkRedisCostBatch measures what Redis spends inside the script per check of a batch of
// 17 (the size a batch of one hot value took under 50 calls in flight), sent as the queue sends
// one (sendBatch), one batch at a time: the same op 17 times on one value, one op on each of 17
// values, and the same op 17 times on a value over its limit (all refused: the calls of a hot
// value that came while its last token was being taken).
func BenchmarkRedisCostBatch(b *testing.B) {
	const n = 17
	srv := redistest.Start(b)
	s := openStore(b, Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, BlockedCache: -1})
	c := s.client.Load().c
	for _, bc := range []struct {
		name   string
		values int
		count  int64 // a second
	}{{"values=1", 1, 1e9}, {"values=17", n, 1e9}, {"refused", 1, 1}} {
		b.Run(bc.name, func(b *testing.B) {
			batch := func(i int) []*waiter {
				ws := make([]*waiter, n)
				for j := range ws {
					op := hotparam.RemoteOp{RuleID: "batch-" + bc.name, Value: "v" + strconv.Itoa((i*n+j)%bc.values), Count: bc.count, Duration: time.Second, Hits: 1}
					ws[j] = &waiter{op: op, key: s.keys([]hotparam.RemoteOp{op})[0], done: make(chan struct{}), deadline: time.Now().Add(time.Minute)}
				}
				return ws
			}
			send := func(i int) {
				ws := batch(i)
				s.sendBatch(context.Background(), c, ws, s.localNow(), time.Time{})
				for j, w := range ws {
					// the refused case's bucket holds a token a second: the first batch (which
					// loads the script) takes it, the others are refused
					if w.err != nil || (i > 0 && w.res.Allowed != (bc.count > 1)) {
						b.Fatalf("batch %d, call %d: %+v, %v; want allowed %v", i, j, w.res, w.err, bc.count > 1)
					}
				}
			}
			send(0) // loads the script
			srv.CLI("CONFIG", "RESETSTAT")
			i := 0
			for b.Loop() {
				i++
				send(i)
			}
			b.StopTimer()
			calls, usec := srv.CommandUsec("evalsha")
			if calls == 0 {
				b.Fatal("no EVALSHA ran")
			}
			b.ReportMetric(float64(usec)/float64(calls)/n, "redis-us/check")
		})
	}
}

package redistest

import (
	"strconv"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// TypicalOps is a typical request for the Redis benchmarks: a QPS rule and a concurrency rule
// on one value, and a QPS rule on a second value, of 1,000 values each (by i). Counts are high
// so every call commits.
func TypicalOps(i int) []hotparam.RemoteOp {
	v := strconv.Itoa(i % 1000)
	return []hotparam.RemoteOp{
		{RuleID: "q", Value: "u" + v, Count: 1e9, Duration: time.Second, Hits: 1},
		{RuleID: "c", Value: "u" + v, Grade: hotparam.Concurrency, Count: 1e6, Lease: time.Second, Hits: 1},
		{RuleID: "i", Value: "i" + v, Count: 1e9, Duration: time.Second, Hits: 1},
	}
}

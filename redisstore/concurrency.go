package redisstore

import (
	_ "embed"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

// concurrencyKind is the state of a concurrency rule's value: a sorted set of its leases,
// one member a hit (script_concurrency.lua).
type concurrencyKind struct{}

//go:embed script_concurrency.lua
var concurrencyScript string

func (concurrencyKind) letter() string { return "c" }

func (concurrencyKind) check(op *hotparam.RemoteOp) error {
	if op.Count > MaxConcurrentCount {
		return fmt.Errorf("rule %q: concurrency count %d: %w", op.RuleID, op.Count, ErrOutOfRange)
	}
	if op.Lease != 0 && op.Lease < time.Microsecond {
		return fmt.Errorf("rule %q: lease %v is under a microsecond", op.RuleID, op.Lease)
	}
	return nil
}

// arg sends the lease id after the numbers.
func (concurrencyKind) arg(op *hotparam.RemoteOp, _ bool, a *opArgs) {
	a.kind = int64(kindConcurrency)
	a.hits = min(a.hits, op.Count+1)
	a.id = leaseName(op)
}

func (concurrencyKind) full(op *hotparam.RemoteOp) int64 { return op.Count }

func (concurrencyKind) cacheable(*hotparam.RemoteOp) bool { return false }

func (concurrencyKind) cached(*hotparam.RemoteOp, *blockEntry, *hotparam.RemoteResult) bool {
	return false
}

// Package audit carries what one call decided from the decision path (which fills it) to what
// reports it (the decision log, the trace), so that neither knows the other. A call's Decision
// lives in its context: the transport layer puts an empty one there with NewContext, the
// decision path fills it once through FromContext, and the reporters read it after the
// handler returns.
package audit

import (
	"context"
	"time"
)

// Decision is what one Check or ShouldRateLimit call decided. Values are raw: whoever shows
// them redacts sensitive params.
type Decision struct {
	API       string // "check" or "ratelimit"
	Domain    string // the rate-limit domain; "" for Check and for a call without one
	RequestID string // Envoy's x-request-id, when the request carries it
	Resource  string
	Origin    string
	// Result is the call's outcome: "allowed", "blocked", "throttled" (allowed after a wait),
	// "dry_run" (would have been blocked), "invalid" (refused as a client mistake).
	Result string
	// Reason says why a request was (or, in a dry run or for a shadow rule, would have been)
	// blocked: "authority", "qps", "throttle", "concurrency", "queue_full", ...; "" when allowed.
	Reason string
	Rule   string // the rule that blocked (or would have), as /rules names it
	Param  string // the param whose value was over its limit
	Value  string
	// Shadow reports that a shadow rule would have blocked an allowed request; Reason, Rule,
	// Param and Value then describe it.
	Shadow bool
	Wait   time.Duration // how long a throttled request was held
}

type key struct{}

// NewContext returns ctx carrying an empty Decision, and that Decision.
func NewContext(ctx context.Context) (context.Context, *Decision) {
	d := new(Decision)
	return context.WithValue(ctx, key{}, d), d
}

// FromContext returns the Decision NewContext put in ctx, or nil when there is none (the
// decision path then records nothing).
func FromContext(ctx context.Context) *Decision {
	d, _ := ctx.Value(key{}).(*Decision)
	return d
}

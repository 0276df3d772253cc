// Package audit is the record of what one call decided, as the decision path builds it
// (policy.Verdict.Audit) and the reporters show it (the decision log, the trace), so that
// neither knows the other.
package audit

import "time"

// Decision is what one Check or ShouldRateLimit call decided. Values are raw: whoever shows
// them redacts sensitive params.
type Decision struct {
	API       string // "check" or "ratelimit"
	Domain    string // the rate-limit domain; "" for Check and for a call without one
	RequestID string // Envoy's x-request-id, when the request carries it
	Resource  string
	Origin    string
	// Result is the call's outcome (policy.Outcome.AuditResult): "allowed", "blocked",
	// "throttled" (allowed after a wait), "dry_run" (would have been blocked), "invalid"
	// (refused as a client mistake), "cancelled".
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

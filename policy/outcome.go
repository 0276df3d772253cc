package policy

// Outcome is how one call ended: what the answer says (Allows, Blocks), the result the metrics
// count it under (Label) and the result its audit record reports (AuditResult). The zero value
// is Allowed.
type Outcome uint8

const (
	Allowed         Outcome = iota // let through at once
	Throttled                      // let through after a wait (Verdict.Wait)
	Shadow                         // let through at once; a shadow rule would have blocked (Verdict.ShadowBlock)
	ShadowThrottled                // let through after a wait; a shadow rule would have blocked
	DryRun                         // let through by the dry run; Verdict.Block says what would have refused it
	Invalid                        // refused as malformed: Verdict.Err says why, Verdict.At which entry
	Authority                      // refused by an authority rule (403)
	ParamFlow                      // refused by a hot-parameter rule (429)
	QueueFull                      // refused: too many requests already waiting (Config.MaxWaiting)
	ShuttingDown                   // refused: held for a throttle rule when the service stopped (Drain)
	Cancelled                      // the call ended during its throttle wait: Verdict.Err is the context's
	outcomes
)

// outcomeNames are each outcome's metric label and audit result.
var outcomeNames = [outcomes]struct{ label, audit string }{
	Allowed:         {"ok", "allowed"},
	Throttled:       {"ok", "throttled"},
	Shadow:          {"shadow", "allowed"},
	ShadowThrottled: {"shadow", "throttled"},
	DryRun:          {"dry_run", "dry_run"},
	Invalid:         {"invalid", "invalid"},
	Authority:       {"authority", "blocked"},
	ParamFlow:       {"param_flow", "blocked"},
	QueueFull:       {"queue_full", "blocked"},
	ShuttingDown:    {"shutting_down", "blocked"},
	Cancelled:       {"cancelled", "cancelled"},
}

// Label is the result the metrics count o under: ok, shadow, dry_run, invalid, authority,
// param_flow, queue_full, shutting_down or cancelled ("" for a value that is no Outcome).
func (o Outcome) Label() string {
	if o >= outcomes {
		return ""
	}
	return outcomeNames[o].label
}

// AuditResult is the result the audit record (the decision log, the trace) reports for o:
// allowed, throttled (allowed after a wait), dry_run (would have been blocked), invalid,
// blocked or cancelled ("" for a value that is no Outcome).
func (o Outcome) AuditResult() string {
	if o >= outcomes {
		return ""
	}
	return outcomeNames[o].audit
}

// String is o's Label.
func (o Outcome) String() string { return o.Label() }

// Allows reports whether the request is let through (the dry run's included).
func (o Outcome) Allows() bool { return o <= DryRun }

// Blocks reports whether a rule refused the request: Authority, ParamFlow, QueueFull or
// ShuttingDown (Verdict.Block says how).
func (o Outcome) Blocks() bool { return o >= Authority && o <= ShuttingDown }

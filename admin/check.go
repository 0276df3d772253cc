package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
)

// MaxCheckBody is the largest body POST /check reads, in bytes.
const MaxCheckBody = 64 << 10

// CheckFunc decides req into v as the service decides its calls (policy.Decider.Decide),
// with what v records left out of the service's metrics.
type CheckFunc func(ctx context.Context, req *policy.Request, v *policy.Verdict)

// Descriptor is one rate-limit descriptor of a POST /check body: its entries, in order, and
// its hits_addend (null: the request's hits).
type Descriptor struct {
	Entries    []DescriptorEntry `json:"entries"`
	HitsAddend *uint64           `json:"hits_addend"`
}

// DescriptorEntry is one key and value of a Descriptor.
type DescriptorEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// DescriptorsFunc maps descriptors of domain as the rate-limit API does, hits being the
// request's hits_addend; errors are the mapper's (*descriptors.RequestError).
type DescriptorsFunc func(domain string, ds []Descriptor, hits uint64) ([]descriptors.Entry, error)

// CheckRequest is the body of POST /check: either a resource with its origin and params (as
// the rules name them, after the mapping), or a raw descriptor list with its domain, as
// Envoy's rate-limit filter sends it.
type CheckRequest struct {
	Resource string `json:"resource"`
	Origin   string `json:"origin"`
	// Params are the request's params by name: one value, or a list of values.
	Params map[string]paramValues `json:"params"`
	// Hits are the tokens asked; 0 means 1.
	Hits uint64 `json:"hits"`

	Domain      string       `json:"domain"`
	Descriptors []Descriptor `json:"descriptors"`

	// Consume makes the check spend what it asks, as a real call would: tokens, and a place
	// in a throttle queue (the answer then waits). Concurrency rules are left out, since
	// nothing would release the slot. False, the default, is a probe: nothing is consumed.
	Consume bool `json:"consume"`
}

// paramValues is one value or a list of values.
type paramValues []string

func (p *paramValues) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*p = paramValues{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil || len(many) == 0 {
		return errors.New("a param is a string or a non-empty list of strings")
	}
	*p = many
	return nil
}

// CheckAnswer is the body answering POST /check.
type CheckAnswer struct {
	// Allowed is what the service would answer: true for OK, false for 403, 429, OVER_LIMIT
	// or a malformed request.
	Allowed bool `json:"allowed"`
	// Probe is true when nothing was consumed.
	Probe bool `json:"probe"`
	// DryRun is true when the service runs in dry run: Allowed is then true, and Rule and
	// Reason say what would have refused.
	DryRun       bool   `json:"dry_run"`
	RulesVersion uint64 `json:"rules_version"`
	// Rule (authority[i] or param_flow[i]) and Reason say what refused: missing_origin,
	// in_black_list, not_in_white_list, qps, throttle, concurrency, queue_full, or invalid
	// (Error then says why). Empty when allowed.
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Error    string `json:"error,omitempty"`
	Entry    *int   `json:"entry,omitempty"` // the refused entry (descriptor), from 0
	Resource string `json:"resource,omitempty"`
	Origin   string `json:"origin,omitempty"`
	Param    string `json:"param,omitempty"`
	Value    string `json:"value,omitempty"` // as /hot shows it (sensitive params redacted)
	// RetryAfterSeconds is, for a hot-param refusal, how long until the tokens asked would
	// be there.
	RetryAfterSeconds float64 `json:"retry_after_seconds,omitempty"`
	// WaitSeconds is how long a throttle rule held (consume) the request.
	WaitSeconds float64 `json:"wait_seconds,omitempty"`
	// Shadow names a shadow rule that would have refused.
	Shadow *CheckShadow `json:"shadow,omitempty"`
	// Entries are the entries decided, with the tightest hot-param limit of each.
	Entries []CheckEntry `json:"entries"`
}

// CheckShadow is a shadow rule that would have refused.
type CheckShadow struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	Param  string `json:"param,omitempty"`
	Value  string `json:"value,omitempty"`
}

// CheckEntry is one decided entry.
type CheckEntry struct {
	Resource string              `json:"resource"`
	Origin   string              `json:"origin"`
	Params   map[string][]string `json:"params"` // values as /hot shows them
	Hits     int64               `json:"hits"`
	// Rule is the hot-param rule whose limit was tightest (param_flow[i]), "" when none
	// applied; Limit, PerSeconds and Remaining are its count, duration and what is left.
	Rule       string  `json:"rule,omitempty"`
	Limit      int64   `json:"limit,omitempty"`
	PerSeconds float64 `json:"per_seconds,omitempty"`
	Remaining  *int64  `json:"remaining,omitempty"`
}

// checkHandler serves POST /check.
func checkHandler(opts Options) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, entries, status, err := readCheck(w, r, opts.Descriptors)
		if err != nil {
			writeJSON(w, status, errorBody{Error: err.Error()})
			return
		}
		preq := &policy.Request{API: policy.APICheck, Entries: entries}
		if req.Descriptors != nil {
			preq.API, preq.Domain = policy.APIRateLimit, req.Domain
		}
		for i := range preq.Entries {
			preq.Entries[i].Probe = !req.Consume
		}
		preq.SkipConcurrency = req.Consume
		var v policy.Verdict
		opts.Check(r.Context(), preq, &v)
		writeJSON(w, http.StatusOK, checkAnswer(req, preq, &v, opts.Redact))
	}
}

// readCheck reads and validates the body of r into the request and its entries, or returns
// the status (400, or 413 for a body over MaxCheckBody) and the error that says what is wrong.
// Descriptors the rate-limit mapper refuses are a 400 that quotes the mapper's error (the
// service refuses them as invalid).
func readCheck(w http.ResponseWriter, r *http.Request, mapDescriptors DescriptorsFunc) (*CheckRequest, []descriptors.Entry, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxCheckBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body is over %d bytes", MaxCheckBody)
		}
		return nil, nil, http.StatusBadRequest, fmt.Errorf("cannot read the body: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req CheckRequest
	if err := dec.Decode(&req); err != nil {
		return nil, nil, http.StatusBadRequest, fmt.Errorf("the body is not a check: %v "+
			`(want {"resource": ..., "origin": ..., "params": {"name": "value"}} or {"domain": ..., "descriptors": [{"entries": [{"key": ..., "value": ...}]}]})`, err)
	}
	if dec.More() {
		return nil, nil, http.StatusBadRequest, errors.New("the body holds more than one JSON value")
	}
	switch {
	case req.Descriptors != nil && (req.Resource != "" || req.Origin != "" || req.Params != nil || req.Hits != 0):
		return nil, nil, http.StatusBadRequest, errors.New("give either resource, origin, params and hits, or domain and descriptors, not both")
	case req.Descriptors != nil:
		if mapDescriptors == nil {
			return nil, nil, http.StatusBadRequest, errors.New("descriptors cannot be checked here")
		}
		entries, err := mapDescriptors(req.Domain, req.Descriptors, req.Hits)
		if err != nil {
			return nil, nil, http.StatusBadRequest, fmt.Errorf("the rate-limit API would refuse these descriptors as invalid: %v", err)
		}
		return &req, entries, 0, nil
	case req.Domain != "":
		return nil, nil, http.StatusBadRequest, errors.New("domain goes with descriptors")
	case req.Resource == "":
		return nil, nil, http.StatusBadRequest, errors.New("resource is missing (or give descriptors)")
	}
	entry, err := structuredEntry(&req)
	if err != nil {
		return nil, nil, http.StatusBadRequest, err
	}
	return &req, []descriptors.Entry{entry}, 0, nil
}

// structuredEntry is the entry of a resource, origin and params, within the mapper's limits.
func structuredEntry(req *CheckRequest) (descriptors.Entry, error) {
	tooLong := func(what string, s string) error {
		if len(s) > descriptors.MaxLen {
			return fmt.Errorf("%s is over %d bytes", what, descriptors.MaxLen)
		}
		return nil
	}
	if err := errors.Join(tooLong("resource", req.Resource), tooLong("origin", req.Origin)); err != nil {
		return descriptors.Entry{}, err
	}
	if len(req.Params) > descriptors.MaxEntries {
		return descriptors.Entry{}, fmt.Errorf("over %d params", descriptors.MaxEntries)
	}
	if req.Hits > 1<<62 {
		return descriptors.Entry{}, errors.New("hits is too large")
	}
	e := descriptors.Entry{Origin: req.Origin}
	e.Resource, e.Hits = req.Resource, int64(req.Hits)
	names := make([]string, 0, len(req.Params))
	for name := range req.Params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		values := req.Params[name]
		if name == "" {
			return descriptors.Entry{}, errors.New("a param has an empty name")
		}
		if err := tooLong("param name "+strconv.Quote(name), name); err != nil {
			return descriptors.Entry{}, err
		}
		if len(values) > descriptors.MaxValues {
			return descriptors.Entry{}, fmt.Errorf("param %q has over %d values", name, descriptors.MaxValues)
		}
		for _, v := range values {
			if err := tooLong("a value of param "+strconv.Quote(name), v); err != nil {
				return descriptors.Entry{}, err
			}
		}
		e.Params = append(e.Params, hotparam.Param{Name: name, Values: values})
	}
	return e, nil
}

// checkAnswer renders v, the verdict on preq.
func checkAnswer(req *CheckRequest, preq *policy.Request, v *policy.Verdict, redact func(param, value string) string) CheckAnswer {
	show := func(param, value string) string {
		if redact == nil {
			return value
		}
		return redact(param, value)
	}
	a := CheckAnswer{Allowed: v.Outcome.Allows(), Probe: !req.Consume, DryRun: v.DryRun,
		Entries: make([]CheckEntry, 0, len(preq.Entries))}
	if v.Rules != nil {
		a.RulesVersion = v.Rules.Version()
	}
	block := v.Outcome.Blocks() || v.DryRun
	switch {
	case v.Outcome == policy.Invalid || (v.DryRun && v.Block.Kind == policy.Invalid):
		a.Reason = policy.Invalid.Label()
		if v.Err != nil {
			a.Error = v.Err.Error()
		}
	case block:
		b := &v.Block
		a.Rule, a.Reason = b.RuleName(), b.Reason
		a.Resource, a.Origin, a.Param = b.Resource, b.Origin, b.Param
		if b.Param != "" {
			a.Value = show(b.Param, b.Value)
		}
		if v.At >= 0 {
			at := v.At
			a.Entry = &at
		}
		a.RetryAfterSeconds = v.RetryAfter.Seconds()
	case v.Outcome == policy.Cancelled:
		a.Reason = policy.Cancelled.Label()
	}
	a.WaitSeconds = v.Wait.Seconds()
	if v.Shadow {
		s := &v.ShadowBlock
		a.Shadow = &CheckShadow{Rule: s.RuleName(), Reason: s.Reason, Param: s.Param}
		if s.Param != "" {
			a.Shadow.Value = show(s.Param, s.Value)
		}
	}
	for i, e := range preq.Entries {
		ce := CheckEntry{Resource: e.Resource, Origin: e.Origin, Hits: max(e.Hits, 1), Params: map[string][]string{}}
		for _, p := range e.Params {
			for _, val := range p.Values {
				ce.Params[p.Name] = append(ce.Params[p.Name], show(p.Name, val))
			}
		}
		if i < len(v.Limits) && v.Limits[i].Rule >= 0 {
			st := v.Limits[i]
			left := st.Remaining
			ce.Rule = "param_flow[" + strconv.Itoa(st.Rule) + "]"
			ce.Limit, ce.PerSeconds, ce.Remaining = st.Limit, st.Duration.Seconds(), &left
		}
		a.Entries = append(a.Entries, ce)
	}
	return a
}

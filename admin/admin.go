// Package admin serves the service's admin HTTP endpoints: health, readiness, metrics, the rules
// in force, the busiest parameter values, a debug check of one request (POST /check), profiles,
// and the live console at / that shows them.
package admin

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

// DefaultTopN is the number of values /hot lists per rule when the request does not say.
const DefaultTopN = 10

// MaxTopN is the most values /hot lists per rule.
const MaxTopN = 1000

// Options say where the handler gets what it shows. Every field may be nil: the endpoint that
// needs it then answers 404 (Metrics, Rules, Top) or 503 (Ready), and the console leaves out
// what it would show.
type Options struct {
	// Ready reports whether the service is ready to take traffic.
	Ready func() bool
	// Metrics serves /metrics.
	Metrics http.Handler
	// Rules returns the rules in force.
	Rules func() *rulestore.Set
	// LastError returns the last rejected load of the rules file, or nil.
	LastError func() *rulestore.LoadError
	// Top returns the n busiest values of each hot-param rule.
	Top func(n int) []hotparam.RuleTop
	// Traffic returns the per-second decisions of the last minutes and the shared store's
	// state (metrics.Metrics.Snapshot), for the console.
	Traffic func(now time.Time) metrics.Snapshot
	// Remaining returns the whole tokens (or free slots) left now for value of the hot-param
	// rule at index rule, if known; /hot and the console show null where it is nil or says no.
	Remaining func(now time.Time, rule int, value string) (int64, bool)
	// Redact turns a param's value into what /hot, /rules (the items of a rule) and the
	// console show (e.g. a keyed hash of a sensitive one); nil shows values as they are.
	Redact func(param, value string) string
	// Now is the clock of the console and /hot; nil means time.Now.
	Now func() time.Time
	// PProf serves Go's profiles under /debug/pprof/. Off by default: a CPU profile or trace
	// costs the service while it runs, and the profiles show internals.
	PProf bool
	// Check decides a POST /check as the service decides its calls (policy.Decider.Decide on
	// the rules in force), without counting it in the service's metrics; nil: no /check.
	Check CheckFunc
	// Descriptors maps the raw descriptors of a POST /check as the rate-limit API does; nil:
	// /check takes only a resource, origin and params.
	Descriptors DescriptorsFunc
	// Fleet is the console's fleet view (/console/fleet): every replica's counts, or this
	// replica's alone when nil or without a Store.
	Fleet *Fleet
	// Hosts are the names, besides loopback names and IP addresses, that requests may carry
	// in their Host header; a request naming anything else is refused with 421 (see
	// config.AdminConfig.Hosts).
	Hosts []string
}

// New returns the admin handler. It answers only requests whose Host header is a loopback
// name, an IP address or one of Options.Hosts, and marks every answer nosniff. It is safe for
// concurrent use.
func New(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if opts.Ready == nil || !opts.Ready() {
			writeText(w, http.StatusServiceUnavailable, "not ready\n")
			return
		}
		writeText(w, http.StatusOK, "ready\n")
	})
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Rules != nil {
		mux.HandleFunc("GET /rules", func(w http.ResponseWriter, r *http.Request) {
			var last *rulestore.LoadError
			if opts.LastError != nil {
				last = opts.LastError()
			}
			writeJSON(w, http.StatusOK, rulesView(opts.Rules(), last, opts.Redact))
		})
	}
	if opts.Top != nil {
		mux.HandleFunc("GET /hot", func(w http.ResponseWriter, r *http.Request) {
			n := DefaultTopN
			if s := r.URL.Query().Get("n"); s != "" {
				v, err := strconv.Atoi(s)
				if err != nil || v < 1 || v > MaxTopN {
					writeJSON(w, http.StatusBadRequest, errorBody{
						Error: "n must be an integer from 1 to " + strconv.Itoa(MaxTopN),
					})
					return
				}
				n = v
			}
			now := time.Now
			if opts.Now != nil {
				now = opts.Now
			}
			hot := hotView(opts.Top(n), n, opts.Redact, opts.Remaining, now())
			if opts.Rules != nil {
				markShadow(hot.Rules, opts.Rules())
			}
			writeJSON(w, http.StatusOK, hot)
		})
	}
	if opts.Check != nil {
		mux.HandleFunc("POST /check", checkHandler(opts))
	}
	consoleHandlers(mux, opts)
	if opts.PProf {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index) // named profiles: heap, goroutine, ...
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return newHostFilter(opts.Hosts, mux)
}

type errorBody struct {
	Error string `json:"error"`
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	writeBody(w, code, body, err)
}

// writeCompactJSON is writeJSON without indentation, for bodies mostly made of numbers.
func writeCompactJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	writeBody(w, code, body, err)
}

func writeBody(w http.ResponseWriter, code int, body []byte, err error) {
	if err != nil {
		writeText(w, http.StatusInternalServerError, "cannot encode response: "+err.Error()+"\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// Rules is the body of /rules.
type Rules struct {
	Version   uint64          `json:"version"`
	LoadedAt  *time.Time      `json:"loaded_at"` // null before any load
	File      string          `json:"file"`
	LastError *LastError      `json:"last_error"` // null when the last load was applied
	Warnings  []string        `json:"warnings"`   // notes about the rules in force
	Authority []AuthorityRule `json:"authority"`
	ParamFlow []ParamRule     `json:"param_flow"`
}

// LastError is the last rejected load.
type LastError struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// AuthorityRule and ParamRule are the rules as rulestore renders them: as the rules file
// spells them.
type (
	AuthorityRule = rulestore.AuthorityJSON
	ParamRule     = rulestore.ParamFlowJSON
)

// rulesView renders set and last; the values of the rules' items go through redact (when not
// nil), as the values of /hot do.
func rulesView(set *rulestore.Set, last *rulestore.LoadError, redact func(param, value string) string) Rules {
	v := Rules{Warnings: []string{}, Authority: []AuthorityRule{}, ParamFlow: []ParamRule{}}
	if last != nil {
		v.LastError = &LastError{Time: last.Time, Message: last.Message}
	}
	if set == nil {
		return v
	}
	v.Version = set.Version
	v.File = set.File
	if !set.LoadedAt.IsZero() {
		t := set.LoadedAt
		v.LoadedAt = &t
	}
	v.Warnings = append(v.Warnings, set.Rules.Warnings...)
	for _, r := range set.Rules.Authority {
		v.Authority = append(v.Authority, rulestore.AuthorityOf(r))
	}
	for _, r := range set.Rules.ParamFlow {
		p := rulestore.ParamFlowOf(r)
		if redact != nil && len(p.Items) > 0 {
			items := make(map[string]int64, len(p.Items))
			for value, count := range p.Items {
				items[redact(r.Param, value)] = count
			}
			p.Items = items
		}
		v.ParamFlow = append(v.ParamFlow, p)
	}
	return v
}

// Hot is the body of /hot.
type Hot struct {
	N     int       `json:"n"`
	Rules []HotRule `json:"rules"`
}

// HotRule is one rule's busiest values.
type HotRule struct {
	Rule      int        `json:"rule"`
	Resource  string     `json:"resource"`
	Param     string     `json:"param"`
	Shadow    bool       `json:"shadow"` // evaluated and counted, never blocks
	ByPassed  []HotValue `json:"by_passed"`
	ByBlocked []HotValue `json:"by_blocked"`
}

// markShadow sets Shadow on the rules of hot that are shadow rules in set.
func markShadow(hot []HotRule, set *rulestore.Set) {
	if set == nil {
		return
	}
	rules := set.Rules.ParamFlow
	for i := range hot {
		if r := hot[i].Rule; r >= 0 && r < len(rules) {
			hot[i].Shadow = rules[r].Shadow
		}
	}
}

// HotValue is one value's counts in the recent window.
type HotValue struct {
	Value     string `json:"value"` // as Options.Redact shows it
	Passed    uint64 `json:"passed"`
	Blocked   uint64 `json:"blocked"`
	Remaining *int64 `json:"remaining"` // tokens or slots left now; null when unknown
}

// hotView renders top with at most n values per list, each value through redact (when not
// nil) and with its remaining tokens from remaining (when not nil).
func hotView(top []hotparam.RuleTop, n int, redact func(param, value string) string,
	remaining func(now time.Time, rule int, value string) (int64, bool), now time.Time) Hot {
	v := Hot{N: n, Rules: make([]HotRule, 0, len(top))}
	values := func(t hotparam.RuleTop, in []hotparam.TopValue) []HotValue {
		if len(in) > n {
			in = in[:n]
		}
		out := make([]HotValue, len(in))
		for i, tv := range in {
			out[i] = HotValue{Value: tv.Value, Passed: tv.Passed, Blocked: tv.Blocked}
			if remaining != nil {
				if left, ok := remaining(now, t.Rule, tv.Value); ok {
					out[i].Remaining = &left
				}
			}
			if redact != nil {
				out[i].Value = redact(t.Param, tv.Value)
			}
		}
		return out
	}
	for _, t := range top {
		v.Rules = append(v.Rules, HotRule{
			Rule:      t.Rule,
			Resource:  t.Resource,
			Param:     t.Param,
			ByPassed:  values(t, t.ByPassed),
			ByBlocked: values(t, t.ByBlocked),
		})
	}
	return v
}

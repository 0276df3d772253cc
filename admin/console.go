package admin

import (
	"embed"
	"io/fs"
	"net/http"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

// MaxConsoleResources is the most resources the console lists: those with per-second counts
// first, then the other resources the rules name, in rule order.
const MaxConsoleResources = 200

// MaxConsoleRules is the most rules the console's rules table lists, authority rules first.
const MaxConsoleRules = 500

// MaxConsoleHotRules is the most hot-param rules the console lists: those with values counted
// in their recent window, in rule order.
const MaxConsoleHotRules = 50

// consoleTopN is the number of values the console lists per hot-param rule and order.
const consoleTopN = 10

// consoleCSP keeps the console to its own origin: no request leaves the admin listener, no
// inline script or style runs.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed console
var consoleFiles embed.FS

// Console is the body of /console/data: everything the console page shows.
type Console struct {
	Time time.Time `json:"time"`
	// WindowSeconds is the length of each resource's Allowed and Blocked series.
	WindowSeconds int `json:"window_seconds"`
	// Rules are the rules in force as /rules shows them, at most MaxConsoleRules of them;
	// MoreRules is how many are left out.
	Rules     Rules             `json:"rules"`
	MoreRules int               `json:"more_rules"`
	Resources []ConsoleResource `json:"resources"`
	// MoreResources is how many resources the rules name beyond those listed.
	MoreResources int `json:"more_resources"`
	// Hot are the hot-param rules with values counted in their recent window; QuietHotRules
	// is how many others there are (none counted recently, or past MaxConsoleHotRules).
	Hot           []HotRule     `json:"hot"`
	QuietHotRules int           `json:"quiet_hot_rules"`
	Store         *ConsoleStore `json:"store"` // null when the metrics are not wired in
}

// ConsoleResource is one resource's recent decisions and the rules that apply to it.
type ConsoleResource struct {
	Resource string `json:"resource"` // "other" for resources counted together, "" for no rule
	// Allowed and Blocked are decisions per second, oldest first, ending with the current
	// second; null when the resource has no per-second counts of its own.
	Allowed []uint32        `json:"allowed"`
	Blocked []uint32        `json:"blocked"`
	Totals  *metrics.Totals `json:"totals"`
	Rules   []RuleRef       `json:"rules"`
	// TopRule is the index in Rules of the rule that blocks most, -1 when none blocked.
	TopRule int `json:"top_rule"`
}

// RuleRef names one rule of a resource and how many requests it blocked (a shadow rule: would
// have blocked, of those let through) in the window. An authority rule counts the resource's
// authority refusals (shared when it has several); a hot-param rule its resource's param_flow
// (shadow) results when it is the resource's only one of its kind, and otherwise, with Recent
// set, what it blocked of its busiest values in its own recent window (its current and
// previous Duration).
type RuleRef struct {
	Kind   string `json:"kind"`  // "authority" or "param_flow"
	Index  int    `json:"index"` // in the rules file's list of that kind
	Label  string `json:"label"`
	Shadow bool   `json:"shadow"`
	Blocks uint64 `json:"blocks"`
	Recent bool   `json:"recent"`
}

// ConsoleStore is the shared store's state.
type ConsoleStore struct {
	Enabled     bool              `json:"enabled"`
	BreakerOpen bool              `json:"breaker_open"`
	Calls       uint64            `json:"calls"`
	Errors      uint64            `json:"errors"`
	Fallbacks   map[string]uint64 `json:"fallbacks"`
}

// consoleHandlers adds the console's routes to mux.
func consoleHandlers(mux *http.ServeMux, opts Options) {
	static, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic("admin: embedded console: " + err.Error()) // the embed directive guarantees it
	}
	files := http.FileServerFS(static)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		consoleHeaders(w)
		http.ServeFileFS(w, r, static, "index.html")
	})
	mux.Handle("GET /console/", http.StripPrefix("/console", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" || r.URL.Path == "/index.html" {
			http.NotFound(w, r) // the page lives at /
			return
		}
		consoleHeaders(w)
		files.ServeHTTP(w, r)
	})))
	mux.HandleFunc("GET /console/data", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		consoleHeaders(w)
		writeCompactJSON(w, http.StatusOK, consoleView(opts, now()))
	})
	fleet := opts.Fleet
	if fleet == nil {
		fleet = &Fleet{Traffic: opts.Traffic}
	}
	mux.HandleFunc("GET /console/fleet", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now
		if opts.Now != nil {
			now = opts.Now
		}
		consoleHeaders(w)
		writeCompactJSON(w, http.StatusOK, fleet.View(r.Context(), now()))
	})
}

func consoleHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", consoleCSP)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
}

// consoleView gathers what the console shows at now.
func consoleView(opts Options, now time.Time) Console {
	var set *rulestore.Set
	if opts.Rules != nil {
		set = opts.Rules()
	}
	var last *rulestore.LoadError
	if opts.LastError != nil {
		last = opts.LastError()
	}
	c := Console{
		Time:          now,
		WindowSeconds: int(metrics.Window / time.Second),
		Rules:         rulesView(set, last, opts.Redact),
		Resources:     []ConsoleResource{},
		Hot:           []HotRule{},
	}
	var top []hotparam.RuleTop
	if opts.Top != nil {
		top = opts.Top(consoleTopN)
		busy := make([]hotparam.RuleTop, 0, min(len(top), MaxConsoleHotRules))
		for _, t := range top {
			if (len(t.ByPassed) > 0 || len(t.ByBlocked) > 0) && len(busy) < MaxConsoleHotRules {
				busy = append(busy, t)
			}
		}
		c.QuietHotRules = len(top) - len(busy)
		c.Hot = hotView(busy, consoleTopN, opts.Redact, opts.Remaining, now).Rules
		markShadow(c.Hot, set)
	}
	var snap metrics.Snapshot
	if opts.Traffic != nil {
		snap = opts.Traffic(now)
		st := snap.Store
		c.Store = &ConsoleStore{Enabled: st.Enabled, BreakerOpen: st.BreakerOpen, Calls: st.Calls,
			Errors: st.Errors, Fallbacks: st.Fallbacks}
	}
	c.Resources, c.MoreResources = resourcesView(set, snap, top)
	if n := len(c.Rules.Authority); n > MaxConsoleRules {
		c.MoreRules += n - MaxConsoleRules
		c.Rules.Authority = c.Rules.Authority[:MaxConsoleRules]
	}
	if n, room := len(c.Rules.ParamFlow), MaxConsoleRules-len(c.Rules.Authority); n > room {
		c.MoreRules += n - room
		c.Rules.ParamFlow = c.Rules.ParamFlow[:room]
	}
	return c
}

// resourcesView lists the resources with per-second counts, then those the rules name, at most
// MaxConsoleResources, each with its rules; and says how many it left out.
func resourcesView(set *rulestore.Set, snap metrics.Snapshot, top []hotparam.RuleTop) ([]ConsoleResource, int) {
	out := []ConsoleResource{}
	at := map[string]int{} // resource -> index in out
	for _, t := range snap.Resources {
		totals := t.Totals
		at[t.Resource] = len(out)
		out = append(out, ConsoleResource{Resource: t.Resource, Allowed: t.Allowed, Blocked: t.Blocked,
			Totals: &totals, Rules: []RuleRef{}, TopRule: -1})
	}
	more := 0
	add := func(resource string, ref RuleRef) {
		i, ok := at[resource]
		if !ok {
			if len(out) >= MaxConsoleResources {
				more++
				at[resource] = -1
				return
			}
			i = len(out)
			at[resource] = i
			out = append(out, ConsoleResource{Resource: resource, Rules: []RuleRef{}, TopRule: -1})
		}
		if i >= 0 {
			out[i].Rules = append(out[i].Rules, ref)
		}
	}
	if set != nil {
		blocked := make(map[int]uint64, len(top))
		for _, t := range top {
			for _, v := range t.ByBlocked {
				blocked[t.Rule] += v.Blocked
			}
		}
		for i, r := range set.Rules.Authority {
			ref := RuleRef{Kind: "authority", Index: i, Label: rulestore.AuthorityOf(r).Strategy + " list"}
			if j, ok := at[r.Resource]; ok && j >= 0 && out[j].Totals != nil {
				ref.Blocks = out[j].Totals.Authority
			}
			add(r.Resource, ref)
		}
		type kinds struct{ enforced, shadow int }
		per := map[string]kinds{}
		for _, r := range set.Rules.ParamFlow {
			k := per[r.Resource]
			if r.Shadow {
				k.shadow++
			} else {
				k.enforced++
			}
			per[r.Resource] = k
		}
		for i, r := range set.Rules.ParamFlow {
			ref := RuleRef{Kind: "param_flow", Index: i, Label: rulestore.ParamFlowOf(r).Grade + " on " + r.Param,
				Shadow: r.Shadow, Blocks: blocked[i], Recent: true}
			if j, ok := at[r.Resource]; ok && j >= 0 && out[j].Totals != nil {
				switch k := per[r.Resource]; {
				case r.Shadow && k.shadow == 1:
					ref.Blocks, ref.Recent = out[j].Totals.Shadow, false
				case !r.Shadow && k.enforced == 1:
					ref.Blocks, ref.Recent = out[j].Totals.ParamFlow, false
				}
			}
			add(r.Resource, ref)
		}
	}
	for i := range out {
		best := uint64(0)
		for j, ref := range out[i].Rules {
			if ref.Blocks > best {
				best, out[i].TopRule = ref.Blocks, j
			}
		}
	}
	return out, more
}

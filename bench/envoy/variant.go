package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// The HTTP filters of the shipped bootstrap that a variant keeps or drops.
const (
	extAuthzFilter  = "envoy.filters.http.ext_authz"
	rateLimitFilter = "envoy.filters.http.ratelimit"
	localRLFilter   = "envoy.filters.http.local_ratelimit"
)

// A variant is the shipped bootstrap with some of its HTTP filters: which ones, and what
// serves the extauthz cluster.
type variant struct {
	name    string
	filters []string // the shipped filters it keeps, besides the router
	local   bool     // Envoy's own local_ratelimit in place of the dropped filters
	service string   // what serves the extauthz cluster: "noop", "extauthz", "mirror", "ratelimit"
}

// variants are the side-by-side configurations, the baseline first.
var variants = []variant{
	{name: "none", service: "noop"},
	{name: "authz-noop", filters: []string{extAuthzFilter}, service: "noop"},
	{name: "authz-extauthz", filters: []string{extAuthzFilter}, service: "extauthz"},
	{name: "rl-noop", filters: []string{rateLimitFilter}, service: "noop"},
	{name: "rl-extauthz", filters: []string{rateLimitFilter}, service: "extauthz"},
	{name: "authz-mirror", filters: []string{extAuthzFilter}, service: "mirror"},
	{name: "rl-mirror", filters: []string{rateLimitFilter}, service: "mirror"},
	{name: "local_ratelimit", local: true, service: "noop"},
	{name: "rl-ratelimit", filters: []string{rateLimitFilter}, service: "ratelimit"},
}

func findVariant(name string) (variant, error) {
	var names []string
	for _, v := range variants {
		if v.name == name {
			return v, nil
		}
		names = append(names, v.name)
	}
	return variant{}, fmt.Errorf("no variant %q (have %v)", name, names)
}

// bootstrap returns the shipped bootstrap src as v runs it: rewritten to loopback by
// envoytest.Bootstrap (the extauthz cluster at service, the upstream cluster at upstream), then
// with only v's HTTP filters before the router. Nothing else changes.
func (v variant) bootstrap(src []byte, service, upstream string) ([]byte, error) {
	js, err := envoytest.Bootstrap(src, envoytest.Rewrite{Upstreams: map[string][]string{
		"extauthz": {service},
		"upstream": {upstream},
	}})
	if err != nil {
		return nil, err
	}
	var root map[string]any
	if err := json.Unmarshal(js, &root); err != nil {
		return nil, err
	}
	hcm, err := connectionManager(root)
	if err != nil {
		return nil, err
	}
	filters, _ := hcm["http_filters"].([]any)
	keep := map[string]bool{"envoy.filters.http.router": true}
	for _, f := range v.filters {
		keep[f] = true
	}
	var out []any
	found := map[string]bool{}
	for _, f := range filters {
		name, _ := f.(map[string]any)["name"].(string)
		found[name] = true
		if name == "envoy.filters.http.router" && v.local {
			out = append(out, localRateLimit())
		}
		if keep[name] {
			out = append(out, f)
		}
	}
	var missing []string
	for name := range keep {
		if !found[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("the bootstrap has no HTTP filter %q", missing)
	}
	hcm["http_filters"] = out
	return json.MarshalIndent(root, "", "  ")
}

// connectionManager is the typed_config of the ingress listener's HTTP connection manager.
func connectionManager(root map[string]any) (map[string]any, error) {
	static, _ := root["static_resources"].(map[string]any)
	listeners, _ := static["listeners"].([]any)
	for _, l := range listeners {
		lm, _ := l.(map[string]any)
		if lm["name"] != "ingress" {
			continue
		}
		chains, _ := lm["filter_chains"].([]any)
		for _, c := range chains {
			fs, _ := c.(map[string]any)["filters"].([]any)
			for _, f := range fs {
				fm, _ := f.(map[string]any)
				if fm["name"] == "envoy.filters.network.http_connection_manager" {
					if tc, ok := fm["typed_config"].(map[string]any); ok {
						return tc, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("no http_connection_manager on the ingress listener")
}

// localRateLimit is Envoy's local_ratelimit filter with a bucket no benchmark empties,
// enabled and enforced for every request: what Envoy spends limiting in process.
func localRateLimit() map[string]any {
	percent := func(key string) map[string]any {
		return map[string]any{"runtime_key": key, "default_value": map[string]any{"numerator": 100, "denominator": "HUNDRED"}}
	}
	return map[string]any{
		"name": localRLFilter,
		"typed_config": map[string]any{
			"@type":       "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
			"stat_prefix": "local_rl",
			"token_bucket": map[string]any{
				"max_tokens": 1 << 30, "tokens_per_fill": 1 << 30, "fill_interval": "1s",
			},
			"filter_enabled":  percent("local_rl_enabled"),
			"filter_enforced": percent("local_rl_enforced"),
		},
	}
}

// Package descriptors maps Envoy's requests (an ext_authz CheckRequest, a rate-limit
// descriptor) to entries: a resource, an origin, params and hits.
package descriptors

import "github.com/extauthz/extauthz/hotparam"

// Config is the mapping section of the service config.
type Config struct {
	Authz     AuthzConfig     `mapstructure:"authz" json:"authz"`
	RateLimit RateLimitConfig `mapstructure:"ratelimit" json:"ratelimit"`
}

// AuthzConfig maps a CheckRequest.
type AuthzConfig struct {
	// Resource is a template over the request: {method}, {path} (without query), {host}.
	// A route's context_extensions["resource"] wins when set. Default "{method}:{path}".
	Resource string `mapstructure:"resource" json:"resource"`
	// Origin lists sources in order; the first that yields a value wins.
	Origin []Source `mapstructure:"origin" json:"origin"`
	// Params maps a param name to its source.
	Params map[string]Source `mapstructure:"params" json:"params"`
	// TrustedHops is how many x-forwarded-for hops (from the right) are our own proxies, for
	// the client_ip source; 0 means the source address.
	TrustedHops int `mapstructure:"trusted_hops" json:"trusted_hops"`
}

// Source is where a value comes from.
type Source struct {
	// From is header, query, cookie, client_ip, host, method, path, principal or
	// context_extension.
	From  string `mapstructure:"from" json:"from"`
	Name  string `mapstructure:"name" json:"name,omitempty"`   // header, query, cookie, extension name
	Split string `mapstructure:"split" json:"split,omitempty"` // splits one value into several
}

// RateLimitConfig maps rate-limit descriptors.
type RateLimitConfig struct {
	ResourceKey string `mapstructure:"resource_key" json:"resource_key"` // default "resource", falls back to "generic_key"
	OriginKey   string `mapstructure:"origin_key" json:"origin_key"`     // default "origin"
	// LeaseKey is the descriptor key whose value names a request's concurrency lease
	// (Entry.LeaseID): Envoy's x-request-id, sent with both the acquire and the release, so that
	// a release frees only the slot its own request holds. Default "lease_id".
	LeaseKey string `mapstructure:"lease_key" json:"lease_key"`
}

// Entry is one request (or descriptor) mapped for the rule engines: the hot-parameter entry
// itself, handed to hotparam as it is, and the origin the authority rules read.
type Entry struct {
	hotparam.Entry
	Origin string // "" when none
}

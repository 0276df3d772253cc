// Package descriptors maps Envoy's requests (an ext_authz CheckRequest, a rate-limit
// descriptor) to entries: a resource, an origin, params and hits.
package descriptors

import (
	"errors"
	"sort"
	"strconv"
	"strings"
)

// Defaults applied by New when the config leaves a field empty.
const (
	DefaultResource    = "{method}:{path}"
	DefaultResourceKey = "resource"
	DefaultOriginKey   = "origin"
	DefaultLeaseKey    = "lease_id"
	// GenericKey names the resource of a descriptor that has no ResourceKey entry.
	GenericKey = "generic_key"
	// ResourceExtension is the context extension that, when a route sets it, names the
	// resource of a check request instead of the template.
	ResourceExtension = "resource"
)

// Config is the mapping section of the service config.
type Config struct {
	Authz     AuthzConfig     `json:"authz"`
	RateLimit RateLimitConfig `json:"ratelimit"`
}

// AuthzConfig maps a CheckRequest.
type AuthzConfig struct {
	// Resource is Check's resource template (see [Mapping](mapping.md)).
	Resource string `json:"resource"`
	// Origin is Check's origin sources, the first that yields a value wins.
	Origin []Source `json:"origin"`
	// Params maps Check's param names to sources.
	Params map[string]Source `json:"params"`
	// TrustedHops is, for Check, the same number as Envoy's `xff_num_trusted_hops`, for `client_ip` (see
	// "The client address" in [Pointing Envoy at it](envoy.md)).
	TrustedHops int `json:"trusted_hops"`
	// KeepOriginHeaders lets, in Check, the headers origin sources read reach the upstream; by
	// default an allowed Check removes them (`headers_to_remove`).
	KeepOriginHeaders bool `json:"keep_origin_headers"`
	// RemoveHeaders are more request headers an allowed Check removes before the upstream.
	RemoveHeaders []string `json:"remove_headers"`
}

// Source is where a value comes from.
type Source struct {
	// From is header, query, cookie, client_ip, host, method, path, principal,
	// context_extension or metadata.
	From  string `json:"from"`
	Name  string `json:"name,omitempty"`  // header, query, cookie, extension name
	Split string `json:"split,omitempty"` // splits one value into several
	// Namespace and Path locate a value in the metadata Envoy verified and sent with the
	// check request (its metadata_context, filled by ext_authz's metadata_context_namespaces):
	// Path walks the struct of filter namespace Namespace, key by key, to a string (e.g.
	// namespace envoy.filters.http.jwt_authn, path [payload, sub] for a JWT's subject). A
	// missing key or a leaf that is not a string yields no value. For from: metadata only.
	Namespace string   `json:"namespace,omitempty"`
	Path      []string `json:"path,omitempty"`
}

// RateLimitConfig maps rate-limit descriptors.
type RateLimitConfig struct {
	// ResourceKey is ShouldRateLimit's descriptor key naming the resource.
	ResourceKey string `json:"resource_key"` // default "resource", falls back to "generic_key"
	// OriginKey is ShouldRateLimit's descriptor key naming the origin.
	OriginKey string `json:"origin_key"` // default "origin"
	// LeaseKey is ShouldRateLimit's descriptor key naming a concurrency lease.
	LeaseKey string `json:"lease_key"`
}

// kind is a compiled Source.From.
type kind uint8

const (
	fromHeader kind = iota + 1
	fromQuery
	fromCookie
	fromClientIP
	fromHost
	fromMethod
	fromPath
	fromPrincipal
	fromExtension
	fromMetadata
)

var kinds = map[string]kind{
	"header":            fromHeader,
	"query":             fromQuery,
	"cookie":            fromCookie,
	"client_ip":         fromClientIP,
	"host":              fromHost,
	"method":            fromMethod,
	"path":              fromPath,
	"principal":         fromPrincipal,
	"context_extension": fromExtension,
	"metadata":          fromMetadata,
}

// sourceNames lists the kinds for errors.
const sourceNames = "header, query, cookie, client_ip, host, method, path, principal, context_extension, metadata"

// MaxMetadataPath is the most keys a metadata source's path may have.
const MaxMetadataPath = 16

// source is a compiled Source.
type source struct {
	kind  kind
	name  string // lower-case for headers; the namespace for metadata
	split string
	path  []string // metadata only
}

// param is a named, compiled Source.
type param struct {
	name string
	src  source
}

// part is one piece of a resource template: a literal, or a placeholder when kind is not 0.
type part struct {
	lit  string
	kind kind
}

// Mapper maps Envoy requests to entries by a validated Config. It is immutable and safe for
// concurrent use. Build one with New; the zero value is not usable.
type Mapper struct {
	resource    []part
	origin      []source
	params      []param // sorted by name
	hops        int
	resourceKey string
	originKey   string
	leaseKey    string
	// uses says which sources the rules in force read; nil: every source is needed.
	uses   Uses
	remove []string // headers an allowed Check removes, lower-case, sorted, no duplicates
}

// Uses tells the mapping which parts of a check request the rules in force read, so that a
// source over a limit (a value longer than MaxLen, more than MaxValues values) refuses only
// the requests whose rules read it. Its methods must be safe for concurrent use; they are
// called only for a source over a limit.
type Uses interface {
	// UsesOrigin reports whether some rule on resource reads the origin (an authority rule).
	UsesOrigin(resource string) bool
	// UsesParam reports whether some rule on resource reads param.
	UsesParam(resource, param string) bool
}

// WithUses returns a copy of m that consults u for a source over a limit: a source no rule on
// the request's resource reads is left out, and the request is mapped and decided as if it did
// not carry it; only a source that a rule on the resource reads refuses the request (with the
// *RequestError CheckInto returns), since that rule cannot be decided on a value the mapping
// will not carry. Without WithUses every source over a limit refuses the request.
func (m *Mapper) WithUses(u Uses) *Mapper {
	c := *m
	c.uses = u
	return &c
}

// New validates cfg and compiles it. Every problem found is returned, each a *ConfigError
// (joined with errors.Join).
func New(cfg Config) (*Mapper, error) {
	var errs []error
	bad := func(field, reason string) {
		errs = append(errs, &ConfigError{Field: field, Reason: reason})
	}
	m := &Mapper{hops: cfg.Authz.TrustedHops}

	tmpl := cfg.Authz.Resource
	if tmpl == "" {
		tmpl = DefaultResource
	}
	parts, err := parseTemplate(tmpl)
	if err != nil {
		bad("authz.resource", err.Error())
	}
	m.resource = parts

	for i, s := range cfg.Authz.Origin {
		src, reason, field := compileSource(s)
		if reason != "" {
			bad("authz.origin["+strconv.Itoa(i)+"]."+field, reason)
			continue
		}
		m.origin = append(m.origin, src)
	}

	names := make([]string, 0, len(cfg.Authz.Params))
	for name := range cfg.Authz.Params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			bad("authz.params", "empty param name")
			continue
		}
		if len(name) > MaxLen {
			bad("authz.params", "param name longer than "+strconv.Itoa(MaxLen)+" bytes")
			continue
		}
		src, reason, field := compileSource(cfg.Authz.Params[name])
		if reason != "" {
			bad("authz.params."+name+"."+field, reason)
			continue
		}
		m.params = append(m.params, param{name: name, src: src})
	}

	m.remove = removeHeaders(cfg.Authz, bad)

	if m.hops < 0 || m.hops > MaxTrustedHops {
		bad("authz.trusted_hops", "must be between 0 and "+strconv.Itoa(MaxTrustedHops))
	}

	m.resourceKey = cfg.RateLimit.ResourceKey
	if m.resourceKey == "" {
		m.resourceKey = DefaultResourceKey
	}
	m.originKey = cfg.RateLimit.OriginKey
	if m.originKey == "" {
		m.originKey = DefaultOriginKey
	}
	if m.resourceKey == m.originKey {
		bad("ratelimit.origin_key", "must differ from resource_key "+strconv.Quote(m.resourceKey))
	}
	m.leaseKey = cfg.RateLimit.LeaseKey
	if m.leaseKey == "" {
		m.leaseKey = DefaultLeaseKey
	}
	switch m.leaseKey {
	case m.resourceKey:
		bad("ratelimit.lease_key", "must differ from resource_key "+strconv.Quote(m.resourceKey))
	case m.originKey:
		bad("ratelimit.lease_key", "must differ from origin_key "+strconv.Quote(m.originKey))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// HeadersToRemove are the request headers an allowed Check asks Envoy to remove before the
// upstream: those origin sources read (unless AuthzConfig.KeepOriginHeaders) and
// AuthzConfig.RemoveHeaders. The slice is shared: callers must not change it.
func (m *Mapper) HeadersToRemove() []string { return m.remove }

// removeHeaders compiles the headers to remove, reporting bad names through bad.
func removeHeaders(a AuthzConfig, bad func(field, reason string)) []string {
	set := map[string]bool{}
	if !a.KeepOriginHeaders {
		for _, s := range a.Origin {
			if s.From == "header" && s.Name != "" {
				set[strings.ToLower(s.Name)] = true
			}
		}
	}
	for i, h := range a.RemoveHeaders {
		name := strings.ToLower(h)
		switch {
		case name == "":
			bad("authz.remove_headers["+strconv.Itoa(i)+"]", "empty header name")
			continue
		case strings.HasPrefix(name, ":") || name == "host":
			bad("authz.remove_headers["+strconv.Itoa(i)+"]", strconv.Quote(h)+" cannot be removed (Envoy keeps pseudo-headers and host)")
			continue
		case len(name) > MaxLen:
			bad("authz.remove_headers["+strconv.Itoa(i)+"]", "longer than "+strconv.Itoa(MaxLen)+" bytes")
			continue
		}
		set[name] = true
	}
	if len(set) == 0 {
		return nil
	}
	out := make([]string, 0, len(set))
	for h := range set {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

// compileSource checks s; on a problem it returns the reason and the field at fault.
func compileSource(s Source) (src source, reason, field string) {
	k, ok := kinds[s.From]
	if !ok {
		if s.From == "" {
			return src, "missing (one of " + sourceNames + ")", "from"
		}
		return src, "unknown source " + strconv.Quote(s.From) + " (want one of " + sourceNames + ")", "from"
	}
	named := k == fromHeader || k == fromQuery || k == fromCookie || k == fromExtension
	if named && s.Name == "" {
		return src, "required for from: " + s.From, "name"
	}
	if !named && s.Name != "" {
		return src, "not used by from: " + s.From, "name"
	}
	if k == fromMetadata {
		return compileMetadata(s)
	}
	if s.Namespace != "" {
		return src, "used only by from: metadata", "namespace"
	}
	if len(s.Path) > 0 {
		return src, "used only by from: metadata", "path"
	}
	name := s.Name
	if k == fromHeader {
		name = strings.ToLower(name)
	}
	return source{kind: k, name: name, split: s.Split}, "", ""
}

// compileMetadata checks a from: metadata source.
func compileMetadata(s Source) (src source, reason, field string) {
	switch {
	case s.Namespace == "":
		return src, "required for from: metadata (the filter namespace, e.g. envoy.filters.http.jwt_authn)", "namespace"
	case len(s.Namespace) > MaxLen:
		return src, "longer than " + strconv.Itoa(MaxLen) + " bytes", "namespace"
	case len(s.Path) == 0:
		return src, "required for from: metadata (the keys to the value, e.g. [payload, sub])", "path"
	case len(s.Path) > MaxMetadataPath:
		return src, "more than " + strconv.Itoa(MaxMetadataPath) + " keys", "path"
	}
	for i, key := range s.Path {
		if key == "" {
			return src, "empty key", "path[" + strconv.Itoa(i) + "]"
		}
	}
	return source{kind: fromMetadata, name: s.Namespace, split: s.Split, path: append([]string(nil), s.Path...)}, "", ""
}

// parseTemplate compiles a resource template: literal text with {method}, {path} and {host}.
func parseTemplate(t string) ([]part, error) {
	var parts []part
	for t != "" {
		open := strings.IndexByte(t, '{')
		close := strings.IndexByte(t, '}')
		if close >= 0 && (open < 0 || close < open) {
			return nil, errors.New("unmatched \"}\" in " + strconv.Quote(t))
		}
		if open < 0 {
			parts = append(parts, part{lit: t})
			break
		}
		if open > 0 {
			parts = append(parts, part{lit: t[:open]})
		}
		if close < 0 {
			return nil, errors.New("unclosed \"{\" in " + strconv.Quote(t))
		}
		name := t[open+1 : close]
		var k kind
		switch name {
		case "method":
			k = fromMethod
		case "path":
			k = fromPath
		case "host":
			k = fromHost
		default:
			return nil, errors.New("unknown placeholder {" + name + "} (want {method}, {path} or {host})")
		}
		parts = append(parts, part{kind: k})
		t = t[close+1:]
	}
	return parts, nil
}

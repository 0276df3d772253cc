package descriptors

import "errors"

// Limits on what one request may carry. A request over a limit is refused with a *RequestError,
// so that memory and work per request stay bounded whatever a client sends.
const (
	// MaxDescriptors is the most descriptors one rate-limit request may carry.
	MaxDescriptors = 64
	// MaxEntries is the most entries one rate-limit descriptor may carry.
	MaxEntries = 64
	// MaxLen is the longest key or value, resource, origin or param value, in bytes.
	MaxLen = 4096
	// MaxValues is the most values one param of a check request may have (a repeated query
	// parameter, a split header).
	MaxValues = 64
	// MaxTrustedHops is the largest accepted AuthzConfig.TrustedHops.
	MaxTrustedHops = 64
)

// Reasons a request is refused; a *RequestError wraps one of them.
var (
	// ErrNoAttributes: a check request without attributes or without an HTTP request.
	ErrNoAttributes = errors.New("no HTTP request attributes")
	// ErrNoDescriptors: a rate-limit request without descriptors.
	ErrNoDescriptors = errors.New("no descriptors")
	// ErrTooManyDescriptors: more than MaxDescriptors descriptors.
	ErrTooManyDescriptors = errors.New("too many descriptors")
	// ErrTooManyEntries: a descriptor with more than MaxEntries entries.
	ErrTooManyEntries = errors.New("too many entries")
	// ErrEmptyKey: a descriptor entry with an empty key.
	ErrEmptyKey = errors.New("empty key")
	// ErrKeyTooLong: a descriptor key longer than MaxLen.
	ErrKeyTooLong = errors.New("key too long")
	// ErrValueTooLong: a value (descriptor value, resource, origin, param value) longer than
	// MaxLen. Values come from the client's request.
	ErrValueTooLong = errors.New("value too long")
	// ErrTooManyValues: a param with more than MaxValues values. Values come from the client's
	// request.
	ErrTooManyValues = errors.New("too many values")
	// ErrHitsTooLarge: a descriptor hits_addend above the largest int64.
	ErrHitsTooLarge = errors.New("hits_addend too large")
)

// RequestError is a request the mapping refuses, addressed by the field at fault.
type RequestError struct {
	// Field names the part of the request, e.g. "descriptors[2].entries[0].value" or
	// "params.user".
	Field string
	// Descriptor is the index of the descriptor at fault, or -1.
	Descriptor int
	// Err is one of the Err* reasons.
	Err error
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return "bad request: " + e.Err.Error()
	}
	return "bad request: " + e.Field + ": " + e.Err.Error()
}

func (e *RequestError) Unwrap() error { return e.Err }

// ClientFault reports whether err refuses a request for what its client sent (a value too long,
// too many values) rather than for its shape, which Envoy's configuration decides.
func ClientFault(err error) bool {
	return errors.Is(err, ErrValueTooLong) || errors.Is(err, ErrTooManyValues)
}

// ConfigError is one problem in the mapping config, addressed by field
// (e.g. "authz.params.user.name").
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "mapping config: " + e.Field + ": " + e.Reason }

package descriptors

import (
	"math"
	"strconv"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/extauthz/extauthz/hotparam"
)

// RateLimit maps a rate-limit request to one entry per descriptor. See AppendRateLimit.
func (m *Mapper) RateLimit(req *rlsv3.RateLimitRequest) ([]Entry, error) {
	return m.AppendRateLimit(nil, req)
}

// AppendRateLimit maps a rate-limit request to one entry per descriptor, in order, appended to
// dst; the capacity of dst beyond its length, and of the Params and Values of the entries found
// there, is reused. In a descriptor the first entry keyed by the resource key (or, when there is
// none, "generic_key") names the resource, the first keyed by the origin key names the origin,
// the first keyed by the lease key names the lease (Entry.LeaseID), and every other entry is a
// param named by its key, a repeated key giving several values. The
// hits are the descriptor's hits_addend when set, else the request's (0 meaning 1); a
// descriptor's explicit hits_addend of 0 is a probe (Probe: decided without consuming). Release
// is the descriptor's is_negative_hits. Strings in the entries may share memory with req.
//
// It returns a *RequestError (naming the descriptor) wrapping ErrNoDescriptors,
// ErrTooManyDescriptors, ErrTooManyEntries, ErrEmptyKey, ErrKeyTooLong, ErrValueTooLong or
// ErrHitsTooLarge; dst is then returned with its original length.
func (m *Mapper) AppendRateLimit(dst []Entry, req *rlsv3.RateLimitRequest) ([]Entry, error) {
	ds := req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return dst, &RequestError{Field: "descriptors", Descriptor: -1, Err: ErrNoDescriptors}
	case len(ds) > MaxDescriptors:
		return dst, &RequestError{Field: "descriptors", Descriptor: -1, Err: ErrTooManyDescriptors}
	}
	start := len(dst)
	hits := int64(req.GetHitsAddend())
	for i, d := range ds {
		n := len(dst)
		if n < cap(dst) {
			dst = dst[:n+1]
		} else {
			dst = append(dst, Entry{})
		}
		if err := m.descriptor(&dst[n], d, hits); err != nil {
			err.Descriptor = i
			err.Field = "descriptors[" + strconv.Itoa(i) + "]" + err.Field
			return dst[:start], err
		}
	}
	return dst, nil
}

// descriptor maps one descriptor into e. Errors name the field relative to the descriptor.
func (m *Mapper) descriptor(e *Entry, d *ratelimitv3.RateLimitDescriptor, hits int64) *RequestError {
	params := e.Params[:0]
	*e = Entry{Entry: hotparam.Entry{Hits: hits, Release: d.GetIsNegativeHits()}}
	defer func() { e.Params = params }()
	if h := d.GetHitsAddend(); h != nil {
		if h.GetValue() > math.MaxInt64 {
			return &RequestError{Field: ".hits_addend", Err: ErrHitsTooLarge}
		}
		e.Hits = int64(h.GetValue())
		// Envoy sends a descriptor's hits_addend whenever it is set, 0 included
		// (GrpcClientImpl::createRequest, filters/common/ratelimit: hits_addend_.has_value()),
		// and it overrides the request's addend; only the request-level 0 means 1. An explicit
		// 0 checks without consuming.
		e.Probe = e.Hits == 0
	}
	entries := d.GetEntries()
	if len(entries) > MaxEntries {
		return &RequestError{Field: ".entries", Err: ErrTooManyEntries}
	}
	var haveResource, haveOrigin, haveLease bool
	generic := -1
	for j, en := range entries {
		k, v := en.GetKey(), en.GetValue()
		switch {
		case k == "":
			return &RequestError{Field: entryField(j, ".key"), Err: ErrEmptyKey}
		case len(k) > MaxLen:
			return &RequestError{Field: entryField(j, ".key"), Err: ErrKeyTooLong}
		case len(v) > MaxLen:
			return &RequestError{Field: entryField(j, ".value"), Err: ErrValueTooLong}
		}
		switch {
		case k == m.resourceKey && !haveResource:
			e.Resource, haveResource = v, true
			continue
		case k == m.originKey && !haveOrigin:
			e.Origin, haveOrigin = v, true
			continue
		case k == m.leaseKey && !haveLease:
			e.LeaseID, haveLease = v, true
			continue
		case k == GenericKey && generic < 0:
			// The resource when no entry has the resource key; a param otherwise.
			generic = len(params)
		}
		params = addValue(params, k, v)
	}
	if !haveResource && generic >= 0 {
		// Promote the first generic_key value to the resource and drop it from the params.
		p := &params[generic]
		e.Resource = p.Values[0]
		if len(p.Values) > 1 {
			copy(p.Values, p.Values[1:])
			p.Values = p.Values[:len(p.Values)-1]
		} else {
			vals := p.Values[:0]
			copy(params[generic:], params[generic+1:])
			params = params[:len(params)-1]
			// Keep the capacity of the dropped Values for later reuse.
			params[:cap(params)][len(params)].Values = vals
		}
	}
	return nil
}

// addValue appends v to the param named k, adding the param when it is new; params are few
// (MaxEntries), so a linear search is cheapest.
func addValue(params []hotparam.Param, k, v string) []hotparam.Param {
	for i := range params {
		if params[i].Name == k {
			params[i].Values = append(params[i].Values, v)
			return params
		}
	}
	n := len(params)
	if n < cap(params) {
		params = params[:n+1]
	} else {
		params = append(params, hotparam.Param{})
	}
	params[n].Name = k
	params[n].Values = append(params[n].Values[:0], v)
	return params
}

func entryField(j int, f string) string {
	return ".entries[" + strconv.Itoa(j) + "]" + f
}

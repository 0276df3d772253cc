package main

import (
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/rulestore"
)

// debugCheck is the admin listener's POST /check: a Decider of its own over the rules in
// force, with the service's decision settings and no Recorder, so that a check is decided as
// a call is but never counted in the service's metrics. The hot-param state is the rules',
// shared with the calls: a probe reads it, a check with consume spends from it.
func debugCheck(rules func() *rulestore.Set, cfg policy.Config) admin.CheckFunc {
	return policy.New(policy.Options{Rules: rules, Now: time.Now, Config: cfg}).Decide
}

// debugDescriptors maps the raw descriptors of a POST /check with the rate-limit API's mapper,
// through the rate-limit request Envoy would have sent.
func debugDescriptors(m *descriptors.Mapper) admin.DescriptorsFunc {
	return func(domain string, ds []admin.Descriptor, hits uint64) ([]descriptors.Entry, error) {
		req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(min(hits, 1<<32-1))}
		for _, d := range ds {
			rd := &ratelimitv3.RateLimitDescriptor{}
			if d.HitsAddend != nil {
				rd.HitsAddend = wrapperspb.UInt64(*d.HitsAddend)
			}
			for _, e := range d.Entries {
				rd.Entries = append(rd.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		return m.RateLimit(req)
	}
}

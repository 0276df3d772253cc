package checks

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/deploy/internal/service"
)

// Rules is the part of a rules file the descriptor checks read.
type Rules struct {
	ParamFlow []struct {
		Resource        string `json:"resource"`
		Param           string `json:"param"`
		MaxQueueingTime string `json:"max_queueing_time"`
	} `json:"param_flow"`
}

// BaseRules reads the rules shipped with the Kubernetes base, which the Istio and Envoy
// Gateway examples' descriptors are written for.
func BaseRules(t *testing.T) Rules {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(service.RepoRoot(t), "deploy", "kubernetes", "base", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var r Rules
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// descriptor keys of the base config's ratelimit mapping (deploy/kubernetes/base/extauthz.yaml).
const (
	resourceKey = "resource"
	originKey   = "origin"
)

// RateLimits checks that each of rls yields a descriptor that extauthz maps onto a hot-param
// rule of rules: one resource entry naming a param_flow rule's resource, the origin, and
// params that are params of that resource's rules (at least one).
func RateLimits(t *testing.T, rls []*routev3.RateLimit, rules Rules) {
	t.Helper()
	if len(rls) == 0 {
		t.Fatal("no rate_limits")
	}
	params := map[string]map[string]bool{}
	for _, r := range rules.ParamFlow {
		if params[r.Resource] == nil {
			params[r.Resource] = map[string]bool{}
		}
		params[r.Resource][r.Param] = true
	}
	for i, rl := range rls {
		resource := ""
		var keys []string
		for _, a := range rl.GetActions() {
			var key, value string
			switch {
			case a.GetHeaderValueMatch() != nil:
				key, value = a.GetHeaderValueMatch().GetDescriptorKey(), a.GetHeaderValueMatch().GetDescriptorValue()
			case a.GetGenericKey() != nil:
				key, value = a.GetGenericKey().GetDescriptorKey(), a.GetGenericKey().GetDescriptorValue()
			case a.GetRequestHeaders() != nil:
				key = a.GetRequestHeaders().GetDescriptorKey()
			case a.GetQueryParameters() != nil:
				key = a.GetQueryParameters().GetDescriptorKey()
			case a.GetRemoteAddress() != nil:
				key = "remote_address"
			case a.GetMetadata() != nil:
				// Only the origin ext_authz resolved, from its dynamic metadata.
				m := a.GetMetadata()
				key = m.GetDescriptorKey()
				path := m.GetMetadataKey().GetPath()
				if key != originKey || m.GetMetadataKey().GetKey() != "envoy.filters.http.ext_authz" ||
					len(path) != 1 || path[0].GetKey() != originKey || !m.GetSkipIfAbsent() {
					t.Errorf("rate_limits[%d]: metadata action %v: want the origin of ext_authz's metadata (namespace envoy.filters.http.ext_authz, path [origin], skip_if_absent)", i, m)
				}
			default:
				t.Errorf("rate_limits[%d]: action %v not checked here", i, a)
				continue
			}
			if key == resourceKey {
				if resource != "" {
					t.Errorf("rate_limits[%d]: two resource entries", i)
				}
				resource = value
				continue
			}
			keys = append(keys, key)
		}
		if params[resource] == nil {
			t.Errorf("rate_limits[%d]: resource %q is not a param_flow rule's resource", i, resource)
			continue
		}
		nparams := 0
		for _, k := range keys {
			switch {
			case k == originKey:
			case params[resource][k]:
				nparams++
			default:
				t.Errorf("rate_limits[%d] (%s): key %q is neither the origin nor a param of its rules", i, resource, k)
			}
		}
		if nparams == 0 {
			t.Errorf("rate_limits[%d] (%s): no param of its rules", i, resource)
		}
	}
}

// RateLimitFilter checks the filter's domain-independent settings: the V3 API, a timeout
// above the longest throttle wait of rules (else Envoy times out queued requests and, failing
// open, lets them through), and fail-open.
func RateLimitFilter(t *testing.T, f *ratelimitv3.RateLimit, rules Rules) {
	t.Helper()
	longest := time.Duration(0)
	for _, r := range rules.ParamFlow {
		if r.MaxQueueingTime == "" {
			continue
		}
		d, err := time.ParseDuration(r.MaxQueueingTime)
		if err != nil {
			t.Fatal(err)
		}
		longest = max(longest, d)
	}
	if f.GetTimeout().AsDuration() <= longest {
		t.Errorf("rate-limit filter timeout %v, want above the longest max_queueing_time %v", f.GetTimeout().AsDuration(), longest)
	}
	if f.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
		t.Errorf("rate_limit_service transport %v, want V3", f.GetRateLimitService().GetTransportApiVersion())
	}
	if f.GetFailureModeDeny() {
		t.Error("rate-limit filter fails closed; flow control should fail open (authority stays closed)")
	}
}

package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// recorder stands in for extauthz behind Envoy's extauthz cluster (envoytest.Service): it
// records every call Envoy makes and answers as told.
type recorder struct{ *envoytest.Service }

// answer sets how ShouldRateLimit answers from now on (Check stays OK).
func (r recorder) answer(f func(*rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse) {
	r.Answer(nil, f)
}

// take returns the calls recorded since the last take and forgets them.
func (r recorder) take() ([]*authv3.CheckRequest, []*rlsv3.RateLimitRequest) { return r.Take() }

// descriptors writes each descriptor of req as "key=value,key=value", in order, with
// " hits=N" for a hits_addend and " negative" for is_negative_hits.
func descriptors(req *rlsv3.RateLimitRequest) []string {
	var out []string
	for _, d := range req.GetDescriptors() {
		var b strings.Builder
		for i, e := range d.GetEntries() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		if h := d.GetHitsAddend(); h != nil {
			fmt.Fprintf(&b, " hits=%d", h.GetValue())
		}
		if d.GetIsNegativeHits() {
			b.WriteString(" negative")
		}
		out = append(out, b.String())
	}
	return out
}

// newRecordedStack starts Envoy on bootstrap (the shipped one when nil) with its extauthz
// cluster pointing at a recorder instead of the service, and the recording upstream.
func newRecordedStack(t *testing.T, bootstrap []byte) (*stack, recorder) {
	t.Helper()
	envoytest.Binary(t)
	rec := recorder{envoytest.StartService(t)}
	if bootstrap == nil {
		var err error
		if bootstrap, err = os.ReadFile(envoyYAML); err != nil {
			t.Fatal(err)
		}
	}
	s := &stack{t: t, up: envoytest.StartUpstream(t)}
	cfg, err := envoytest.Bootstrap(bootstrap, envoytest.Rewrite{Upstreams: map[string][]string{
		"extauthz": {rec.Addr},
		"upstream": {s.up.Addr},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.envoy = envoytest.Start(t, envoytest.Options{Config: cfg})
	s.addr = s.envoy.Listener(t, "ingress")
	s.base = "http://" + s.addr
	return s, rec
}

// variant returns the shipped envoy.yaml after edit, which changes the decoded document in
// place (numbers as json.Number). Each test that runs a variant names its edit.
func variant(t *testing.T, edit func(root map[string]any)) []byte {
	t.Helper()
	src, err := os.ReadFile(envoyYAML)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		t.Fatal(err)
	}
	edit(root)
	out, err := json.Marshal(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Paths into the shipped bootstrap's one listener, for variants.

func obj(v any) map[string]any { return v.(map[string]any) }

func listener(root map[string]any) map[string]any {
	return obj(obj(root["static_resources"])["listeners"].([]any)[0])
}

// hcm is the typed_config of the listener's HTTP connection manager.
func hcm(root map[string]any) map[string]any {
	chain := obj(listener(root)["filter_chains"].([]any)[0])
	return obj(obj(chain["filters"].([]any)[0])["typed_config"])
}

// httpFilter is the typed_config of the HTTP filter called name.
func httpFilter(root map[string]any, name string) map[string]any {
	for _, f := range hcm(root)["http_filters"].([]any) {
		if obj(f)["name"] == name {
			return obj(obj(f)["typed_config"])
		}
	}
	panic("no http filter " + name)
}

// vhost is the route table's one virtual host.
func vhost(root map[string]any) map[string]any {
	return obj(obj(hcm(root)["route_config"])["virtual_hosts"].([]any)[0])
}

// route is the virtual host's route called name.
func route(root map[string]any, name string) map[string]any {
	for _, r := range vhost(root)["routes"].([]any) {
		if obj(r)["name"] == name {
			return obj(r)
		}
	}
	panic("no route " + name)
}

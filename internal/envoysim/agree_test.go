package envoysim

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/descriptors"
)

// FuzzTrustedHopsAgree: for any x-forwarded-for a client sends and any number of trusted hops,
// the service's client_ip with authz.trusted_hops N is the address Envoy's connection manager
// settled on with xff_num_trusted_hops N.
func FuzzTrustedHopsAgree(f *testing.F) {
	f.Add("203.0.113.7, 198.51.100.2", uint8(1), uint8(60))
	f.Add("", uint8(0), uint8(1))
	f.Add("a,,b, 2001:db8::1 ,10.0.0.1", uint8(2), uint8(2))
	f.Add("fe80::1%eth0,1.2.3.4", uint8(2), uint8(3))
	c, err := Load(shippedEnvoy)
	if err != nil {
		f.Fatal(err)
	}
	mappers := make([]*descriptors.Mapper, 6)
	for n := range mappers {
		if mappers[n], err = descriptors.New(descriptors.Config{Authz: descriptors.AuthzConfig{
			TrustedHops: n, Params: map[string]descriptors.Source{"ip": {From: "client_ip"}}}}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, xff string, hops, peer uint8) {
		n := int(hops) % len(mappers)
		c.Managers[0].XffNumTrustedHops = uint32(n)
		r := Request{Method: "GET", Path: "/items", Host: "h", Headers: map[string][]string{"x-forwarded-for": {xff}},
			Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, peer}), 1000)}
		s, err := c.Accept(r)
		if err != nil {
			t.Skip(err) // not an input Envoy's connection manager passes to filters here
		}
		if s.Client.Zone() != "" {
			// Envoy takes a scoped IPv6 entry with the index of its own interface of that
			// name (fe80::1%eth0 is fe80::1%4 on one machine, no address on another); the
			// service, on another machine, cannot know it and takes the peer.
			t.Skipf("a scoped address %s: Envoy's interface index, not the service's", s.Client)
		}
		cr, err := CheckRequest(nil, s.Request, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		e, err := mappers[n].Check(cr)
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Params) != 1 || e.Params[0].Values[0] != s.Client.String() {
			t.Fatalf("xff %q, %d hops: service picks %v, Envoy %s", xff, n, e.Params, s.Client)
		}
	})
}

// FuzzAccept: the connection-manager emulation never panics; what it passes on has a
// normalised path (envoy.yaml: normalize_path, merge_slashes, escaped slashes refused), one
// x-forwarded-for ending with the peer, and a fresh x-request-id.
func FuzzAccept(f *testing.F) {
	f.Add("/x/../items?q=%2F", "1.2.3.4", "id")
	f.Add("//a%2fb", "", "")
	f.Add("a\\..\\%2e%2E/%00", "x,,y", "z")
	c, err := Load(shippedEnvoy)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, xff, rid string) {
		r := Request{Method: "GET", Path: path, Host: "h", Remote: netip.MustParseAddrPort("192.0.2.1:9"),
			Headers: map[string][]string{"x-forwarded-for": {xff}, "x-request-id": {rid}}}
		s, err := c.Accept(r)
		if err != nil {
			return
		}
		p, _, _ := strings.Cut(s.Request.Path, "?")
		if !strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.Contains(strings.ToLower(p), "%2f") {
			t.Fatalf("path %q passed on as %q", path, s.Request.Path)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("path %q passed on as %q", path, s.Request.Path)
			}
		}
		got := s.Request.Headers["x-forwarded-for"]
		if len(got) != 1 || !strings.HasSuffix(got[0], "192.0.2.1") {
			t.Fatalf("x-forwarded-for %q", got)
		}
		if id := s.Request.Headers["x-request-id"]; len(id) != 1 || id[0] == rid {
			t.Fatalf("x-request-id %q kept from the client's %q", id, rid)
		}
	})
}

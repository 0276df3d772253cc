package envoy

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
)

// jwtKey signs test tokens; its JWKS is what Envoy's jwt_authn verifies them against.
type jwtKey struct {
	kid string
	key *rsa.PrivateKey
}

func newJWTKey(t *testing.T, kid string) jwtKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return jwtKey{kid: kid, key: k}
}

var b64 = base64.RawURLEncoding

func (k jwtKey) jwks() string {
	e := big.NewInt(int64(k.key.E)).Bytes()
	b, _ := json.Marshal(map[string]any{"keys": []any{map[string]any{
		"kty": "RSA", "alg": "RS256", "use": "sig", "kid": k.kid,
		"n": b64.EncodeToString(k.key.N.Bytes()), "e": b64.EncodeToString(e),
	}}})
	return string(b)
}

// token is an RS256 JWT of claims, signed by k.
func (k jwtKey) token(t *testing.T, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]any{"alg": "RS256", "typ": "JWT", "kid": k.kid})
	c, _ := json.Marshal(claims)
	signing := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + b64.EncodeToString(sig)
}

const jwtNamespace = "envoy.filters.http.jwt_authn"

// jwtConfig is the service config of TestIdentityFromJWT: the origin is the verified token's
// subject, and the tenant claim a param.
const jwtConfig = `
log: {level: info, format: json}
authz:
  resource: "{method}:{path}"
  origin:
    - {from: metadata, namespace: envoy.filters.http.jwt_authn, path: [payload, sub]}
  params:
    tenant: {from: metadata, namespace: envoy.filters.http.jwt_authn, path: [payload, tenant]}
ratelimit: {resource_key: resource, origin_key: origin, lease_key: lease_id}
`

const jwtRules = `
authority:
  - {resource: "GET:/items", strategy: white, origins: [alice]}
  - {resource: "GET:/reports", strategy: white, origins: [alice]}
param_flow:
  - {resource: "GET:/reports", param: tenant, grade: qps, count: 1, duration: 1h}
`

// withJWT is the shipped bootstrap with Envoy's jwt_authn filter in front of ext_authz,
// verifying tokens against jwks (a missing token is let through, without claims), and ext_authz
// sending jwt_authn's metadata with the Check: the variant's two edits.
func withJWT(jwks string) func(root map[string]any) {
	return func(root map[string]any) {
		h := hcm(root)
		jwt := map[string]any{
			"name": jwtNamespace,
			"typed_config": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
				"providers": map[string]any{"test": map[string]any{
					"issuer":              "test-issuer",
					"local_jwks":          map[string]any{"inline_string": jwks},
					"payload_in_metadata": "payload",
				}},
				"rules": []any{map[string]any{
					"match": map[string]any{"prefix": "/"},
					"requires": map[string]any{"requires_any": map[string]any{"requirements": []any{
						map[string]any{"provider_name": "test"},
						map[string]any{"allow_missing": map[string]any{}},
					}}},
				}},
			},
		}
		h["http_filters"] = append([]any{jwt}, h["http_filters"].([]any)...)
		httpFilter(root, "envoy.filters.http.ext_authz")["metadata_context_namespaces"] = []any{jwtNamespace}
	}
}

// TestIdentityFromJWT: the origin and a param come from the claims of a token Envoy's jwt_authn
// verified: a valid token's subject passes the white list and its tenant is limited; an expired
// token or one signed by another key is refused by Envoy before any Check; a request without a
// token has no origin, and the white list refuses it. The shipped rate-limit actions read the
// origin from ext_authz's metadata: had they read x-origin, the rate-limit call would see no
// origin and refuse the token's subject.
func TestIdentityFromJWT(t *testing.T) {
	key, other := newJWTKey(t, "k1"), newJWTKey(t, "k1")
	s := newStack(t, stackOptions{config: []byte(jwtConfig), rules: []byte(jwtRules), bootstrap: variant(t, withJWT(key.jwks()))})
	now := time.Now().Unix()
	claims := func(sub string, exp int64) map[string]any {
		return map[string]any{"iss": "test-issuer", "sub": sub, "tenant": "acme", "exp": exp}
	}
	bearer := func(tok string) []string { return []string{"authorization", "Bearer " + tok} }
	for _, tc := range []struct {
		name       string
		path       string
		kv         []string
		want       int
		wantChecks int64
	}{
		{"valid token", "/items?item_id=1", bearer(key.token(t, claims("alice", now+3600))), 200, 1},
		{"valid token, not on the list", "/items?item_id=1", bearer(key.token(t, claims("mallory", now+3600))), 403, 1},
		{"expired token", "/items?item_id=1", bearer(key.token(t, claims("alice", now-3600))), 401, 0},
		{"another key", "/items?item_id=1", bearer(other.token(t, claims("alice", now+3600))), 401, 0},
		{"no token", "/items?item_id=1", nil, 403, 1},
		{"a client's x-origin is no identity here", "/items?item_id=1", []string{"x-origin", "alice"}, 403, 1},
		{"tenant's first report", "/reports", bearer(key.token(t, claims("alice", now+3600))), 200, 1},
		{"tenant over its limit", "/reports", bearer(key.token(t, claims("alice", now+3600))), 429, 1},
	} {
		before := s.checks()
		a := s.do(h1, "GET", tc.path, tc.kv...)
		if a.status != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, a.status, tc.want, a.body)
		}
		if got := s.checks() - before; got != tc.wantChecks {
			t.Errorf("%s: %d Checks, want %d", tc.name, got, tc.wantChecks)
		}
	}
	waitBlocked(s, "check", "qps", 1)
	if s.blocked("check", "qps") != 1 || !strings.Contains(s.svc.LogText(), `"value":"acme"`) {
		t.Errorf("the tenant's refusal is not logged with its value:\n%s", s.svc.LogText())
	}
}

// TestIdentityToRateLimit: the shipped configs: the allowed Check removes the origin header
// and returns the origin as dynamic metadata, which envoy.yaml's rate-limit actions read: the
// upstream never sees x-origin, and the rate-limit call still knows the caller: its white list
// passes, and its refusal names the origin.
func TestIdentityToRateLimit(t *testing.T) {
	s := newStack(t, stackOptions{})
	statuses := map[int]int{}
	for i := 0; i < 10; i++ {
		statuses[s.do(h1, "GET", "/items?item_id=md", "x-origin", "web").status]++
	}
	if statuses[200] < 5 || statuses[429] == 0 || statuses[200]+statuses[429] != 10 {
		t.Errorf("10 requests of one item: %v, want the bucket's share 200 and the rest 429", statuses)
	}
	for _, r := range s.up.Requests() {
		if v := r.Header.Get("x-origin"); v != "" {
			t.Errorf("the upstream saw x-origin %q", v)
		}
	}
	if len(s.up.Requests()) != statuses[200] {
		t.Errorf("the upstream got %d requests, the client %d 200s", len(s.up.Requests()), statuses[200])
	}
	waitBlocked(s, "ratelimit", "qps", statuses[429])
	if !strings.Contains(s.svc.LogText(), `"api":"ratelimit"`) || s.blocked("ratelimit", "qps") != statuses[429] {
		t.Fatalf("the rate-limit refusals are not logged:\n%s", s.svc.LogText())
	}
	for _, line := range strings.Split(s.svc.LogText(), "\n") {
		if strings.Contains(line, `"api":"ratelimit"`) && !strings.Contains(line, `"origin":"web"`) {
			t.Errorf("a rate-limit decision without the metadata's origin: %s", line)
		}
	}
	// Downloads: the acquire and the stream-done release both carry the origin from the
	// metadata, so the release frees the slot.
	for i := 0; i < 3; i++ {
		if a := s.do(h1, "GET", "/downloads/f.bin", "x-origin", "web", "x-user-id", "md", envoytest.DelayHeader, "1"); a.status != http.StatusOK {
			t.Errorf("download %d one after another: %d, want 200", i, a.status)
		}
	}
}

package redisstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

// A redis-server serving TLS with a certificate of a private CA: the store trusts it through
// CAFile, and refuses it without.
func TestTLSPrivateCA(t *testing.T) {
	files := redistest.Certs(t)
	srv := redistest.StartTLS(t, files)
	op := qps("tls", "v", 1)

	s, err := New(Config{Addrs: []string{srv.Addr()}, TLS: true, CAFile: files.CA, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := eval(t, s, op)[0]; !got.Allowed {
		t.Errorf("first call over TLS: got %+v, want allowed", got)
	}
	if got := eval(t, s, op)[0]; got.Allowed {
		t.Errorf("second call over TLS: got %+v, want blocked (the state is kept)", got)
	}

	// the system roots do not know the private CA: the handshake fails, nothing is decided
	untrusted, err := New(Config{Addrs: []string{srv.Addr()}, TLS: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if err := untrusted.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)); err == nil {
		t.Error("Eval with a server certificate of an unknown CA: got nil error")
	}
	// plain TCP to a TLS port gets no answer it can use either
	plain, err := New(Config{Addrs: []string{srv.Addr()}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Eval(context.Background(), []hotparam.RemoteOp{op}, make([]hotparam.RemoteResult, 1)); err == nil {
		t.Error("Eval in plain TCP to a TLS port: got nil error")
	}
}

func TestCAFileErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"without tls", Config{Addrs: []string{"127.0.0.1:1"}, CAFile: junk}},
		{"missing file", Config{Addrs: []string{"127.0.0.1:1"}, TLS: true, CAFile: filepath.Join(dir, "none.pem")}},
		{"no certificate", Config{Addrs: []string{"127.0.0.1:1"}, TLS: true, CAFile: junk}},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "ca_file" {
			t.Errorf("%s: got %v, want a ConfigError on ca_file", tt.name, err)
		}
	}
}

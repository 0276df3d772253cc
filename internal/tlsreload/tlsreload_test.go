package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/extauthz/extauthz/internal/testkit/testpki"
)

// pemPair is a certificate and its key, PEM-encoded, and the certificate parsed.
type pemPair struct {
	cert, key []byte
	leaf      *x509.Certificate
}

func issuePair(t *testing.T, ca *testpki.CA, cn string, usage x509.ExtKeyUsage) pemPair {
	t.Helper()
	cert, key := ca.Issue(t, cn, usage)
	leaf, err := parseLeaf(cert)
	if err != nil {
		t.Fatal(err)
	}
	return pemPair{cert: cert, key: key, leaf: leaf}
}

func parseLeaf(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

// replaceFile writes data to path through a rename, as rotation tools do.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	writeAtomic(t, path, string(data))
}

// rewriteFile writes data over path in place.
func rewriteFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// messages counts the log entries with message msg.
func messages(logs *observer.ObservedLogs, msg string) int {
	return logs.FilterMessage(msg).Len()
}

const (
	msgReloaded     = "tls certificate reloaded"
	msgReloadFailed = "tls certificate reload failed; the certificate in force stays"
)

func TestReloaderClaimOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	a := issuePair(t, ca, "a", x509.ExtKeyUsageServerAuth)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r, err := New(Options{
		Files:    Config{CertFile: writeBytes(t, dir, "c.pem", a.cert), KeyFile: writeBytes(t, dir, "c.key", a.key)},
		Interval: 5 * time.Second,
		Now:      func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at      time.Duration // after t0
		release bool          // release the claim held before this step
		want    bool
	}{
		{0, false, false},                 // just loaded
		{5*time.Second - 1, false, false}, // one nanosecond early
		{5 * time.Second, false, true},    // due
		{5 * time.Second, false, false},   // already claimed
		{20 * time.Second, false, false},  // due, but the look still runs
		{10*time.Second - 1, true, false}, // released; the next is due at 10s
		{10 * time.Second, false, true},   //
		{16 * time.Second, true, true},    // a late look: the next is due 5s after it
		{21*time.Second - 1, true, false}, //
		{21 * time.Second, false, true},   //
	}
	for i, s := range steps {
		if s.release {
			r.release()
		}
		if got := r.claim(t0.Add(s.at)); got != s.want {
			t.Errorf("step %d: claim at t0+%v = %v, want %v", i, s.at, got, s.want)
		}
	}
}

func TestReloaderCheck(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
	c := issuePair(t, ca, "extauthz-c", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "tls.crt", a.cert)
	keyFile := writeBytes(t, dir, "tls.key", a.key)
	core, logs := observer.New(zapcore.InfoLevel)
	t0 := a.leaf.NotBefore.Add(time.Minute)
	r, err := New(Options{
		Files: Config{CertFile: certFile, KeyFile: keyFile},
		Now:   func() time.Time { return t0 },
		Log:   zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	touch := func(path string) { // a distinct modification time for every change
		t.Helper()
		mtime = mtime.Add(time.Second)
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}

	steps := []struct {
		name        string
		change      func()
		now         time.Time
		wantApplied bool
		wantServing *x509.Certificate
		wantLogs    map[string]int // messages logged so far, in total
	}{
		{"unchanged", func() {}, t0, false, a.leaf, map[string]int{msgReloaded: 0, msgReloadFailed: 0}},
		{"renamed into place", func() {
			replaceFile(t, keyFile, b.key)
			replaceFile(t, certFile, b.cert)
		}, t0, true, b.leaf, map[string]int{msgReloaded: 1, msgReloadFailed: 0}},
		{"looked at again", func() {}, t0, false, b.leaf, map[string]int{msgReloaded: 1, msgReloadFailed: 0}},
		{"touched only", func() { touch(certFile) }, t0, false, b.leaf, map[string]int{msgReloaded: 1, msgReloadFailed: 0}},
		{"key of another pair", func() { rewriteFile(t, keyFile, c.key); touch(keyFile) }, t0, false, b.leaf,
			map[string]int{msgReloaded: 1, msgReloadFailed: 1}},
		{"failure logged once", func() {}, t0, false, b.leaf, map[string]int{msgReloaded: 1, msgReloadFailed: 1}},
		{"certificate half written", func() {
			rewriteFile(t, certFile, c.cert[:len(c.cert)/2])
			touch(certFile)
		}, t0, false, b.leaf, map[string]int{msgReloaded: 1, msgReloadFailed: 2}},
		{"write completed", func() { rewriteFile(t, certFile, c.cert); touch(certFile) }, t0, true, c.leaf,
			map[string]int{msgReloaded: 2, msgReloadFailed: 2}},
		{"certificate removed", func() {
			if err := os.Remove(certFile); err != nil {
				t.Fatal(err)
			}
		}, t0, false, c.leaf, map[string]int{msgReloaded: 2, msgReloadFailed: 3}},
		{"expired replacement", func() {
			replaceFile(t, certFile, a.cert)
			replaceFile(t, keyFile, a.key)
		}, a.leaf.NotAfter.Add(1), false, c.leaf, map[string]int{msgReloaded: 2, msgReloadFailed: 4}},
		{"valid replacement", func() { touch(certFile) }, a.leaf.NotAfter, true, a.leaf,
			map[string]int{msgReloaded: 3, msgReloadFailed: 4}},
	}
	for _, s := range steps {
		s.change()
		if got := r.check(s.now, false); got != s.wantApplied {
			t.Errorf("%s: check = %v, want %v", s.name, got, s.wantApplied)
		}
		if got := r.current().cert.Leaf; !got.Equal(s.wantServing) {
			t.Errorf("%s: serving %s, want %s", s.name, got.Subject, s.wantServing.Subject)
		}
		for msg, want := range s.wantLogs {
			if got := messages(logs, msg); got != want {
				t.Errorf("%s: %q logged %d times, want %d", s.name, msg, got, want)
			}
		}
	}

	reloaded := logs.FilterMessage(msgReloaded).All()
	if len(reloaded) == 0 {
		t.Fatal("no reload logged")
	}
	fields := reloaded[0].ContextMap()
	if got, want := fields["subject"], "CN=extauthz-b"; got != want {
		t.Errorf("reload log subject = %v, want %v", got, want)
	}
	if got, ok := fields["not_after"].(time.Time); !ok || !got.Equal(b.leaf.NotAfter) {
		t.Errorf("reload log not_after = %v, want %v", fields["not_after"], b.leaf.NotAfter)
	}
	if got, want := fields["serial"], b.leaf.SerialNumber.String(); got != want {
		t.Errorf("reload log serial = %v, want %v", got, want)
	}
	failed := logs.FilterMessage(msgReloadFailed).All()
	if got := failed[len(failed)-1].ContextMap()["error"]; !strings.Contains(got.(string), "expired") {
		t.Errorf("last failure = %v, want an expiry", got)
	}
}

func TestReloaderClientCA(t *testing.T) {
	dir := t.TempDir()
	oldCA := testpki.New(t, "old CA")
	newCA := testpki.New(t, "new CA")
	s := issuePair(t, oldCA, "extauthz", x509.ExtKeyUsageServerAuth)
	caFile := writeBytes(t, dir, "ca.pem", oldCA.PEM)
	core, logs := observer.New(zapcore.InfoLevel)
	t0 := s.leaf.NotBefore.Add(time.Minute)
	r, err := New(Options{
		Files: Config{CertFile: writeBytes(t, dir, "s.pem", s.cert), KeyFile: writeBytes(t, dir, "s.key", s.key), ClientCAFile: caFile},
		Log:   zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	verifies := func(ca *testpki.CA) bool {
		pair := issuePair(t, ca, "envoy", x509.ExtKeyUsageClientAuth)
		_, err := pair.leaf.Verify(x509.VerifyOptions{
			Roots:       r.current().config.ClientCAs,
			CurrentTime: t0,
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		})
		return err == nil
	}
	if !verifies(oldCA) || verifies(newCA) {
		t.Fatalf("before rotation: old CA %v, new CA %v; want true, false", verifies(oldCA), verifies(newCA))
	}
	steps := []struct {
		name             string
		data             []byte
		wantOld, wantNew bool
	}{
		{"both CAs, while clients move", append(append([]byte{}, oldCA.PEM...), newCA.PEM...), true, true},
		{"not a certificate", []byte("garbage"), true, true},
		{"new CA only", newCA.PEM, false, true},
	}
	for _, st := range steps {
		replaceFile(t, caFile, st.data)
		r.check(t0, false)
		if gotOld, gotNew := verifies(oldCA), verifies(newCA); gotOld != st.wantOld || gotNew != st.wantNew {
			t.Errorf("%s: old CA %v, new CA %v; want %v, %v", st.name, gotOld, gotNew, st.wantOld, st.wantNew)
		}
	}
	if got, want := messages(logs, msgReloaded), 2; got != want {
		t.Errorf("%d reloads logged, want %d", got, want)
	}
	if got, want := messages(logs, msgReloadFailed), 1; got != want {
		t.Errorf("%d failures logged, want %d", got, want)
	}
	cfg := r.ServerConfig()
	got, err := cfg.GetConfigForClient(nil)
	if err != nil || got != r.current().config || got.ClientAuth != tls.RequireAndVerifyClientCert || !got.SessionTicketsDisabled {
		t.Errorf("GetConfigForClient = %p, %v; want the set in force, verifying clients, no tickets", got, err)
	}
}

func TestReloaderStartErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	a := issuePair(t, ca, "a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "b", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "a.pem", a.cert)
	keyFile := writeBytes(t, dir, "a.key", a.key)
	huge := writeBytes(t, dir, "huge.pem", []byte(strings.Repeat(string(a.cert), maxPEMFile/len(a.cert)+1)))
	tests := []struct {
		name    string
		files   Config
		wantErr string
	}{
		{"mismatched key", Config{CertFile: certFile, KeyFile: writeBytes(t, dir, "b.key", b.key)}, "private key does not match"},
		{"truncated certificate", Config{CertFile: writeBytes(t, dir, "half.pem", a.cert[:len(a.cert)/2]), KeyFile: keyFile}, "cert_file"},
		{"oversized certificate", Config{CertFile: huge, KeyFile: keyFile}, "larger than 1 MiB"},
		{"oversized client CA", Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: huge}, "tls.client_ca_file"},
	}
	for _, tt := range tests {
		_, err := New(Options{Files: tt.files})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: err = %v, want one containing %q", tt.name, err, tt.wantErr)
		}
	}
}

// The handshake path: one atomic load and a clock read, no allocation, no lock.
func BenchmarkReloaderHandshakePath(b *testing.B) {
	dir := b.TempDir()
	ca := testpki.New(b, "ca")
	cert, key := ca.Issue(b, "s", x509.ExtKeyUsageServerAuth)
	files := Config{ClientCAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "s.pem"), KeyFile: filepath.Join(dir, "s.key")}
	for path, data := range map[string][]byte{files.ClientCAFile: ca.PEM, files.CertFile: cert, files.KeyFile: key} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	r, err := New(Options{Files: files})
	if err != nil {
		b.Fatal(err)
	}
	tc := r.ServerConfig()
	hello := &tls.ClientHelloInfo{}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c, err := tc.GetConfigForClient(hello); c == nil || err != nil {
				b.Fatal("no handshake config")
			}
		}
	})
}

// A file replaced by another of the same size and the same modification time (file systems
// stamp times coarsely: two files written a millisecond apart can share one) is still a
// change when it is another file: a rename over it, or a symlink swapped to a new one.
func TestReloaderSameStampNewFile(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
	if len(a.cert) != len(b.cert) || len(a.key) != len(b.key) {
		t.Skipf("pairs differ in size (%d/%d, %d/%d); the case needs equal sizes", len(a.cert), len(b.cert), len(a.key), len(b.key))
	}
	stamp := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	write := func(path string, data []byte) {
		t.Helper()
		writeAtomic(t, path, string(data))
		if err := os.Chtimes(path, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write(certFile, a.cert)
	write(keyFile, a.key)
	t0 := a.leaf.NotBefore.Add(time.Minute)
	r, err := New(Options{Files: Config{CertFile: certFile, KeyFile: keyFile}, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	write(keyFile, b.key)
	write(certFile, b.cert)
	if !r.check(t0, false) {
		t.Error("check after a rename with the same size and time: not applied")
	}
	if got := r.current().cert.Leaf.SerialNumber; got.Cmp(b.leaf.SerialNumber) != 0 {
		t.Errorf("serving serial %v, want %v", got, b.leaf.SerialNumber)
	}
}

func TestStartErrorsAndConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	cert, key := ca.Issue(t, "s", x509.ExtKeyUsageServerAuth)
	certFile := writeBytes(t, dir, "s.pem", cert)
	keyFile := writeBytes(t, dir, "s.key", key)
	notPEM := writeBytes(t, dir, "junk.pem", []byte("not a certificate"))
	tests := []struct {
		name string
		cfg  Config
	}{
		{"missing cert", Config{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: keyFile}},
		{"key is not a key", Config{CertFile: certFile, KeyFile: notPEM}},
		{"missing client CA", Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "nope.pem")}},
		{"client CA without PEM", Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}},
	}
	for _, tt := range tests {
		if _, err := New(Options{Files: tt.cfg}); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		}
	}
	r, err := New(Options{Files: Config{CertFile: certFile, KeyFile: keyFile, ClientCAFile: writeBytes(t, dir, "ca.pem", ca.PEM)}})
	if err != nil {
		t.Fatal(err)
	}
	tc := r.ServerConfig()
	if tc.ClientAuth != tls.RequireAndVerifyClientCert || tc.MinVersion != tls.VersionTLS12 || tc.GetCertificate == nil {
		t.Errorf("mTLS config = auth %v, min %x, GetCertificate set %v", tc.ClientAuth, tc.MinVersion, tc.GetCertificate != nil)
	}
	hs, err := tc.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil || hs == nil || hs.ClientCAs == nil || hs.ClientAuth != tls.RequireAndVerifyClientCert || hs.MinVersion != tls.VersionTLS12 {
		t.Errorf("handshake config = %+v, %v; want the client CA pool, verifying clients, TLS 1.2 at least", hs, err)
	}
}

// Reload reads the files at once, without a handshake and whatever the interval: a new pair is
// applied, the same bytes again change nothing, and a broken pair leaves the one in force.
func TestReloaderReload(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.New(t, "ca")
	a := issuePair(t, ca, "extauthz-a", x509.ExtKeyUsageServerAuth)
	b := issuePair(t, ca, "extauthz-b", x509.ExtKeyUsageServerAuth)
	certFile, keyFile := writeBytes(t, dir, "tls.crt", a.cert), writeBytes(t, dir, "tls.key", a.key)
	t0 := a.leaf.NotBefore.Add(time.Minute)
	r, err := New(Options{Files: Config{CertFile: certFile, KeyFile: keyFile}, Interval: time.Hour,
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, keyFile, string(b.key))
	writeAtomic(t, certFile, string(b.cert))
	if !r.Reload() {
		t.Fatal("Reload after a rotation: not applied")
	}
	if got := r.current().cert.Leaf.SerialNumber; got.Cmp(b.leaf.SerialNumber) != 0 {
		t.Errorf("serving serial %v, want %v", got, b.leaf.SerialNumber)
	}
	if r.Reload() {
		t.Error("Reload of the same files applied a new set")
	}
	writeAtomic(t, keyFile, string(a.key)) // a's key with b's certificate
	if r.Reload() {
		t.Error("Reload of a mismatched pair applied it")
	}
	if got := r.current().cert.Leaf.SerialNumber; got.Cmp(b.leaf.SerialNumber) != 0 {
		t.Errorf("after a broken pair serving serial %v, want %v still", got, b.leaf.SerialNumber)
	}
}

// Package tlsreload serves a TLS listener's certificate, key and client CA from files, reloaded
// when the files change, so that a rotated certificate is served without a restart.
package tlsreload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// DefaultInterval is how long a listener goes, at most, without looking at the certificate
// files again; a rotated certificate is served from the first handshake after the next look.
const DefaultInterval = 5 * time.Second

// maxPEMFile bounds what is read of one certificate, key or CA file.
const maxPEMFile = 1 << 20

// Config names the files of a TLS listener. The zero value is no TLS.
type Config struct {
	// CertFile is the TLS certificate of the gRPC listener (PEM), with `tls.key_file`. Rotation needs
	// no restart: the files are looked at again at most every 5s (on the next handshake, following
	// symlinks, so a rename, a write in place and a Kubernetes secret's symlink swap all count);
	// new connections get the new pair, open ones keep theirs. A pair that does not load
	// (mismatched key, half-written file, expired certificate) leaves the one in force and is
	// logged once as `tls certificate reload failed`; a good one logs `tls certificate reloaded`
	// with its subject, serial and `not_after`. At start a bad pair is fatal.
	CertFile string // PEM certificate (chain) the listener presents
	// KeyFile is the certificate's private key (PEM).
	KeyFile string // PEM private key of CertFile
	// ClientCAFile requires, with TLS, client certificates signed by this CA (mTLS); reloaded with
	// the pair, so a CA bundle can carry old and new CA while clients move, then the new CA alone.
	ClientCAFile string
}

// Enabled reports whether the listener serves TLS.
func (c Config) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" }

// ConfigError is one problem of a Config, addressed by its field ("cert_file").
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "tls: " + e.Field + ": " + e.Reason }

// Validate reports every missing companion file of c (a certificate without its key, a key
// without its certificate, a client CA without either), each a *ConfigError, joined.
func (c Config) Validate() error {
	var errs []error
	if c.Enabled() {
		if c.CertFile == "" {
			errs = append(errs, &ConfigError{"cert_file", "required with key_file"})
		}
		if c.KeyFile == "" {
			errs = append(errs, &ConfigError{"key_file", "required with cert_file"})
		}
	} else if c.ClientCAFile != "" {
		errs = append(errs, &ConfigError{"client_ca_file", "requires cert_file and key_file"})
	}
	return errors.Join(errs...)
}

// Options configure a Reloader.
type Options struct {
	Files    Config
	Interval time.Duration    // minimum time between two looks at the files; 0 is DefaultInterval
	Now      func() time.Time // the clock of the handshake path; nil is time.Now
	Log      *zap.Logger      // reloads and failures; nil logs nothing
}

// Reloader serves the current certificate and client CA pool of a listener and replaces
// them when their files change. It is safe for concurrent use.
//
// How a change is noticed: a handshake that finds Interval elapsed since the last look starts
// one look in the background, then goes on with the pair in force; the look stats the files
// (following symlinks) and reloads only when a modification time or size moved. This was
// chosen over fsnotify because rotation tools replace files in ways a watch handles badly: a
// Kubernetes secret volume swaps a "..data" symlink two levels above the name we were given,
// cert-manager and Vault agents rename over the file (dropping a watch on it) or rewrite it in
// place (one event per write, the first while the file is half written). A stat of three files
// every few seconds sees all of them, needs no goroutine living beside the server, and costs a
// handshake only an atomic load: no handshake ever waits for a file or a parse.
type Reloader struct {
	files    Config
	interval time.Duration
	now      func() time.Time
	log      *zap.Logger

	state atomic.Pointer[tlsState] // the set in force; never nil after New
	next  atomic.Int64             // Unix nanoseconds before which no look starts
	busy  atomic.Bool              // a look is running

	mu   sync.Mutex // serialises looks; guards seen
	seen fileStamps // the files as last loaded or tried, so a bad file is reported once
}

// tlsState is one consistent set, loaded together and replaced together.
type tlsState struct {
	cert   *tls.Certificate
	pool   *x509.CertPool // nil without mTLS
	config *tls.Config    // the handshake configuration for mTLS; nil without
	raw    [3][]byte      // the certificate, key and CA files' bytes
}

// fileStamp is what a stat of one file says; a stamp is comparable. The file's identity
// (device and inode) is part of it: file systems stamp times coarsely, so a file renamed over
// another, or a symlink swapped to one, of the same size can carry the same modification time.
type fileStamp struct {
	modNanos int64
	size     int64
	id       fileID
	err      string // the stat error; "" when the file is there
}

// fileStamps are the stamps of the certificate, key and client CA files.
type fileStamps [3]fileStamp

// New loads the files of o once (an error there is the start-up error) and returns the
// Reloader serving them.
func New(o Options) (*Reloader, error) {
	r := &Reloader{files: o.Files, interval: o.Interval, now: o.Now, log: o.Log}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = zap.NewNop()
	}
	r.seen = r.stat()
	st, err := loadTLS(r.files)
	if err != nil {
		return nil, err
	}
	r.state.Store(st)
	now := r.now()
	r.next.Store(now.Add(r.interval).UnixNano())
	if leaf := st.cert.Leaf; now.After(leaf.NotAfter) {
		r.log.Warn("tls certificate expired", certFields(st)...)
	}
	return r, nil
}

// ServerConfig is the listener's configuration: its callbacks read the set in force. With a
// client CA, client certificates are required and verified against the pool in force.
func (r *Reloader) ServerConfig() *tls.Config {
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2"},
		GetCertificate: r.getCertificate,
	}
	if r.files.ClientCAFile != "" {
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		tc.GetConfigForClient = r.getConfigForClient
	}
	return tc
}

func (r *Reloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	st := r.state.Load()
	r.poll()
	return st.cert, nil
}

// getConfigForClient hands the handshake the certificate and the client CA pool of one set.
func (r *Reloader) getConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	st := r.state.Load()
	r.poll()
	return st.config, nil
}

// poll starts a look at the files in the background when one is due.
func (r *Reloader) poll() {
	now := r.now()
	if !r.claim(now) {
		return
	}
	// The goroutine is this reloader's: there is at most one, and it ends after one look.
	go func() {
		defer r.release()
		r.check(now, false)
	}()
}

// Reload reads the files again now, changed or not (on an operator's SIGHUP), and reports
// whether a new set is in force. A set that does not load, or whose certificate has expired,
// leaves the one in force and is logged.
func (r *Reloader) Reload() bool { return r.check(r.now(), true) }

// claim reports whether a look is due at now and no look is running; when it is, the caller
// owns the look and must call release after it. Two claims are at least interval apart.
func (r *Reloader) claim(now time.Time) bool {
	next := r.next.Load()
	if now.UnixNano() < next {
		return false
	}
	if !r.busy.CompareAndSwap(false, true) {
		return false
	}
	if !r.next.CompareAndSwap(next, now.Add(r.interval).UnixNano()) {
		r.busy.Store(false)
		return false
	}
	return true
}

// release ends the look claim granted.
func (r *Reloader) release() { r.busy.Store(false) }

// check reloads the files when they changed since they were last loaded or tried, or when
// force is set. A set that fails to load, or whose certificate has expired at now, leaves the
// set in force; the failure is logged once, until the files change again (or force). It
// reports whether a new set is in force.
func (r *Reloader) check(now time.Time, force bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamps := r.stat() // before reading: a change after this is seen by the next look
	if stamps == r.seen && !force {
		return false
	}
	r.seen = stamps
	st, err := loadTLS(r.files)
	if err == nil && now.After(st.cert.Leaf.NotAfter) {
		err = fmt.Errorf("tls: %s: certificate expired at %s", r.files.CertFile, st.cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	if err != nil {
		r.log.Error("tls certificate reload failed; the certificate in force stays", zap.Error(err))
		return false
	}
	if sameBytes(r.state.Load().raw, st.raw) {
		return false // touched, not changed
	}
	r.state.Store(st)
	r.log.Info("tls certificate reloaded", certFields(st)...)
	return true
}

// current is the set in force.
func (r *Reloader) current() *tlsState { return r.state.Load() }

// stat stamps the three files; os.Stat follows symlinks, so a swapped link counts as a change.
func (r *Reloader) stat() fileStamps {
	var s fileStamps
	for i, path := range [3]string{r.files.CertFile, r.files.KeyFile, r.files.ClientCAFile} {
		if path == "" {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			s[i] = fileStamp{err: err.Error()}
			continue
		}
		s[i] = fileStamp{modNanos: fi.ModTime().UnixNano(), size: fi.Size(), id: identity(fi)}
	}
	return s
}

// loadTLS reads and checks one set from files.
func loadTLS(files Config) (*tlsState, error) {
	certPEM, err := readPEMFile(files.CertFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot load cert_file/key_file: %w", err)
	}
	keyPEM, err := readPEMFile(files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot load cert_file/key_file: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: cannot load cert_file/key_file %s, %s: %w", files.CertFile, files.KeyFile, err)
	}
	if cert.Leaf == nil { // only with GODEBUG x509keypairleaf=0
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: cert_file %s: %w", files.CertFile, err)
		}
	}
	st := &tlsState{cert: &cert, raw: [3][]byte{certPEM, keyPEM}}
	if files.ClientCAFile == "" {
		return st, nil
	}
	caPEM, err := readPEMFile(files.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tls.client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls.client_ca_file: %s: no PEM certificate found", files.ClientCAFile)
	}
	st.pool, st.raw[2] = pool, caPEM
	st.config = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2"},
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// A session ticket would let a client resume a session its certificate opened under
		// an earlier CA file; every connection shows its certificate to the pool in force.
		SessionTicketsDisabled: true,
	}
	return st, nil
}

// readPEMFile reads path, refusing a file larger than maxPEMFile.
func readPEMFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxPEMFile {
		return nil, fmt.Errorf("%s: %w", path, errPEMTooLarge)
	}
	return data, nil
}

// errPEMTooLarge is the error for a certificate, key or CA file over maxPEMFile bytes.
var errPEMTooLarge = errors.New("larger than 1 MiB; not a certificate file")

func sameBytes(a, b [3][]byte) bool {
	return bytes.Equal(a[0], b[0]) && bytes.Equal(a[1], b[1]) && bytes.Equal(a[2], b[2])
}

// certFields describe the certificate of st in the log.
func certFields(st *tlsState) []zap.Field {
	leaf := st.cert.Leaf
	fields := []zap.Field{
		zap.String("subject", leaf.Subject.String()),
		zap.String("serial", leaf.SerialNumber.String()),
		zap.Time("not_after", leaf.NotAfter),
	}
	if st.pool != nil {
		fields = append(fields, zap.Int("client_cas", countPEMCerts(st.raw[2])))
	}
	return fields
}

// countPEMCerts counts the CERTIFICATE blocks of a CA file, for the log.
func countPEMCerts(data []byte) int {
	return bytes.Count(data, []byte("-----BEGIN CERTIFICATE-----"))
}

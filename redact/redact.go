// Package redact hides the values of sensitive params: a Redactor shows such a value only as
// a keyed hash, so that an operator can tell values apart and follow one across the admin
// endpoints and the logs without ever seeing it.
//
// A param is sensitive when the config lists it, or when its name looks like a credential:
// the name, lower-cased and stripped of everything but letters and digits, contains one of
// DefaultNames (so "api_key", "X-Api-Key", "apiKey" and "upstream_token" all match). Other
// values are shown as they are.
//
// A hash is "hmac:" and the first 16 bytes of HMAC-SHA256(key, value) in hex. Without a
// configured key each process draws a random one at start: its hashes are stable for the
// life of the process only, and differ between replicas and across restarts. Give every
// replica the same key to compare hashes between them; with the key, an operator can compute
// the hash of a value they already know (see Redactor.Value) but not recover a value from its
// hash.
package redact

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultNames are the words that make a param sensitive by its name alone, in the normal form
// the matching uses (lower case, letters and digits only).
var DefaultNames = []string{
	"apikey", "accesskey", "privatekey", "token", "authorization", "bearer", "password",
	"passwd", "passphrase", "secret", "session", "cookie", "credential", "signature", "jwt",
}

// MinKeyLen is the shortest HMAC key Config.Key may hold, in bytes.
const MinKeyLen = 16

// Prefix starts every hashed value.
const Prefix = "hmac:"

// hashBytes is how many bytes of the HMAC a hashed value shows (128 bits: no two values of a
// rule's busiest list will ever share one).
const hashBytes = 16

// ErrShortKey is returned by New for a key shorter than MinKeyLen.
var ErrShortKey = errors.New("redact: key shorter than 16 bytes")

// Redactor decides which params are sensitive and hashes their values. The zero value is not
// usable: build one with New. A Redactor is safe for concurrent use.
type Redactor struct {
	key   []byte
	named map[string]bool // normal forms of the configured params
}

// New returns a Redactor hashing with key (nil or empty: a random key of this process) that
// treats as sensitive the params named like a credential and those in params.
func New(params []string, key []byte) (*Redactor, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	} else if len(key) < MinKeyLen {
		return nil, ErrShortKey
	}
	r := &Redactor{key: append([]byte(nil), key...), named: make(map[string]bool, len(params))}
	for _, p := range params {
		r.named[normal(p)] = true
	}
	return r, nil
}

// normal is name lower-cased with everything but ASCII letters and digits left out.
func normal(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
		}
	}
	return b.String()
}

// Sensitive reports whether param's values are shown hashed: it is configured as sensitive
// (compared in normal form, so "api-key" covers "API_KEY"), or its name contains one of
// DefaultNames.
func (r *Redactor) Sensitive(param string) bool {
	n := normal(param)
	if r.named[n] {
		return true
	}
	for _, w := range DefaultNames {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Value returns value as it may be shown for param: as it is, or, for a sensitive param,
// Prefix and the hex of the first 16 bytes of HMAC-SHA256(key, value). An empty value stays
// empty (there is nothing to hide, and "no value" stays readable). With the key at hand, the
// hash of a known value is
//
//	printf %s "$VALUE" | openssl dgst -sha256 -hmac "$KEY" | sed 's/.*= //' | cut -c1-32
func (r *Redactor) Value(param, value string) string {
	if value == "" || !r.Sensitive(param) {
		return value
	}
	return r.Hash(value)
}

// Hash returns the keyed hash of value, whatever its param.
func (r *Redactor) Hash(value string) string {
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(value))
	sum := m.Sum(nil)
	return Prefix + hex.EncodeToString(sum[:hashBytes])
}

// Core wraps core so that every entry logged with a "param" string field has its "value"
// string field shown through r.Value: a log line about a sensitive param never carries the
// value in clear, whichever package wrote it. Fields added with With are left alone.
//
// The wrapper decides only by level, so it goes under any sampling: wrap the core that writes,
// then sample the result (a sampler under it would be skipped).
func (r *Redactor) Core(core zapcore.Core) zapcore.Core {
	return &redactCore{Core: core, r: r}
}

// Logger returns log with its core wrapped by Core; sample the logger it returns, not the one
// it is given.
func (r *Redactor) Logger(log *zap.Logger) *zap.Logger {
	return log.WithOptions(zap.WrapCore(r.Core))
}

type redactCore struct {
	zapcore.Core
	r *Redactor
}

func (c *redactCore) With(fields []zapcore.Field) zapcore.Core {
	return &redactCore{Core: c.Core.With(fields), r: c.r}
}

func (c *redactCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *redactCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	param, vi := "", -1
	for i, f := range fields {
		if f.Type != zapcore.StringType {
			continue
		}
		switch f.Key {
		case "param":
			param = f.String
		case "value":
			vi = i
		}
	}
	if vi >= 0 && fields[vi].String != "" && c.r.Sensitive(param) {
		out := make([]zapcore.Field, len(fields))
		copy(out, fields)
		out[vi] = zap.String("value", c.r.Hash(fields[vi].String))
		fields = out
	}
	return c.Core.Write(e, fields)
}

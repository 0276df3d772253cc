package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/internal/config"
)

func TestNewLogger(t *testing.T) {
	tests := []struct {
		cfg     config.LogConfig
		wantErr bool
		check   func(out string) bool
	}{
		{config.LogConfig{Level: "info", Format: "json"}, false, func(out string) bool {
			var m map[string]any
			return json.Unmarshal([]byte(out), &m) == nil && m["msg"] == "hello" && m["k"] == "v"
		}},
		{config.LogConfig{Level: "info", Format: "console"}, false, func(out string) bool {
			return strings.Contains(out, "\tINFO\thello") && !strings.HasPrefix(out, "{")
		}},
		{config.LogConfig{Level: "error", Format: "json"}, false, func(out string) bool { return out == "" }},
		{config.LogConfig{Level: "loud", Format: "json"}, true, nil},
		{config.LogConfig{Level: "info", Format: "xml"}, true, nil},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		log, err := newLogger(tt.cfg, &buf)
		if (err != nil) != tt.wantErr {
			t.Errorf("newLogger(%+v) error = %v, want error %v", tt.cfg, err, tt.wantErr)
			continue
		}
		if err != nil {
			continue
		}
		log.Sugar().Infow("hello", "k", "v")
		if !tt.check(buf.String()) {
			t.Errorf("newLogger(%+v) wrote %q", tt.cfg, buf.String())
		}
	}
}

func TestSampledLogger(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.LogConfig{Level: "info", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0
	s := sampled(log, func() { dropped++ })
	const flood = 1000
	for range flood {
		s.Info("blocked")
	}
	written := strings.Count(buf.String(), "\n")
	// Within one tick: the first sampleFirst, then every sampleThereafter-th. The loop may
	// straddle the boundary of two ticks (the sampler reads the wall clock), at most doubling it.
	if want := sampleFirst + (flood-sampleFirst)/sampleThereafter; written < want || written > 2*want {
		t.Errorf("wrote %d entries of %d, want %d (or up to %d across two ticks)", written, flood, want, 2*want)
	}
	if dropped != flood-written {
		t.Errorf("dropped = %d, want %d", dropped, flood-written)
	}
	// The unsampled logger is not affected.
	buf.Reset()
	for range 50 {
		log.Info("applied")
	}
	if got := strings.Count(buf.String(), "\n"); got != 50 {
		t.Errorf("unsampled logger wrote %d of 50", got)
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
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

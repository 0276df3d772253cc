package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary config files and environment values to Load: it never panics, and
// every problem it reports names a key and says what is wrong.
func FuzzLoad(f *testing.F) {
	for _, seed := range []struct{ file, env string }{
		{"grpc_addr: \":9001\"\nlog: {level: info}\n", ""},
		{"shutdown_grace: 15\n", "15"},
		{"authz:\n  origin: [{from: header, name: x-origin}, {frm: query}]\n  params: {user: {from: header, name: x-user, split: \",\"}}\n", "1s"},
		{"store: {redis: {addrs: [a:1, b], mode: clustr, timeout: 5}}\n", "x"},
		{"grpc: {max_concurrent_streams: -1, keepalive: {time: 1h}}\nmemory_limit: 1GB\n", "512MiB"},
		{"log: loud\nparam_names: [\"\", a]\n", ""},
		{"[1, 2]\n", ""},
		{"authz: {params: {A: {from: query, name: a}, a: {from: query, name: b}}}\n", ""},
	} {
		f.Add(seed.file, seed.env)
	}
	f.Fuzz(func(t *testing.T, file, envValue string) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			switch k {
			case "EXTAUTHZ_SHUTDOWN_GRACE", "EXTAUTHZ_MEMORY_LIMIT", "EXTAUTHZ_STORE_REDIS_ADDRS", "EXTAUTHZ_GRPC_MAX_CONCURRENT_STREAMS":
				return envValue
			}
			return ""
		}
		_, err := Load(Source{File: path, Getenv: getenv})
		var errs Errors
		if !errors.As(err, &errs) {
			return // nil, or a file that is not YAML: an error of its own
		}
		if len(errs) == 0 {
			t.Fatal("empty Errors returned as an error")
		}
		for _, fe := range errs {
			if strings.TrimSpace(fe.Field) == "" || strings.TrimSpace(fe.Reason) == "" {
				t.Errorf("problem without a key or a reason: %+v", fe)
			}
		}
	})
}

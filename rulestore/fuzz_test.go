package rulestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/rulestore/decode"
)

// fuzzSeeds adds every fixture whose name ends with one of exts as a seed.
func fuzzSeeds(f *testing.F, exts ...string) {
	for _, dir := range []string{"valid", "invalid", "shapes"} {
		files, err := os.ReadDir(filepath.Join("testdata", dir))
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range files {
			for _, ext := range exts {
				if strings.HasSuffix(e.Name(), ext) {
					data, err := os.ReadFile(filepath.Join("testdata", dir, e.Name()))
					if err != nil {
						f.Fatal(err)
					}
					f.Add(data)
				}
			}
		}
	}
}

// checkParse asserts what holds for any input: Parse returns in bounded time, the rules or
// validation errors (never a bare error), the same answer twice, and rules the engine accepts.
func checkParse(t *testing.T, file string, data []byte, opts ParseOptions) {
	if len(data) > 64<<10 {
		return
	}
	start := time.Now()
	rules, err := Parse(file, data, opts)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Parse of %d bytes took %v", len(data), d)
	}
	if err != nil {
		var errs decode.Errors
		if !errors.As(err, &errs) || len(errs) == 0 {
			t.Fatalf("Parse error %T %v is not a non-empty Errors", err, err)
		}
		for _, e := range errs {
			if e.Reason == "" {
				t.Fatalf("error without a reason: %+v", e)
			}
		}
		return
	}
	again, err := Parse(file, data, opts)
	if err != nil || !reflect.DeepEqual(rules, again) {
		t.Fatalf("Parse is not deterministic: %+v / %+v, %v", rules, again, err)
	}
	if _, err := compileRules(file, rules, positions{}, nil, hotparamOptions()); err != nil {
		t.Fatalf("parsed rules do not compile: %v", err)
	}
}

func FuzzParseYAML(f *testing.F) {
	fuzzSeeds(f, ".yaml")
	f.Add([]byte("a: [[[[\n"))
	f.Add([]byte("param_flow:\n  - resource: r\n    param: p\n    count: 1\n    match: {prefix: \"a\"}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, "r.yaml", data, ParseOptions{ParamNames: []string{"a", "b"}, ClusterEnabled: true})
	})
}

func FuzzParseJSON(f *testing.F) {
	fuzzSeeds(f, ".json")
	f.Add([]byte(`{"param_flow": [{"resource": "r", "param": "p", "count": 1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParse(t, "r.json", data, ParseOptions{ParamNames: []string{"a", "b"}, ClusterEnabled: true})
		// The depth scan agrees with encoding/json on valid JSON within the limit.
		var v any
		if json.Valid(data) && decode.CheckJSONDepth(data) == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("valid JSON within the depth limit does not decode: %v", err)
			}
			if d := depthOf(v); d > decode.MaxDepth {
				t.Fatalf("depth %d passed the scan", d)
			}
		}
	})
}

func FuzzParseSentinel(f *testing.F) {
	fuzzSeeds(f, "sentinel.json", "sentinel_object.json")
	for _, dir := range []string{"valid", "invalid"} {
		matches, _ := filepath.Glob(filepath.Join("testdata", dir, "sentinel*"))
		for _, m := range matches {
			if data, err := os.ReadFile(m); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := ParseOptions{ParamNames: []string{"item_id", "tenant", "user"}, ClusterEnabled: true}
		checkParse(t, "sentinel.json", data, opts)
		checkParse(t, "sentinel.yaml", data, opts)
	})
}

// depthOf is the nesting depth of a decoded JSON value.
func depthOf(v any) int {
	d := 0
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	case map[string]any:
		for _, e := range x {
			d = max(d, depthOf(e))
		}
		return d + 1
	}
	return 0
}

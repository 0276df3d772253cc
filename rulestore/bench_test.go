package rulestore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/hotparam"
	"sigs.k8s.io/yaml"
)

func BenchmarkParseYAML(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "valid", "rules.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	opts := ParseOptions{ClusterEnabled: true}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("rules.yaml", data, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSentinel(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "valid", "sentinel.json"))
	if err != nil {
		b.Fatal(err)
	}
	opts := ParseOptions{ParamNames: []string{"item_id", "tenant", "user"}}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse("sentinel.json", data, opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCurrent measures the readers' side: one atomic load per request.
func BenchmarkCurrent(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if s.Current() == nil {
				b.Fatal("nil set")
			}
		}
	})
}

// BenchmarkReload measures a full load of a changed file: read, parse, compile, swap.
func BenchmarkReload(b *testing.B) {
	path := filepath.Join(b.TempDir(), "rules.yaml")
	contents := [2][]byte{[]byte(orderRules(5, 7)), []byte(orderRules(6, 7))}
	if err := os.WriteFile(path, contents[0], 0o644); err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{File: path})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := os.WriteFile(path, contents[i%2], 0o644); err != nil {
			b.Fatal(err)
		}
		if err := s.Reload(); err != nil {
			b.Fatal(err)
		}
	}
}

// rulesN writes n native param-flow rules (YAML, as an operator would) with one exception
// item every tenth rule; bump changes the count of every fiftieth rule (1,000 of 50,000), the
// realistic reload: the same file with some thresholds edited.
func rulesN(n, bump int) []byte {
	var b strings.Builder
	b.Grow(n * 110)
	b.WriteString("param_flow:\n")
	for i := range n {
		count := 10
		if i%50 == 0 {
			count += bump
		}
		fmt.Fprintf(&b, "  - {resource: \"GET:/r%d\", param: user, count: %d, duration: 1s, burst: 2", i, count)
		if i%10 == 0 {
			b.WriteString(`, items: [{value: "vip", count: 100}]`)
		}
		b.WriteString("}\n")
	}
	return []byte(b.String())
}

// BenchmarkParse50k measures the rules store's part of a 50,000-rule reload: parse and
// validate (not the limiter's compile). Target for the whole reload: ≤ 250 ms, ≤ 50 MB.
func BenchmarkParse50k(b *testing.B) {
	for _, format := range []string{"rules.yaml", "rules.json"} {
		data := rulesN(50000, 0)
		if format == "rules.json" {
			js, err := yaml.YAMLToJSON(data)
			if err != nil {
				b.Fatal(err)
			}
			data = js
		}
		b.Run(format, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, _, err := parse(format, data, ParseOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReload50k measures a whole reload of a 50,000-rule file in which 1,000 rules changed
// threshold, with values tracked in 1,000 rules: read, parse, validate, compile (keeping every
// rule's state) and swap. Target: ≤ 250 ms, ≤ 50 MB allocated (JSON; YAML is reported).
//
// rules.json/inserted is the same with, besides, one rule added at the top of the file on
// every other reload, so that every rule changes place; rules.json/all-changed changes the
// count of every rule (the worst case: every rule is compiled again).
func BenchmarkReload50k(b *testing.B) {
	for _, name := range []string{"rules.yaml", "rules.json", "rules.json/inserted", "rules.json/all-changed"} {
		format, variant, _ := strings.Cut(name, "/")
		inserted := variant == "inserted"
		b.Run(name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), format)
			var contents [2][]byte
			for i := range contents {
				contents[i] = rulesN(50000, i)
				if variant == "all-changed" && i == 1 {
					contents[i] = bytes.ReplaceAll(contents[i], []byte("count: 10,"), []byte("count: 11,"))
				}
				if inserted && i == 1 {
					top := "param_flow:\n  - {resource: \"GET:/top\", param: user, count: 1}\n"
					contents[i] = append([]byte(top), contents[i][len("param_flow:\n"):]...)
				}
				if format == "rules.json" {
					js, err := yaml.YAMLToJSON(contents[i])
					if err != nil {
						b.Fatal(err)
					}
					contents[i] = js
				}
			}
			if err := os.WriteFile(path, contents[0], 0o644); err != nil {
				b.Fatal(err)
			}
			s, err := New(Options{File: path})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 50000; i += 50 {
				e := []hotparam.Entry{{Resource: fmt.Sprintf("GET:/r%d", i), Params: []hotparam.Param{{Name: "user", Values: []string{"u"}}}}}
				s.Current().ParamFlow.Check(context.Background(), t0, e, hotparam.CheckOptions{}, nil)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				b.StopTimer()
				if err := os.WriteFile(path, contents[i%2], 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := s.Reload(); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/reload")
			b.ReportMetric(250, "target-ms/reload")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/(1<<20), "MB-allocated/reload")
			b.ReportMetric(50, "target-MB/reload")
		})
	}
}

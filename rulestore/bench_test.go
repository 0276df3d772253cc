package rulestore

import (
	"os"
	"path/filepath"
	"testing"
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

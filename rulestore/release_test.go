package rulestore

import (
	"fmt"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"testing"
)

// forcedGCs reads the collections the process forced so far (runtime.GC, debug.FreeOSMemory).
func forcedGCs() uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// A load that applies a set and may leave more garbage than releaseAfter, by what it allocated
// or by the rules it dropped, returns it to the system once it is done, by each of the three
// ways to load (the first load, a reload, documents): two collections, the second returning the
// free pages (what the load left in sync.Pools survives the first). A load under the threshold
// forces none, nor does one that applies nothing (rejected, or the content in force again).
func TestLargeLoadReturnsItsGarbage(t *testing.T) {
	defer func(was uint64) { releaseAfter = was }(releaseAfter)
	var b strings.Builder
	b.WriteString("param_flow:\n")
	for i := range 1000 { // about 5 MiB allocated to load
		fmt.Fprintf(&b, "  - {resource: \"GET:/r%d\", param: user, grade: qps, count: %d, duration: 1s}\n", i, 10+i)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, b.String())
	var s *Store
	loads := []struct {
		name      string
		threshold uint64
		load      func() error
		collects  bool
	}{
		{"a first load under the threshold", 1 << 40, func() (err error) { s, err = New(Options{File: path}); return err }, false},
		{"a first load over it", 64 << 10, func() error { _, err := New(Options{File: path}); return err }, true},
		{"a reload over it", 64 << 10, func() error {
			writeFile(t, path, strings.Replace(b.String(), "count: 10,", "count: 11,", 1))
			return s.Reload()
		}, true},
		{"documents over it", 64 << 10, func() error {
			return s.LoadDocuments([]Document{{Name: "rules.yaml", Data: []byte(b.String())}}, 0)
		}, true},
		{"the same documents", 64 << 10, func() error {
			return s.LoadDocuments([]Document{{Name: "rules.yaml", Data: []byte(b.String())}}, 0)
		}, false},
		{"a rejected reload", 64 << 10, func() error {
			writeFile(t, path, b.String()+"  - {resource: 7}\n")
			if err := s.Reload(); err == nil {
				t.Error("a rule without its param loaded")
			}
			return nil
		}, false},
		{"a small reload that drops 999 rules", 512 << 10, func() error {
			writeFile(t, path, "param_flow:\n  - {resource: GET:/r0, param: user, count: 10}\n")
			from := heapAllocated()
			err := s.Reload()
			if n := heapAllocated() - from; n >= 512<<10 {
				t.Errorf("the small reload allocated %d bytes, over the threshold: it shows nothing of the rules dropped", n)
			}
			return err
		}, true},
	}
	for _, l := range loads {
		releaseAfter = l.threshold
		before := forcedGCs()
		if err := l.load(); err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		n := forcedGCs() - before
		switch {
		case l.collects && n != 2:
			t.Errorf("%s: forced %d collections, want 2", l.name, n)
		case !l.collects && n != 0:
			t.Errorf("%s: forced %d collections, want none", l.name, n)
		}
	}
}

package file

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/proccpu"
	"github.com/extauthz/extauthz/rulestore"
)

// BenchmarkChangesToOtherFiles is what a change to another file in the rules file's directory
// costs the process: a line appended to a log next to the rules file every 500 µs (a log line
// a request at 2,000 requests a second, written as it comes), with the directory watched by Run
// and without (side by side; the difference is the watcher's, with the kernel's work of
// queueing the event in the write). It reports the process's CPU a change (user and system,
// getrusage), read once the watcher has had time to take the last events.
func BenchmarkChangesToOtherFiles(b *testing.B) {
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "rules.yaml")
			if err := os.WriteFile(path, []byte(orderRules(1, 1)), 0o644); err != nil {
				b.Fatal(err)
			}
			if watched {
				s, err := rulestore.New(rulestore.Options{File: path})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- New(s, Options{}).Run(ctx) }()
				defer func() { cancel(); <-done }()
				time.Sleep(200 * time.Millisecond) // the start-up reload, and the watch set
			}
			f, err := os.Create(filepath.Join(dir, "access.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			line := []byte("GET /items?item_id=1 200 0 12 3 \"-\" \"h2load\"\n")
			before := proccpu.Used(b)
			b.ResetTimer()
			for range b.N {
				if _, err := f.Write(line); err != nil {
					b.Fatal(err)
				}
				time.Sleep(500 * time.Microsecond)
			}
			b.StopTimer()
			time.Sleep(50 * time.Millisecond)
			b.ReportMetric(float64(proccpu.Used(b)-before)/float64(b.N), "cpu-ns/change")
		})
	}
}

package main

// TestQuickstart runs the README's Quickstart: every sh block, in order, from the repository
// root, each checked against the text block after it. The block that starts the service
// (`go run ./cmd/extauthz --config ...`) runs the built binary with the same arguments, on
// free ports instead of :9001 and :9002; the commands are given the real addresses.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

// readmeBlock is one fenced block of the README.
type readmeBlock struct {
	lang string // the info string: sh, text, yaml...
	body string
	line int // where the block starts, for messages
}

// quickstartBlocks are the fenced blocks of the README's "## Quickstart" section, up to its
// "### With Envoy in front" part, which needs Docker (e2e/compose.sh covers it).
func quickstartBlocks(t *testing.T, readme string) []readmeBlock {
	t.Helper()
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		blocks  []readmeBlock
		in      bool // inside the section
		current *readmeBlock
		n       int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		if current != nil {
			if line == "```" {
				blocks = append(blocks, *current)
				current = nil
				continue
			}
			current.body += line + "\n"
			continue
		}
		if strings.HasPrefix(line, "#") {
			if in && (strings.HasPrefix(line, "## ") || line == "### With Envoy in front") {
				break
			}
			in = line == "## Quickstart"
			continue
		}
		if in && strings.HasPrefix(line, "```") {
			current = &readmeBlock{lang: strings.TrimPrefix(line, "```"), line: n}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

// serveCommandPrefix is how the Quickstart starts the service.
const serveCommandPrefix = "go run ./cmd/extauthz --config "

func TestQuickstart(t *testing.T) {
	path := binary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	blocks := quickstartBlocks(t, filepath.Join(root, "README.md"))
	if len(blocks) < 4 {
		t.Fatalf("README Quickstart has %d code blocks, want the start, the grpcurl install and the calls", len(blocks))
	}

	// grpcurl and anything else the Quickstart installs goes to a bin directory of the test's,
	// first on PATH.
	gobin := t.TempDir()
	environ := append(os.Environ(), "GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"))

	var (
		svc     *testbin.Proc
		checked int    // sh blocks with an excerpt checked
		lastOut string // the output of the last sh block
		lastSh  *readmeBlock
	)
	for i := range blocks {
		b := &blocks[i]
		switch b.lang {
		case "sh":
			cmd := strings.TrimSpace(b.body)
			if strings.HasPrefix(cmd, serveCommandPrefix) {
				if svc != nil {
					t.Fatalf("README.md:%d: the service is started twice", b.line)
				}
				args := strings.Fields(strings.TrimPrefix(cmd, "go run ./cmd/extauthz "))
				args = append(args, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
				svc = testbin.Start(t, testbin.Options{Binary: path, Args: args, Dir: root})
				svc.WaitLog(t, "rules applied", 10*time.Second)
				lastOut, lastSh = "", b
				continue
			}
			if svc == nil {
				t.Fatalf("README.md:%d: a command before the service is started:\n%s", b.line, cmd)
			}
			cmd = strings.ReplaceAll(cmd, "localhost:9001", svc.GRPCAddr)
			cmd = strings.ReplaceAll(cmd, "localhost:9002", svc.AdminAddr)
			run := exec.Command("bash", "-euo", "pipefail", "-c", cmd)
			run.Dir = root
			run.Env = environ
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("README.md:%d: %v\n%s\noutput:\n%s", b.line, err, cmd, out)
			}
			lastOut, lastSh = string(out), b
		case "text":
			if lastSh == nil {
				t.Fatalf("README.md:%d: an excerpt with no command before it", b.line)
			}
			if missing := excerptMissing(lastOut, b.body); missing != "" {
				t.Errorf("README.md:%d: the output of the command at line %d lacks %q (excerpt lines are checked in order):\n%s",
					b.line, lastSh.line, missing, lastOut)
			}
			checked++
			lastSh = nil // one excerpt per command
		}
	}
	if svc == nil {
		t.Fatalf("README Quickstart never starts the service with %q", serveCommandPrefix)
	}
	if checked < 4 {
		t.Errorf("only %d commands with an output excerpt; want the allow, the 403, the 429 and validate", checked)
	}
}

// excerptMissing returns the first line of excerpt that is not in out after the lines before
// it, or "" when all are there in order. Lines are compared without their indentation.
func excerptMissing(out, excerpt string) string {
	rest := out
	for _, line := range strings.Split(excerpt, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		i := strings.Index(rest, line)
		if i < 0 {
			return line
		}
		rest = rest[i+len(line):]
	}
	return ""
}

func TestExcerptMissing(t *testing.T) {
	out := "{\n  \"a\": 1,\n  \"b\": 2\n}\n{\n  \"a\": 3\n}\n"
	for _, tt := range []struct{ excerpt, want string }{
		{"\"a\": 1,\n\"b\": 2\n", ""},
		{"  \"a\": 1,\n\n\"a\": 3\n", ""},
		{"\"b\": 2\n\"a\": 1,\n", "\"a\": 1,"}, // out of order
		{"\"c\": 4\n", "\"c\": 4"},
	} {
		if got := excerptMissing(out, tt.excerpt); got != tt.want {
			t.Errorf("excerptMissing(%q) = %q, want %q", tt.excerpt, got, tt.want)
		}
	}
}

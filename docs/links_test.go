// Package docs holds the manual's pages; its test keeps their relative links true.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// link is a Markdown link or image: [text](target) or ![alt](target), with an optional title.
var link = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestRelativeLinks: every relative link of the README and of docs/ names a file or directory
// that exists, and every #anchor a heading of the page it points to.
func TestRelativeLinks(t *testing.T) {
	root := ".."
	var files []string
	for _, p := range []string{"README.md", "docs/*.md", "e2e/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	anchors := make(map[string]map[string]bool) // file -> anchors of its headings
	anchorsOf := func(file string) (map[string]bool, error) {
		if a, ok := anchors[file]; ok {
			return a, nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(data))
		anchors[file] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(string(data)) {
			target := l.target
			if isExternal(target) {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %q: no such file or directory", rel, l.line, target)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, l.line, target)
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link %q: no heading with anchor #%s in %s", rel, l.line, target, anchor, filepath.Base(dest))
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: is the link pattern right?")
	}
}

func isExternal(target string) bool {
	for _, scheme := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, scheme) {
			return true
		}
	}
	return false
}

// foundLink is one link of a page and the line it is on.
type foundLink struct {
	target string
	line   int
}

// links are the links of a Markdown page outside fenced code blocks and code spans.
func links(doc string) []foundLink {
	var found []foundLink
	for i, line := range proseLines(doc) {
		for _, m := range link.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			found = append(found, foundLink{target: m[1], line: i + 1})
		}
	}
	return found
}

// proseLines are the lines of doc with those inside fenced code blocks blanked, so that the
// numbers stay those of the file.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

var codeSpan = regexp.MustCompile("`[^`]*`")

func stripCodeSpans(line string) string { return codeSpan.ReplaceAllString(line, "") }

// headingAnchors are the anchors GitHub gives the headings of doc: each heading's text lower-
// cased, stripped of everything but letters, digits, spaces, hyphens and underscores, spaces
// as hyphens; a repeated anchor gets -1, -2, ...
func headingAnchors(doc string) map[string]bool {
	anchors := make(map[string]bool)
	seen := make(map[string]int)
	for _, line := range proseLines(doc) {
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		a := slug(line[level+1:])
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		anchors[a] = true
	}
	return anchors
}

func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestHeadingAnchors(t *testing.T) {
	doc := "# Cost budgets: LLM tokens per user per hour\n## `hits_addend`\n## Watch it: Prometheus and Grafana\n" +
		"```yaml\n# a route whose calls are in domain \"free\"\n```\n## Domains\n## Domains\n#not a heading\n"
	got := headingAnchors(doc)
	for _, want := range []string{"cost-budgets-llm-tokens-per-user-per-hour", "hits_addend",
		"watch-it-prometheus-and-grafana", "domains", "domains-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if len(got) != 5 {
		t.Errorf("anchors %v, want 5 (none from a code block or from a line without a space)", got)
	}
}

func TestLinksSkipCode(t *testing.T) {
	doc := "See [rules](rules.md#domains) and `[not](a-link.md)`.\n```\n[nor](this.md)\n```\n![pic](console.png)\n"
	got := links(doc)
	want := []foundLink{{"rules.md#domains", 1}, {"console.png", 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("links %v, want %v", got, want)
	}
}

package monitoring

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const runbookBase = "https://github.com/extauthz/extauthz/blob/main/docs/runbooks.md#"

// anchor is the fragment GitHub gives a Markdown heading: lower case, spaces as hyphens,
// punctuation dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestEveryAlertHasARunbook: every alert's runbook_url is a section of docs/runbooks.md that
// says what the alert means, what to check and what to do.
func TestEveryAlertHasARunbook(t *testing.T) {
	doc, err := os.ReadFile("../../docs/runbooks.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // anchor -> the section's text
	var cur string
	for _, line := range strings.Split(string(doc), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			cur = anchor(h)
			sections[cur] = ""
			continue
		}
		if cur != "" {
			sections[cur] += line + "\n"
		}
	}
	var r alertRules
	if err := yaml.UnmarshalStrict(Alerts, &r); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	n := 0
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			n++
			url := rule.Annotations["runbook_url"]
			frag, ok := strings.CutPrefix(url, runbookBase)
			if !ok {
				t.Errorf("alert %s: runbook_url %q, want %s<section>", rule.Alert, url, runbookBase)
				continue
			}
			text, ok := sections[frag]
			if !ok {
				t.Errorf("alert %s: docs/runbooks.md has no section #%s", rule.Alert, frag)
				continue
			}
			for _, part := range []string{"What it means", "What to check", "What to do"} {
				if !strings.Contains(text, part) {
					t.Errorf("docs/runbooks.md#%s: no %q", frag, part)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("alerts.yaml has no alerts")
	}
}

// TestBlockedShareCountsEveryRefusal: the dashboard's blocked share counts every result the
// decision path refuses with, as policy/policy.go declares them (a Result constant whose
// comment says it is blocked or refused, and not allowed).
func TestBlockedShareCountsEveryRefusal(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../policy/policy.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var refusals []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || !strings.HasPrefix(vs.Names[0].Name, "Result") || len(vs.Values) != 1 || vs.Comment == nil {
			return true
		}
		lit, ok := vs.Values[0].(*ast.BasicLit)
		if !ok {
			return true
		}
		c := strings.TrimSpace(vs.Comment.Text())
		if !strings.HasPrefix(c, "allowed") && (strings.HasPrefix(c, "blocked") || strings.Contains(c, "refused")) {
			v, _ := strconv.Unquote(lit.Value)
			refusals = append(refusals, v)
		}
		return true
	})
	if len(refusals) < 4 {
		t.Fatalf("found refusal results %v in policy/policy.go, want at least authority, param_flow, invalid, queue_full", refusals)
	}
	sel := regexp.MustCompile(`result=~"([^"]*)"`)
	for _, p := range loadDashboard(t).Panels {
		if p.Title != "Blocked" && p.Title != "Blocked by resource" {
			continue
		}
		for _, tg := range p.Targets {
			m := sel.FindStringSubmatch(tg.Expr)
			if m == nil {
				t.Errorf("panel %q: %s selects no results", p.Title, tg.Expr)
				continue
			}
			counted := strings.Split(m[1], "|")
			for _, r := range refusals {
				if !slices.Contains(counted, r) {
					t.Errorf("panel %q leaves out result %q: %s", p.Title, r, tg.Expr)
				}
			}
		}
	}
}

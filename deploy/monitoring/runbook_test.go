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
// decision path refuses with, as policy/outcome.go declares them: each Outcome whose comment
// says it is refused, under its metric label in outcomeNames.
func TestBlockedShareCountsEveryRefusal(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "../../policy/outcome.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{}  // Outcome constants whose comment says refused
	labels := map[string]string{} // Outcome constant -> metric label
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if len(n.Names) == 1 && n.Comment != nil && strings.HasPrefix(strings.TrimSpace(n.Comment.Text()), "refused") {
				refused[n.Names[0].Name] = true
			}
		case *ast.KeyValueExpr:
			key, ok := n.Key.(*ast.Ident)
			val, ok2 := n.Value.(*ast.CompositeLit)
			if ok && ok2 && len(val.Elts) == 2 {
				if lit, ok := val.Elts[0].(*ast.BasicLit); ok {
					labels[key.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
		return true
	})
	var refusals []string
	for name := range refused {
		if l := labels[name]; l != "" {
			refusals = append(refusals, l)
		}
	}
	slices.Sort(refusals)
	if len(refusals) < 4 {
		t.Fatalf("found refusal results %v in policy/outcome.go, want at least authority, param_flow, invalid, queue_full", refusals)
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

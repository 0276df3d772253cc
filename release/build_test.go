package release

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// target is one GOOS/GOARCH pair of a build.
type target struct{ os, arch string }

func (tg target) String() string { return tg.os + "/" + tg.arch }

// targets lists a build's targets, every goos with every goarch, as goreleaser does.
func targets(b buildConfig) []target {
	var out []target
	for _, goos := range b.Goos {
		for _, goarch := range b.Goarch {
			out = append(out, target{goos, goarch})
		}
	}
	return out
}

// binary is one built target.
type binary struct {
	build  buildConfig
	target target
	path   string
	took   time.Duration
}

// goBuild is the go build command goreleaser runs for one target: the build's flags, its
// ldflags joined into one -ldflags, its env over this process's, and GOFLAGS=-buildvcs=false
// as on a CI machine that sets it, so only the ldflags can stamp the version and commit.
func goBuild(t *testing.T, root string, f fields, b buildConfig, tg target, out string) *exec.Cmd {
	t.Helper()
	tf := f.with(fields{"Os": tg.os, "Arch": tg.arch, "Binary": b.Binary})
	args := []string{"build"}
	for i, flag := range b.Flags {
		args = append(args, tf.apply(t, fmt.Sprintf("builds[%s].flags[%d]", b.ID, i), flag))
	}
	var ld []string
	for i, l := range b.Ldflags {
		ld = append(ld, tf.apply(t, fmt.Sprintf("builds[%s].ldflags[%d]", b.ID, i), l))
	}
	if len(ld) > 0 {
		args = append(args, "-ldflags="+strings.Join(ld, " "))
	}
	args = append(args, "-o", out, b.Main)

	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOOS", "GOARCH", "GOAMD64", "GOARM64", "GOFLAGS", "CGO_ENABLED":
		default:
			env = append(env, kv)
		}
	}
	for i, kv := range b.Env {
		env = append(env, tf.apply(t, fmt.Sprintf("builds[%s].env[%d]", b.ID, i), kv))
	}
	// goreleaser's default variants (goamd64 v1, goarm64 v8.0), which are also Go's.
	env = append(env, "GOOS="+tg.os, "GOARCH="+tg.arch, "GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=-buildvcs=false")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = env
	return cmd
}

// buildAll builds every target of every build into dist, as many at once as there are CPUs,
// and sets each binary's modification time to the build's mod_timestamp.
func buildAll(t *testing.T, root, dist string, f fields, c config) []binary {
	t.Helper()
	var bins []binary
	for _, b := range c.Builds {
		for _, tg := range targets(b) {
			out := filepath.Join(dist, fmt.Sprintf("%s_%s_%s", b.ID, tg.os, tg.arch), b.Binary)
			bins = append(bins, binary{build: b, target: tg, path: out})
		}
	}
	cmds := make([]*exec.Cmd, len(bins))
	for i, bin := range bins {
		cmds[i] = goBuild(t, root, f, bin.build, bin.target, bin.path)
	}
	start := time.Now()
	errs := make([]error, len(bins))
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	var wg sync.WaitGroup
	for i := range bins {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			began := time.Now()
			if out, err := cmds[i].CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("%s: %v\n%s\n%s", bins[i].target, err, strings.Join(cmds[i].Args, " "), out)
			}
			bins[i].took = time.Since(began)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var took []string
	for _, bin := range bins {
		took = append(took, fmt.Sprintf("%s %.1fs", bin.target, bin.took.Seconds()))
	}
	t.Logf("built %d targets in %.1fs, %d at a time (%s)", len(bins), time.Since(start).Seconds(), cap(sem), strings.Join(took, ", "))
	for _, bin := range bins {
		if bin.build.ModTimestamp == "" {
			continue
		}
		sec, err := strconv.ParseInt(f.apply(t, "builds.mod_timestamp", bin.build.ModTimestamp), 10, 64)
		if err != nil {
			t.Fatalf("build %s: mod_timestamp: %v", bin.build.ID, err)
		}
		mt := time.Unix(sec, 0)
		if err := os.Chtimes(bin.path, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	return bins
}

// checkBinary checks one built binary: its build settings, its format and architecture, that a
// Linux binary is static, and that the version and commit are in it.
func checkBinary(t *testing.T, bin binary, f fields) {
	t.Helper()
	info, err := buildinfo.ReadFile(bin.path)
	if err != nil {
		t.Fatalf("build info: %v", err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"GOOS": bin.target.os, "GOARCH": bin.target.arch, "CGO_ENABLED": "0", "-trimpath": "true"} {
		if got := settings[k]; got != want {
			t.Errorf("build setting %s = %q, want %q", k, got, want)
		}
	}
	// -buildvcs=false took effect: Go stamped no revision, so the one shown comes from -X.
	if rev, ok := settings["vcs.revision"]; ok {
		t.Errorf("vcs.revision %s stamped by Go: the build did not run with -buildvcs=false", rev)
	}

	switch bin.target.os {
	case "linux":
		checkELF(t, bin)
	case "darwin":
		checkMachO(t, bin)
	default:
		t.Errorf("no format check for %s: teach release/ this target", bin.target)
	}

	data, err := os.ReadFile(bin.path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Version", "FullCommit"} {
		if v := f[k].(string); !bytes.Contains(data, []byte(v)) {
			t.Errorf("%s %q is not stamped in the binary", k, v)
		}
	}
	if bin.build.ModTimestamp != "" {
		st, err := os.Stat(bin.path)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := strconv.FormatInt(st.ModTime().Unix(), 10), f["CommitTimestamp"]; got != want {
			t.Errorf("modification time %s, want the commit's %s", got, want)
		}
	}
}

func checkELF(t *testing.T, bin binary) {
	t.Helper()
	e, err := elf.Open(bin.path)
	if err != nil {
		t.Fatalf("not an ELF file: %v", err)
	}
	defer e.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[bin.target.arch]
	if e.Class != elf.ELFCLASS64 || e.Machine != machine {
		t.Errorf("ELF %v %v, want ELFCLASS64 %v", e.Class, e.Machine, machine)
	}
	if e.Type != elf.ET_EXEC {
		t.Errorf("ELF type %v, want ET_EXEC (a static executable)", e.Type)
	}
	for _, p := range e.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("program header %v: the binary is dynamically linked", p.Type)
		}
	}
	if libs, _ := e.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
}

func checkMachO(t *testing.T, bin binary) {
	t.Helper()
	m, err := macho.Open(bin.path)
	if err != nil {
		t.Fatalf("not a Mach-O file: %v", err)
	}
	defer m.Close()
	cpu := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[bin.target.arch]
	if m.Cpu != cpu || m.Type != macho.TypeExec {
		t.Errorf("Mach-O %v %v, want %v %v", m.Cpu, m.Type, cpu, macho.TypeExec)
	}
	// Go on macOS always links libSystem; anything else would have to be installed.
	libs, err := m.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, lib := range libs {
		if !strings.HasPrefix(lib, "/usr/lib/") && !strings.HasPrefix(lib, "/System/Library/") {
			t.Errorf("the binary needs %s, not part of macOS", lib)
		}
	}
	if len(libs) == 0 {
		t.Error("no libSystem import: not a binary Go makes for macOS")
	}
}

// hostBinary is the binary built for the machine running the test.
func hostBinary(t *testing.T, bins []binary) binary {
	t.Helper()
	for _, bin := range bins {
		if bin.target == (target{runtime.GOOS, runtime.GOARCH}) {
			return bin
		}
	}
	t.Fatalf("no target for this machine (%s/%s): no built binary can be run", runtime.GOOS, runtime.GOARCH)
	return binary{}
}

// TestSnapshot does what `goreleaser release --snapshot` does with .goreleaser.yaml, but
// publishing and the image: the hooks, every build, the archives, an SBOM, the checksums; and
// checks each of them.
func TestSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every release target; skipped under -short")
	}
	root := repoRoot(t)
	c := loadConfig(t, root)
	f := snapshotFields(t, root, c)
	dist := t.TempDir()

	for _, hook := range c.Before.Hooks {
		args := strings.Fields(hook)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("before hook %q: %v\n%s", hook, err, out)
		}
	}

	bins := buildAll(t, root, dist, f, c)
	for _, bin := range bins {
		t.Run("binary/"+bin.target.os+"_"+bin.target.arch, func(t *testing.T) { checkBinary(t, bin, f) })
	}
	host := hostBinary(t, bins)
	t.Run("version", func(t *testing.T) {
		out, err := exec.Command(host.path, "version").CombinedOutput()
		want := fmt.Sprintf("extauthz %s\ncommit: %s\n", f["Version"], f["FullCommit"])
		if err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s version: %v\n%s\nwant it to begin with\n%s", host.target, err, out, want)
		}
	})

	began := time.Now()
	archives := packAll(t, root, dist, f, c, bins)
	t.Logf("packed %d archives in %.1fs", len(archives), time.Since(began).Seconds())
	began = time.Now()
	t.Run("archives", func(t *testing.T) { checkArchives(t, root, c, archives) })
	t.Logf("read them back in %.1fs", time.Since(began).Seconds())

	var sboms []artifact
	for i, s := range c.SBOMs {
		// goreleaser catalogs every archive; one, the host's, shows the configuration works.
		a := archiveOf(t, archives, host)
		began := time.Now()
		doc := catalog(t, dist, s, a)
		t.Logf("catalogued %s in %.1fs", a.name, time.Since(began).Seconds())
		t.Run(fmt.Sprintf("sbom%d", i), func(t *testing.T) { checkSBOM(t, root, f, a, host, doc) })
		sboms = append(sboms, doc)
	}

	sums := writeChecksums(t, dist, f, c, append(append([]artifact{}, archives...), sboms...))
	t.Run("checksums", func(t *testing.T) { checkChecksums(t, c, sums, append(archives, sboms...)) })
	t.Run("docs", func(t *testing.T) { runDocs(t, root, dist, f, host) })
}

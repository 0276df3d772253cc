package memlimit

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fixture lays out a cgroup tree under a temp dir: files maps a path relative to the root to
// its content; membership is the /proc/self/cgroup file.
func fixture(t *testing.T, membership string, files map[string]string) Source {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "cgroup")
	for rel, content := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc := filepath.Join(dir, "proc-self-cgroup")
	if err := os.WriteFile(proc, []byte(membership), 0o644); err != nil {
		t.Fatal(err)
	}
	return Source{CgroupRoot: root, ProcCgroup: proc}
}

func TestDetect(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		name       string
		membership string
		files      map[string]string
		setting    string
		env        string
		want       Limit
		wantFile   string // relative to the root
	}{
		{"v2 in a container's namespace", "0::/\n", map[string]string{"memory.max": "1073741824\n"}, "", "",
			Limit{Bytes: gib * 9 / 10, Container: gib, From: FromCgroupV2}, "memory.max"},
		{"v2 unlimited", "0::/\n", map[string]string{"memory.max": "max\n"}, "", "",
			Limit{From: FromNone}, ""},
		{"v2 nested: the smallest ancestor wins", "0::/kubepods/pod1/c1\n", map[string]string{
			"kubepods/pod1/c1/memory.max": "max",
			"kubepods/pod1/memory.max":    "536870912",
			"kubepods/memory.max":         "1073741824",
		}, "", "", Limit{Bytes: 483183820, Container: 512 << 20, From: FromCgroupV2}, "kubepods/pod1/memory.max"},
		{"v1", "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n", map[string]string{
			"memory/docker/abc/memory.limit_in_bytes": "268435456\n",
		}, "", "", Limit{Bytes: 241591910, Container: 256 << 20, From: FromCgroupV1}, "memory/docker/abc/memory.limit_in_bytes"},
		{"v1 unlimited", "4:memory:/\n", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712"}, "", "",
			Limit{From: FromNone}, ""},
		{"hybrid: v2 has no limit, v1 has", "0::/\n4:memory:/\n", map[string]string{
			"memory.max":                   "max",
			"memory/memory.limit_in_bytes": "1073741824",
		}, "", "", Limit{Bytes: gib * 9 / 10, Container: gib, From: FromCgroupV1}, "memory/memory.limit_in_bytes"},
		{"no cgroup files", "0::/\n", nil, "", "", Limit{From: FromNone}, ""},
		{"setting wins over the cgroup", "0::/\n", map[string]string{"memory.max": "1073741824"}, "256MiB", "",
			Limit{Bytes: 256 << 20, From: FromSetting}, ""},
		{"off", "0::/\n", map[string]string{"memory.max": "1073741824"}, "off", "",
			Limit{From: FromOff}, ""},
		{"GOMEMLIMIT stays", "0::/\n", map[string]string{"memory.max": "1073741824"}, "", "800MiB",
			Limit{From: FromEnv}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := fixture(t, tt.membership, tt.files)
			src.Setting = tt.setting
			src.Getenv = func(k string) string {
				if k == "GOMEMLIMIT" {
					return tt.env
				}
				return ""
			}
			got, err := Detect(src)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if tt.wantFile != "" {
				want.File = filepath.Join(src.CgroupRoot, filepath.FromSlash(tt.wantFile))
			}
			if got != want {
				t.Errorf("Detect = %+v, want %+v", got, want)
			}
		})
	}
}

func TestDetectErrors(t *testing.T) {
	src := fixture(t, "0::/\n", map[string]string{"memory.max": "lots\n"})
	if _, err := Detect(src); err == nil || !strings.Contains(err.Error(), `"lots" is not a memory limit`) {
		t.Errorf("Detect with a garbled memory.max: %v", err)
	}
	src.Setting = "12 apples"
	if _, err := Detect(src); err == nil {
		t.Error("Detect with a bad setting: no error")
	}
	// No /proc: not Linux, no limit, no error.
	got, err := Detect(Source{ProcCgroup: filepath.Join(t.TempDir(), "none")})
	if err != nil || got.From != FromNone {
		t.Errorf("Detect without /proc = %+v, %v", got, err)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1": 1, "512B": 512, "4KiB": 4096, "512MiB": 512 << 20, "2GiB": 2 << 30, "1TiB": 1 << 40, " 3 MiB": 3 << 20,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1MiB", "1.5GiB", "1GB", "1 G", "lots", "9999999TiB"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q): no error", in)
		}
	}
	for _, ok := range []string{"", "off", "1GiB"} {
		if err := CheckSetting(ok); err != nil {
			t.Errorf("CheckSetting(%q) = %v", ok, err)
		}
	}
	if err := CheckSetting("1GB"); err == nil {
		t.Error("CheckSetting(1GB): no error")
	}
}

// Apply sets the runtime's soft limit from a cgroup fixture.
func TestApply(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	lim, err := Detect(fixture(t, "0::/\n", map[string]string{"memory.max": "2147483648"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := lim.Apply(), int64(2147483648*9/10); got != want {
		t.Errorf("soft limit after Apply = %d, want %d", got, want)
	}
	// A Limit with no bytes leaves the limit in force.
	if got, want := (Limit{From: FromNone}).Apply(), int64(2147483648*9/10); got != want {
		t.Errorf("soft limit after an empty Apply = %d, want %d", got, want)
	}
}

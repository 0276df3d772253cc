// Package memlimit sets the Go runtime's soft memory limit (debug.SetMemoryLimit) from the
// container's memory limit, read from its cgroup (v2 memory.max, v1 memory.limit_in_bytes),
// keeping headroom below it, or from an explicit setting.
//
// Without a soft limit the Go heap may grow to twice the live heap before a collection (GOGC
// 100), so a service holding a large, steady state (tracked values) can be killed by the
// container's limit while half of what it holds is garbage. With the limit, the collector runs
// harder as the heap nears it, and resident memory tracks the live heap. GCTarget sets the
// collector's target from the live heap, under a limit and, never below Go's default, without
// one (see GCTarget).
package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// Headroom is the share of the container's limit given to the Go heap: the rest is for
// what the runtime does not count (goroutine stacks beyond it, cgo, the binary's text, page
// cache charged to the cgroup).
const Headroom = 0.9

// Where a Limit came from.
const (
	FromSetting  = "memory_limit"      // the memory_limit setting
	FromEnv      = "GOMEMLIMIT"        // the Go runtime's own variable, which then stays in force
	FromCgroupV2 = "cgroup v2"         // memory.max of the process's cgroup
	FromCgroupV1 = "cgroup v1"         // memory.limit_in_bytes of the process's memory cgroup
	FromNone     = "none"              // no limit found: the runtime's default (none) stays
	FromOff      = settingOff          // the setting turned detection off: none is set
	settingOff   = "off"               // the setting that turns detection off
	defaultRoot  = "/sys/fs/cgroup"    // where cgroup file systems are mounted
	defaultProc  = "/proc/self/cgroup" // the process's cgroup membership
)

// Source is where Detect looks. The zero value reads the real process's cgroup and no setting.
type Source struct {
	// Setting is the memory_limit setting: "" detects the container's limit, "off" sets none,
	// and a size ("512MiB", "2GiB", "1073741824") is the soft limit itself.
	Setting string
	// Getenv reads GOMEMLIMIT; when set, the runtime already applies it and Detect leaves it.
	// nil means an empty environment.
	Getenv func(string) string
	// CgroupRoot is where the cgroup file systems are mounted; "" is /sys/fs/cgroup.
	CgroupRoot string
	// ProcCgroup is the process's cgroup membership file; "" is /proc/self/cgroup.
	ProcCgroup string
}

// Limit is the soft memory limit Detect chose.
type Limit struct {
	// Bytes is the soft limit to set; 0 when none is (From is FromNone, FromOff or FromEnv).
	Bytes int64
	// Container is the container's memory limit in bytes, when one was read; 0 otherwise.
	Container int64
	// From says where Bytes came from: one of the From constants.
	From string
	// File is the cgroup file the container's limit was read from, if any.
	File string
}

// Detect chooses the soft memory limit: the setting when it is a size, nothing when it is
// "off" or GOMEMLIMIT is set, else Headroom of the cgroup's limit (v2, then v1). A machine
// with no cgroup limit yields FromNone. An error is a setting that is not a size or a cgroup
// file that cannot be parsed.
func Detect(src Source) (Limit, error) {
	switch s := strings.TrimSpace(src.Setting); s {
	case settingOff:
		return Limit{From: FromOff}, nil
	case "":
	default:
		n, err := ParseSize(s)
		if err != nil {
			return Limit{}, err
		}
		return Limit{Bytes: n, From: FromSetting}, nil
	}
	if src.Getenv != nil && src.Getenv("GOMEMLIMIT") != "" {
		return Limit{From: FromEnv}, nil
	}
	root, proc := src.CgroupRoot, src.ProcCgroup
	if root == "" {
		root = defaultRoot
	}
	if proc == "" {
		proc = defaultProc
	}
	membership, err := os.ReadFile(proc)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Limit{From: FromNone}, nil // not Linux, or no /proc
		}
		return Limit{}, fmt.Errorf("cannot read cgroup membership: %w", err)
	}
	v2, v1 := parseMembership(membership)
	if v2 != "" {
		if lim, file, ok, err := lowest(root, v2, "memory.max"); err != nil || ok {
			return withHeadroom(lim, file, FromCgroupV2), err
		}
	}
	if v1 != "" {
		if lim, file, ok, err := lowest(filepath.Join(root, "memory"), v1, "memory.limit_in_bytes"); err != nil || ok {
			return withHeadroom(lim, file, FromCgroupV1), err
		}
	}
	return Limit{From: FromNone}, nil
}

// withHeadroom is the Limit for a container limit of container bytes read from file.
func withHeadroom(container int64, file, from string) Limit {
	return Limit{Bytes: int64(float64(container) * Headroom), Container: container, From: from, File: file}
}

// Apply sets the runtime's soft memory limit to l.Bytes, if l has one, and returns the limit
// in force afterwards.
func (l Limit) Apply() int64 {
	if l.Bytes > 0 {
		debug.SetMemoryLimit(l.Bytes)
	}
	return debug.SetMemoryLimit(-1)
}

// parseMembership reads /proc/self/cgroup: the cgroup v2 path ("0::/path") and the v1 memory
// controller's path ("4:memory:/path"), each "" when absent.
func parseMembership(data []byte) (v2, v1 string) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v2, v1
}

// lowest is the smallest limit named file holds in the cgroup at rel under root and in each
// of its parents up to root (a cgroup's effective limit is the smallest of its ancestors').
// Inside a container's cgroup namespace rel is "/" and only root's own file counts. ok is false
// when no file sets a limit.
func lowest(root, rel, name string) (limit int64, file string, ok bool, err error) {
	dir := path.Clean("/" + rel)
	for {
		f := filepath.Join(root, filepath.FromSlash(dir), name)
		n, found, err := readLimit(f)
		if err != nil {
			return 0, "", false, err
		}
		if found && (!ok || n < limit) {
			limit, file, ok = n, f, true
		}
		if dir == "/" {
			return limit, file, ok, nil
		}
		dir = path.Dir(dir)
	}
}

// unlimitedV1 is the smallest value cgroup v1 uses for "no limit" (the largest page-aligned
// int64, 9223372036854771712, and above).
const unlimitedV1 = math.MaxInt64 &^ (1<<20 - 1)

// readLimit reads a memory limit file: found is false for a missing file, "max" (v2) or v1's
// unlimited value.
func readLimit(file string) (n int64, found bool, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("cannot read memory limit: %w", err)
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false, fmt.Errorf("%s: %q is not a memory limit", file, s)
	}
	if n >= unlimitedV1 {
		return 0, false, nil
	}
	return n, true, nil
}

// units are the suffixes ParseSize takes, as GOMEMLIMIT does.
var units = []struct {
	suffix string
	bytes  int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ParseSize reads a size in bytes as GOMEMLIMIT writes it: a whole number with an optional
// unit B, KiB, MiB, GiB or TiB ("512MiB", "1073741824").
func ParseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSuffix(s, u.suffix), u.bytes
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a memory size: write a whole number of bytes with a unit B, KiB, MiB, GiB or TiB, like 512MiB, or off", s)
	}
	return n * mult, nil
}

// CheckSetting reports whether s is a valid memory_limit setting: "", "off" or a size.
func CheckSetting(s string) error {
	if s = strings.TrimSpace(s); s == "" || s == settingOff {
		return nil
	}
	_, err := ParseSize(s)
	return err
}

package compose

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// network is compose's default network without a container engine: one Linux network
// namespace per service (its own loopback and ports, as a container has), joined by a bridge
// that lives in a namespace of its own, each service reachable by its name through the hosts
// file that `ip netns exec` puts over /etc/hosts (from /etc/netns/NAME/). Nothing of it is in
// the machine's own namespace, and it is all removed when the test ends.
type network struct {
	prefix string
	addrs  map[string]string // service -> its address
}

// subnet is the bridge's: addresses of this test's own namespaces, reached from nowhere else.
const subnet = "10.251.7."

// ip runs the ip command, failing t with its output.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNetwork makes a namespace for each name, on one bridge.
func newNetwork(t *testing.T, names []string) *network {
	t.Helper()
	n := &network{prefix: fmt.Sprintf("xzc%d", os.Getpid()%100000), addrs: map[string]string{}}
	bridge := n.prefix + "-br"
	t.Cleanup(func() {
		for _, name := range names {
			_ = exec.Command("ip", "netns", "del", n.ns(name)).Run()
			_ = os.RemoveAll(filepath.Join("/etc/netns", n.ns(name)))
		}
		_ = exec.Command("ip", "netns", "del", bridge).Run()
	})
	ip(t, "netns", "add", bridge)
	ip(t, "-n", bridge, "link", "add", "br0", "type", "bridge")
	ip(t, "-n", bridge, "link", "set", "br0", "up")
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for i, name := range sorted {
		n.addrs[name] = fmt.Sprintf("%s%d", subnet, i+2)
	}
	for i, name := range sorted {
		ns := n.ns(name)
		ip(t, "netns", "add", ns)
		ip(t, "-n", ns, "link", "set", "lo", "up")
		inner, outer := fmt.Sprintf("eth%d", i), fmt.Sprintf("p%d", i)
		ip(t, "link", "add", inner, "netns", ns, "type", "veth", "peer", "name", outer, "netns", bridge)
		ip(t, "-n", ns, "addr", "add", n.addrs[name]+"/24", "dev", inner)
		ip(t, "-n", ns, "link", "set", inner, "up")
		ip(t, "-n", bridge, "link", "set", outer, "master", "br0")
		ip(t, "-n", bridge, "link", "set", outer, "up")
		if err := os.MkdirAll(filepath.Join("/etc/netns", ns), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("/etc/netns", ns, "hosts"), []byte(n.hosts()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// ns is the namespace of service name.
func (n *network) ns(name string) string { return n.prefix + "-" + name }

// hosts is the hosts file every namespace sees: localhost and each service by its name.
func (n *network) hosts() string {
	var b strings.Builder
	b.WriteString("127.0.0.1 localhost\n")
	names := make([]string, 0, len(n.addrs))
	for name := range n.addrs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s %s\n", n.addrs[name], name)
	}
	return b.String()
}

// command runs argv in service name's namespace, with its volumes bound over their container
// paths in a mount namespace of its own (the paths that do not exist on this machine are made
// first, and removed when the test ends).
func (n *network) command(t *testing.T, name string, mounts []mount, argv ...string) *exec.Cmd {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, m := range mounts {
		made, err := ensure(m.target, m.dir)
		if err != nil {
			t.Fatal(err)
		}
		if made != "" {
			t.Cleanup(func() { _ = os.RemoveAll(made) })
		}
		fmt.Fprintf(&script, "mount --bind %q %q\n", m.source, m.target)
		if m.readOnly {
			fmt.Fprintf(&script, "mount -o remount,bind,ro %q\n", m.target)
		}
	}
	script.WriteString(`exec "$@"` + "\n")
	args := append([]string{"netns", "exec", n.ns(name), "unshare", "--mount", "--propagation", "private",
		"sh", "-c", script.String(), "sh"}, argv...)
	return exec.Command("ip", args...)
}

// inNS runs argv in service name's namespace, without mounts (a health check, the checks).
func (n *network) inNS(name string, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.ns(name)}, argv...)...)
}

// ensure makes path (a directory when dir, else an empty file) if it does not exist, and
// returns the topmost path it made ("" when it made none).
func ensure(path string, dir bool) (string, error) {
	if _, err := os.Stat(path); err == nil {
		return "", nil
	}
	top := path
	for p := filepath.Dir(path); p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		top = p
	}
	if dir {
		return top, os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return top, err
	}
	return top, os.WriteFile(path, nil, 0o644)
}

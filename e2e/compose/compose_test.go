// Package compose runs docker-compose.yml without a container engine: each service becomes a
// local process in a network namespace of its own (Envoy from the pinned release, the built
// extauthz with the Dockerfile's entrypoint, redis-server, an echo server), with the file's
// commands, environment, volumes and health checks, and then e2e/compose.sh's checks run
// against it. The compose file stays the one a Docker user runs.
package compose

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/extauthz/extauthz/internal/testkit/envoytest"
	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

const repoRoot = "../.."

var service = testbin.Lazy{ModuleRoot: repoRoot}

func TestMain(m *testing.M) {
	if os.Getenv(echoEnv) == "1" {
		os.Exit(serveEcho())
	}
	code := m.Run()
	service.Close()
	os.Exit(code)
}

// composeFile is the part of the compose format docker-compose.yml uses; a key outside it
// fails the test, which then has to learn it.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image       string            `json:"image"`
	Build       string            `json:"build"`
	Command     []string          `json:"command"`
	Volumes     []string          `json:"volumes"`
	Environment map[string]string `json:"environment"`
	Ports       []string          `json:"ports"`
	DependsOn   map[string]struct {
		Condition string `json:"condition"`
	} `json:"depends_on"`
	Healthcheck struct {
		Test     []string `json:"test"`
		Interval string   `json:"interval"`
		Timeout  string   `json:"timeout"`
		Retries  int      `json:"retries"`
	} `json:"healthcheck"`
}

// mount is one volume: a file or directory of the repository over a container path.
type mount struct {
	source, target string
	readOnly, dir  bool
}

func TestComposeStack(t *testing.T) {
	envoyBin := envoytest.Binary(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("needs iproute2's ip: %v", err)
	}
	bin := service.Path(t)
	src, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.UnmarshalStrict(src, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	names := make([]string, 0, len(cf.Services)+1)
	for name := range cf.Services {
		names = append(names, name)
	}
	net := newNetwork(t, append(names, "client"))
	order, err := startOrder(cf.Services)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range order {
		s := cf.Services[name]
		argv, env, dir := processFor(t, name, s, envoyBin, bin)
		cmd := net.command(t, name, mounts(t, s.Volumes), argv...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		cmd.Dir = dir
		logs := &logTail{}
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", name, logs)
			}
		})
		if err := waitHealthy(net, name, s, done); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, logs)
		}
		t.Logf("%s is healthy", name)
	}
	script, err := filepath.Abs(filepath.Join(repoRoot, "e2e", "compose.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	check := net.inNS("client", "bash", script)
	check = exec.CommandContext(ctx, check.Path, check.Args[1:]...)
	check.Env = []string{"PATH=" + os.Getenv("PATH"), "EXTAUTHZ_COMPOSE_RUNNING=1", "BASE_URL=http://envoy:8080"}
	out, err := check.CombinedOutput()
	t.Logf("e2e/compose.sh:\n%s", out)
	if err != nil {
		t.Fatalf("e2e/compose.sh against the stack: %v", err)
	}
	if !bytes.Contains(out, []byte("all checks passed")) {
		t.Fatal("e2e/compose.sh did not say that all checks passed")
	}
}

// processFor is the command line, environment and working directory of service name: what
// the container would run, with the container's program replaced by this machine's.
func processFor(t *testing.T, name string, s composeService, envoyBin, bin string) (argv, env []string, dir string) {
	t.Helper()
	for k, v := range s.Environment {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	switch {
	case strings.HasPrefix(s.Image, "envoyproxy/envoy:"):
		if want := "envoyproxy/envoy:v" + envoytest.Version; s.Image != want {
			t.Fatalf("%s: image %s, but the tests run Envoy %s (%s)", name, s.Image, envoytest.Version, want)
		}
		if len(s.Command) == 0 || s.Command[0] != "envoy" {
			t.Fatalf("%s: command %q does not start with envoy", name, s.Command)
		}
		return append([]string{envoyBin}, s.Command[1:]...), env, t.TempDir()
	case s.Build == ".":
		entry, cmd, workdir := dockerfile(t)
		if len(s.Command) > 0 {
			cmd = s.Command
		}
		if len(entry) != 1 || filepath.Base(entry[0]) != "extauthz" {
			t.Fatalf("Dockerfile ENTRYPOINT %q is not the extauthz binary", entry)
		}
		return append([]string{bin}, cmd...), env, workdir
	case strings.HasPrefix(s.Image, "redis:"):
		// The image's entrypoint starts a server without a config file with protected mode off,
		// so that other containers may connect; it works (and saves) in its own directory.
		return append([]string{"redis-server", "--protected-mode", "no"}, s.Command...), env, t.TempDir()
	case strings.HasPrefix(s.Image, "mendhak/http-https-echo:"):
		return []string{os.Args[0], "-test.run=^$"}, append(env, echoEnv+"=1"), t.TempDir()
	}
	t.Fatalf("%s: no local process for image %q build %q: teach processFor", name, s.Image, s.Build)
	return nil, nil, ""
}

// dockerfile reads the Dockerfile's ENTRYPOINT and CMD (exec form) and its last WORKDIR.
func dockerfile(t *testing.T) (entry, cmd []string, workdir string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(src), "\n") {
		word, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch word {
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(rest), &v); err != nil {
				t.Fatalf("Dockerfile %s %s: not the exec form: %v", word, rest, err)
			}
			if word == "CMD" {
				cmd = v
			} else {
				entry = v
			}
		case "WORKDIR":
			workdir = strings.TrimSpace(rest)
		}
	}
	return entry, cmd, workdir
}

// mounts reads compose volumes of the form ./path:/container/path[:ro].
func mounts(t *testing.T, volumes []string) []mount {
	t.Helper()
	var ms []mount
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			t.Fatalf("volume %q: only ./host:container[:ro] is understood", v)
		}
		src, err := filepath.Abs(filepath.Join(repoRoot, parts[0]))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatalf("volume %q: %v", v, err)
		}
		ms = append(ms, mount{source: src, target: parts[1], readOnly: len(parts) > 2 && parts[2] == "ro", dir: fi.IsDir()})
	}
	return ms
}

// startOrder lists the services so that each comes after those it depends on.
func startOrder(services map[string]composeService) ([]string, error) {
	var order []string
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(string) error
	visit = func(name string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("depends_on has a cycle through %s", name)
		case 2:
			return nil
		}
		state[name] = 1
		deps := make([]string, 0, len(services[name].DependsOn))
		for d := range services[name].DependsOn {
			if _, ok := services[d]; !ok {
				return fmt.Errorf("%s depends on unknown service %s", name, d)
			}
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, name)
		return nil
	}
	names := make([]string, 0, len(services))
	for n := range services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// waitHealthy runs the service's health check as compose does (CMD form, every interval, up
// to retries times; "$$" is compose's escape of "$"). A program named by a container path
// that this machine lacks is this machine's program of that name.
func waitHealthy(net *network, name string, s composeService, exited <-chan struct{}) error {
	hc := s.Healthcheck
	if len(hc.Test) < 2 || hc.Test[0] != "CMD" {
		return fmt.Errorf("health check %q: only the CMD form is understood", hc.Test)
	}
	argv := make([]string, len(hc.Test)-1)
	for i, a := range hc.Test[1:] {
		argv[i] = strings.ReplaceAll(a, "$$", "$")
	}
	if _, err := os.Stat(argv[0]); err != nil && filepath.IsAbs(argv[0]) {
		argv[0] = filepath.Base(argv[0])
	}
	interval, err := time.ParseDuration(hc.Interval)
	if err != nil {
		return fmt.Errorf("health check interval: %v", err)
	}
	timeout, err := time.ParseDuration(hc.Timeout)
	if err != nil {
		return fmt.Errorf("health check timeout: %v", err)
	}
	var last []byte
	for i := 0; i < hc.Retries; i++ {
		select {
		case <-exited:
			return fmt.Errorf("exited before it was healthy")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		probe := net.inNS(name, argv...)
		probe = exec.CommandContext(ctx, probe.Path, probe.Args[1:]...)
		out, err := probe.CombinedOutput()
		cancel()
		if err == nil {
			return nil
		}
		last = append(out, []byte(err.Error())...)
		time.Sleep(interval)
	}
	return fmt.Errorf("not healthy after %d checks: %s", hc.Retries, last)
}

// logTail keeps the last 64 KiB a process wrote.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - 64<<10; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

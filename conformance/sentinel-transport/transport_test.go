// Package sentineltransport holds extauthz's dashboard transport to Sentinel's own: the Java
// program of this directory runs Sentinel's simple-http command center and heartbeat with the
// rules and traffic the test gives, the test runs the built extauthz with the same, sends both
// the requests a Sentinel dashboard sends, and holds extauthz's answers to read as Sentinel's do.
package sentineltransport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/extauthz/extauthz/internal/testkit/testbin"
)

var binary = testbin.Lazy{ModuleRoot: "../.."}

func TestMain(m *testing.M) {
	code := m.Run()
	binary.Close()
	os.Exit(code)
}

const (
	app      = "edge-gw"
	resource = "POST:/order"
	rules    = `{"paramFlowRules":[{"resource":"POST:/order","paramIdx":0,"count":100,"paramFlowItemList":[{"object":"vip","classType":"java.lang.String","count":5}]}],` +
		`"authorityRules":[{"resource":"POST:/order","limitApp":"serviceA","strategy":0}]}`
)

// traffic is what both sides decide before the metrics are compared: 3 callers the white list
// names, 2 it does not.
var traffic = []struct{ Origin, Arg string }{{"serviceA", "x"}, {"serviceB", "x"}, {"serviceA", "y"}, {"serviceB", "y"}, {"serviceA", "x"}}

// dashboardFake takes heartbeats as the dashboard does, the latest of each command port.
type dashboardFake struct {
	mu    sync.Mutex
	beats map[string]url.Values // by port
}

func (d *dashboardFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/registry/machine" || r.ParseForm() != nil {
		http.NotFound(w, r)
		return
	}
	d.mu.Lock()
	d.beats[r.Form.Get("port")] = r.Form
	d.mu.Unlock()
	_, _ = io.WriteString(w, `{"success":true,"code":0,"msg":"success","data":null}`)
}

func (d *dashboardFake) wait(t *testing.T, port string) url.Values {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		d.mu.Lock()
		f := d.beats[port]
		d.mu.Unlock()
		if f != nil {
			return f
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no heartbeat for port %s within 30s", port)
	return nil
}

func TestDashboardTransport(t *testing.T) {
	bin := binary.Path(t) // skips under -short
	fake := &dashboardFake{beats: map[string]url.Values{}}
	dash := httptest.NewServer(fake)
	defer dash.Close()
	dashAddr := strings.TrimPrefix(dash.URL, "http://")
	start := time.Now()

	javaAddr := startSentinel(t, dashAddr)

	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.json")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testbin.Start(t, testbin.Options{Binary: bin, Dir: dir, Env: []string{
		"EXTAUTHZ_SENTINEL_DASHBOARD_ADDRS=" + dashAddr, "EXTAUTHZ_SENTINEL_DASHBOARD_COMMAND_ADDR=127.0.0.1:0",
		"EXTAUTHZ_SENTINEL_DASHBOARD_APP=" + app, "EXTAUTHZ_SENTINEL_DASHBOARD_HEARTBEAT_INTERVAL=500ms",
		"EXTAUTHZ_SENTINEL_DASHBOARD_ALLOW_MEMORY_OVERRIDES=true", "EXTAUTHZ_PARAM_NAMES=item_id"},
		Args: []string{"serve", "--rules", rulesFile, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}})
	ourAddr := p.Entry("sentinel dashboard commands serving")["command_addr"].(string)
	decide(t, p.GRPCAddr)

	t.Run("heartbeat", func(t *testing.T) {
		theirs := fake.wait(t, port(javaAddr))
		ours := fake.wait(t, port(ourAddr))
		for k := range theirs {
			if _, ok := ours[k]; !ok {
				t.Errorf("extauthz's heartbeat lacks %s (Sentinel's: %v)", k, theirs)
			}
		}
		for k := range ours {
			if _, ok := theirs[k]; !ok && k != "pid" { // pid: Sentinel's netty-http transport sends it
				t.Errorf("extauthz's heartbeat has %s, Sentinel's does not", k)
			}
		}
		for _, k := range []string{"app", "app_type", "ip"} {
			if ours.Get(k) != theirs.Get(k) {
				t.Errorf("heartbeat %s: extauthz %q, Sentinel %q", k, ours.Get(k), theirs.Get(k))
			}
		}
		if a, b := version(ours.Get("v")), version(theirs.Get("v")); a != b {
			t.Errorf("heartbeat v as the dashboard reads it: extauthz %v, Sentinel %v", a, b)
		}
		for name, f := range map[string]url.Values{"extauthz": ours, "Sentinel": theirs} {
			ms, err := strconv.ParseInt(f.Get("version"), 10, 64)
			if err != nil || ms < start.UnixMilli()-1000 || ms > time.Now().UnixMilli()+1000 {
				t.Errorf("%s's heartbeat version %q, want the send time in Unix milliseconds", name, f.Get("version"))
			}
		}
	})

	t.Run("reads", func(t *testing.T) {
		a, b := get(t, ourAddr, "version"), get(t, javaAddr, "version")
		if a.code != 200 || b.code != 200 || version(a.body) != version(b.body) {
			t.Errorf("version: extauthz %v, Sentinel %v", a, b)
		}
		for _, cmd := range []string{"getParamFlowRules", "getRules?type=authority", "getRules?type=flow"} {
			sameRules(t, cmd, get(t, ourAddr, cmd), get(t, javaAddr, cmd))
		}
		a, b = get(t, ourAddr, "noSuchCommand"), get(t, javaAddr, "noSuchCommand")
		if a != b || a.code != 400 || !strings.HasPrefix(a.body, "Unknown command") {
			t.Errorf("an unknown command: extauthz %v, Sentinel %v (the dashboard reads 400 \"Unknown command\" as not supported)", a, b)
		}
		var ourAPI, theirAPI []struct{ URL string }
		decodeAnswer(t, "api", get(t, ourAddr, "api"), &ourAPI)
		decodeAnswer(t, "api", get(t, javaAddr, "api"), &theirAPI)
		for _, c := range ourAPI {
			if !slices.ContainsFunc(theirAPI, func(x struct{ URL string }) bool { return x.URL == c.URL }) {
				t.Errorf("api: extauthz lists %s, which Sentinel does not", c.URL)
			}
		}
	})

	t.Run("resources", func(t *testing.T) {
		for _, cmd := range []string{"clusterNode?type=notZero", "jsonTree"} {
			for name, addr := range map[string]string{"extauthz": ourAddr, "Sentinel": javaAddr} {
				var nodes []map[string]any
				decodeAnswer(t, cmd, get(t, addr, cmd), &nodes)
				i := slices.IndexFunc(nodes, func(n map[string]any) bool { return n["resource"] == resource })
				if i < 0 || nodes[i]["oneMinutePass"] != 3.0 || nodes[i]["oneMinuteBlock"] != 2.0 {
					t.Errorf("%s %s: %v, want %s with 3 passed and 2 blocked in the minute", name, cmd, nodes, resource)
				}
				if cmd == "jsonTree" && (nodes[0]["resource"] != "machine-root" || nodes[i]["parentId"] == nil) {
					t.Errorf("%s jsonTree: %v, want the root first and %s below it", name, nodes, resource)
				}
			}
		}
	})

	t.Run("metric", func(t *testing.T) {
		// As the dashboard asks: whole seconds, endTime at least 2s before now.
		from := start.UnixMilli()/1000*1000 - 1000
		var ours, theirs [2]int64
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			to := time.Now().UnixMilli()/1000*1000 + 1000
			q := fmt.Sprintf("metric?startTime=%d&endTime=%d&refetch=false", from, to)
			ours, theirs = metricTotals(t, get(t, ourAddr, q)), metricTotals(t, get(t, javaAddr, q))
			if ours == [2]int64{3, 2} && theirs == ours {
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		t.Errorf("metric totals of %s (pass, block): extauthz %v, Sentinel %v, want both [3 2]", resource, ours, theirs)
	})

	t.Run("push", func(t *testing.T) {
		// The dashboard posts a form whose data the handlers decode once more: the + of an
		// item becomes a space on both sides.
		data := `[{"resource":"POST:/order","limitApp":"default","grade":1,"paramIdx":0,"count":7.0,"controlBehavior":0,"durationInSec":1,"burstCount":0,"maxQueueingTimeMs":0,"paramFlowItemList":[{"object":"a+b","classType":"java.lang.String","count":9}],"clusterMode":false,"regex":false}]`
		a, b := post(t, ourAddr, "setParamFlowRules", url.Values{"data": {data}}), post(t, javaAddr, "setParamFlowRules", url.Values{"data": {data}})
		if a != b || a.body != "success" {
			t.Fatalf("setParamFlowRules: extauthz %v, Sentinel %v", a, b)
		}
		sameRules(t, "getParamFlowRules after the push", get(t, ourAddr, "getParamFlowRules"), get(t, javaAddr, "getParamFlowRules"))
		if body := get(t, ourAddr, "getParamFlowRules").body; !strings.Contains(body, `"object":"a b"`) {
			t.Errorf("the pushed item read back as %s, want \"a b\"", body)
		}
		auth := `[{"resource":"POST:/order","limitApp":"serviceA,serviceC","strategy":1,"regex":false}]`
		a, b = post(t, ourAddr, "setRules", url.Values{"type": {"authority"}, "data": {auth}}), post(t, javaAddr, "setRules", url.Values{"type": {"authority"}, "data": {auth}})
		if a != b || a.code != 200 {
			t.Fatalf("setRules authority: extauthz %v, Sentinel %v", a, b)
		}
		sameRules(t, "getRules authority after the push", get(t, ourAddr, "getRules?type=authority"), get(t, javaAddr, "getRules?type=authority"))
		// Where Sentinel loads what it can and answers success, extauthz refuses the set whole.
		bad := `[{"resource":"POST:/order","paramIdx":4,"count":1}]`
		if a := post(t, ourAddr, "setParamFlowRules", url.Values{"data": {bad}}); a.code != 400 || a.body == "success" {
			t.Errorf("a set with a paramIdx out of range: extauthz %v, want a failure the dashboard shows", a)
		}
	})
}

// startSentinel builds and starts the Java reference, with the rules and traffic; it returns
// its command address once it serves.
func startSentinel(t *testing.T, dashAddr string) string {
	t.Helper()
	cp := build(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var javaTraffic []map[string]string
	for _, r := range traffic {
		javaTraffic = append(javaTraffic, map[string]string{"resource": resource, "origin": r.Origin, "arg": r.Arg})
	}
	var setup map[string]any
	if err := json.Unmarshal([]byte(rules), &setup); err != nil {
		t.Fatal(err)
	}
	setup["traffic"] = javaTraffic
	line, _ := json.Marshal(setup)
	cmd := exec.Command("java", "-Xshare:auto", "-XX:TieredStopAtLevel=1",
		"-Dcsp.sentinel.log.dir="+t.TempDir(), "-Dproject.name="+app,
		"-Dcsp.sentinel.api.port="+strconv.Itoa(port), "-Dcsp.sentinel.dashboard.server="+dashAddr,
		"-Dcsp.sentinel.heartbeat.client.ip=127.0.0.1", "-Dcsp.sentinel.heartbeat.interval.ms=500",
		"-cp", cp, "extauthz.conformance.transport.Reference")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	if _, err := fmt.Fprintf(stdin, "%s\n", line); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var ready struct{ Port, Passed, Blocked int }
		if json.Unmarshal(sc.Bytes(), &ready) != nil || ready.Port == 0 {
			continue
		}
		if ready.Passed != 3 || ready.Blocked != 2 {
			t.Fatalf("Sentinel passed %d and blocked %d of the traffic, want 3 and 2", ready.Passed, ready.Blocked)
		}
		return "127.0.0.1:" + strconv.Itoa(ready.Port)
	}
	t.Fatalf("the Java reference did not start: %v\n%s", sc.Err(), stderr.String())
	return ""
}

// build packages the Java module (from the local Maven cache when it can) and returns its
// classpath. java and mvn missing is a failure: scripts/test installs them.
func build(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run Sentinel's transport (scripts/test installs it): %v", tool, err)
		}
	}
	mvn := func(extra ...string) ([]byte, error) {
		cmd := exec.Command("mvn", append([]string{"-q", "-B", "package"}, extra...)...)
		return cmd.CombinedOutput()
	}
	if _, err := mvn("-o"); err != nil {
		if out, err := mvn(); err != nil {
			t.Fatalf("mvn package: %v\n%s", err, out)
		}
	}
	deps, err := os.ReadFile(filepath.Join("target", "classpath.txt"))
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(filepath.Join("target", "classes"))
	return abs + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
}

// decide sends the traffic through extauthz's rate-limit API, one call each.
func decide(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlsv3.NewRateLimitServiceClient(conn)
	passed, blocked := 0, 0
	for _, r := range traffic {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rl.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitcommonv3.RateLimitDescriptor{{
			Entries: []*ratelimitcommonv3.RateLimitDescriptor_Entry{{Key: "resource", Value: resource}, {Key: "origin", Value: r.Origin}, {Key: "item_id", Value: r.Arg}}}}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			passed++
		} else {
			blocked++
		}
	}
	if passed != 3 || blocked != 2 {
		t.Fatalf("extauthz passed %d and blocked %d of the traffic, want 3 and 2", passed, blocked)
	}
}

type answer struct {
	code int
	body string
}

func get(t *testing.T, addr, cmd string) answer {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/" + cmd)
	if err != nil {
		t.Fatalf("%s %s: %v", addr, cmd, err)
	}
	return read(t, resp)
}

// post sends a form as the dashboard's HTTP client does for a machine of 1.7.1 and above.
func post(t *testing.T, addr, cmd string, form url.Values) answer {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/"+cmd, "application/x-www-form-urlencoded; charset=UTF-8", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatalf("%s %s: %v", addr, cmd, err)
	}
	return read(t, resp)
}

func read(t *testing.T, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, string(b)}
}

func decodeAnswer(t *testing.T, what string, a answer, v any) {
	t.Helper()
	if a.code != 200 {
		t.Fatalf("%s: %v", what, a)
	}
	if err := json.Unmarshal([]byte(a.body), v); err != nil {
		t.Fatalf("%s: %v: %s", what, err, a.body)
	}
}

// sameRules holds two rule lists to read the same as JSON (a count of 100 and 100.0 are one
// double to the dashboard's JSON reader).
func sameRules(t *testing.T, what string, ours, theirs answer) {
	t.Helper()
	var a, b []map[string]any
	decodeAnswer(t, what+" (extauthz)", ours, &a)
	decodeAnswer(t, what+" (Sentinel)", theirs, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s:\n extauthz %s\n Sentinel %s", what, ours.body, theirs.body)
	}
}

// version is a version string as the dashboard's VersionUtils reads it: major, minor, fix
// (the postfix after - set aside).
func version(v string) [3]int {
	var out [3]int
	v, _, _ = strings.Cut(strings.TrimSpace(v), "-")
	for i, p := range strings.SplitN(v, ".", 3) {
		out[i], _ = strconv.Atoi(p)
	}
	return out
}

// metricTotals sums the pass and block of resource over a metric answer's lines, each read as
// the dashboard's MetricNode.fromThinString reads it.
func metricTotals(t *testing.T, a answer) [2]int64 {
	t.Helper()
	if a.code != 200 {
		t.Fatalf("metric: %v", a)
	}
	var sum [2]int64
	for line := range strings.SplitSeq(a.body, "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) < 7 || len(f) > 10 {
			t.Fatalf("metric line %q: %d fields, want 7 to 10", line, len(f))
		}
		for _, i := range []int{0, 2, 3, 4, 5, 6} {
			if _, err := strconv.ParseInt(f[i], 10, 64); err != nil {
				t.Fatalf("metric line %q: field %d is no number", line, i)
			}
		}
		if f[1] == resource {
			p, _ := strconv.ParseInt(f[2], 10, 64)
			b, _ := strconv.ParseInt(f[3], 10, 64)
			sum[0] += p
			sum[1] += b
		}
	}
	return sum
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// Package conformance runs Sentinel's own Java code beside extauthz: a case (Sentinel rules as
// Sentinel's datasources store them, and a trace of requests at fixed instants) is decided by
// the Java program in conformance/sentinel, which replays it through Sentinel's slot chain on a
// controlled clock, so that tests can hold extauthz's decisions to Sentinel's.
package conformance

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// Case is one set of Sentinel rules with the requests to decide under them.
type Case struct {
	Name string `json:"name"`
	// Note says what the case shows.
	Note string `json:"note,omitempty"`
	// AuthorityRules, ParamFlowRules and GatewayRules are JSON lists as Sentinel's datasources
	// store them (AuthorityRule, ParamFlowRule, GatewayFlowRule).
	AuthorityRules json.RawMessage `json:"authorityRules,omitempty"`
	ParamFlowRules json.RawMessage `json:"paramFlowRules,omitempty"`
	GatewayRules   json.RawMessage `json:"gatewayRules,omitempty"`
	// ArgTypes are the Java types of the application's positional arguments ("String",
	// "int", "long", "double", ...): Sentinel receives each value typed so. Missing: String.
	ArgTypes []string `json:"argTypes,omitempty"`
	// Params are the param names extauthz resolves paramIdx with (ParseOptions.ParamNames);
	// when empty, p0, p1, ... for as many positions as the trace uses.
	Params []string `json:"params,omitempty"`
	// Cluster, when set, has Sentinel's token server decide the case's cluster rule.
	Cluster *Cluster `json:"cluster,omitempty"`
	// Relation names how extauthz's decisions must relate to Sentinel's; "" is identical.
	Relation string    `json:"relation,omitempty"`
	Trace    []Request `json:"trace"`
}

// Cluster is a token server's setting: the clients connected to it (Sentinel), the replicas
// sharing the store (extauthz: store.redis.replicas).
type Cluster struct {
	Clients int `json:"clients"`
}

// Request is one request of a trace.
type Request struct {
	T        int64  `json:"t"` // milliseconds since the case's start
	Resource string `json:"resource"`
	Origin   string `json:"origin,omitempty"`
	Hits     int    `json:"hits,omitempty"` // 0 means 1
	// Args are the positional arguments, each nil (absent) or one or more values.
	Args [][]string `json:"args,omitempty"`
	// Gateway, when set, is an API-gateway request whose arguments Sentinel's
	// GatewayParamParser extracts.
	Gateway *GatewayRequest `json:"gateway,omitempty"`
}

// GatewayRequest is what Sentinel's gateway adapter reads from a request.
type GatewayRequest struct {
	Headers map[string]string `json:"headers,omitempty"`
	Query   map[string]string `json:"query,omitempty"`
	Cookies map[string]string `json:"cookies,omitempty"`
	IP      string            `json:"ip,omitempty"`
	Host    string            `json:"host,omitempty"`
}

// Decision is Sentinel's answer to one request.
type Decision struct {
	Case   string `json:"case"`
	I      int    `json:"i"`
	Allow  bool   `json:"allow"`
	Block  string `json:"block"`  // "authority", "param_flow", ... when !Allow
	Waited bool   `json:"waited"` // a throttle rule let it through after a wait
}

// Loaded is how many rules of each kind Sentinel kept from a case (it skips invalid ones).
type Loaded struct {
	Case      string `json:"case"`
	Authority int    `json:"authority"`
	ParamFlow int    `json:"paramFlow"`
	Gateway   int    `json:"gateway"`
	Cluster   int    `json:"cluster"` // the cluster rules the token server holds
}

// Result is Sentinel's answers to one case.
type Result struct {
	Loaded    Loaded
	Decisions []Decision
}

// Sentinel builds the Java program once (with Maven, from the local cache when it can) and
// runs cases through it. The zero value is ready; it is safe for concurrent use.
type Sentinel struct {
	once sync.Once
	cp   string // the classpath of the built program
	err  error
}

// ErrNoJava is returned when java or mvn is not on PATH.
var ErrNoJava = errors.New("java and mvn are needed to run Sentinel (scripts/test installs them)")

// moduleDir is the Java module's directory.
func moduleDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "sentinel")
}

func (s *Sentinel) build() {
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			s.err = fmt.Errorf("%w: %s: %v", ErrNoJava, tool, err)
			return
		}
	}
	dir := moduleDir()
	// Offline first: a second run needs nothing but the local repository.
	if _, err := mvn(dir, "-o"); err != nil {
		if out, err := mvn(dir); err != nil {
			s.err = fmt.Errorf("mvn package in %s: %v\n%s", dir, err, out)
			return
		}
	}
	deps, err := os.ReadFile(filepath.Join(dir, "target", "classpath.txt"))
	if err != nil {
		s.err = err
		return
	}
	s.cp = filepath.Join(dir, "target", "classes") + string(os.PathListSeparator) + strings.TrimSpace(string(deps))
}

func mvn(dir string, extra ...string) ([]byte, error) {
	args := append([]string{"-q", "-B", "package"}, extra...)
	cmd := exec.Command("mvn", args...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// Run decides cases with Sentinel: one JVM for all of them, each case on its own clock and
// with no state of another. Sentinel's log goes to logDir.
func (s *Sentinel) Run(cases []Case, logDir string) (map[string]*Result, error) {
	s.once.Do(s.build)
	if s.err != nil {
		return nil, s.err
	}
	in, err := json.Marshal(cases)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("java", "-Xshare:auto", "-XX:TieredStopAtLevel=1",
		"-Dcsp.sentinel.log.dir="+logDir, "-Dproject.name=extauthz-conformance",
		"-cp", s.cp, "extauthz.conformance.Replay")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("java Replay: %v\n%s", err, stderr.Bytes())
	}
	results := make(map[string]*Result, len(cases))
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("{")) {
			continue // Sentinel's own start-up notes
		}
		var probe struct {
			Case  string `json:"case"`
			Allow *bool  `json:"allow"`
		}
		if err := json.Unmarshal(line, &probe); err != nil {
			return nil, fmt.Errorf("java Replay: %v: %s", err, line)
		}
		r := results[probe.Case]
		if r == nil {
			r = &Result{}
			results[probe.Case] = r
		}
		if probe.Allow == nil {
			if err := json.Unmarshal(line, &r.Loaded); err != nil {
				return nil, err
			}
			continue
		}
		var d Decision
		if err := json.Unmarshal(line, &d); err != nil {
			return nil, err
		}
		r.Decisions = append(r.Decisions, d)
	}
	for _, c := range cases {
		r := results[c.Name]
		if r == nil || len(r.Decisions) != len(c.Trace) {
			return nil, fmt.Errorf("java Replay: case %q: no decision for every request\n%s", c.Name, stderr.Bytes())
		}
	}
	return results, nil
}

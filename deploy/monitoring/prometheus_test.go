package monitoring

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/extauthz/extauthz/deploy/internal/service"
)

// prometheus is a real Prometheus server scraping the service every second.
type prometheus struct {
	base string
}

func startPrometheus(t *testing.T, path, target string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	alerts, err := filepath.Abs("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: extauthz
    static_configs:
      # The second target has nothing listening: a replica that is down (ExtauthzTargetDown).
      - targets: [%q, %q]
`, alerts, target, service.FreeAddr(t))
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := service.FreeAddr(t) // given to Prometheus
	cmd := exec.Command(path,
		"--config.file="+cfgFile,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
	)
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			log, _ := os.ReadFile(logFile.Name())
			t.Logf("prometheus log:\n%s", log)
		}
	})
	p := &prometheus{base: "http://" + listen}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("prometheus exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready at %s within 30s: %v", p.base, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sample is one element of an instant vector answer.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now and returns the vector, or a scalar as one sample.
func (p *prometheus) query(expr string) ([]sample, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("status %s: %s", body.Status, body.Error)
	}
	switch body.Data.ResultType {
	case "vector":
		var v []sample
		err := json.Unmarshal(body.Data.Result, &v)
		return v, err
	case "scalar":
		var s [2]any
		err := json.Unmarshal(body.Data.Result, &s)
		return []sample{{Value: s}}, err
	default:
		return nil, fmt.Errorf("result type %s, want a vector", body.Data.ResultType)
	}
}

// waitFor waits until expr returns data.
func (p *prometheus) waitFor(t *testing.T, expr string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		res, err := p.query(expr)
		if err == nil && len(res) > 0 {
			return
		}
		if time.Now().After(deadline) {
			last, _ := p.query(`{__name__=~"extauthz_decisions_total|extauthz_rules_version|extauthz_rules_last_load_success|up"}`)
			t.Fatalf("Prometheus: %s returned no data within %v (err %v); now: %v", expr, limit, err, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// activeAlerts returns the names of the alerts Prometheus holds pending or firing.
func (p *prometheus) activeAlerts() (map[string]bool, error) {
	var body struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/alerts", &body); err != nil {
		return nil, err
	}
	active := map[string]bool{}
	for _, a := range body.Data.Alerts {
		if a.State == "pending" || a.State == "firing" {
			active[a.Labels["alertname"]] = true
		}
	}
	return active, nil
}

func (p *prometheus) get(path string, into any) error {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return fmt.Errorf("%s: %v: %s", path, err, raw)
	}
	return nil
}

// anyNumber reports whether some sample's value is a number (not NaN).
func anyNumber(res []sample) bool {
	for _, s := range res {
		str, _ := s.Value[1].(string)
		if v, err := strconv.ParseFloat(str, 64); err == nil && !math.IsNaN(v) {
			return true
		}
	}
	return false
}

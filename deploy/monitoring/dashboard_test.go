package monitoring

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Schema     int     `json:"schemaVersion"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Annotations struct {
		List []struct {
			Name string `json:"name"`
			Expr string `json:"expr"`
		} `json:"list"`
	} `json:"annotations"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// query is one PromQL expression of the pack and where it comes from.
type query struct {
	where string
	expr  string
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// labelValues matches Grafana's label_values(METRIC_SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// dashboardQueries lists every PromQL query of d: the panels' targets, the annotations, and
// the variables' label_values selectors (as count(...), which has data when the metric does).
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var qs []query
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, a := range d.Annotations.List {
		qs = append(qs, query{fmt.Sprintf("annotation %q", a.Name), a.Expr})
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		m := labelValues.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("variable %s: query %v is not label_values(selector, label)", v.Name, v.Query)
		}
		qs = append(qs, query{fmt.Sprintf("variable %q", v.Name), "count by (" + m[2] + ") (" + m[1] + ")"})
	}
	return qs
}

// grafanaVars replaces the dashboard's variables with what Grafana would send when every
// job and instance is selected; the rate interval spans the whole live test, so that the
// first round's Redis calls are still in it at the end.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$job", ".+",
	"$instance", ".+",
)

// alertRules is the part of a Prometheus rule file the tests read.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	var r alertRules
	if err := yaml.UnmarshalStrict(Alerts, &r); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var qs []query
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			qs = append(qs, query{"alert " + rule.Alert, rule.Expr})
		}
	}
	return qs
}

func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.Schema < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want a uid, a title and schema >= 36", d.UID, d.Title, d.Schema)
	}
	ids := map[int]string{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at (%d,%d)", other, p.Title, x, y)
				}
				taken[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want the ${datasource} variable so that imports pick theirs", p.Title, p.Datasource)
		}
		for _, tg := range p.Targets {
			if !strings.Contains(tg.Expr, `job=~"$job"`) || !strings.Contains(tg.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q target %s ignores the job or instance variable: %s", p.Title, tg.RefID, tg.Expr)
			}
		}
	}
	// Each topic the dashboard promises has a query naming its metric.
	all := ""
	for _, q := range dashboardQueries(t, d) {
		all += q.expr + "\n"
	}
	for _, m := range []string{
		"extauthz_decisions_total", "extauthz_decision_duration_seconds_bucket",
		"extauthz_queue_wait_seconds_bucket", "extauthz_queue_waiting", "extauthz_hotparam_tracked_values",
		"extauthz_hotparam_evictions_total", "extauthz_rule_reloads_total",
		"extauthz_rules_last_load_success", "extauthz_redis_calls_total",
		"extauthz_redis_breaker_open", "extauthz_redis_fallbacks_total",
	} {
		if !strings.Contains(all, m) {
			t.Errorf("no dashboard query reads %s", m)
		}
	}
}

func TestAlertsShape(t *testing.T) {
	var r alertRules
	if err := yaml.UnmarshalStrict(Alerts, &r); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	seen := map[string]bool{}
	for _, g := range r.Groups {
		for _, rule := range g.Rules {
			seen[rule.Alert] = true
			if rule.Labels["severity"] == "" || rule.Annotations["summary"] == "" || rule.For == "" {
				t.Errorf("alert %s: want a severity label, a summary and a for duration", rule.Alert)
			}
		}
	}
	for _, a := range []string{"ExtauthzTargetDown", "ExtauthzRulesLoadFailing", "ExtauthzRedisBreakerOpen", "ExtauthzRedisFallbacks", "ExtauthzHotParamEvictions", "ExtauthzDecisionLatencyHigh", "ExtauthzThrottleQueueFull"} {
		if !seen[a] {
			t.Errorf("alert %s missing", a)
		}
	}
}

package metrics

import (
	"strconv"
	"strings"
	"testing"
)

func TestBuildInfo(t *testing.T) {
	m := New(Options{NoRuntime: true})
	m.SetBuild(BuildInfo{Version: "v1.2.3", Commit: "0123abc", GoVersion: "go1.26.8"})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		if f.GetName() != "extauthz_build_info" {
			continue
		}
		for _, s := range f.GetMetric() {
			var ls []string
			for _, l := range s.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			got = append(got, strings.Join(ls, ",")+" "+strconv.FormatFloat(s.GetGauge().GetValue(), 'g', -1, 64))
		}
	}
	if want := "commit=0123abc,goversion=go1.26.8,version=v1.2.3 1"; len(got) != 1 || got[0] != want {
		t.Errorf("extauthz_build_info %q, want [%q]", got, want)
	}
}

// TestAlertedCountersStartAtZero: the counters alerts take a rate of are there at 0 before
// anything happened, so that the first failure is an increase Prometheus sees.
func TestAlertedCountersStartAtZero(t *testing.T) {
	m := New(Options{NoRuntime: true})
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	zero := map[string]bool{} // "metric{label=value}" at 0
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			if s.GetCounter() == nil || s.GetCounter().GetValue() != 0 || len(s.GetLabel()) != 1 {
				continue
			}
			l := s.GetLabel()[0]
			zero[f.GetName()+"{"+l.GetName()+"="+l.GetValue()+"}"] = true
		}
	}
	for _, want := range []string{
		"extauthz_rule_reloads_total{result=applied}", "extauthz_rule_reloads_total{result=failed}",
		"extauthz_redis_calls_total{result=ok}", "extauthz_redis_calls_total{result=error}",
		"extauthz_redis_fallbacks_total{policy=local}", "extauthz_redis_fallbacks_total{policy=allow}",
		"extauthz_redis_fallbacks_total{policy=deny}",
	} {
		if !zero[want] {
			t.Errorf("%s not at 0 from the start", want)
		}
	}
}

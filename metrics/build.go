package metrics

import "github.com/prometheus/client_golang/prometheus"

// BuildInfo says which build of the service runs, for extauthz_build_info.
type BuildInfo struct {
	Version   string // "(devel)" for a build from a work tree
	Commit    string // the VCS revision, "" when unknown
	GoVersion string // the Go version that built the binary
}

// SetBuild publishes b as extauthz_build_info{version, commit, goversion} 1, so that a
// dashboard or an alert can tell the builds of a fleet apart. Call it once.
func (m *Metrics) SetBuild(b BuildInfo) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "extauthz_build_info",
		Help:        "Always 1; its labels name the running build: version, commit and the Go version that built it.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion},
	})
	g.Set(1)
	m.registry.MustRegister(g)
}

// zeroCounters makes the counters that alerts read exist at 0 from the start: a rate needs
// two samples, so a counter that first appears at 1 with the first failure would not fire
// an alert until the second.
func (m *Metrics) zeroCounters() {
	for _, r := range []string{"applied", "failed"} {
		m.reloads.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.redisCalls.WithLabelValues(r)
	}
	for _, p := range []string{"local", "allow", "deny"} {
		m.redisFallback.WithLabelValues(p)
	}
}

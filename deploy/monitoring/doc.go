// Package monitoring holds extauthz's Prometheus alert rules (alerts.yaml, with their promtool
// unit tests in alerts_test.yaml), an alert on Envoy's own metrics of its calls to the service
// (envoy-alerts.yaml, tested in envoy-alerts_test.yaml), and its Grafana dashboard
// (dashboard.json). Its tests check
// the rules with promtool and evaluate every dashboard query and alert expression in a real
// Prometheus scraping the built binary under known traffic.
package monitoring

import _ "embed"

// Alerts is alerts.yaml: the Prometheus rule file.
//
//go:embed alerts.yaml
var Alerts []byte

// Dashboard is dashboard.json: the Grafana dashboard.
//
//go:embed dashboard.json
var Dashboard []byte

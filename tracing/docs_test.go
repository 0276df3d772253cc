package tracing

import (
	"os"
	"strings"
	"testing"

	tracev3 "github.com/envoyproxy/go-control-plane/envoy/config/trace/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// The Envoy tracing snippet of the Tracing section of docs/operations.md is a valid connection
// manager tracing block with the OpenTelemetry provider.
func TestDocsEnvoySnippet(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Tracing\n")
	if !ok {
		t.Fatal("docs/operations.md has no Tracing section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, snippet, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal("the Tracing section has no yaml block")
	}
	snippet, _, _ = strings.Cut(snippet, "```")
	js, err := yaml.YAMLToJSON([]byte(snippet))
	if err != nil {
		t.Fatalf("snippet is not YAML: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := protojson.Unmarshal(js, &hcm); err != nil {
		t.Fatalf("snippet is not a connection manager's tracing block: %v\n%s", err, js)
	}
	tr := hcm.GetTracing()
	if tr == nil {
		t.Fatalf("snippet has no tracing block: %s", js)
	}
	if err := tr.Validate(); err != nil {
		t.Fatalf("Envoy would refuse the snippet: %v", err)
	}
	var otel tracev3.OpenTelemetryConfig
	if err := tr.GetProvider().GetTypedConfig().UnmarshalTo(&otel); err != nil {
		t.Fatalf("provider config: %v", err)
	}
	if tr.GetProvider().GetName() != "envoy.tracers.opentelemetry" || otel.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
		t.Errorf("provider %s with %v, want the OpenTelemetry tracer sending over gRPC", tr.GetProvider().GetName(), &otel)
	}
}

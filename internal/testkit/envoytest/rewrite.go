package envoytest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"

	"sigs.k8s.io/yaml"
)

// Rewrite says what a shipped bootstrap's addresses become on loopback. Bootstrap changes
// nothing else: the config Envoy runs in a test is the shipped one, field for field, but for
// where it listens and where its clusters point.
type Rewrite struct {
	// Upstreams maps each cluster's name to the addresses ("host:port") its endpoints become,
	// in order. Every static cluster must be named, so that no test sends traffic to a
	// shipped host name.
	Upstreams map[string][]string
}

// Bootstrap returns src (a YAML or JSON Envoy bootstrap) as JSON with the admin listener and
// every static listener on 127.0.0.1 at a port the kernel picks (read back with
// Proc.Listener), and the endpoints of each static cluster replaced by rw.Upstreams. Numbers
// keep their spelling.
func Bootstrap(src []byte, rw Rewrite) ([]byte, error) {
	js, err := yaml.YAMLToJSON(src)
	if err != nil {
		return nil, fmt.Errorf("cannot read the bootstrap: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("cannot read the bootstrap: %w", err)
	}
	if admin, ok := root["admin"].(map[string]any); ok {
		admin["address"] = loopbackAddress()
	}
	static, _ := root["static_resources"].(map[string]any)
	listeners, _ := static["listeners"].([]any)
	for i, l := range listeners {
		lm, ok := l.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("listener %d is not an object", i)
		}
		lm["address"] = loopbackAddress()
	}
	clusters, _ := static["clusters"].([]any)
	seen := map[string]bool{}
	for i, c := range clusters {
		cm, ok := c.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("cluster %d is not an object", i)
		}
		name, _ := cm["name"].(string)
		addrs, ok := rw.Upstreams[name]
		if !ok {
			return nil, fmt.Errorf("cluster %q has no address in the rewrite", name)
		}
		seen[name] = true
		endpoints, err := lbEndpoints(addrs)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", name, err)
		}
		cm["load_assignment"] = map[string]any{
			"cluster_name": name,
			"endpoints":    []any{map[string]any{"lb_endpoints": endpoints}},
		}
	}
	var extra []string
	for name := range rw.Upstreams {
		if !seen[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, fmt.Errorf("the bootstrap has no cluster %q", extra)
	}
	return json.MarshalIndent(root, "", "  ")
}

func loopbackAddress() map[string]any {
	return map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 0}}
}

func lbEndpoints(addrs []string) ([]any, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no address")
	}
	var out []any
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("port of %q: %w", a, err)
		}
		out = append(out, map[string]any{"endpoint": map[string]any{"address": map[string]any{
			"socket_address": map[string]any{"address": host, "port_value": p},
		}}})
	}
	return out, nil
}

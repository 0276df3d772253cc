// Package envoysim loads the Envoy bootstraps shipped with extauthz, checks them the way Envoy
// would before accepting them, and derives what Envoy sends to the service for a given request:
// the rate-limit descriptors of a route and the ext_authz CheckRequest. It keeps tests fast
// where running Envoy is not needed; its own cases also run through Envoy 1.40 itself (the
// real_*_test.go files, skipped under -short), and where the two differ Envoy is right.
package envoysim

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// The typed_config messages the shipped configs use; an Any resolves only if its package
	// is linked in.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Config is a loaded and checked Envoy bootstrap. It is immutable after Load and safe for
// concurrent use.
type Config struct {
	File      string
	Bootstrap *bootstrapv3.Bootstrap
	// Managers are the HTTP connection managers of the static listeners, unpacked.
	Managers []*hcmv3.HttpConnectionManager
	// RequestID, when set, makes the x-request-id Accept generates for a request (given as
	// received), so that tests can name their requests; nil means random version-4 UUIDs, as
	// Envoy's default request id extension makes.
	RequestID func(Request) string
}

// Load reads and checks the bootstrap at path (YAML or JSON).
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read envoy config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes data as Envoy decodes a bootstrap (unknown fields and bad enum names are errors),
// then checks it: ValidateAll on the bootstrap and on every typed_config unpacked from an Any at
// any depth, and every cluster a filter or route names must be defined. file is used in
// messages.
func Parse(file string, data []byte) (*Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", file, err)
	}
	var b bootstrapv3.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		return nil, fmt.Errorf("%s: not a v3 Bootstrap: %w", file, err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: invalid bootstrap: %w", file, err)
	}
	w := walker{clusterRefs: map[string][]string{}}
	w.message("", b.ProtoReflect())
	if len(w.errs) > 0 {
		return nil, fmt.Errorf("%s: %w", file, errors.Join(w.errs...))
	}
	c := &Config{File: file, Bootstrap: &b, Managers: w.managers}
	if err := c.checkClusters(w.clusterRefs); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := c.checkPerFilterNames(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// Routes returns every route of the inline route configs of the static listeners, in order.
func (c *Config) Routes() []*routev3.Route {
	var out []*routev3.Route
	for _, m := range c.Managers {
		rc := m.GetRouteConfig()
		for _, vh := range rc.GetVirtualHosts() {
			out = append(out, vh.GetRoutes()...)
		}
	}
	return out
}

// Route returns the route called name, or nil.
func (c *Config) Route(name string) *routev3.Route {
	for _, r := range c.Routes() {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

// walker visits every message of a config, unpacking Anys, validating what it unpacks and
// collecting cluster references and HTTP connection managers.
type walker struct {
	errs        []error
	clusterRefs map[string][]string // cluster name -> where it is named
	managers    []*hcmv3.HttpConnectionManager
}

type validator interface{ ValidateAll() error }

func (w *walker) message(path string, m protoreflect.Message) {
	switch v := m.Interface().(type) {
	case *anypb.Any:
		w.any(path, v)
		return
	case *hcmv3.HttpConnectionManager:
		w.managers = append(w.managers, v)
	}
	w.collectClusters(path, m)
	m.Range(func(fd protoreflect.FieldDescriptor, val protoreflect.Value) bool {
		name := path + "." + string(fd.Name())
		if path == "" {
			name = string(fd.Name())
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := val.List()
			for i := 0; i < l.Len(); i++ {
				w.message(fmt.Sprintf("%s[%d]", name, i), l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			var keys []string
			val.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k.String())
				return true
			})
			sort.Strings(keys)
			for _, k := range keys {
				v := val.Map().Get(protoreflect.ValueOfString(k).MapKey())
				w.message(fmt.Sprintf("%s[%q]", name, k), v.Message())
			}
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			w.message(name, val.Message())
		}
		return true
	})
}

func (w *walker) any(path string, a *anypb.Any) {
	m, err := a.UnmarshalNew()
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: cannot unpack %s: %w", path, a.GetTypeUrl(), err))
		return
	}
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s (%s): %w", path, m.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	w.message(fmt.Sprintf("%s(%s)", path, m.ProtoReflect().Descriptor().Name()), m.ProtoReflect())
}

// clusterField names the string field of a message type that names a cluster, or "".
func clusterField(m protoreflect.FullName) protoreflect.Name {
	switch m {
	case "envoy.config.core.v3.GrpcService.EnvoyGrpc":
		return "cluster_name"
	case "envoy.config.route.v3.RouteAction",
		"envoy.config.route.v3.RouteAction.RequestMirrorPolicy",
		"envoy.config.core.v3.HttpUri",
		"envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy":
		return "cluster"
	case "envoy.config.route.v3.WeightedCluster.ClusterWeight":
		return "name"
	case "envoy.config.core.v3.ApiConfigSource":
		return "cluster_names"
	case "envoy.config.trace.v3.ZipkinConfig":
		return "collector_cluster"
	}
	return ""
}

func (w *walker) collectClusters(path string, m protoreflect.Message) {
	field := clusterField(m.Descriptor().FullName())
	if field == "" {
		return
	}
	fd := m.Descriptor().Fields().ByName(field)
	if fd == nil || fd.Kind() != protoreflect.StringKind || !m.Has(fd) {
		return
	}
	where := path + "." + string(field)
	if fd.IsList() {
		l := m.Get(fd).List()
		for i := 0; i < l.Len(); i++ {
			n := l.Get(i).String()
			w.clusterRefs[n] = append(w.clusterRefs[n], fmt.Sprintf("%s[%d]", where, i))
		}
		return
	}
	n := m.Get(fd).String()
	w.clusterRefs[n] = append(w.clusterRefs[n], where)
}

func (c *Config) checkClusters(refs map[string][]string) error {
	defined := map[string]bool{}
	for _, cl := range c.Bootstrap.GetStaticResources().GetClusters() {
		if defined[cl.GetName()] {
			return fmt.Errorf("cluster %q is defined twice", cl.GetName())
		}
		defined[cl.GetName()] = true
	}
	var errs []error
	names := make([]string, 0, len(refs))
	for n := range refs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !defined[n] {
			errs = append(errs, fmt.Errorf("undefined cluster %q named at %s", n, strings.Join(refs[n], ", ")))
		}
	}
	return errors.Join(errs...)
}

// checkPerFilterNames rejects a route's typed_per_filter_config entry for a filter that the
// connection manager does not run: Envoy would accept it and silently ignore it.
func (c *Config) checkPerFilterNames() error {
	var errs []error
	for _, m := range c.Managers {
		filters := map[string]bool{}
		for _, f := range m.GetHttpFilters() {
			filters[f.GetName()] = true
		}
		for _, vh := range m.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				for name := range r.GetTypedPerFilterConfig() {
					if !filters[name] {
						errs = append(errs, fmt.Errorf("route %q: typed_per_filter_config for %q, which is not in the HTTP filter chain", r.GetName(), name))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

// unpack returns the route's typed_per_filter_config for filter, unpacked into m; false when the
// route has none.
func unpack(r *routev3.Route, filter string, m proto.Message) (bool, error) {
	a, ok := r.GetTypedPerFilterConfig()[filter]
	if !ok {
		return false, nil
	}
	if err := a.UnmarshalTo(m); err != nil {
		return false, fmt.Errorf("route %q: typed_per_filter_config[%q]: %w", r.GetName(), filter, err)
	}
	return true, nil
}

package manifest

import (
	"encoding/json"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	// Types named by "@type" in the examples' typed_config, registered for protojson.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// DecodeProto decodes JSON (or a value already decoded from YAML) into m with protojson,
// which rejects unknown fields and resolves "@type" of Any against the registered types;
// then it runs the message's protoc-gen-validate rules when it has them (Envoy's do).
func DecodeProto(v any, m proto.Message) error {
	raw, ok := v.([]byte)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return err
		}
	}
	if err := protojson.Unmarshal(raw, m); err != nil {
		return err
	}
	if val, ok := m.(interface{ ValidateAll() error }); ok {
		return val.ValidateAll()
	}
	return nil
}

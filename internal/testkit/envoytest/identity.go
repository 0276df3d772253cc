package envoytest

import (
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi"
)

// Identity is the dynamic metadata the service's allowed Check gives a stream whose
// CheckRequest is cr, as far as the shipped rate-limit actions read it: the resource and the
// origin m maps cr to, under envoyapi's keys (params are left out: no shipped action reads
// them). It is nil when m refuses cr or a value is not UTF-8 (the service writes U+FFFD
// there, which no shipped action reads).
func Identity(m *descriptors.Mapper, cr *authv3.CheckRequest) *structpb.Struct {
	e, err := m.Check(cr)
	if err != nil {
		return nil
	}
	fields := map[string]any{envoyapi.MetadataResource: e.Resource}
	if e.Origin != "" {
		fields[envoyapi.MetadataOrigin] = e.Origin
	}
	st, err := structpb.NewStruct(fields)
	if err != nil {
		return nil
	}
	return st
}

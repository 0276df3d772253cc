package envoyapi

import (
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/rulestore"
)

// MetadataNamespace is the dynamic-metadata namespace of an allowed Check's identity: Envoy's
// ext_authz filter puts what the answer carries there, where the rate-limit filter's metadata
// actions (source DYNAMIC) read it.
const MetadataNamespace = "envoy.filters.http.ext_authz"

// Keys of the identity struct besides one per param.
const (
	MetadataResource = "resource"
	MetadataOrigin   = "origin"
)

// identity is the dynamic metadata of an allowed Check: the resource, the origin (when there
// is one) and each param of e that a rule on the resource reads, a param of one value as a
// string (what a metadata action reads), one of several values as a list of them. Sensitive
// params are given as their keyed hash (Options.Redact). Params no rule on the resource reads
// are left out, and so is a param named like the resource or origin key.
func (s *Server) identity(e *descriptors.Entry, set *rulestore.Set) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 2+len(e.Params))
	fields[MetadataResource] = structpb.NewStringValue(e.Resource)
	if e.Origin != "" {
		fields[MetadataOrigin] = structpb.NewStringValue(e.Origin)
	}
	read := s.readParams(set)[e.Resource]
	for _, p := range e.Params {
		if !read[p.Name] || p.Name == MetadataResource || p.Name == MetadataOrigin {
			continue
		}
		if len(p.Values) == 1 {
			fields[p.Name] = structpb.NewStringValue(s.redact(p.Name, p.Values[0]))
			continue
		}
		vs := make([]*structpb.Value, len(p.Values))
		for i, v := range p.Values {
			vs[i] = structpb.NewStringValue(s.redact(p.Name, v))
		}
		fields[p.Name] = structpb.NewListValue(&structpb.ListValue{Values: vs})
	}
	return &structpb.Struct{Fields: fields}
}

// paramIndex is, for one rule set, the params the param-flow rules of each resource read.
type paramIndex struct {
	set    *rulestore.Set
	params map[string]map[string]bool
}

// readParams returns the params each resource's rules read in set, built once per set.
func (s *Server) readParams(set *rulestore.Set) map[string]map[string]bool {
	if set == nil {
		return nil
	}
	if c := s.paramIndex.Load(); c != nil && c.set == set {
		return c.params
	}
	idx := map[string]map[string]bool{}
	for _, r := range set.Rules.ParamFlow {
		if idx[r.Resource] == nil {
			idx[r.Resource] = map[string]bool{}
		}
		idx[r.Resource][r.Param] = true
	}
	s.paramIndex.Store(&paramIndex{set: set, params: idx})
	return idx
}

func (s *Server) redact(param, value string) string {
	if s.redactFn == nil {
		return value
	}
	return s.redactFn(param, value)
}

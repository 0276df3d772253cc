package wire

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Allowed is an allowed Check's answer taken from a Codec's pool (Codec.Allowed): every
// message it points to lives in it, and the Codec that encodes it writes its bytes directly
// and gives it back, as it does the rate-limit answers (see answerPool).
type Allowed struct {
	resp   authv3.CheckResponse
	status rpcstatus.Status
	ok     authv3.CheckResponse_OkResponse
	http   authv3.OkHttpResponse
	ptrs   [3]*corev3.HeaderValueOption
	opts   [3]corev3.HeaderValueOption
	vals   [3]corev3.HeaderValue
	meta   []byte // the encoded dynamic_metadata field, kept for the next answer's
}

func (a *Allowed) msg() *authv3.CheckResponse { return &a.resp }

// maxKeptMetadata is the largest metadata buffer an answer keeps for the next one: a Check
// with huge param values does not leave every pooled answer holding that much.
const maxKeptMetadata = 4 << 10

func (a *Allowed) reset() {
	meta := a.meta[:0]
	if cap(meta) > maxKeptMetadata {
		meta = nil
	}
	*a = Allowed{meta: meta}
}

// Response is the answer: status OK, ok_response taking remove (Allowed's argument) off the
// request.
func (a *Allowed) Response() *authv3.CheckResponse { return &a.resp }

// ResponseHeaders adds three headers for the client to the answer (response_headers_to_add,
// each overwriting one of the same name), and returns them for the caller to fill.
func (a *Allowed) ResponseHeaders() *[3]corev3.HeaderValue {
	for i := range a.opts {
		a.opts[i].Header = &a.vals[i]
		a.opts[i].AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.ptrs[i] = &a.opts[i]
	}
	a.http.ResponseHeadersToAdd = a.ptrs[:]
	return &a.vals
}

// MetadataBuffer is an empty buffer, with the room the last answer's metadata took, for the
// caller to append the encoded dynamic_metadata field to and hand to SetMetadata.
func (a *Allowed) MetadataBuffer() []byte { return a.meta[:0] }

// SetMetadata sets the answer's dynamic_metadata to b, the field already encoded (its tag,
// length and Struct), kept as an unknown field of the answer: proto.Marshal writes it after
// the known fields, where the direct encoder writes it too. b is the answer's until it is
// encoded.
func (a *Allowed) SetMetadata(b []byte) {
	a.meta = b
	a.resp.ProtoReflect().SetUnknown(protoreflect.RawFields(b))
}

// Allowed returns an allowed Check's answer from the Codec's pool: status OK and an
// ok_response that removes the headers named in remove (which the answer only refers to).
// The Codec's Marshal gives it back once it has encoded it; one never encoded is left to the
// garbage collector.
func (c *Codec) Allowed(remove []string) *Allowed {
	a := c.allowed.hand()
	a.resp.Status = &a.status
	a.http.HeadersToRemove = remove
	a.ok.OkResponse = &a.http
	a.resp.HttpResponse = &a.ok
	return a
}

// Field numbers of what an allowed Check's answer holds.
const (
	fieldCheckStatus        = 1 // CheckResponse.status
	fieldCheckOK            = 3 // CheckResponse.ok_response
	fieldOKHeadersToRemove  = 5 // OkHttpResponse.headers_to_remove
	fieldOKResponseHeaders  = 6 // OkHttpResponse.response_headers_to_add
	fieldOptionHeader       = 1 // HeaderValueOption.header
	fieldOptionAppendAction = 3 // HeaderValueOption.append_action
	fieldHeaderKey          = 1 // HeaderValue.key
	fieldHeaderValue        = 2 // HeaderValue.value
)

// marshalAllowed encodes an answer of Codec.Allowed directly, to the same bytes as
// proto.Marshal: fields in number order, zero values left out, the unknown fields (the
// metadata) last. It reports false, encoding nothing, when the answer holds anything the
// handler does not set there (it was changed after Allowed); that one takes the generic path.
// Strings are written as they are, as the lenient fallback of Codec.Marshal would write them.
func marshalAllowed(a *Allowed) ([]byte, bool) {
	r, h := &a.resp, &a.http
	if r.Status != &a.status || r.HttpResponse != &a.ok || a.ok.OkResponse != h || r.DynamicMetadata != nil ||
		a.status.Code != 0 || a.status.Message != "" || len(a.status.Details) > 0 ||
		len(h.Headers) > 0 || deprecatedMetadata(h) || len(h.QueryParametersToSet) > 0 || len(h.QueryParametersToRemove) > 0 ||
		!sameHeaders(h.ResponseHeadersToAdd, a) {
		return nil, false
	}
	meta := r.ProtoReflect().GetUnknown()
	var optSize [3]int
	ok := 0
	for _, k := range h.HeadersToRemove {
		ok += 1 + protowire.SizeBytes(len(k))
	}
	for i := range h.ResponseHeadersToAdd {
		optSize[i] = optionSize(&a.opts[i])
		ok += 1 + protowire.SizeBytes(optSize[i])
	}
	size := 2 + 1 + protowire.SizeBytes(ok) + len(meta) // status: tag and length 0
	b := make([]byte, 0, size)
	b = append(b, fieldCheckStatus<<3|byte(protowire.BytesType), 0)
	b = append(b, fieldCheckOK<<3|byte(protowire.BytesType))
	b = appendVarint(b, uint64(ok))
	for _, k := range h.HeadersToRemove {
		b = appendString(b, fieldOKHeadersToRemove, k)
	}
	for i := range h.ResponseHeadersToAdd {
		o := &a.opts[i]
		b = append(b, fieldOKResponseHeaders<<3|byte(protowire.BytesType))
		b = appendVarint(b, uint64(optSize[i]))
		b = append(b, fieldOptionHeader<<3|byte(protowire.BytesType)) // set, though it may be empty
		b = appendVarint(b, uint64(headerSize(o.Header)))
		b = appendStringField(b, fieldHeaderKey, o.Header.Key)
		b = appendStringField(b, fieldHeaderValue, o.Header.Value)
		b = appendVarintField(b, fieldOptionAppendAction, uint64(int64(o.AppendAction)))
	}
	return append(b, meta...), true
}

// sameHeaders reports whether hs is empty or the three options ResponseHeaders added, each
// holding only a header's key and value and an append action.
func sameHeaders(hs []*corev3.HeaderValueOption, a *Allowed) bool {
	if len(hs) == 0 {
		return true
	}
	if len(hs) != len(a.ptrs) {
		return false
	}
	for i, o := range hs {
		if o != &a.opts[i] || o.Header != &a.vals[i] || deprecatedAppend(o) || o.KeepEmptyValue ||
			len(o.Header.RawValue) > 0 || len(o.Header.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

func optionSize(o *corev3.HeaderValueOption) int {
	return 1 + protowire.SizeBytes(headerSize(o.Header)) + sizeVarintField(uint64(int64(o.AppendAction)))
}

func headerSize(h *corev3.HeaderValue) int {
	return stringFieldSize(h.Key) + stringFieldSize(h.Value)
}

// stringFieldSize is the size of a string field (number below 16), 0 when s is empty.
func stringFieldSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

// appendStringField appends the string field num (below 16) holding s, nothing when s is "".
func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(b, num, s)
}

// appendString appends the string field num (below 16) holding s, even when s is "" (an
// element of a repeated field).
func appendString(b []byte, num protowire.Number, s string) []byte {
	b = append(b, byte(num)<<3|byte(protowire.BytesType))
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// deprecatedMetadata reports whether h has its deprecated dynamic_metadata, which the handler
// never sets.
func deprecatedMetadata(h *authv3.OkHttpResponse) bool {
	//lint:ignore SA1019 looked for only to leave an answer holding it to the generic encoder
	return h.DynamicMetadata != nil
}

// deprecatedAppend reports whether o has its deprecated append, which the handler never sets.
func deprecatedAppend(o *corev3.HeaderValueOption) bool {
	//lint:ignore SA1019 looked for only to leave an answer holding it to the generic encoder
	return o.Append != nil
}

// Command throttlebody writes the body of one gRPC ShouldRateLimit call (the 5-byte gRPC
// message prefix, then the encoded RateLimitRequest) for h2load's -d: domain extauthz, one
// descriptor of resource POST:/orders and user u1, as envoy.yaml's /orders route sends it, or
// with -descriptors N, N descriptors of users u0 to uN-1. With -check it writes a Check call
// instead: GET /reports with an x-api-key header and the headers Envoy adds. run.sh beside it
// (and bench/descriptors/run.sh) drives extauthz with it.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

func main() {
	n := flag.Int("descriptors", 1, "descriptors in the request")
	check := flag.Bool("check", false, "a Check call instead")
	flag.Parse()
	if *check {
		write(checkRequest())
		return
	}
	req := &rlsv3.RateLimitRequest{Domain: "extauthz"}
	for i := range *n {
		user := "u" + strconv.Itoa(i)
		if *n == 1 {
			user = "u1"
		}
		req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
				{Key: "resource", Value: "POST:/orders"},
				{Key: "user", Value: user},
			}})
	}
	write(req)
}

// checkRequest is an allowed Check of GET /reports as Envoy sends it for envoy.yaml's route.
func checkRequest() *authv3.CheckRequest {
	const id = "b3a1c9a0-1111-2222-3333-444455556666"
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
			SocketAddress: &corev3.SocketAddress{Address: "10.0.0.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 40000}}}}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "GET", Path: "/reports?x=1", Host: "example.com", Scheme: "http", Protocol: "HTTP/2",
			Headers: map[string]string{":authority": "example.com", ":method": "GET", ":path": "/reports?x=1",
				":scheme": "http", "user-agent": "h2load", "x-api-key": "k-1", "x-forwarded-proto": "http",
				"x-request-id": id, "accept": "*/*"},
		}},
	}}
}

// write writes m as one gRPC message to standard output.
func write(m proto.Message) {
	msg, err := proto.Marshal(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "throttlebody:", err)
		os.Exit(1)
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg))) // frame[0] = 0: not compressed
	if _, err := os.Stdout.Write(append(frame, msg...)); err != nil {
		fmt.Fprintln(os.Stderr, "throttlebody:", err)
		os.Exit(1)
	}
}

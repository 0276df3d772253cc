// Command throttlebody writes the body of one gRPC ShouldRateLimit call (the 5-byte gRPC
// message prefix, then the encoded RateLimitRequest) for h2load's -d: domain extauthz, one
// descriptor of resource POST:/orders and user u1, as envoy.yaml's /orders route sends it, or
// with -descriptors N, N descriptors of users u0 to uN-1. run.sh beside it (and
// bench/descriptors/run.sh) drives extauthz with it.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"strconv"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

func main() {
	n := flag.Int("descriptors", 1, "descriptors in the request")
	flag.Parse()
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
	msg, err := proto.Marshal(req)
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

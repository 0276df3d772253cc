package envoyapi_test

import (
	"context"
	"fmt"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"

	"github.com/extauthz/extauthz/authority"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/rulestore"
)

func Example() {
	mapper, err := descriptors.New(descriptors.Config{Authz: descriptors.AuthzConfig{
		Origin: []descriptors.Source{{From: "header", Name: "x-origin"}},
		Params: map[string]descriptors.Source{"item": {From: "query", Name: "item"}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	list, _ := authority.New([]authority.Rule{{Resource: "GET:/buy", Strategy: authority.White, Origins: []string{"shop"}}})
	limiter, _ := hotparam.New([]hotparam.Rule{{Resource: "GET:/buy", Param: "item", Count: 1, Duration: time.Minute}}, hotparam.Options{})
	set := &rulestore.Set{Authority: list, ParamFlow: limiter}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	s := envoyapi.New(envoyapi.Options{
		Mapper: mapper,
		Policy: policy.Options{
			Rules: func() *rulestore.Set { return set },
			Now:   func() time.Time { return now },
		},
	})
	g := grpc.NewServer()
	s.Register(g) // then g.Serve(listener)

	check := func(origin string) {
		resp, err := s.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "GET", Path: "/buy?item=42", Headers: map[string]string{"x-origin": origin},
			}},
		}})
		if err != nil {
			fmt.Println(err)
			return
		}
		if d := resp.GetDeniedResponse(); d != nil {
			fmt.Println(d.GetStatus().GetCode(), d.GetBody())
			return
		}
		fmt.Println("OK")
	}
	check("intruder")
	check("shop")
	check("shop")
	// Output:
	// Forbidden {"blocked":"authority","rule":0,"resource":"GET:/buy","origin":"intruder","reason":"not_in_white_list"}
	// OK
	// TooManyRequests {"blocked":"param_flow","rule":0,"resource":"GET:/buy","origin":"shop","param":"item","value":"42","reason":"qps"}
}

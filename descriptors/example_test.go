package descriptors_test

import (
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/extauthz/extauthz/descriptors"
)

func ExampleMapper_Check() {
	m, err := descriptors.New(descriptors.Config{Authz: descriptors.AuthzConfig{
		Origin: []descriptors.Source{{From: "header", Name: "x-origin"}},
		Params: map[string]descriptors.Source{
			"item_id": {From: "query", Name: "itemId"},
			"user":    {From: "header", Name: "x-user-id", Split: ","},
		},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := m.Check(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method:  "POST",
			Path:    "/order?itemId=42",
			Headers: map[string]string{"x-origin": "checkout", "x-user-id": "u1,u2"},
		}},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Resource, e.Origin)
	for _, p := range e.Params {
		fmt.Println(p.Name, p.Values)
	}
	// Output:
	// POST:/order checkout
	// item_id [42]
	// user [u1 u2]
}

package redact_test

import (
	"fmt"

	"github.com/extauthz/extauthz/redact"
)

func ExampleRedactor_Value() {
	r, err := redact.New([]string{"user"}, []byte("a key of sixteen bytes or more"))
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Value("item_id", "42"))
	fmt.Println(r.Value("api_key", "sk-live-42"))
	fmt.Println(r.Value("user", "alice"))
	// Output:
	// 42
	// hmac:335f84326643fe33ce2a1c12fc7c0d37
	// hmac:845008c5cbfaf29ebff12a2be2d88d9c
}

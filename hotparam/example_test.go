package hotparam_test

import (
	"context"
	"fmt"
	"time"

	"github.com/extauthz/extauthz/hotparam"
)

func Example() {
	rules := []hotparam.Rule{{
		Resource: "POST:/order",
		Param:    "item_id",
		Grade:    hotparam.QPS,
		Count:    2, // 2 per second for each item id...
		Duration: time.Second,
		Items:    map[string]int64{"42": 3}, // ...3 for item 42
	}}
	l, err := hotparam.New(rules, hotparam.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	order := func(item string) hotparam.Entry {
		return hotparam.Entry{Resource: "POST:/order", Params: []hotparam.Param{{Name: "item_id", Values: []string{item}}}}
	}
	st := make([]hotparam.Status, 1)
	for _, item := range []string{"7", "7", "7", "42", "42", "42", "42"} {
		d := l.Check(context.Background(), now, []hotparam.Entry{order(item)}, hotparam.CheckOptions{}, st)
		fmt.Printf("item %s: allowed=%v remaining=%d retry=%v\n", item, d.Allowed, st[0].Remaining, st[0].RetryAfter)
	}
	// Half a second later item 7 has earned exactly one token back.
	d := l.Check(context.Background(), now.Add(500*time.Millisecond), []hotparam.Entry{order("7")}, hotparam.CheckOptions{}, st)
	fmt.Printf("item 7 at +500ms: allowed=%v remaining=%d\n", d.Allowed, st[0].Remaining)
	// Output:
	// item 7: allowed=true remaining=1 retry=0s
	// item 7: allowed=true remaining=0 retry=0s
	// item 7: allowed=false remaining=0 retry=500ms
	// item 42: allowed=true remaining=2 retry=0s
	// item 42: allowed=true remaining=1 retry=0s
	// item 42: allowed=true remaining=0 retry=0s
	// item 42: allowed=false remaining=0 retry=333.333334ms
	// item 7 at +500ms: allowed=true remaining=0
}

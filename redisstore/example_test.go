package redisstore_test

import (
	"context"
	"log"
	"time"

	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/redisstore"
)

// The store is the Remote of a hotparam.Limiter; its Run closes the breaker again after Redis
// failed, so it runs for as long as the store is used.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := redisstore.New(redisstore.Config{Addrs: []string{"127.0.0.1:6379"}, Timeout: 5 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	go store.Run(ctx)

	rules := []hotparam.Rule{{Resource: "POST:/order", Param: "item_id", Count: 5, Duration: time.Second, Cluster: true}}
	limiter, err := hotparam.New(rules, hotparam.Options{Remote: store, Fallback: hotparam.FallbackLocal, Replicas: 3})
	if err != nil {
		log.Fatal(err)
	}
	_ = limiter
}

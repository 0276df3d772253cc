package redisstore

import "github.com/extauthz/extauthz/hotparam"

// sameDecision compares two engines' decisions but for their Holds, which are each engine's own
// record of a held call's turns.
func sameDecision(a, b hotparam.Decision) bool {
	a.Hold, b.Hold = nil, nil
	return a == b
}

package policy

import (
	"testing"

	"github.com/extauthz/extauthz/hotparam"
)

// Reasons are named as hotparam spells them; a value without a spelling is "none".
func TestReasonName(t *testing.T) {
	for r, want := range map[hotparam.Reason]string{
		hotparam.ReasonNone:        "none",
		hotparam.ReasonQPS:         "qps",
		hotparam.ReasonThrottle:    "throttle",
		hotparam.ReasonConcurrency: "concurrency",
		hotparam.Reason(200):       "none",
	} {
		if got := ReasonName(r); got != want {
			t.Errorf("ReasonName(%d) = %q, want %q", r, got, want)
		}
	}
}

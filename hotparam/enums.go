package hotparam

import "fmt"

// Grade is what a rule limits: tokens per duration, or requests in flight.
type Grade uint8

const (
	QPS Grade = iota
	Concurrency
)

// Behavior is what a QPS rule does with a request over the limit.
type Behavior uint8

const (
	// Reject blocks at once (a token bucket).
	Reject Behavior = iota
	// Throttle spaces the requests of one value Duration/Count apart and makes a request wait
	// for its slot, up to MaxQueueingTime.
	Throttle
)

// Reason says why a rule blocked.
type Reason uint8

const (
	ReasonNone        Reason = iota
	ReasonQPS                // token bucket empty, or the request asks more than its capacity
	ReasonThrottle           // the wait would exceed MaxQueueingTime or the deadline
	ReasonConcurrency        // too many in flight
)

// Fallback is what a Cluster rule does when the Remote fails.
type Fallback uint8

const (
	// FallbackLocal enforces the rule on this replica's own state (Sentinel's
	// fallbackToLocalWhenFail), its counts divided by Options.Replicas.
	FallbackLocal Fallback = iota
	FallbackAllow
	FallbackDeny
)

// The spellings of the enums in rule files, config, logs and answers: String returns them,
// MarshalText writes them and UnmarshalText reads them (the empty text reads as the zero
// value, the default). A value with no spelling prints as its number and does not marshal.
var (
	gradeNames    = [...]string{QPS: "qps", Concurrency: "concurrency"}
	behaviorNames = [...]string{Reject: "reject", Throttle: "throttle"}
	reasonNames   = [...]string{ReasonNone: "none", ReasonQPS: "qps", ReasonThrottle: "throttle", ReasonConcurrency: "concurrency"}
	fallbackNames = [...]string{FallbackLocal: "local", FallbackAllow: "allow", FallbackDeny: "deny"}
	overflowNames = [...]string{OverflowDefault: "", OverflowForget: "forget", OverflowRefuse: "refuse"}
)

func nameOf(names []string, what string, v uint8) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", what, v)
}

func marshalName(names []string, what string, v uint8) ([]byte, error) {
	if int(v) < len(names) {
		return []byte(names[v]), nil
	}
	return nil, fmt.Errorf("hotparam: unknown %s %d", what, v)
}

func unmarshalName(names []string, what string, text []byte) (uint8, error) {
	if len(text) == 0 {
		return 0, nil
	}
	for i, n := range names {
		if n == string(text) {
			return uint8(i), nil
		}
	}
	return 0, fmt.Errorf("hotparam: unknown %s %q (want one of %q)", what, text, names)
}

func (g Grade) String() string                { return nameOf(gradeNames[:], "Grade", uint8(g)) }
func (g Grade) MarshalText() ([]byte, error)  { return marshalName(gradeNames[:], "grade", uint8(g)) }
func (b Behavior) String() string             { return nameOf(behaviorNames[:], "Behavior", uint8(b)) }
func (r Reason) String() string               { return nameOf(reasonNames[:], "Reason", uint8(r)) }
func (r Reason) MarshalText() ([]byte, error) { return marshalName(reasonNames[:], "reason", uint8(r)) }
func (f Fallback) String() string             { return nameOf(fallbackNames[:], "Fallback", uint8(f)) }

func (b Behavior) MarshalText() ([]byte, error) {
	return marshalName(behaviorNames[:], "behavior", uint8(b))
}

func (f Fallback) MarshalText() ([]byte, error) {
	return marshalName(fallbackNames[:], "fallback", uint8(f))
}

func (g *Grade) UnmarshalText(text []byte) error {
	v, err := unmarshalName(gradeNames[:], "grade", text)
	*g = Grade(v)
	return err
}

func (b *Behavior) UnmarshalText(text []byte) error {
	v, err := unmarshalName(behaviorNames[:], "behavior", text)
	*b = Behavior(v)
	return err
}

func (r *Reason) UnmarshalText(text []byte) error {
	v, err := unmarshalName(reasonNames[:], "reason", text)
	*r = Reason(v)
	return err
}

func (f *Fallback) UnmarshalText(text []byte) error {
	v, err := unmarshalName(fallbackNames[:], "fallback", text)
	*f = Fallback(v)
	return err
}

func (o Overflow) String() string { return nameOf(overflowNames[:], "Overflow", uint8(o)) }

func (o Overflow) MarshalText() ([]byte, error) {
	return marshalName(overflowNames[:], "overflow", uint8(o))
}

func (o *Overflow) UnmarshalText(text []byte) error {
	v, err := unmarshalName(overflowNames[1:], "overflow", text)
	if err == nil && len(text) > 0 {
		v++
	}
	*o = Overflow(v)
	return err
}

package redisstore

import "github.com/extauthz/extauthz/hotparam"

// kind is the type of state an op keeps in Redis, each in its file with its section of the
// script: a token bucket (bucket.go, script_bucket.lua), a throttle schedule (throttle.go,
// script_throttle.lua) or a sorted set of concurrency leases (concurrency.go,
// script_concurrency.lua). Its value is the kind's number in the script's arguments.
type kind uint8

const (
	kindBucket      kind = 1
	kindThrottle    kind = 2
	kindConcurrency kind = 3
)

// kindOf is the kind of op's state.
func kindOf(op *hotparam.RemoteOp) kind {
	switch {
	case op.Grade == hotparam.Concurrency:
		return kindConcurrency
	case op.Behavior == hotparam.Throttle:
		return kindThrottle
	}
	return kindBucket
}

// kindMethods is what each kind implements; kind's methods below dispatch to it.
type kindMethods interface {
	// letter names the kind's state type in its key (see key).
	letter() string
	// check reports why the script cannot evaluate op exactly, past the bounds every op
	// shares (see CheckOp).
	check(op *hotparam.RemoteOp) error
	// arg sets the kind's part of op's script argument in a (see opArg).
	arg(op *hotparam.RemoteOp, undo bool, a *opArgs)
	// full is what op's state holds when nothing is taken, answered for an op not checked.
	full(op *hotparam.RemoteOp) int64
	// cacheable reports whether a refusal of op, which consumes, may be kept (see blocked);
	// cached adjusts r, the answer of entry e to op, and reports whether it holds.
	cacheable(op *hotparam.RemoteOp) bool
	cached(op *hotparam.RemoteOp, e *blockEntry, r *hotparam.RemoteResult) bool
}

var (
	_ kindMethods = bucketKind{}
	_ kindMethods = throttleKind{}
	_ kindMethods = concurrencyKind{}
)

// The dispatch of kind's methods to the kinds.

func (k kind) letter() string {
	switch k {
	case kindThrottle:
		return throttleKind{}.letter()
	case kindConcurrency:
		return concurrencyKind{}.letter()
	}
	return bucketKind{}.letter()
}

func (k kind) check(op *hotparam.RemoteOp) error {
	switch k {
	case kindThrottle:
		return throttleKind{}.check(op)
	case kindConcurrency:
		return concurrencyKind{}.check(op)
	}
	return bucketKind{}.check(op)
}

func (k kind) arg(op *hotparam.RemoteOp, undo bool, a *opArgs) {
	switch k {
	case kindThrottle:
		throttleKind{}.arg(op, undo, a)
	case kindConcurrency:
		concurrencyKind{}.arg(op, undo, a)
	default:
		bucketKind{}.arg(op, undo, a)
	}
}

func (k kind) full(op *hotparam.RemoteOp) int64 {
	switch k {
	case kindThrottle:
		return throttleKind{}.full(op)
	case kindConcurrency:
		return concurrencyKind{}.full(op)
	}
	return bucketKind{}.full(op)
}

func (k kind) cacheable(op *hotparam.RemoteOp) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.cacheable(op)
	case kindConcurrency:
		return concurrencyKind{}.cacheable(op)
	}
	return bucketKind{}.cacheable(op)
}

func (k kind) cached(op *hotparam.RemoteOp, e *blockEntry, r *hotparam.RemoteResult) bool {
	switch k {
	case kindThrottle:
		return throttleKind{}.cached(op, e, r)
	case kindConcurrency:
		return concurrencyKind{}.cached(op, e, r)
	}
	return bucketKind{}.cached(op, e, r)
}

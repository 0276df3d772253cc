package hotparam

import (
	"context"
	"time"
)

// Limiter holds a set of rules and the per-value state of each. It is safe for concurrent use.
type Limiter struct {
	rules []Rule
}

// New builds a Limiter with fresh state for rules.
func New(rules []Rule, opts Options) (*Limiter, error) { panic("TODO") }

// Reload builds a Limiter for rules that keeps the state of every rule of l whose identity
// (resource, param, grade, behavior, duration, cluster) is unchanged.
func (l *Limiter) Reload(rules []Rule, opts Options) (*Limiter, error) { panic("TODO") }

// Rules returns the rules in force. The caller must not modify them.
func (l *Limiter) Rules() []Rule { return l.rules }

// Check checks every entry against every rule of its resource, all or nothing: a request blocked
// by any rule or value consumes nothing from the others. st, when not nil, has one element per
// entry and is filled with each entry's tightest status.
func (l *Limiter) Check(ctx context.Context, now time.Time, entries []Entry, opt CheckOptions, st []Status) Decision {
	panic("TODO")
}

// Stats returns the counters of every rule.
func (l *Limiter) Stats() []RuleStats { panic("TODO") }

// Top returns, per rule, the n busiest values by passed and by blocked requests in the recent
// window.
func (l *Limiter) Top(now time.Time, n int) []RuleTop { panic("TODO") }

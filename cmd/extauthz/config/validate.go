package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/internal/memlimit"
	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/redact"
	"github.com/extauthz/extauthz/redisstore"
)

// Validate checks every setting, each library its own section, and returns Errors naming
// every bad one, or nil. The sections are checked one after the other, always in the same
// order, so that the same Config always gets the same Errors.
func (c *Config) Validate() error {
	var p problems
	c.validateListeners(&p)
	c.Log.validate(&p)
	validateTLS(&p, c.TLS)
	c.GRPC.validate(&p)
	c.validateRuntime(&p)
	c.validateMapping(&p)
	validateDecision(&p, c.Decision)
	c.Store.Redis.validate(&p)
	c.validateRulesEtcd(&p)
	c.Sensitive.validate(&p)
	c.Tracing.validate(&p)
	// decision_log.max_per_second is reported after the dashboard's section, allowed_every
	// before it: the order of the messages stays as it is.
	c.DecisionLog.validateAllowedEvery(&p)
	c.validateDashboard(&p)
	c.DecisionLog.validateMaxPerSecond(&p)
	if len(p.errs) == 0 {
		return nil
	}
	return p.errs
}

// problems collects the FieldErrors of a Validate in the order they are found.
type problems struct{ errs Errors }

// add records that field is bad, the reason formatted as by fmt.Sprintf.
func (p *problems) add(field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
}

// addr checks that addr, the setting of field, is a host:port with a port.
func (p *problems) addr(field, addr string) {
	if addr == "" {
		p.add(field, "must not be empty")
		return
	}
	if _, port, err := net.SplitHostPort(addr); err != nil {
		p.add(field, "must be host:port, not %q", addr)
	} else if port == "" {
		p.add(field, "missing port in %q", addr)
	}
}

// oneOf checks that value, the setting of field, is one of allowed.
func (p *problems) oneOf(field, value string, allowed ...string) {
	if slices.Contains(allowed, value) {
		return
	}
	p.add(field, "must be %s, not %q%s", orList(allowed), value, suggest(value, allowed))
}

// validateListeners checks grpc_addr, admin_addr and the admin section.
func (c *Config) validateListeners(p *problems) {
	p.addr("grpc_addr", c.GRPCAddr)
	p.addr("admin_addr", c.AdminAddr)
	if c.Admin.HotWindow < 0 {
		p.add("admin.hot_window", "must not be negative, not %s", c.Admin.HotWindow)
	}
	for i, h := range c.Admin.Hosts {
		if !validHostName(strings.TrimPrefix(h, "*.")) {
			p.add(fmt.Sprintf("admin.hosts[%d]", i), "must be a host name (or *. and a host name), without a port, not %q", h)
		}
	}
	if c.Admin.FleetInterval < time.Second || c.Admin.FleetInterval > 10*time.Second {
		p.add("admin.fleet_interval", "must be from 1s to 10s, not %s", c.Admin.FleetInterval)
	}
}

// validate checks the log section.
func (l LogConfig) validate(p *problems) {
	p.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	p.oneOf("log.format", l.Format, "json", "console")
}

// validateTLS reports the problems the TLS files' own validation finds.
func validateTLS(p *problems, t tlsreload.Config) {
	for _, e := range leaves(t.Validate()) {
		var te *tlsreload.ConfigError
		if errors.As(e, &te) {
			p.add("tls."+te.Field, "%s", te.Reason)
		}
	}
}

// validate checks the grpc section.
func (g GRPCConfig) validate(p *problems) {
	if g.MaxRecvMsgSize <= 0 {
		p.add("grpc.max_recv_msg_size", "must be > 0 bytes, not %d", g.MaxRecvMsgSize)
	}
	if n := g.MaxConcurrentStreams; n <= 0 || int64(n) > math.MaxUint32 {
		p.add("grpc.max_concurrent_streams", "must be between 1 and %d, not %d", uint32(math.MaxUint32), n)
	}
	if n := g.StreamWorkers; n < 0 || n > MaxStreamWorkers {
		p.add("grpc.stream_workers", "must be between 0 and %d, not %d", MaxStreamWorkers, n)
	}
	if g.Keepalive.Time < 0 {
		p.add("grpc.keepalive.time", "must not be negative, not %v", g.Keepalive.Time)
	}
	if g.Keepalive.Timeout <= 0 {
		p.add("grpc.keepalive.timeout", "must be > 0, not %v", g.Keepalive.Timeout)
	}
	if g.Keepalive.MinTime < 0 {
		p.add("grpc.keepalive.min_time", "must not be negative, not %v", g.Keepalive.MinTime)
	}
}

// validateRuntime checks shutdown_grace, sweep_interval, the hot_param section and
// memory_limit.
func (c *Config) validateRuntime(p *problems) {
	if c.ShutdownGrace <= 0 {
		p.add("shutdown_grace", "must be > 0, not %v", c.ShutdownGrace)
	}
	if c.SweepInterval <= 0 {
		p.add("sweep_interval", "must be > 0, not %v", c.SweepInterval)
	}
	c.HotParam.validate(p)
	if err := memlimit.CheckSetting(c.MemoryLimit); err != nil {
		p.add("memory_limit", "%v", err)
	}
}

// validate checks the hot_param section.
func (h HotParamConfig) validate(p *problems) {
	for _, b := range []struct{ key, size string }{
		{"hot_param.state_budget", h.StateBudget},
		{"hot_param.rule_state_budget", h.RuleStateBudget},
	} {
		if _, err := memlimit.ParseSize(b.size); err != nil {
			p.add(b.key, "%v", strings.TrimSuffix(err.Error(), ", or off"))
		}
	}
	if o := h.Overflow; o != "forget" && o != "refuse" {
		p.add("hot_param.overflow", "must be forget or refuse, not %q", o)
	}
}

// validateMapping reports the problems descriptors.New finds in the mapping, each by field,
// and checks param_names.
func (c *Config) validateMapping(p *problems) {
	if _, err := descriptors.New(c.Mapping); err != nil {
		for _, e := range leaves(err) {
			var ce *descriptors.ConfigError
			if errors.As(e, &ce) {
				p.add(ce.Field, "%s", ce.Reason)
			} else {
				p.add("authz", "%v", e)
			}
		}
	}
	for i, name := range c.ParamNames {
		if strings.TrimSpace(name) == "" {
			p.add(fmt.Sprintf("param_names[%d]", i), "must not be empty")
		}
	}
}

// validateDecision reports the problems the decision section's own validation finds.
func validateDecision(p *problems, d policy.Config) {
	for _, e := range leaves(d.Validate()) {
		var de *policy.ConfigError
		if errors.As(e, &de) {
			p.add("decision."+de.Field, "%s", de.Reason)
		}
	}
}

// validate checks the store.redis section: its own settings here, the Redis store's by the
// store when addresses are set.
func (r RedisConfig) validate(p *problems) {
	p.oneOf("store.redis.fallback", r.Fallback, "local", "allow", "deny")
	if r.Replicas < 0 {
		p.add("store.redis.replicas", "must not be negative, not %d", r.Replicas)
	}
	if !r.Enabled() {
		if r.Username != "" || r.Password != "" || r.TLS || r.CAFile != "" {
			p.add("store.redis.addrs", "required when other store.redis connection settings are set")
		}
		return
	}
	if err := r.Config.Validate(); err != nil {
		var ce *redisstore.ConfigError
		if errors.As(err, &ce) {
			p.add("store.redis."+ce.Field, "%v", ce.Err)
		} else {
			p.add("store.redis", "%v", err)
		}
	}
}

// validateRulesEtcd reports the problem the rules_etcd section's own validation finds, and
// checks that the rules have one source.
func (c *Config) validateRulesEtcd(p *problems) {
	if err := c.RulesEtcd.Validate(); err != nil {
		var ce *etcdrules.ConfigError
		if errors.As(err, &ce) {
			p.add("rules_etcd."+ce.Field, "%s", ce.Reason)
		}
	}
	if c.RulesEtcd.Enabled() && c.RulesFile != "" && !c.RulesOptional {
		p.add("rules_etcd.endpoints", "the rules come from rules_file or from rules_etcd, not both: unset rules_file")
	}
}

// validate checks the sensitive section.
func (s SensitiveConfig) validate(p *problems) {
	for i, param := range s.Params {
		if strings.TrimSpace(param) == "" {
			p.add(fmt.Sprintf("sensitive.params[%d]", i), "must not be empty")
		}
	}
	if k := s.Key; k != "" && len(k) < redact.MinKeyLen {
		// The key itself is never repeated in an error.
		p.add("sensitive.key", "must be at least %d bytes, not %d", redact.MinKeyLen, len(k))
	}
}

// validate checks the tracing section.
func (t TracingConfig) validate(p *problems) {
	if t.Endpoint != "" {
		p.addr("tracing.endpoint", t.Endpoint)
	}
	if r := t.SampleRatio; !(r >= 0 && r <= 1) {
		p.add("tracing.sample_ratio", "must be from 0 to 1, not %v", r)
	}
}

// validateAllowedEvery checks decision_log.allowed_every.
func (d DecisionLogConfig) validateAllowedEvery(p *problems) {
	if d.AllowedEvery < 0 {
		p.add("decision_log.allowed_every", "must not be negative, not %d", d.AllowedEvery)
	}
}

// validateMaxPerSecond checks decision_log.max_per_second.
func (d DecisionLogConfig) validateMaxPerSecond(p *problems) {
	if d.MaxPerSecond < 1 {
		p.add("decision_log.max_per_second", "must be at least 1, not %d", d.MaxPerSecond)
	}
}

// validateDashboard checks the sentinel_dashboard section, and that a push can be written
// where the rules come from.
func (c *Config) validateDashboard(p *problems) {
	d := c.SentinelDashboard
	for _, e := range d.Validate() {
		p.add("sentinel_dashboard."+e.Field, "%s", e.Reason)
	}
	if k := d.EtcdKey; k != "" && !slices.Contains(c.RulesEtcd.Keys, k) {
		p.add("sentinel_dashboard.etcd_key", "must be one of rules_etcd.keys, not %q", k)
	}
	if d.Enabled() && d.EtcdKey == "" && len(c.RulesEtcd.Keys) > 1 {
		p.add("sentinel_dashboard.etcd_key", "required with more than one of rules_etcd.keys: the key the dashboard's pushes are written to")
	}
}

// leaves flattens errors.Join trees into their single errors; nil has none.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// orList words a list of choices: "a, b or c".
func orList(choices []string) string {
	if len(choices) == 1 {
		return choices[0]
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// Package dashboard makes the service one of a Sentinel dashboard's machines: it sends the
// dashboard the heartbeat of Sentinel's transport, and answers the commands the dashboard sends a
// machine (the rules of a kind, the resources, the per-second metrics, a push of new rules) on a
// listener of its own, as Sentinel's simple-http command center answers them.
package dashboard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Config is the sentinel_dashboard section of the service config. The zero value is off.
type Config struct {
	// Addrs are the Sentinel dashboards (`host:port`) the heartbeat goes to, the first that answers (see
	// [Sentinel dashboard](sentinel.md#sentinel-dashboard)).
	Addrs []string `json:"addrs"`
	// App is the application the dashboard lists the replicas under.
	App string `json:"app"`
	// AppType is Sentinel's application type: 0 a common application, 1 an API gateway.
	AppType int `json:"app_type"`
	// CommandAddr is the listener of the dashboard's commands (e.g. `127.0.0.1:8719`); empty: no
	// listener, no heartbeat.
	CommandAddr string `json:"command_addr"`
	// IP is the literal address the dashboard reaches the command port at; empty: `command_addr`'s host
	// when literal, else the host's first address that is not loopback.
	IP string `json:"ip"`
	// Hostname is the heartbeat's host name; "" is the host's own.
	Hostname string `json:"hostname"`
	// HeartbeatInterval is the time between heartbeats (the dashboard marks a machine unhealthy after
	// 60s without one).
	HeartbeatInterval time.Duration `json:"heartbeat_interval"`
	// AllowedCallers are the addresses or CIDR ranges answered besides those of `addrs` (names resolved
	// at start); any other caller gets 403.
	AllowedCallers []string `json:"allowed_callers"`
	// AllowMemoryOverrides puts, with rules from a file (or none), pushes in force in memory only,
	// lost on restart and on the file's next reload; `false`: such pushes are refused.
	AllowMemoryOverrides bool `json:"allow_memory_overrides"`
	// EtcdKey is the key of `rules_etcd.keys` pushes are written to (Sentinel's object form);
	// empty: the only key.
	EtcdKey string `json:"etcd_key"`
}

// Defaults of the default config.
const (
	DefaultApp               = "extauthz"
	DefaultHeartbeatInterval = 10 * time.Second
)

// MaxBody bounds a command's request, its line and headers included, in bytes.
const MaxBody = 4 << 20

// Enabled reports whether the command listener and the heartbeat run.
func (c Config) Enabled() bool { return c.CommandAddr != "" }

// ConfigError is a problem with one field of the section.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return e.Field + ": " + e.Reason }

// Validate reports the problems with the section, each naming its field.
func (c Config) Validate() []*ConfigError {
	var errs []*ConfigError
	add := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	for i, a := range c.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			add(fmt.Sprintf("addrs[%d]", i), "must be host:port (the dashboard's server port), not %q", a)
		}
	}
	if !c.Enabled() {
		if len(c.Addrs) > 0 {
			add("command_addr", "required when addrs are set: the dashboard reaches each machine on its command port")
		}
		return errs
	}
	if _, port, err := net.SplitHostPort(c.CommandAddr); err != nil || port == "" {
		add("command_addr", "must be host:port, not %q", c.CommandAddr)
	}
	if c.App == "" || len(c.App) > 256 {
		add("app", "must be 1 to 256 bytes (the dashboard refuses others), got %d", len(c.App))
	}
	if c.AppType < 0 {
		add("app_type", "must not be negative, not %d", c.AppType)
	}
	if c.IP != "" {
		if a, err := netip.ParseAddr(c.IP); err != nil || a.IsUnspecified() || a.Zone() != "" {
			add("ip", "must be a literal IPv4 or IPv6 address the dashboard can reach, not %q", c.IP)
		}
	}
	if len(c.Hostname) > 256 {
		add("hostname", "must be at most 256 bytes (the dashboard refuses longer), got %d", len(c.Hostname))
	}
	if c.HeartbeatInterval <= 0 {
		add("heartbeat_interval", "must be > 0, not %v", c.HeartbeatInterval)
	}
	for i, a := range c.AllowedCallers {
		if _, err := parseCaller(a); err != nil {
			add(fmt.Sprintf("allowed_callers[%d]", i), "%v", err)
		}
	}
	if len(c.Addrs) == 0 && len(c.AllowedCallers) == 0 {
		add("allowed_callers", "the command listener answers only the dashboards of addrs and allowed_callers: set one")
	}
	return errs
}

// parseCaller reads an address or a CIDR range.
func parseCaller(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("must be an address or a CIDR range, not %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("must be an address or a CIDR range, not %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Callers are the addresses the command listener answers: those of Addrs (a name resolved with
// lookup) and AllowedCallers.
func (c Config) Callers(ctx context.Context, lookup func(ctx context.Context, host string) ([]netip.Addr, error)) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range c.AllowedCallers {
		p, err := parseCaller(a)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	for _, a := range c.Addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("addrs: %w", err)
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			ip = ip.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		ips, err := lookup(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("addrs: cannot resolve the dashboard %q: %w", host, err)
		}
		for _, ip := range ips {
			ip = ip.Unmap().WithZone("")
			out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
	return out, nil
}

// AnnouncedIP is the address the heartbeat gives: IP when set, else the command listener's
// when it is a literal address other than the unspecified one, else the first address of
// ifaces (the host's interface addresses) that is neither loopback nor link-local.
func (c Config) AnnouncedIP(listener net.Addr, ifaces []net.Addr) (string, error) {
	if c.IP != "" {
		return c.IP, nil
	}
	if ap, err := netip.ParseAddrPort(listener.String()); err == nil && !ap.Addr().IsUnspecified() {
		return ap.Addr().Unmap().WithZone("").String(), nil
	}
	for _, a := range ifaces {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		if ip := p.Addr().Unmap(); !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsUnspecified() {
			return ip.WithZone("").String(), nil
		}
	}
	return "", fmt.Errorf("no address to give the dashboard: set sentinel_dashboard.ip")
}

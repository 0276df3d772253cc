package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/dashboard"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

// dashboardRun is the Sentinel dashboard's side of the service: the command server, the
// heartbeat, and where pushes go.
type dashboardRun struct {
	cfg  dashboard.Config
	log  *zap.Logger
	http *http.Server
	mem  *dashboard.Memory // nil when pushes are written to etcd
	cli  *clientv3.Client  // the etcd client of pushes; nil without
}

// newDashboard builds the command server of sentinel_dashboard; nil, nil without its
// command_addr. Pushes are written to etcd when the rules come from there, else kept in memory
// when allowed.
func newDashboard(cfg config.Config, parse rulestore.ParseOptions, store *rulestore.Store, m *metrics.Metrics, log *zap.Logger) (*dashboardRun, error) {
	dc := cfg.SentinelDashboard
	if !dc.Enabled() {
		return nil, nil
	}
	log = log.Named("dashboard")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	allowed, err := dc.Callers(ctx, func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	})
	if err != nil {
		return nil, fmt.Errorf("sentinel_dashboard.%w", err)
	}
	d := &dashboardRun{cfg: dc, log: log}
	format := dashboard.Format{ParamNames: cfg.ParamNames, FallbackLocal: cfg.Store.Redis.Fallback == "local"}
	var pusher dashboard.Pusher
	if cfg.RulesEtcd.Enabled() {
		d.cli, err = etcdrules.NewClient(cfg.RulesEtcd)
		if err != nil {
			return nil, fmt.Errorf("sentinel_dashboard: rules_etcd: %w", err)
		}
		key := dc.EtcdKey
		if key == "" {
			key = cfg.RulesEtcd.Keys[0]
		}
		pusher = &dashboard.Etcd{Client: d.cli, Keys: cfg.RulesEtcd.Keys, Key: key, Store: store, Parse: parse,
			Timeout: cfg.RulesEtcd.DialTimeout}
	} else {
		d.mem = &dashboard.Memory{Store: store, Format: format, Allow: dc.AllowMemoryOverrides, Source: cfg.RulesFile}
		pusher = d.mem
	}
	d.http = &http.Server{
		Handler: dashboard.New(dashboard.Options{Rules: store.Current, Traffic: m.Snapshot, Format: format,
			Parse: parse, Pusher: pusher, Allowed: allowed, Log: log}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log),
	}
	return d, nil
}

// start opens the command listener and serves it, and sends the heartbeat, until ctx ends;
// a server failure goes to failed. Without a dashboard it does nothing.
func (d *dashboardRun) start(ctx context.Context, wg *sync.WaitGroup, failed chan<- error) error {
	if d == nil {
		return nil
	}
	lis, err := net.Listen("tcp", d.cfg.CommandAddr)
	if err != nil {
		return fmt.Errorf("sentinel_dashboard.command_addr: %w", err)
	}
	ifaces, _ := net.InterfaceAddrs()
	ip, err := d.cfg.AnnouncedIP(lis.Addr(), ifaces)
	if err != nil {
		lis.Close()
		return fmt.Errorf("sentinel_dashboard.ip: %w", err)
	}
	host := d.cfg.Hostname
	if host == "" {
		host, _ = os.Hostname()
	}
	machine := dashboard.Machine{App: d.cfg.App, AppType: d.cfg.AppType, Hostname: host, IP: ip,
		Port: lis.Addr().(*net.TCPAddr).Port, PID: os.Getpid()}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := d.http.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed <- fmt.Errorf("sentinel dashboard command server: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if len(d.cfg.Addrs) > 0 {
			beat := &dashboard.Heartbeat{Addrs: d.cfg.Addrs, Machine: machine, Log: d.log}
			t := time.NewTicker(d.cfg.HeartbeatInterval)
			beat.Run(ctx, t.C)
			t.Stop()
		} else {
			<-ctx.Done()
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := d.http.Shutdown(sctx); err != nil {
			d.http.Close()
		}
	}()
	d.log.Info("sentinel dashboard commands serving", zap.String("command_addr", lis.Addr().String()),
		zap.String("app", machine.App), zap.String("ip", ip), zap.Int("port", machine.Port),
		zap.Strings("dashboards", d.cfg.Addrs), zap.Bool("memory_overrides", d.cfg.AllowMemoryOverrides))
	return nil
}

// close releases the etcd client of pushes.
func (d *dashboardRun) close() {
	if d != nil && d.cli != nil {
		_ = d.cli.Close()
		d.cli = nil
	}
}

// rulesView is the rules /rules and the console show: those in force, with a warning while a
// push from the dashboard is in force in memory only.
func (s *service) rulesView() *rulestore.Set {
	set := s.store.Current()
	if s.dash != nil && s.dash.mem != nil {
		return s.dash.mem.View(set)
	}
	return set
}

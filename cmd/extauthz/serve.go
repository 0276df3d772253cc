package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/descriptors"
	"github.com/extauthz/extauthz/envoyapi"
	"github.com/extauthz/extauthz/envoyapi/wire"
	"github.com/extauthz/extauthz/hotparam"
	"github.com/extauthz/extauthz/internal/observe"
	"github.com/extauthz/extauthz/internal/tlsreload"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/policy"
	"github.com/extauthz/extauthz/redact"
	"github.com/extauthz/extauthz/redisstore"
	"github.com/extauthz/extauthz/rulestore"
	"github.com/extauthz/extauthz/tracing"
)

// serve runs the service with the settings of the parsed flags fs and the environment environ
// until ctx ends, then shuts down gracefully.
func serve(ctx context.Context, fs *pflag.FlagSet, environ []string, stderr io.Writer) error {
	cfg, err := config.Load(configSource(fs, environ))
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	logSettings(log, cfg)
	if gc := setMemoryLimit(log, cfg.MemoryLimit, lookupEnv(environ)); gc != nil {
		gc.Update() // in force before the first call
		go gc.Run(ctx)
	}
	warnIgnoredEnv(log, environ)
	warnStore(log, cfg.Store.Redis)

	svc, err := newService(cfg, log)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return err
	}
	defer svc.close()
	return svc.run(ctx)
}

// service is the running process: the rules, the two servers and the watcher.
type service struct {
	cfg     config.Config
	log     *zap.Logger
	metrics *metrics.Metrics
	store   *rulestore.Store
	remote  *redisstore.Store   // nil without store.redis
	sources []source            // where the rules come from, loaded; none without a file or rules_etcd
	tracing *tracing.Provider   // nil until built
	tls     *tlsreload.Reloader // nil without TLS
	api     *envoyapi.Server
	grpc    *grpc.Server
	health  *health.Server
	admin   *http.Server
	dash    *dashboardRun // nil without sentinel_dashboard.command_addr
	fleet   *admin.Fleet  // the console's fleet view
	serving atomic.Bool   // the gRPC server accepts calls
}

// newService builds everything that can fail before a port is opened: the mapping, the shared
// store, the first load of the rules, the servers.
func newService(cfg config.Config, log *zap.Logger) (_ *service, err error) {
	s := &service{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.close() // what was acquired before the failure
		}
	}()
	// The stores report to the metrics; the metrics read the stores and the decision path once
	// they are built (Watch).
	s.metrics = metrics.New(metrics.Options{})
	bi := readBuildInfo()
	s.metrics.SetBuild(metrics.BuildInfo{Version: bi.Version, Commit: bi.Commit, GoVersion: bi.Go})

	mapper, err := descriptors.New(cfg.Mapping)
	if err != nil {
		return nil, err
	}

	// Before the shared store, whose calls are spans of the decisions' traces.
	s.tracing, err = tracing.New(context.Background(), tracing.Options{Endpoint: cfg.Tracing.Endpoint,
		Insecure: cfg.Tracing.Insecure, SampleRatio: cfg.Tracing.SampleRatio})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}

	rem, err := newRemote(cfg.Store.Redis, s.metrics, s.tracing.TracerProvider(), log)
	if err != nil {
		return nil, err
	}
	s.remote = rem

	storeOpts := rulestore.Options{
		File:     cfg.RulesFile,
		Optional: cfg.RulesOptional,
		Parse: rulestore.ParseOptions{
			ParamNames:      cfg.ParamNames,
			ClusterEnabled:  rem != nil,
			ClusterFallback: cfg.Store.Redis.Fallback,
			ClusterClients:  cfg.Store.Redis.Replicas,
			Mapping:         &cfg.Mapping,
		},
		Limiter: limiterOptions(cfg.Store.Redis, cfg.Admin.HotWindow, rem, s.metrics),
		OnLoad:  s.onLoad,
	}
	stateBudget(&storeOpts.Limiter, cfg.HotParam, log)
	sourceOptions(cfg, &storeOpts)
	store, err := rulestore.New(storeOpts)
	if err != nil {
		return nil, err
	}
	s.store = store
	if s.sources, err = rulesSources(cfg, store, log); err != nil {
		return nil, err
	}
	if s.dash, err = newDashboard(cfg, storeOpts.Parse, store, s.metrics, log); err != nil {
		return nil, err
	}

	red, err := redact.New(cfg.Sensitive.Params, []byte(cfg.Sensitive.Key))
	if err != nil {
		return nil, fmt.Errorf("sensitive.key: %w", err)
	}

	codec := wire.NewCodec()
	opts, tlsr, err := grpcOptions(cfg, codec, log.Named("tls"))
	if err != nil {
		return nil, err
	}
	s.tls = tlsr
	obs := observe.Options{Redact: red.Value, LeaseKey: cfg.Mapping.RateLimit.LeaseKey,
		AllowedEvery: uint64(cfg.DecisionLog.AllowedEvery), MaxPerSecond: cfg.DecisionLog.MaxPerSecond,
		OnSuppressed: s.metrics.DecisionLogSuppressed}
	if s.tracing.Enabled() { // off: no span is started, Envoy's trace id still logged
		obs.Tracer = s.tracing.Tracer()
	}
	if cfg.DecisionLog.Enabled {
		obs.Log = log.Named("decision")
	}
	observer := observe.New(obs)
	opts = append(opts, grpc.ChainUnaryInterceptor(observer.Unary))
	api := envoyapi.New(envoyapi.Options{
		Mapper: mapper.WithUses(rulestore.Uses{Current: store.Current}),
		Policy: policy.Options{Rules: store.Current, Now: time.Now,
			Recorder: recorder{Metrics: s.metrics, log: log}, Config: cfg.Decision},
		Redact:   red.Value,
		Codec:    codec,
		Reporter: observer,
	})
	s.api = api
	src := storeSources(store, rem)
	src.Waiting = api.Waiting
	s.metrics.Watch(src)
	s.grpc = grpc.NewServer(opts...)
	api.Register(s.grpc)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)

	s.fleet = newFleet(cfg, rem, s.metrics, log)
	s.admin = &http.Server{
		Handler: admin.New(admin.Options{
			Ready:     s.ready,
			Metrics:   promhttp.HandlerFor(s.metrics.Registry(), promhttp.HandlerOpts{Registry: s.metrics.Registry()}),
			Rules:     s.rulesView,
			LastError: store.LastError,
			Top:       s.top,
			Traffic:   s.metrics.Snapshot,
			PProf:     cfg.Admin.PProf,
			Redact:    red.Value,
			Hosts:     cfg.Admin.Hosts,
			Fleet:     s.fleet,
			// /check's descriptors are mapped as the rate-limit API maps them.
			Check:       debugCheck(store.Current, cfg.Decision),
			Descriptors: debugDescriptors(mapper.WithUses(rulestore.Uses{Current: store.Current})),
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          zap.NewStdLog(log.Named("admin")),
	}
	return s, nil
}

// run opens the listeners, serves until ctx ends or a server fails, and shuts down.
func (s *service) run(ctx context.Context) error {
	grpcLis, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("grpc_addr: %w", err)
	}
	adminLis, err := net.Listen("tcp", s.cfg.AdminAddr)
	if err != nil {
		grpcLis.Close()
		return fmt.Errorf("admin_addr: %w", err)
	}

	s.fleet.Replica.Admin = adminLis.Addr().String() // before the admin server and the fleet run

	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	hup, stopHangup := notifyHangup() // before "serving": a SIGHUP from then on reloads
	defer stopHangup()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.reloadOnHangup(watchCtx, hup)
	}()
	for _, src := range s.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runSource(watchCtx, src, s.log)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := runRemote(watchCtx, s.remote); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Error("shared store loop stopped", zap.Error(err))
		}
	}()

	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sweep(watchCtx, s.cfg.SweepInterval)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.fleet.Run(watchCtx)
	}()

	failed := make(chan error, 3)
	if err := s.dash.start(watchCtx, &wg, failed); err != nil {
		grpcLis.Close()
		adminLis.Close()
		stopWatch()
		wg.Wait()
		return err
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.grpc.Serve(grpcLis); err != nil {
			failed <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := s.admin.Serve(adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			failed <- fmt.Errorf("admin server: %w", err)
		}
	}()
	s.serving.Store(true)
	s.setHealth(healthpb.HealthCheckResponse_SERVING)
	s.log.Info("serving",
		zap.String("grpc_addr", grpcLis.Addr().String()),
		zap.String("admin_addr", adminLis.Addr().String()),
		zap.Bool("tls", s.cfg.TLS.Enabled()),
		zap.Bool("mtls", s.cfg.TLS.ClientCAFile != ""))

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", zap.Duration("grace", s.cfg.ShutdownGrace))
	case runErr = <-failed:
		s.log.Error("server failed; shutting down", zap.Error(runErr))
	}

	s.shutdown()
	stopWatch()
	wg.Wait()
	s.log.Info("stopped")
	return runErr
}

// answerWithin is how long, after the grace period, the throttled calls still held get to be
// answered (OVER_LIMIT, shutting_down) before the server closes what is left.
const answerWithin = time.Second

// shutdown stops accepting calls, lets in-flight calls (throttle waits included) finish within
// the grace period, then closes what is left. A throttled call is never cut off with an error,
// which Envoy's rate-limit filter admits: one whose turn comes after the grace is refused at
// once (OVER_LIMIT, reason shutting_down), and any still held when the grace ends is refused
// then.
func (s *service) shutdown() {
	s.serving.Store(false)
	s.health.Shutdown() // health checks answer NOT_SERVING while the calls drain
	s.api.Drain(time.Now().Add(s.cfg.ShutdownGrace))

	drained := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(drained)
	}()
	grace := time.NewTimer(s.cfg.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-drained:
	case <-grace.C:
		held := s.api.Waiting()
		s.api.Drain(time.Now())
		answered := time.NewTimer(answerWithin)
		defer answered.Stop()
		select {
		case <-drained:
			if held > 0 {
				s.log.Warn("grace period over; throttled calls still held were refused", zap.Int("calls", held),
					zap.Duration("grace", s.cfg.ShutdownGrace))
			}
		case <-answered.C:
			s.log.Warn("grace period over; closing the calls still in flight", zap.Duration("grace", s.cfg.ShutdownGrace))
			s.grpc.Stop()
			<-drained
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.admin.Shutdown(ctx); err != nil {
		s.admin.Close()
	}
}

// close releases what newService acquired.
func (s *service) close() {
	s.dash.close()
	for _, src := range s.sources {
		src.close()
	}
	s.sources = nil
	if s.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.tracing.Shutdown(ctx); err != nil { // sends the spans still buffered
			s.log.Warn("tracing: spans lost at shutdown", zap.Error(err))
		}
		cancel()
		s.tracing = nil
	}
	if s.remote != nil {
		s.remote.Close()
		s.remote = nil
	}
}

// sweep forgets the idle hot-param values of the rules in force every interval until ctx
// ends (hotparam's Limiter.Sweep), so that memory follows the values in use.
func (s *service) sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if n := s.store.Current().ParamFlow.Sweep(now); n > 0 {
				s.log.Debug("idle hot-param values forgotten", zap.Int("values", n))
			}
		}
	}
}

// setHealth sets the status the gRPC health service reports for the server as a whole ("")
// and for each of the two APIs.
func (s *service) setHealth(status healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range []string{"", authv3.Authorization_ServiceDesc.ServiceName, rlsv3.RateLimitService_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, status)
	}
}

// ready reports whether the rules are loaded and the gRPC server serves.
func (s *service) ready() bool {
	return s.serving.Load()
}

// onLoad logs and counts every load of the rules file.
func (s *service) onLoad(e rulestore.Event) {
	s.metrics.Reload(e.Applied, e.Version, e.Rules)
	if e.Restored {
		s.log.Info("rules file restored to the rules in force", zap.String("file", e.File), zap.Uint64("version", e.Version))
		return
	}
	if e.Applied {
		s.log.Info("rules applied", zap.String("file", e.File), zap.Uint64("version", e.Version), zap.Int("rules", e.Rules))
		for _, w := range e.Warnings {
			s.log.Warn("rules warning", zap.String("file", e.File), zap.String("warning", w))
		}
		s.warnRules(e)
		s.metrics.SetResources(resources(e.Set))
		return
	}
	s.log.Error("rules rejected; the rules in force stay", zap.String("file", e.File),
		zap.Uint64("version", e.Version), zap.Error(e.Err))
}

// storeSources are what the metrics read at scrape time: the hot-param counters of the rules in
// force (a Set the store built always has a Limiter, empty without param_flow rules) and, with
// a shared store, its breaker and its cache of blocked values.
func storeSources(store *rulestore.Store, rem *redisstore.Store) metrics.Sources {
	src := metrics.Sources{RuleStats: func() ([]hotparam.Rule, []hotparam.RuleStats) {
		lim := store.Current().ParamFlow
		return lim.Rules(), lim.Stats()
	}}
	if rem != nil {
		src.BreakerOpen = func() bool { return rem.Stats().BreakerOpen }
		src.RedisCacheHits = func() uint64 { return rem.Stats().CacheHits }
		src.RedisHeld = func() uint64 { return rem.Stats().Held }
		src.RedisBooked = func() metrics.BookedTokens {
			st := rem.Stats()
			return metrics.BookedTokens{Booked: st.Booked, Given: st.BookGiven, Back: st.BookBack, Lost: st.BookLost}
		}
	}
	return src
}

// top lists the busiest values of each hot-param rule.
func (s *service) top(n int) []hotparam.RuleTop {
	return s.store.Current().ParamFlow.Top(time.Now(), n)
}

// resources are the resources the rules of set name, the label values metrics keep.
func resources(set *rulestore.Set) []string {
	var out []string
	for _, r := range set.Rules.Authority {
		out = append(out, r.Resource)
	}
	for _, r := range set.Rules.ParamFlow {
		out = append(out, r.Resource)
	}
	return out
}

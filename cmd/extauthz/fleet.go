package main

import (
	"os"

	"go.uber.org/zap"

	"github.com/extauthz/extauthz/admin"
	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/redisstore"
)

// newFleet is the console's fleet view: with the shared store rem, this replica publishes its
// per-second counts there every admin.fleet_interval and reads the other replicas'; without,
// the view is this replica alone. Its admin address is set once the listener is bound (run).
func newFleet(cfg config.Config, rem *redisstore.Store, m *metrics.Metrics, log *zap.Logger) *admin.Fleet {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	f := &admin.Fleet{Replica: admin.NewReplica(host, os.Getpid(), cfg.AdminAddr), Traffic: m.Snapshot,
		Interval: cfg.Admin.FleetInterval}
	if rem == nil {
		return f
	}
	f.Store = rem
	log = log.Named("fleet")
	f.OnPublish = func(err error) {
		if err != nil {
			log.Warn("cannot publish this replica's counts for the console's fleet view; the other replicas' consoles miss it until it can",
				zap.String("replica", f.Replica.ID), zap.Error(err))
			return
		}
		log.Info("publishing this replica's counts for the console's fleet view again", zap.String("replica", f.Replica.ID))
	}
	return f
}

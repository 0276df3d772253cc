package main

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/rulesource/file"
	"github.com/extauthz/extauthz/rulestore"
)

// rulesSource feeds the Store from where the rules are kept, until ctx ends: the rules file
// (rulesource/file) or etcd's keys (etcdrules). A source is built loaded: its first load has
// been made (and its failure is fatal at start, as a bad rules file is) before the service
// serves. Run records a failed load in the Store (the rules in force stay) and goes on; it
// returns an error only when it cannot go on.
type rulesSource interface {
	Run(ctx context.Context) error
}

// reloader is a source that SIGHUP reads again at once; the others are only watched.
type reloader interface {
	Reload() error
}

// source is one rules source as the service runs it.
type source struct {
	src     rulesSource
	stopped string // what the log says when Run fails
	watched string // what SIGHUP's log says of a source that is not a reloader
	close   func() // releases what the source holds
}

// sourceOptions points the Store's options at the configured source: with rules_etcd, no file,
// and the keys as the rules' name.
func sourceOptions(cfg config.Config, opts *rulestore.Options) {
	if cfg.RulesEtcd.Enabled() {
		opts.File, opts.Optional, opts.Source = "", false, cfg.RulesEtcd.Source()
	}
}

// rulesSources builds the sources of store's rules, loaded: etcd with rules_etcd, else the
// rules file when there is one; none without either (the Store keeps the empty set it made).
func rulesSources(cfg config.Config, store *rulestore.Store, log *zap.Logger) ([]source, error) {
	switch {
	case cfg.RulesEtcd.Enabled():
		src, err := etcdSource(cfg, store, log)
		if err != nil {
			return nil, err
		}
		return []source{src}, nil
	case store.File() != "":
		// the Store made the file's first load when it was built
		return []source{{src: file.New(store, file.Options{Log: log.Named("rules")}),
			stopped: "rules watcher stopped; the rules in force stay until restart", close: func() {}}}, nil
	}
	return nil, nil
}

// etcdSource connects to etcd and loads the rules once into store. The watcher logs to log what
// a watch alone would hide (etcd's history lost, a compacted watch).
func etcdSource(cfg config.Config, store *rulestore.Store, log *zap.Logger) (source, error) {
	cli, err := etcdrules.NewClient(cfg.RulesEtcd)
	if err != nil {
		return source{}, fmt.Errorf("rules_etcd: %w", err)
	}
	w := etcdrules.New(cli, cfg.RulesEtcd, store)
	w.Log = log.Named("etcd")
	if err := w.Load(context.Background()); err != nil {
		cli.Close()
		return source{}, err
	}
	return source{src: w, stopped: "rules_etcd watch stopped; the rules in force stay until restart",
		watched: "from etcd, watched: not read again", close: func() { closeClient(cli) }}, nil
}

func closeClient(cli *clientv3.Client) { _ = cli.Close() }

// runSource runs src until ctx ends, and logs why when it stops before.
func runSource(ctx context.Context, src source, log *zap.Logger) {
	if err := src.src.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error(src.stopped, zap.Error(err))
	}
}

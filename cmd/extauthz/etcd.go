package main

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/extauthz/extauthz/cmd/extauthz/config"
	"github.com/extauthz/extauthz/etcdrules"
	"github.com/extauthz/extauthz/rulestore"
)

// rulesSource points the Store's options at etcd when rules_etcd is configured: no file, and
// the keys as the rules' name.
func rulesSource(cfg config.Config, opts *rulestore.Options) {
	if cfg.RulesEtcd.Enabled() {
		opts.File, opts.Optional, opts.Source = "", false, cfg.RulesEtcd.Source()
	}
}

// etcdRules connects to etcd and loads the rules once into store (a failure is fatal at start,
// as a bad rules file is); nil, nil without rules_etcd. close releases the client. The watcher
// logs to log what a watch alone would hide (etcd's history lost, a compacted watch).
func etcdRules(cfg config.Config, store *rulestore.Store, log *zap.Logger) (w *etcdrules.Watcher, closeFn func(), err error) {
	if !cfg.RulesEtcd.Enabled() {
		return nil, func() {}, nil
	}
	cli, err := etcdrules.NewClient(cfg.RulesEtcd)
	if err != nil {
		return nil, nil, fmt.Errorf("rules_etcd: %w", err)
	}
	w = etcdrules.New(cli, cfg.RulesEtcd, store)
	w.Log = log.Named("etcd")
	if err := w.Load(context.Background()); err != nil {
		cli.Close()
		return nil, nil, err
	}
	return w, func() { closeClient(cli) }, nil
}

func closeClient(cli *clientv3.Client) { _ = cli.Close() }

// runEtcdRules watches etcd until ctx ends; without rules_etcd it returns at once.
func runEtcdRules(ctx context.Context, w *etcdrules.Watcher) error {
	if w == nil {
		return nil
	}
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

package main

// Warnings of a shared store that cannot do what it is there for.

import (
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/redistest"
)

const (
	msgNoClusterRule = "store.redis is configured but no rule is cluster: true; every replica counts on its own"
	msgReplicasOne   = "store.redis.replicas is 1: while Redis fails, each replica enforces the whole count of cluster rules on its own"
)

// With Redis configured and no cluster rule, every load says that each replica counts alone
// (an autoscaled fleet then loosens every limit by its replica count); a load with a cluster
// rule does not. store.redis.replicas left at 1 beside the local fallback is warned of at start.
func TestBinaryStoreWarnings(t *testing.T) {
	srv := redistest.Start(t)
	dir := t.TempDir()
	rulesPath := writeFile(t, dir, "rules.yaml", floodRules)
	p := start(t, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--config", writeFile(t, dir, "extauthz.yaml", "store: {redis: {addrs: ["+srv.Addr()+"]}}\n"))
	p.WaitLog(t, msgNoClusterRule, 5*time.Second)
	if e := p.Entry(msgNoClusterRule); e["rules"] != float64(1) || e["version"] != float64(1) {
		t.Errorf("warning %v, want the version and its rule count", e)
	}
	p.WaitLog(t, msgReplicasOne, 5*time.Second)

	writeAtomic(t, rulesPath, floodRules+"    cluster: true\n")
	eventually(t, "the cluster rule applied", func() bool { return rulesOf(t, p).Version == 2 })
	if n := len(entries(p, msgNoClusterRule)); n != 1 {
		t.Errorf("%d warnings after a load with a cluster rule, want only the first load's", n)
	}

	// Set to the fleet's size, replicas is no warning; without Redis, neither warning.
	q := start(t, "--rules", rulesPath, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
		"--config", writeFile(t, dir, "replicas.yaml", "store: {redis: {addrs: ["+srv.Addr()+"], replicas: 3}}\n"))
	m := start(t, "--rules", writeFile(t, dir, "local.yaml", floodRules), "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	for _, p := range []*proc{q, m} {
		p.Stop(t)
		if p.Logged(msgReplicasOne) || p.Logged(msgNoClusterRule) {
			t.Errorf("a store warning with replicas set or without Redis:\n%s", p.LogText())
		}
	}
}

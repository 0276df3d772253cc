package redistest

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters only, on loopback ports.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them with
// `redis-cli --cluster create`, and waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	skipShort(t)
	if n < 3 {
		t.Fatalf("a redis cluster needs 3 masters, asked for %d", n)
	}
	c := &Cluster{}
	create := []string{"--cluster", "create"}
	for range n {
		port := freePort(t, true)
		s := start(t, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		c.Nodes = append(c.Nodes, s)
		create = append(create, s.Addr())
	}
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	cli := filepath.Join(filepath.Dir(c.Nodes[0].bin), "redis-cli")
	if out, err := exec.Command(cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, s := range c.Nodes {
		for !strings.Contains(s.CLI("CLUSTER", "INFO"), "cluster_state:ok") {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok after 15s:\n%s", s.Addr(), s.CLI("CLUSTER", "INFO"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		a[i] = s.Addr()
	}
	return a
}

// CommandCalls sums Server.CommandCalls over the nodes.
func (c *Cluster) CommandCalls(cmd string) int {
	n := 0
	for _, s := range c.Nodes {
		n += s.CommandCalls(cmd)
	}
	return n
}

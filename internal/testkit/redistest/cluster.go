package redistest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/extauthz/extauthz/internal/testkit/wait"
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
	err := wait.Until(15*time.Second, 50*time.Millisecond, func() error {
		for _, s := range c.Nodes {
			if info := s.CLI("CLUSTER", "INFO"); !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("cluster node %s not ok:\n%s", s.Addr(), info)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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

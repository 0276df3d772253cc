package conformance

import (
	"strings"
	"testing"
)

// TestClusterTokenServer: imported cluster rules decide as Sentinel's own token server
// (DefaultTokenService over ClusterParamFlowRuleManager, with that many connected clients)
// decides them: count per second (times the clients for thresholdType 0, an item's count too, a
// fraction of the product cut), multi-hit and multi-valued requests; burstCount, durationInSec
// and controlBehavior unread; a rule whose clusterConfig Sentinel finds invalid limits nothing
// on either side. The bursts are two seconds apart, past the token server's window, where its
// per-second average and extauthz's bucket coincide.
func TestClusterTokenServer(t *testing.T) {
	var cases []Case
	for _, c := range loadCases(t) {
		if strings.HasPrefix(c.Name, "cluster/") {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatal("no cases under testdata/cases/cluster.json")
	}
	tl := runCases(t, cases)
	tl.report(t)
	if tl.identical != tl.compared {
		t.Errorf("%d of %d decisions identical", tl.identical, tl.compared)
	}
	res, err := sentinel.Run(cases, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for _, c := range cases {
		want := 1
		if strings.Contains(c.Name, "skipped") {
			want = 0
		}
		if got := res[c.Name].Loaded.Cluster; got != want {
			t.Errorf("%s: the token server holds %d rules, want %d", c.Name, got, want)
		}
		for _, d := range res[c.Name].Decisions {
			if !d.Allow {
				refused++
			}
		}
	}
	if refused == 0 {
		t.Error("the token server refused nothing: the cases show nothing")
	}
	t.Logf("token server: %d cases, %d requests refused", len(cases), refused)
}

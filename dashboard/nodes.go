package dashboard

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/extauthz/extauthz/metrics"
	"github.com/extauthz/extauthz/rulestore"
)

// nodeJSON is Sentinel's NodeVo, the resource statistics of jsonTree and clusterNode, in
// fastjson's order; id and parentId only in jsonTree.
type nodeJSON struct {
	AverageRt          int64  `json:"averageRt"`
	BlockQps           int64  `json:"blockQps"`
	ExceptionQps       int64  `json:"exceptionQps"`
	ID                 string `json:"id,omitempty"`
	OneMinuteBlock     int64  `json:"oneMinuteBlock"`
	OneMinuteException int64  `json:"oneMinuteException"`
	OneMinutePass      int64  `json:"oneMinutePass"`
	OneMinuteTotal     int64  `json:"oneMinuteTotal"`
	ParentID           string `json:"parentId,omitempty"`
	PassQps            int64  `json:"passQps"`
	Resource           string `json:"resource"`
	SuccessQps         int64  `json:"successQps"`
	ThreadNum          int    `json:"threadNum"`
	Timestamp          int64  `json:"timestamp"`
	TotalQps           int64  `json:"totalQps"`
}

// rootID is the resource of the root of Sentinel's tree, as Sentinel names it.
const rootID = "machine-root"

// counted reports whether a resource of the metrics is one of the service's own: the decisions
// no rule applied to ("") and the resources without a label of their own (metrics.Other) are
// not resources the dashboard can hold rules for.
func counted(name string) bool { return name != "" && name != metrics.Other }

// resourceNames are the resources the rules of set name and those the snapshot counted, sorted.
func resourceNames(set *rulestore.Set, snap metrics.Snapshot) []string {
	var names []string
	for _, r := range set.Rules.Authority {
		names = append(names, r.Resource)
	}
	for _, r := range set.Rules.ParamFlow {
		names = append(names, r.Resource)
	}
	for _, t := range snap.Resources {
		if counted(t.Resource) {
			names = append(names, t.Resource)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// node is the statistics of one resource at the snapshot's time: the last whole second's
// counts as its QPS, the last 60 whole seconds' as its minute.
func node(name string, t *metrics.Traffic, now time.Time) nodeJSON {
	n := nodeJSON{Resource: name, Timestamp: now.UnixMilli()}
	if t == nil || len(t.Allowed) < 2 {
		return n
	}
	last := len(t.Allowed) - 2 // the current second is still counting
	n.PassQps, n.BlockQps = int64(t.Allowed[last]), int64(t.Blocked[last])
	n.SuccessQps, n.TotalQps = n.PassQps, n.PassQps+n.BlockQps
	for j := max(0, last-59); j <= last; j++ {
		n.OneMinutePass += int64(t.Allowed[j])
		n.OneMinuteBlock += int64(t.Blocked[j])
	}
	n.OneMinuteTotal = n.OneMinutePass + n.OneMinuteBlock
	return n
}

// nodes are the statistics of every resource of resourceNames.
func nodes(set *rulestore.Set, snap metrics.Snapshot) []nodeJSON {
	byName := make(map[string]*metrics.Traffic, len(snap.Resources))
	for i := range snap.Resources {
		byName[snap.Resources[i].Resource] = &snap.Resources[i]
	}
	names := resourceNames(set, snap)
	out := make([]nodeJSON, 0, len(names))
	for _, name := range names {
		out = append(out, node(name, byName[name], snap.Time))
	}
	return out
}

// tree is jsonTree's list: Sentinel's root node, then every resource as its child.
func tree(set *rulestore.Set, snap metrics.Snapshot) []nodeJSON {
	children := nodes(set, snap)
	root := nodeJSON{ID: "0", Resource: rootID, Timestamp: snap.Time.UnixMilli()}
	for i := range children {
		c := &children[i]
		c.ID, c.ParentID = strconv.Itoa(i+1), root.ID
		root.PassQps += c.PassQps
		root.BlockQps += c.BlockQps
		root.SuccessQps += c.SuccessQps
		root.TotalQps += c.TotalQps
		root.OneMinutePass += c.OneMinutePass
		root.OneMinuteBlock += c.OneMinuteBlock
		root.OneMinuteTotal += c.OneMinuteTotal
	}
	return append([]nodeJSON{root}, children...)
}

// metricQuery is a metric command's window: the seconds from Start to End (Unix
// milliseconds, both included), or from Start on, at most MaxLines lines, when End is not set.
type metricQuery struct {
	Start, End int64
	HasEnd     bool
	MaxLines   int
	Identity   string // one resource, or "" for all
}

// metricLines are Sentinel's metric lines (MetricNode's thin form, one per resource and whole
// second with traffic, oldest first): timestamp|resource|pass|block|success|exception|rt|
// occupiedPass|concurrency|classification. Allowed decisions are pass and success, blocked ones
// block; what extauthz cannot know (the exceptions and response time of the upstream, the
// requests in flight) is 0.
func metricLines(snap metrics.Snapshot, q metricQuery) string {
	type line struct {
		sec        int64
		res        string
		pass, drop uint32
	}
	var lines []line
	now := snap.Time.Unix()
	for _, t := range snap.Resources {
		if !counted(t.Resource) || q.Identity != "" && t.Resource != q.Identity {
			continue
		}
		first := now - int64(len(t.Allowed)) + 1
		for j := 0; j < len(t.Allowed)-1; j++ { // the current second is still counting
			sec := first + int64(j)
			ms := sec * 1000
			if ms < q.Start || q.HasEnd && ms > q.End || t.Allowed[j]+t.Blocked[j] == 0 {
				continue
			}
			lines = append(lines, line{sec, t.Resource, t.Allowed[j], t.Blocked[j]})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int {
		if a.sec != b.sec {
			return int(a.sec - b.sec)
		}
		return strings.Compare(a.res, b.res)
	})
	if !q.HasEnd && len(lines) > q.MaxLines {
		lines = lines[:q.MaxLines]
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%d|%s|%d|%d|%d|0|0|0|0|0\n", l.sec*1000, strings.ReplaceAll(l.res, "|", "_"), l.pass, l.drop, l.pass)
	}
	return b.String()
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// DefaultSampleInterval is the default of Config.SampleInterval.
const DefaultSampleInterval = 10 * time.Second

// NoEviction is the maxmemory-policy under which Redis never deletes a key to free memory (it
// refuses writes instead, which the store counts as failures). Every other policy may delete
// the state of a cluster rule's value, which then starts again from its full allowance.
const NoEviction = "noeviction"

// Evicts reports whether Redis with maxmemory-policy policy may delete keys to free memory:
// every policy but noeviction (the volatile-* ones too: every key of the store has a TTL).
func Evicts(policy string) bool { return policy != NoEviction }

// ServerInfo is what one Redis node says of how it keeps the store's keys.
type ServerInfo struct {
	Addr string
	// Policy is maxmemory-policy; MaxMemory is maxmemory in bytes (0: no limit, so no
	// eviction whatever the policy, until someone sets one).
	Policy    string
	MaxMemory int64
	// PolicyFrom says where Policy was read: "config" (CONFIG GET) or "info" (INFO memory, for
	// a Redis that refuses CONFIG, as managed services do).
	PolicyFrom string
	// RunID changes when the process restarts; Uptime is since it started.
	RunID  string
	Uptime time.Duration
	// Master is false for a replica (it does not evict by itself; it follows its master).
	Master bool
	// Replicas is the number of replicas connected to a master.
	Replicas int
	// AOF says whether the append-only file is on; RDBSaves whether RDB snapshots are
	// configured ("save" not empty; known only through CONFIG).
	AOF      bool
	RDBSaves bool
	// EvictedKeys is INFO's evicted_keys: the keys this process has evicted since it started.
	EvictedKeys uint64
}

// Servers reads ServerInfo from every node the client knows, in address order. A node that
// fails to answer INFO is an error; a CONFIG that is refused is not (the policy comes from
// INFO then).
func (s *Store) Servers(ctx context.Context) ([]ServerInfo, error) {
	if err := s.connect(); err != nil {
		return nil, err
	}
	b := s.client.Load()
	if b == nil {
		return nil, ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Timeout, time.Second))
	defer cancel()
	nodes := b.c.Nodes()
	var out []ServerInfo
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(nodes)) {
		info, err := serverInfo(ctx, addr, nodes[addr])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, info)
	}
	return out, errors.Join(errs...)
}

// serverInfo asks one node.
func serverInfo(ctx context.Context, addr string, c rueidis.Client) (ServerInfo, error) {
	text, err := c.Do(ctx, c.B().Info().Build()).ToString()
	if err != nil {
		return ServerInfo{}, fmt.Errorf("redis store: INFO from %s: %w", addr, err)
	}
	f := infoFields(text)
	info := ServerInfo{Addr: addr, Policy: f["maxmemory_policy"], PolicyFrom: "info", RunID: f["run_id"],
		Master: f["role"] != "slave", AOF: f["aof_enabled"] == "1"}
	info.MaxMemory, _ = strconv.ParseInt(f["maxmemory"], 10, 64)
	up, _ := strconv.ParseInt(f["uptime_in_seconds"], 10, 64)
	info.Uptime = time.Duration(up) * time.Second
	info.Replicas, _ = strconv.Atoi(f["connected_slaves"])
	info.EvictedKeys, _ = strconv.ParseUint(f["evicted_keys"], 10, 64)
	cfg, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy", "save").Build()).AsStrMap()
	if err == nil && cfg["maxmemory-policy"] != "" {
		info.Policy, info.PolicyFrom = cfg["maxmemory-policy"], "config"
		info.RDBSaves = strings.TrimSpace(cfg["save"]) != ""
	}
	if info.Policy == "" {
		return info, fmt.Errorf("redis store: %s tells no maxmemory-policy (CONFIG GET: %v)", addr, err)
	}
	return info, nil
}

// maxInfoFields bounds what infoFields keeps of a reply: INFO has some 150 fields, and only a
// few are read.
const maxInfoFields = 1024

// infoFields parses INFO's "key:value" lines; section headers and blank lines are skipped.
func infoFields(text string) map[string]string {
	f := make(map[string]string, 160)
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' || len(f) >= maxInfoFields {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f[k] = v
		}
	}
	return f
}

// ServerEventKind says what a ServerEvent reports.
type ServerEventKind int

// Kinds of ServerEvent.
const (
	// Evicting: a master evicted keys since the last sample, after a sample where it had not
	// (the first of a run of samples with evictions).
	Evicting ServerEventKind = iota + 1
	// EvictingStopped: a sample with no eviction after a run of samples with some.
	EvictingStopped
	// Restarted: a master's run_id changed: the process restarted, and its keys are lost
	// unless it persisted them (AOF or RDB) or a replica took over with them.
	Restarted
	// PolicyEvicts: a master's maxmemory-policy evicts, seen at the first sample of that node
	// or after a change from noeviction.
	PolicyEvicts
)

func (k ServerEventKind) String() string {
	switch k {
	case Evicting:
		return "evicting"
	case EvictingStopped:
		return "evicting stopped"
	case Restarted:
		return "restarted"
	case PolicyEvicts:
		return "policy evicts"
	}
	return "unknown"
}

// ServerEvent is a change seen by comparing two samples of a node's INFO, reported once
// through Options.OnServer.
type ServerEvent struct {
	Kind ServerEventKind
	Info ServerInfo // the sample that showed it
	// Evicted is the number of keys evicted: since the previous sample (Evicting), or during
	// the run of samples with evictions (EvictingStopped).
	Evicted uint64
	// Since is how long the run of samples with evictions lasted (EvictingStopped).
	Since time.Duration
}

// nodeSample is what the last sample of a node said, for the next one.
type nodeSample struct {
	info      ServerInfo
	evicting  bool
	runStart  time.Time // when the run of samples with evictions began
	runKeys   uint64    // keys evicted in that run
	evictsRep bool      // PolicyEvicts was reported for the policy in force
}

// Check reads every node's ServerInfo (see Servers) and makes it the first sample of Run's:
// what it returns (an evicting policy, say) is the caller's to report, and Run reports only
// what changes after it. A service calls it once at start.
func (s *Store) Check(ctx context.Context) ([]ServerInfo, error) {
	infos, err := s.Servers(ctx)
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.samples == nil {
		s.samples = make(map[string]*nodeSample)
	}
	for _, info := range infos {
		if _, seen := s.samples[info.Addr]; !seen && info.Master {
			s.samples[info.Addr] = &nodeSample{info: info, evictsRep: true}
		}
	}
	return infos, err
}

// sample reads every node's INFO, counts evictions and restarts, and reports the changes.
func (s *Store) sample(ctx context.Context, now time.Time) {
	infos, _ := s.Servers(ctx) // a node that does not answer is sampled next time
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.samples == nil {
		s.samples = make(map[string]*nodeSample)
	}
	for _, info := range infos {
		if !info.Master {
			continue
		}
		prev, seen := s.samples[info.Addr]
		if !seen {
			prev = &nodeSample{info: info}
			s.samples[info.Addr] = prev
		}
		var evicted uint64
		switch {
		case !seen:
		case info.RunID != prev.info.RunID:
			s.restarts.Add(1)
			s.reportServer(ServerEvent{Kind: Restarted, Info: info})
			evicted = info.EvictedKeys // all since it started again
		case info.EvictedKeys >= prev.info.EvictedKeys:
			evicted = info.EvictedKeys - prev.info.EvictedKeys
		default:
			evicted = info.EvictedKeys // CONFIG RESETSTAT
		}
		s.evicted.Add(evicted)
		switch {
		case evicted > 0 && !prev.evicting:
			prev.evicting, prev.runStart, prev.runKeys = true, now, evicted
			s.reportServer(ServerEvent{Kind: Evicting, Info: info, Evicted: evicted})
		case evicted > 0:
			prev.runKeys += evicted
		case prev.evicting:
			prev.evicting = false
			s.reportServer(ServerEvent{Kind: EvictingStopped, Info: info, Evicted: prev.runKeys, Since: now.Sub(prev.runStart)})
		}
		if seen && info.Policy != prev.info.Policy {
			prev.evictsRep = false
		}
		if Evicts(info.Policy) && !prev.evictsRep {
			prev.evictsRep = true
			s.reportServer(ServerEvent{Kind: PolicyEvicts, Info: info})
		}
		prev.info = info
	}
}

// reportServer hands e to Options.OnServer. It requires smu held.
func (s *Store) reportServer(e ServerEvent) {
	if s.opts.OnServer != nil {
		s.opts.OnServer(e)
	}
}

package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// The fleet's keys: one sorted set of the replicas by the Unix millisecond each last published
// at, and one key per replica holding its record for its ttl. They share the hash tag {fleet},
// so that in a cluster they sit on one slot and a read is one MGET.
const (
	fleetSet    = ":{fleet}:replicas"
	fleetRecord = ":{fleet}:r:"
	// maxFleetMembers bounds the sorted set: the replicas that published last are kept.
	maxFleetMembers = 1000
	// fleetForget is how many of its ttls a replica that stopped publishing stays in the set,
	// which readers clean up sooner when they find its record gone.
	fleetForget = 10
)

// PublishReplica stores record as replica id's for ttl, and lists id in the fleet's set. It
// goes around the breaker and the counters of Eval: the console's fleet view is no decision.
func (s *Store) PublishReplica(ctx context.Context, id string, record []byte, ttl time.Duration) error {
	c, err := s.fleetClient()
	if err != nil {
		return err
	}
	set := s.cfg.Prefix + fleetSet
	now := time.Now().UnixMilli()
	forget := fleetForget * ttl.Milliseconds()
	cmds := rueidis.Commands{
		c.B().Set().Key(s.cfg.Prefix + fleetRecord + id).Value(rueidis.BinaryString(record)).
			PxMilliseconds(max(ttl.Milliseconds(), 1)).Build(),
		c.B().Zadd().Key(set).ScoreMember().ScoreMember(float64(now), id).Build(),
		c.B().Zremrangebyscore().Key(set).Min("-inf").Max(strconv.FormatInt(now-forget, 10)).Build(),
		c.B().Zremrangebyrank().Key(set).Start(0).Stop(-maxFleetMembers - 1).Build(),
		c.B().Pexpire().Key(set).Milliseconds(max(forget, 1)).Build(),
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("redis store: publish the fleet's counts: %w", err)
		}
	}
	return nil
}

// Replicas returns, by id, the records of the most replicas that published last and whose ttl
// has not run out, and how many more replicas the set lists. The replicas whose record is gone
// are taken out of the set.
func (s *Store) Replicas(ctx context.Context, most int) (map[string][]byte, int, error) {
	c, err := s.fleetClient()
	if err != nil {
		return nil, 0, err
	}
	set := s.cfg.Prefix + fleetSet
	res := c.DoMulti(ctx,
		c.B().Zrange().Key(set).Min("+inf").Max("-inf").Byscore().Rev().Limit(0, int64(most)).Build(),
		c.B().Zcard().Key(set).Build())
	ids, err := res[0].AsStrSlice()
	if err != nil {
		return nil, 0, fmt.Errorf("redis store: read the fleet: %w", err)
	}
	n, err := res[1].AsInt64()
	if err != nil {
		return nil, 0, fmt.Errorf("redis store: read the fleet: %w", err)
	}
	out := make(map[string][]byte, len(ids))
	if len(ids) == 0 {
		return out, 0, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.cfg.Prefix + fleetRecord + id
	}
	vals, err := c.Do(ctx, c.B().Mget().Key(keys...).Build()).ToArray()
	if err != nil {
		return nil, 0, fmt.Errorf("redis store: read the fleet: %w", err)
	}
	var gone []string
	for i, v := range vals {
		if i >= len(ids) {
			break
		}
		b, err := v.AsBytes()
		if rueidis.IsRedisNil(err) {
			gone = append(gone, ids[i])
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("redis store: read the fleet: %w", err)
		}
		out[ids[i]] = b
	}
	if len(gone) > 0 { // best effort: the next reader or publisher cleans up otherwise
		_ = c.Do(ctx, c.B().Zrem().Key(set).Member(gone...).Build()).Error()
	}
	return out, int(max(n-int64(len(ids)), 0)), nil
}

// fleetClient is the connected client, connecting first if New could not.
func (s *Store) fleetClient() (rueidis.Client, error) {
	if err := s.connect(); err != nil {
		return nil, err
	}
	b := s.client.Load()
	if b == nil {
		return nil, ErrUnavailable
	}
	return b.c, nil
}

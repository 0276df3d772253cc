// Package redisstore keeps the state of cluster hot-param rules in Redis (standalone or Redis
// Cluster), shared by every replica: one atomic server-side script per request and slot.
//
// # Semantics
//
// Store implements hotparam.Remote with the local engine's semantics: an exact continuous token
// bucket of capacity Count+Burst refilled at Count per Duration (a request asking more than the
// capacity, and every request of a Count 0 rule, is blocked and consumes nothing); throttling
// that spaces a value's requests Duration/Count apart and blocks a request whose wait would
// exceed MaxWait (the wait is returned, the caller sleeps); concurrency leases that expire after
// Lease and that a release frees: the lease its LeaseID names (nothing when that id holds none),
// else the newest lease acquired without an id (never an id's: bare releases cannot free the
// slots of requests that named themselves), never below zero. Acquisitions under one LeaseID
// are all that id's; unlike the local engine, they end together, when the newest ends. A release of a Refund rule (bucket or throttle) gives
// back at most what the acquisition with the same LeaseID consumed for that value: nothing for
// a refused request (it consumed nothing), nothing without a LeaseID, never twice, and nothing
// once the rule's Lease has passed since the acquisition. A call is all or nothing: unless every op that is not
// Shadow passes, nothing is consumed; Release ops never block and always apply.
//
// A Probe op (Envoy's per-descriptor hits_addend 0) is decided as the acquisition it names and
// consumes nothing, as in the local engine: a bucket passes iff Hits tokens are there, a throttle
// iff its next slot is free now (it would not wait), concurrency iff Hits slots are free. Its
// result reports the state as it is; it writes no state, holds no lease, records nothing a
// refund could give back, and when refused blocks the call's other ops like any op. Probes
// coalesced with acquisitions of the same key are answered on the state the calls before them
// left, taking nothing from those after them; a cross-slot compensation gives nothing back for
// a probe.
//
// A throttle op that takes a turn reports where the schedule ends after it (RemoteResult.Turn).
// An Unhold op naming that turn (a held call given up, see hotparam.Limiter.Unhold) gives it
// back iff the schedule still ends there and was stored with the same count: the schedule is
// then as it was before the call, and the turns given up before it that it stood on come back
// with it. A turn with another taken after it is kept in the value's record of turns given up
// (Prefix:{value}:ruleID:u, at most 64, expiring with the last) until the turns behind it are
// given back, as in the local engine.
//
// # Time and precision
//
// The clock is Redis's (TIME inside the script; Redis 7 replicates scripts by their effects), so
// replicas with skewed clocks agree. Time is kept in whole microseconds since the Unix epoch
// (exact in Lua's doubles until the year 2255); Duration and Lease are truncated to microseconds.
// Count/Duration is reduced to lowest terms r/d; bucket tokens are counted in units of 1/d and a
// throttle schedule in microseconds plus a fraction in 1/r, so no fraction of a token or of a
// spacing is ever lost. CheckOp states the ranges in which this is exact; Eval rejects ops
// outside them. Waits and retry/reset times are returned in nanoseconds, rounded up.
//
// # Keys and memory
//
// A value's state for a rule is at Prefix:{value}:ruleID:kind (kind B bucket, T throttle, c
// concurrency; a value that is long, empty, starts with '#' or holds a brace is replaced by a
// hash of it). The hash tag is the value, so all rules of one value share a Redis Cluster slot.
// A bucket is a string of three little-endian doubles (units, time, scale; no parsing), expiring when it would be full again (a full bucket
// is deleted); a throttle schedule expires when it is in the past; a concurrency value is a
// sorted set of lease expiries (members named by the lease id, scored +end, or by the call,
// scored -end so that the newest lease without an id is the lowest score), expiring with its
// last lease and deleted when empty. A Refund rule's acquisition with a LeaseID adds a record
// of what it consumed at Prefix:{value}:ruleID:r:leaseID ("hits end"), expiring with the lease
// and deleted by the release that gives it all back. A throttle value's turns given up behind
// others are at Prefix:{value}:ruleID:u (40 bytes each, at most 64), expiring with the last of
// them. Redis memory is therefore bounded by the values active
// within one duration or lease.
//
// # Cluster mode
//
// In standalone mode a call is one EVALSHA. In cluster mode the ops are grouped by slot and the
// groups are sent together, one EVALSHA each, to the nodes that own them: one round trip per
// slot, in parallel. Each group is atomic; across groups all or nothing is best effort: when a
// group blocks or fails while others consumed, Eval sends the others a compensating call that gives the
// tokens, schedule and leases back. Between the two calls a concurrent request may see the
// consumed state, and a compensation that fails is lost (the tokens refill, the leases expire).
//
// # Refusals without Redis
//
// When Redis refuses a value, the replica keeps the refusal (Config.BlockedCache entries, 10000
// by default) until the instant Redis said the request may pass, and answers the same request
// (bucket: one hit; throttle: the same or a shorter max wait) with the same refusal without a
// call, even while the breaker is open; Stats.CacheHits counts them. A bucket acquisition that
// passes and leaves less than a token is kept the same way, until the next token is there: the
// calls that come after it, and those queued behind it (see the coalescing of calls), are
// refused without a call, so a value over its limit costs Redis about one call per token it
// gives, the call that takes it. An entry ends when Redis's answer says, counted from the
// call's start, since Redis may have computed it as soon as then; Redis may also have computed
// it as late as the answer came back. A call of one bucket acquisition that comes in between
// (at most 2ms, Stats.Held) waits for the later instant before it goes to Redis: went earlier,
// it would often find the token not yet back and be refused by Redis, only to make an entry
// that ends early again. The cache never admits:
// every admission comes from Redis, so admissions stay exact. It can only refuse what Redis
// would have admitted, when tokens come back in a way this replica does not see before the entry
// ends: a refund or a throttle turn given back on another replica, or a key deleted by hand. A
// probe's refusal is kept as the refusal of a request that may not wait, and a cached refusal
// answers a probe (refused until the same instant), except a throttle probe with a max wait,
// whose remaining the entry does not know. See blocked for the details.
//
// Config.BookAhead (off by default) makes the call that takes a hot value's last token book
// the tokens of the next BookAhead too, which the replica then gives out itself as they come
// due, with the answers the bucket would give; what is left goes back to the bucket before the
// value's next call to Redis or when the booking ends. See book.go.
//
// # Failures
//
// Every Eval has Config.Timeout as its deadline. An error means nothing was decided; the caller
// applies its fallback. Groups that did answer in a call that failed elsewhere are given back
// as above; a script that Redis ran after the deadline had passed is not (its tokens refill and
// its leases expire). BreakerFailures consecutive failures open a circuit breaker: Eval then
// returns ErrUnavailable at once, and Run probes Redis with PING every BreakerCooldown, closing
// the breaker when it answers. A Redis restarted on the same address is used again without a
// new Store (scripts are sent again with EVAL when the server answers NOSCRIPT).
//
// Options.OnTransition is told each change once, never once per call: Opened (the failures
// that opened the breaker and the last error), FallbackStarted (the first NoteFallback after
// it: callers say through NoteFallback that they decided a call by their fallback) and Closed
// (the outage's duration, failed calls, fallback decisions, short circuits and probes).
//
// # State loss
//
// A key deleted before it expires hands its value a full allowance again. Redis deletes keys
// under maxmemory with any policy but noeviction (every key of the store has a TTL, so the
// volatile-* policies evict them too), and a Redis restarted without persistence starts empty.
// Check reads each node's maxmemory-policy (CONFIG GET, or INFO where CONFIG is refused),
// maxmemory and persistence; Run reads INFO every Config.SampleInterval while the breaker is
// closed and counts in Stats the keys the masters evicted (the growth of evicted_keys, every
// key of the server) and the restarts (a master's run_id changed), and tells Options.OnServer
// when evictions start and stop, when a master restarted and when its policy evicts.
//
// # Requirements
//
// Redis 7.0 or newer (scripts replicated by their effects, SET PXAT, PEXPIREAT GT); tested with
// 7.0.
//
// # Cost
//
// One call is one EVALSHA per slot group, which reads the Redis clock once (TIME), reads each
// state once (GET, or ZREMRANGEBYSCORE and ZCARD for concurrency) and writes only the states
// that changed (one SET, or ZADD and PEXPIREAT). Op arguments and states are fixed binary
// layouts unpacked with struct, not parsed. A call of one bucket acquisition (the commonest:
// one value, one rule) takes a fast path that makes no table but its reply; BenchmarkRedisCost
// prints what Redis spends per call. Such calls are coalesced per lane (the whole Redis, or a
// slot in cluster mode) while one is in flight (see batch.go): one script call then answers
// many, reading and writing each state once; a call waits for another value's call in flight at
// most Config.BatchWait. Versions before this one kept buckets and throttles as text under the
// lower-case kinds b and t: this one neither reads nor overwrites them, so during a rolling
// upgrade old and new replicas count apart, for at most one Duration.
//
// # Tests
//
// The script takes an optional time argument in place of the Redis clock; only this package's
// tests set it (Store.clock), so that their expectations are exact to the microsecond.
package redisstore

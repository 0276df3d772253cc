-- extauthz hot-param check: every op of one slot group, atomic, all or nothing.
--
-- ARGV[1]  now in microseconds since the Unix epoch, or "" to read redis TIME
-- ARGV[2]  nonce: unique per call, names the anonymous concurrency leases this call adds
-- ARGV[3]  number of ops
-- then 12 fields per op:
--   key index (1-based into KEYS), kind (b bucket | t throttle | c concurrency),
--   count, burst, duration (us), max wait (ns), lease (us), hits,
--   flags (1 release, 2 refund, 4 shadow, 8 undo: give back what this nonce's call took),
--   rate (count and duration are reduced by their greatest common divisor: rate/duration is
--   count per duration in lowest terms),
--   lease id (concurrency; "" for none),
--   refund record key index (1-based into KEYS; 0 for none)
--
-- A concurrency value is a sorted set of leases scored by their expiry (us). A lease with an id
-- is held by members "=id:1" .. "=id:hits"; one without, by "nonce:op:1" .. "nonce:op:hits". A
-- release with an id removes that id's members (the highest numbers first), and nothing when
-- the id holds none; a release without an id removes the newest leases (highest expiry).
--
-- A refund (a release of a Refund rule's bucket or throttle) gives back at most what the
-- acquisition of the same lease id consumed for that value, and nothing without a lease id: an
-- acquisition that consumed (the call passed) adds its hits to its lease's record, a string
-- "hits end" expiring at end, a lease after; a release takes from it what it gives back. An undo (flag 8) gives
-- back its hits and takes them from the record.
--
-- Keys expire at absolute instants of the script's clock (PXAT, PEXPIREAT): when a bucket is
-- full again, a schedule is past, the last lease ends.
--
-- Returns {ok, then per op: allowed, remaining, reset after (ns), retry after (ns), wait (ns)}.
--
-- All numbers are integers kept below 2^53 (the Go side checks the bounds), so the double
-- arithmetic of Lua is exact. Bucket tokens are scaled by the (reduced) duration D in
-- microseconds: a bucket of capacity C holds C*D units and gains rate units per microsecond. A
-- throttle schedule is a time in microseconds plus a fraction y/rate. Each state stores its scale;
-- a state read with another scale (the rule's count changed) is converted, rounding down.

local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  return q, r
end

local function cdiv(a, b)
  local q, r = idiv(a, b)
  if r > 0 then q = q + 1 end
  return q
end

-- ns of a/b microseconds, rounded up.
local function ns(a, b)
  local q, r = idiv(a, b)
  return q * 1000 + cdiv(r * 1000, b)
end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nonce = ARGV[2]
local n = tonumber(ARGV[3])

local ops = {}
for i = 1, n do
  local b = 3 + (i - 1) * 12
  local f = tonumber(ARGV[b + 9])
  ops[i] = {
    k = tonumber(ARGV[b + 1]), kind = ARGV[b + 2],
    count = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]), dur = tonumber(ARGV[b + 5]),
    maxwait = tonumber(ARGV[b + 6]), lease = tonumber(ARGV[b + 7]), hits = tonumber(ARGV[b + 8]),
    rate = tonumber(ARGV[b + 10]), id = ARGV[b + 11], lk = tonumber(ARGV[b + 12]),
    release = f % 2 == 1, refund = math.floor(f / 2) % 2 == 1, shadow = math.floor(f / 4) % 2 == 1,
    undo = math.floor(f / 8) % 2 == 1,
  }
end

-- State per key, loaded on first use. base holds the state with the releases applied (always
-- written); work is a copy with the acquisitions applied (written only when all pass).
local base, work = {}, {}

local function load(op)
  local s = base[op.k]
  if s then return s end
  local key = KEYS[op.k]
  s = {kind = op.kind}
  if op.kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    s.card = redis.call('ZCARD', key)
    s.stored = s.card
    s.adds = {}
    s.names = {}
  else
    local v = redis.call('GET', key)
    if v then
      local a, b, c = string.match(v, '^(%d+) (%d+) (%d+)$')
      s.x, s.y = tonumber(a), tonumber(b)
      local old = tonumber(c)
      if op.kind == 'b' and old ~= op.dur then
        s.x = math.floor(s.x / old * op.dur)
      elseif op.kind == 't' and old ~= op.rate then
        s.y = math.floor(s.y / old * op.rate)
      end
    end
  end
  base[op.k] = s
  return s
end

local function copy(s)
  local c = {}
  for k, v in pairs(s) do c[k] = v end
  if s.adds then c.adds, c.names = {}, {} end
  return c
end

-- record returns what the lease whose record is KEYS[lk] consumed and has not been given back: 0
-- when the record is missing or its lease is over. A record is "hits end" (end in us).
local function record(lk)
  local v = redis.call('GET', KEYS[lk])
  if not v then return 0 end
  local h, e = string.match(v, '^(%d+) (%d+)$')
  if not h or tonumber(e) <= now then return 0 end
  return tonumber(h), tonumber(e)
end

-- refundable returns how many of a refund's hits may be given back, and takes them from the
-- lease's record: an undo gives back all its hits.
local function refundable(op)
  local give = op.hits
  if op.lk == 0 then
    if op.undo then return give end
    return 0
  end
  local had, e = record(op.lk)
  if not op.undo then give = math.min(give, had) end
  if had - give > 0 then
    redis.call('SET', KEYS[op.lk], string.format('%d %d', had - give, e), 'KEEPTTL')
  elseif had > 0 then
    redis.call('DEL', KEYS[op.lk])
  end
  return give
end

-- Bucket: x = tokens*dur, y = time of x. A missing bucket is full.
local function refill(s, op)
  local cap = (op.count + op.burst) * op.dur
  if s.x == nil or s.x >= cap then
    s.x = cap
  else
    local el = now - s.y
    if el < 0 then el = 0 end
    if el >= cdiv(cap - s.x, op.rate) then s.x = cap else s.x = s.x + el * op.rate end
  end
  s.y = now
  return cap
end

-- A request that can never pass (count 0, or more hits than the capacity) is told to try again
-- a duration later: dur is the reduced duration, count/rate the factor it was reduced by.
local function bucket(s, op, r)
  if op.count <= 0 then
    if not op.release then r.allowed, r.retry = 0, op.dur * 1000 end
    return
  end
  local cap = refill(s, op)
  if op.release then
    if op.refund then
      local give = refundable(op)
      if give > 0 then
        s.x = math.min(cap, s.x + give * op.dur)
        s.dirty = true
      end
    end
  elseif op.hits * op.dur > cap then
    r.allowed = 0
    r.retry = op.dur * (op.count / op.rate) * 1000
  elseif s.x >= op.hits * op.dur then
    s.x = s.x - op.hits * op.dur
    s.dirty = true
  else
    r.allowed = 0
    r.retry = ns(op.hits * op.dur - s.x, op.rate)
  end
  r.remaining = math.floor(s.x / op.dur)
  s.cap, s.scale = cap, op.dur
  r.reset = ns(cap - s.x, op.rate)
  s.full = cdiv(cap - s.x, op.rate)
end

-- Throttle: x = microseconds, y = fraction in 1/count of the instant the schedule is free.
local function throttle(s, op, r)
  if op.count <= 0 then
    if not op.release then r.allowed, r.retry = 0, math.max(op.dur * 1000 - op.maxwait, 1) end
    return
  end
  if s.x == nil or s.x < now or (s.x == now and s.y == 0) then
    s.x, s.y = now, 0
  elseif s.y >= op.rate then
    local q, m = idiv(s.y, op.rate)
    s.x, s.y = s.x + q, m
  end
  local q, m = idiv(op.hits * op.dur, op.rate)
  if op.release then
    local give = 0
    if op.refund then give = refundable(op) end
    if give > 0 then
      q, m = idiv(give * op.dur, op.rate)
      local x, y = s.x - q, s.y - m
      if y < 0 then x, y = x - 1, y + op.rate end
      if x < now then x, y = now, 0 end
      s.x, s.y, s.dirty = x, y, true
    end
  else
    local wait = (s.x - now) * 1000 + cdiv(s.y * 1000, op.rate)
    if wait > op.maxwait then
      r.allowed = 0
      r.retry = wait - op.maxwait
    else
      r.wait = wait
      local y = s.y + m
      s.x = s.x + q
      if y >= op.rate then s.x, y = s.x + 1, y - op.rate end
      s.y, s.dirty = y, true
    end
  end
  s.scale = op.rate
  local ahead = (s.x - now) * op.rate + s.y
  r.reset = ns(ahead, op.rate)
  local room = math.floor(op.maxwait / 1000) * op.rate - ahead
  if r.allowed == 1 and room >= 0 then r.remaining = math.floor(room / op.dur) + 1 end
end

-- Concurrency: a sorted set of lease expiries (us); card counts the leases after this call,
-- stored those in the set now (releases are removed at once, acquisitions added at the end).
local function first_end(s, key)
  if s.stored > 0 then
    local e = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return tonumber(e[2])
  end
  if #s.adds > 0 then return s.adds[1][1] end
  return now + s.lease
end

local function named(op, j) return '=' .. op.id .. ':' .. j end

local function anonymous(i, j) return nonce .. ':' .. i .. ':' .. j end

local function remove(s, key, m)
  if #m == 0 then return end
  local d = redis.call('ZREM', key, unpack(m))
  s.stored, s.card, s.dirty = s.stored - d, s.card - d, true
end

-- release_id removes up to hits members of the lease named op.id, the highest numbers first.
local function release_id(s, key, op)
  local score = redis.call('ZSCORE', key, named(op, 1))
  if not score then return end
  local pre = '=' .. op.id .. ':'
  local js = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, score, score)) do
    if string.sub(m, 1, #pre) == pre then
      local j = tonumber(string.sub(m, #pre + 1))
      if j then js[#js + 1] = j end
    end
  end
  table.sort(js, function(a, b) return a > b end)
  local m = {}
  for x = 1, math.min(op.hits, #js) do m[x] = pre .. js[x] end
  remove(s, key, m)
end

local function concurrency(s, op, r, i)
  local key = KEYS[op.k]
  s.lease = op.lease
  if op.undo then
    -- give back the leases this nonce's call added (a cross-slot call that blocked elsewhere)
    local m = {}
    for j = 1, op.hits do m[j] = anonymous(i, j) end
    local before = s.stored
    remove(s, key, m)
    if s.stored == before and op.id ~= '' then
      m = {}
      for j = 1, op.hits do m[j] = named(op, j) end
      remove(s, key, m)
    end
  elseif op.release then
    if op.id ~= '' then
      release_id(s, key, op)
    else
      local d = math.min(op.hits, s.stored)
      if d > 0 then
        redis.call('ZPOPMAX', key, d)
        s.stored, s.card, s.dirty = s.stored - d, s.card - d, true
      end
    end
  elseif s.card + op.hits <= op.count then
    -- an id already held (or taken earlier in this call) leaves this lease anonymous
    local byid = op.id ~= '' and not s.names[op.id] and not redis.call('ZSCORE', key, named(op, 1))
    if byid then s.names[op.id] = true end
    for j = 1, op.hits do
      local m = anonymous(i, j)
      if byid then m = named(op, j) end
      s.adds[#s.adds + 1] = {now + op.lease, m}
    end
    s.card, s.dirty = s.card + op.hits, true
  else
    -- as the local engine: the time until the first lease ends (a lease's length when none is
    -- held), a lower bound when more than one must end
    r.allowed = 0
    r.retry = math.max((first_end(s, key) - now) * 1000, 1)
  end
  r.remaining = math.max(op.count - s.card, 0)
end

local function run(s, op, r, i)
  if op.kind == 'b' then bucket(s, op, r)
  elseif op.kind == 't' then throttle(s, op, r)
  else concurrency(s, op, r, i) end
end

local res = {}
for i = 1, n do res[i] = {allowed = 1, remaining = 0, reset = 0, retry = 0, wait = 0} end

for i = 1, n do
  if ops[i].release then run(load(ops[i]), ops[i], res[i], i) end
end
local ok = 1
for i = 1, n do
  local op = ops[i]
  if not op.release then
    local s = work[op.k]
    if not s then s = copy(load(op)); work[op.k] = s end
    run(s, op, res[i], i)
    if res[i].allowed == 0 and not op.shadow then ok = 0 end
  end
end

local function write(key, s)
  if not s.dirty then return end
  if s.kind == 'c' then
    for _, a in ipairs(s.adds) do redis.call('ZADD', key, string.format('%d', a[1]), a[2]) end
    if s.card <= 0 then
      redis.call('DEL', key)
    else
      local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      redis.call('PEXPIREAT', key, string.format('%d', cdiv(tonumber(e[2]), 1000)))
    end
  elseif s.kind == 'b' then
    if s.x >= s.cap then
      redis.call('DEL', key)
    else
      redis.call('SET', key, string.format('%d %d %d', s.x, s.y, s.scale), 'PXAT', string.format('%d', cdiv(now + s.full, 1000)))
    end
  else
    if s.x < now or (s.x == now and s.y == 0) then
      redis.call('DEL', key)
    else
      redis.call('SET', key, string.format('%d %d %d', s.x, s.y, s.scale), 'PXAT', string.format('%d', cdiv(s.x + 1, 1000)))
    end
  end
end

for k, s in pairs(base) do
  local w = work[k]
  if ok == 1 and w then s = w end
  write(KEYS[k], s)
end

-- what the refundable acquisitions of a call that passed consumed, by lease
if ok == 1 then
  for i = 1, n do
    local op = ops[i]
    if op.lk > 0 and not op.release and res[i].allowed == 1 and op.count > 0 then
      local had = record(op.lk)
      local e = now + op.lease
      redis.call('SET', KEYS[op.lk], string.format('%d %d', had + op.hits, e), 'PXAT', string.format('%d', cdiv(e, 1000)))
    end
  end
end

local out = {ok}
for i = 1, n do
  local r = res[i]
  out[#out + 1] = r.allowed
  out[#out + 1] = r.remaining
  out[#out + 1] = r.reset
  out[#out + 1] = r.retry
  out[#out + 1] = r.wait
end
return out

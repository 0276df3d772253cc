-- extauthz hot-param check: every op of one slot group, atomic, all or nothing.
--
-- ARGV[1]  now in microseconds since the Unix epoch, or "" to read redis TIME (once)
-- ARGV[2]  nonce: unique per call, names the anonymous concurrency leases this call adds; "*"
--          makes the call a batch of independent bucket acquisitions of one key (fast path)
-- ARGV[3..] one op each: 15 little-endian doubles, then the lease id (concurrency; may be empty):
--   key index (1-based into KEYS), kind (1 bucket, 2 throttle, 3 concurrency, 4 a postpaid
--   bucket's charge, 5 a throttle turn given back), count,
--   capacity (count+burst), duration (us), rate, max wait (ns), lease (us), hits,
--   release, refund, shadow, undo (1 or 0; undo: give back what this nonce's call took),
--   refund record key index (1-based into KEYS; 0 for none), probe (1 or 0).
--   rate/duration is count per duration in lowest terms (both divided by their gcd).
--
-- A bucket or throttle state is a string of 3 little-endian doubles: x, y, scale. A concurrency
-- value is a sorted set of leases scored by their expiry e (us): +e for a lease with an id, -e
-- for one without (so that the newest of those is the lowest score, found without reading the
-- id's leases). The leases of an id are held by
-- members "=id:1" .. "=id:n", all with one score: an acquisition under an id already held adds
-- "=id:n+1" .. and moves the id's end to the later one (its slots stay held as long as its
-- newest lease). One without an id is held by "nonce:op:1" .. "nonce:op:hits". A release with an
-- id removes that id's members (the highest numbers first), and nothing when the id holds none;
-- a release without an id removes the newest leases acquired without one (highest expiry), never
-- an id's, as the memory engine (hotparam shard.free): bare releases cannot free the slots of
-- requests that named themselves.
--
-- A refund (a release of a Refund rule's bucket or throttle) gives back at most what the
-- acquisition of the same lease id consumed for that value, and nothing without a lease id: an
-- acquisition that consumed (the call passed) appends to its lease's record a pair of doubles
-- (hits, end in us, a lease after it), the record expiring with its last end; a release takes
-- what it gives back from the pairs not ended, the latest first, as the memory engine does, so
-- an id used again never brings back what an ended acquisition took. An undo gives back its
-- hits and takes them from the record the same way. A record keeps at most 64 pairs (the
-- oldest go first), as the memory engine keeps 64 records a value.
--
-- A charge (kind 4, sent as a release) is a postpaid bucket's: it takes hits from whatever is
-- left, the bucket going into debt (x < 0) down to one bucket below empty, and like a release
-- it is applied whatever the outcome and never refused. A bucket in debt refills from its debt
-- at the same rate; it reports 0 remaining and its reset after counts the debt.
--
-- A turn given back (kind 5, sent as a release; max wait and lease carry the turn: the
-- microseconds and fraction the schedule ended at after an earlier call took it; the refund
-- record key index names the value's record of turns given up) gives back that call's hits if
-- the schedule still ends there (no turn was taken after it; stored with the same rate): the
-- schedule is as it was before that call. Then each turn given up earlier that ended where the
-- schedule now ends is given back too, and so on. A turn with one taken after it changes
-- nothing now: it is added to the record (5 doubles: start, end, rate; at most 64, those whose
-- end is ahead; the record expires with the last end) and given back with the turns behind it.
-- It reports allowed iff it gave turns back, and how many as remaining.
--
-- A probe (never a release) is decided as the acquisition it names and consumes nothing: a
-- bucket passes iff hits tokens are there, a throttle iff its next slot is free now (no wait),
-- concurrency iff hits slots are free. It reports the state as it is (remaining, reset after),
-- blocks the call's other ops when refused (unless shadow), and records no refund.
--
-- Keys expire at absolute instants of the script's clock (PXAT, PEXPIREAT): when a bucket is
-- full again, a schedule is past, the last lease ends.
--
-- Returns {ok, then per op: allowed, remaining, reset after (ns), retry after (ns), wait (ns),
-- and for a throttle op that took a turn the schedule's end after it (microseconds, fraction;
-- else 0, 0)}. The fast path answers 6 numbers per op: ok and the first five.
--
-- All numbers are integers kept below 2^53 (the Go side checks the bounds), so the double
-- arithmetic of Lua is exact. Bucket tokens are scaled by the (reduced) duration D in
-- microseconds: a bucket of capacity C holds C*D units and gains rate units per microsecond. A
-- throttle schedule is a time in microseconds plus a fraction y/rate. Each state stores its scale;
-- a state read with another scale (the rule's count changed) is converted, rounding down.
--
-- Cost: one TIME, one GET per state read, one write per state changed; no parsing (struct); a
-- call of one bucket acquisition takes a fast path that builds no table but its answer.

local floor, min, max = math.floor, math.min, math.max
local pack, sunpack, unpack = struct.pack, struct.unpack, unpack
local call = redis.call

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nonce = ARGV[2]
local n = #ARGV - 2

local function idiv(a, b)
  local q = floor(a / b)
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

-- Fast path: one bucket acquisition with no refund record, the commonest call, or a batch of
-- them (nonce "*"): calls of one key, each its own call, as if sent one after the other at the
-- same instant, answered one after the other (6 numbers each, as a call of one op). The same
-- arithmetic as bucket() below, without the general path's tables and closures; one GET and at
-- most one SET for the whole batch.
local batch = nonce == '*'
if n == 1 or batch then
  local k, kind, count, cap, dur, rate, _, _, hits, rel, _, shadow, _, lk, probe =
    sunpack('<ddddddddddddddd', ARGV[3])
  if kind == 1 and rel == 0 and lk == 0 and count > 0 then
    local key = KEYS[k]
    cap = cap * dur
    local x = cap
    local v = call('GET', key)
    if v and #v == 24 then
      local sx, sy, old = sunpack('<ddd', v)
      if old ~= dur then sx = floor(sx / old * dur) end
      if sx < cap then
        local el = now - sy
        if el < 0 then el = 0 end
        if el < cdiv(cap - sx, rate) then x = sx + el * rate end
      end
    end
    local out, taken = {}, false
    for i = 1, n do
      if i > 1 then
        -- the batch's ops share the key and the rule's numbers: only hits and shadow differ
        _, _, _, _, _, _, _, _, hits, _, _, shadow, _, _, probe = sunpack('<ddddddddddddddd', ARGV[i + 2])
      end
      local need = hits * dur
      local allowed, retry = 1, 0
      if need > cap then
        allowed, retry = 0, dur * (count / rate) * 1000
      elseif x >= need then
        if probe == 0 then x, taken = x - need, true end
      else
        allowed, retry = 0, ns(need - x, rate)
      end
      local ok = 1
      if allowed == 0 and shadow == 0 then ok = 0 end
      local b = (i - 1) * 6
      out[b + 1], out[b + 2], out[b + 3], out[b + 4], out[b + 5], out[b + 6] =
        ok, allowed, max(floor(x / dur), 0), ns(cap - x, rate), retry, 0
    end
    if taken then
      call('SET', key, pack('<ddd', x, now, dur), 'PXAT', cdiv(now + cdiv(cap - x, rate), 1000))
    end
    return out
  end
  if batch then return redis.error_reply('batch of ops that are not plain bucket acquisitions') end
end

-- ops, and which kinds of work the call holds: helpers are made only for the kinds present
local ops = {}
local has_throttle, has_concurrency, has_refund, has_unhold = false, false, false, false
for i = 1, n do
  local a = ARGV[i + 2]
  local k, kind, count, cap, dur, rate, maxwait, lease, hits, rel, refund, shadow, undo, lk, probe =
    sunpack('<ddddddddddddddd', a)
  local charge, unhold = kind == 4, kind == 5
  if charge then kind, rel = 1, 1 elseif unhold then kind, rel = 2, 1 end
  ops[i] = {k = k, kind = kind, count = count, cap = cap, dur = dur, rate = rate, maxwait = maxwait,
    lease = lease, hits = hits, release = rel == 1, refund = refund == 1, shadow = shadow == 1,
    undo = undo == 1, lk = lk, probe = probe == 1 and rel == 0, charge = charge, unhold = unhold, a = a}
  if kind == 2 then has_throttle = true elseif kind == 3 then has_concurrency = true end
  if refund == 1 then has_refund = true end
  if unhold then has_unhold = true end
end

-- State per key, loaded on first use. Releases apply to it at once; acquisitions too, after
-- saving it (sx, sy, sfull; card), so that a call that does not pass can restore it.
local states = {}

local function load(op)
  local s = states[op.k]
  if s then return s end
  local key = KEYS[op.k]
  -- every field named at once: the table is sized once
  s = {kind = op.kind, x = false, y = false, held = false, cap = 0, scale = 0, full = 0,
    saved = false, sx = false, sy = false, sfull = 0, taken = false, dirty = false, old = 0}
  if op.kind == 3 then
    call('ZREMRANGEBYSCORE', key, -now, now) -- ended, with an id or without
    s.card = call('ZCARD', key)
    s.stored = s.card
    s.adds = {}
    s.names = {}
  else
    local v = call('GET', key)
    if v and #v == 24 then
      local x, y, old = sunpack('<ddd', v)
      s.x, s.y, s.held, s.old = x, y, true, old
      if op.kind == 1 and old ~= op.dur then
        s.x = floor(x / old * op.dur)
      elseif op.kind == 2 and old ~= op.rate then
        s.y = floor(y / old * op.rate)
      end
    end
  end
  states[op.k] = s
  return s
end

local records, keep, refundable
if has_refund then
  -- records returns the pairs of the record KEYS[lk] whose acquisition has not ended, oldest
  -- first, as one list (hits, end, hits, end, ...).
  records = function(lk)
    local v, list = call('GET', KEYS[lk]), {}
    if not v or #v % 16 ~= 0 then return list end
    for p = 1, #v, 16 do
      local h, e = sunpack('<dd', v, p)
      if e > now and h > 0 then
        list[#list + 1], list[#list + 2] = h, e
      end
    end
    return list
  end

  -- keep stores the pairs of list (at most the 64 latest) as the record KEYS[lk], expiring with
  -- the last end, or deletes the record when none is left.
  keep = function(lk, list)
    local parts, last = {}, 0
    for x = max(1, #list - 127), #list, 2 do
      parts[#parts + 1] = pack('<dd', list[x], list[x + 1])
      last = max(last, list[x + 1])
    end
    if #parts == 0 then
      call('DEL', KEYS[lk])
    else
      call('SET', KEYS[lk], table.concat(parts), 'PXAT', cdiv(last, 1000))
    end
  end

  -- refundable returns how many of a refund's hits may be given back, and takes them from the
  -- lease's record, the latest acquisition first: an undo gives back all its hits.
  refundable = function(op)
    local give = op.hits
    if op.lk == 0 then
      if op.undo then return give end
      return 0
    end
    local list = records(op.lk)
    local left, taken = give, 0
    for x = #list - 1, 1, -2 do
      if left <= 0 then break end
      local k = min(left, list[x])
      list[x], left, taken = list[x] - k, left - k, taken + k
    end
    if taken > 0 then
      local kept = {}
      for x = 1, #list, 2 do
        if list[x] > 0 then kept[#kept + 1], kept[#kept + 2] = list[x], list[x + 1] end
      end
      keep(op.lk, kept)
    end
    if op.undo then return give end
    return taken
  end
end

-- save keeps a state as it is before the call's first acquisition on it.
local function save(s)
  if s.saved then return end
  s.saved, s.sx, s.sy, s.sfull, s.scard = true, s.x, s.y, s.full, s.card
end

-- Bucket: x = tokens*dur, y = time of x. A missing bucket is full. A request that can never pass
-- (count 0, or more hits than the capacity) is told to try again a duration later: dur is the
-- reduced duration, count/rate the factor it was reduced by.
local function bucket(s, op, r)
  if op.count <= 0 then
    if not op.release then r[1], r[4] = 0, op.dur * 1000 end
    return
  end
  if not op.release then save(s) end
  local cap = op.cap * op.dur
  if not s.x or s.x >= cap then
    s.x = cap
  else
    local el = now - s.y
    if el < 0 then el = 0 end
    if el >= cdiv(cap - s.x, op.rate) then s.x = cap else s.x = s.x + el * op.rate end
  end
  s.y = now
  local need = op.hits * op.dur
  if op.charge then
    -- hits <= 2*capacity (the Go side cuts it): at most 3 capacities below full, exact
    s.x = max(s.x - need, -cap)
    s.dirty = true
  elseif op.release then
    if op.refund then
      local give = refundable(op)
      if give > 0 then
        s.x = min(cap, s.x + give * op.dur)
        s.dirty = true
      end
    end
  elseif need > cap then
    r[1], r[4] = 0, op.dur * (op.count / op.rate) * 1000
  elseif s.x >= need then
    if not op.probe then
      s.x = s.x - need
      s.taken = true
    end
  else
    r[1], r[4] = 0, ns(need - s.x, op.rate)
  end
  r[2] = max(floor(s.x / op.dur), 0)
  s.cap, s.scale = cap, op.dur
  r[3] = ns(cap - s.x, op.rate)
  s.full = cdiv(cap - s.x, op.rate)
end

local given_up, keep_given_up
if has_unhold then
  -- given_up returns the turns given up in the record KEYS[lk] whose end is ahead, each
  -- {start x, start y, end x, end y, rate}.
  given_up = function(lk)
    local v, list = call('GET', KEYS[lk]), {}
    if not v or #v % 40 ~= 0 then return list end
    for p = 1, #v, 40 do
      local sx, sy, ex, ey, rate = sunpack('<ddddd', v, p)
      if ex > now then list[#list + 1] = {sx, sy, ex, ey, rate} end
    end
    return list
  end

  -- keep_given_up stores list as the record KEYS[lk], expiring with its last end, or deletes
  -- the record when it is empty.
  keep_given_up = function(lk, list)
    if #list == 0 then
      call('DEL', KEYS[lk])
      return
    end
    local parts, last = {}, 0
    for j = 1, #list do
      local g = list[j]
      parts[j] = pack('<ddddd', g[1], g[2], g[3], g[4], g[5])
      last = max(last, g[3])
    end
    call('SET', KEYS[lk], table.concat(parts), 'PXAT', cdiv(last + 1, 1000))
  end
end

local throttle
if has_throttle then
  -- Throttle: x = microseconds, y = fraction in 1/rate of the instant the schedule is free.
  throttle = function(s, op, r)
    if op.unhold then
      -- the turn that ended the schedule at (maxwait, lease) goes back if nothing came after
      -- it, with the turns given up that it stood on; otherwise it is remembered as given up
      r[1] = 0
      if op.count <= 0 then return end
      local q, m = idiv(op.hits * op.dur, op.rate)
      local x, y = op.maxwait - q, op.lease - m -- where the turn started
      if y < 0 then x, y = x - 1, y + op.rate end
      local list = {}
      if op.lk > 0 then list = given_up(op.lk) end
      if s.x == op.maxwait and s.y == op.lease and s.old == op.rate then
        local n, j = 1, 1
        while j <= #list do
          local g = list[j]
          if g[3] == x and g[4] == y and g[5] == op.rate then
            x, y, n = g[1], g[2], n + 1
            table.remove(list, j)
            j = 1 -- the one it stood on may come before it
          else
            j = j + 1
          end
        end
        if x < now then x, y = now, 0 end
        s.x, s.y, s.old, s.scale, s.dirty, r[1], r[2] = x, y, op.rate, op.rate, true, 1, n
      elseif op.maxwait > now and #list < 64 then
        list[#list + 1] = {x, y, op.maxwait, op.lease, op.rate}
      end
      if op.lk > 0 then keep_given_up(op.lk, list) end
      return
    end
    if op.count <= 0 then
      -- a probe waits for nothing: its retry is the whole duration
      local mw = op.maxwait
      if op.probe then mw = 0 end
      if not op.release then r[1], r[4] = 0, max(op.dur * 1000 - mw, 1) end
      return
    end
    if not op.release then save(s) end
    if not s.x or s.x < now or (s.x == now and s.y == 0) then
      s.x, s.y = now, 0
    elseif s.y >= op.rate then
      local q, m = idiv(s.y, op.rate)
      s.x, s.y = s.x + q, m
    end
    if op.release then
      local give = 0
      if op.refund then give = refundable(op) end
      if give > 0 then
        local q, m = idiv(give * op.dur, op.rate)
        local x, y = s.x - q, s.y - m
        if y < 0 then x, y = x - 1, y + op.rate end
        if x < now then x, y = now, 0 end
        s.x, s.y, s.dirty = x, y, true
      end
    else
      local wait = (s.x - now) * 1000 + cdiv(s.y * 1000, op.rate)
      if op.probe then
        -- passes only when the next slot is free now; waits for it otherwise
        if wait > 0 then r[1], r[4] = 0, wait end
      elseif wait > op.maxwait then
        r[1], r[4] = 0, wait - op.maxwait
      else
        r[5] = wait
        local q, m = idiv(op.hits * op.dur, op.rate)
        local y = s.y + m
        s.x = s.x + q
        if y >= op.rate then s.x, y = s.x + 1, y - op.rate end
        s.y, s.taken = y, true
        r[6], r[7] = s.x, y
      end
    end
    s.scale = op.rate
    local ahead = (s.x - now) * op.rate + s.y
    r[3] = ns(ahead, op.rate)
    local room = floor(op.maxwait / 1000) * op.rate - ahead
    if (r[1] == 1 or op.probe) and room >= 0 then r[2] = floor(room / op.dur) + 1 end
  end
end

local concurrency, chunked
if has_concurrency then
  -- the lease id of a concurrency op, after its numbers
  local function id(op) return string.sub(op.a, 121) end

  -- Concurrency: card counts the leases after this call, stored those in the set now (releases
  -- are removed at once, acquisitions added at the end).
  local function first_end(s, key)
    if s.stored > 0 then
      local e = math.huge
      local a = call('ZRANGEBYSCORE', key, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if a[2] then e = tonumber(a[2]) end
      a = call('ZREVRANGEBYSCORE', key, '(0', '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if a[2] then e = min(e, -tonumber(a[2])) end
      return e
    end
    if #s.adds > 0 then return math.abs(s.adds[1]) end
    return now + s.lease
  end

  local function named(lid, j) return '=' .. lid .. ':' .. j end

  local function anonymous(i, j) return nonce .. ':' .. i .. ':' .. j end

  -- chunked calls cmd key with the elements of list, at most 1000 at a time (Lua's stack is
  -- small); it returns the sum of the replies.
  chunked = function(cmd, key, list)
    local sum = 0
    for i = 1, #list, 1000 do
      sum = sum + call(cmd, key, unpack(list, i, min(i + 999, #list)))
    end
    return sum
  end

  local function remove(s, key, m)
    if #m == 0 then return end
    local d = chunked('ZREM', key, m)
    s.stored, s.card, s.dirty = s.stored - d, s.card - d, true
  end

  -- held returns the numbers of the members held by id lid, highest first (all share the score
  -- of "=lid:1"; other members with that score are skipped).
  local function held(key, lid)
    local js = {}
    local score = call('ZSCORE', key, named(lid, 1))
    if not score then return js, 0 end
    local pre = '=' .. lid .. ':'
    for _, m in ipairs(call('ZRANGEBYSCORE', key, score, score)) do
      if string.sub(m, 1, #pre) == pre then
        local j = tonumber(string.sub(m, #pre + 1))
        if j then js[#js + 1] = j end
      end
    end
    table.sort(js, function(a, b) return a > b end)
    return js, tonumber(score)
  end

  -- release_id removes up to hits members of the lease named lid, the highest numbers first.
  local function release_id(s, key, op, lid)
    local js = held(key, lid)
    local m = {}
    for x = 1, min(op.hits, #js) do m[x] = named(lid, js[x]) end
    remove(s, key, m)
  end

  -- release_bare removes up to hits of the newest leases without an id: the lowest scores.
  local function release_bare(s, key, op)
    remove(s, key, call('ZRANGEBYSCORE', key, '-inf', '(0', 'LIMIT', 0, op.hits))
  end

  concurrency = function(s, op, r, i)
    local key = KEYS[op.k]
    s.lease = op.lease
    if op.undo then
      -- give back the leases this nonce's call added (a cross-slot call that blocked elsewhere)
      local lid = id(op)
      if lid ~= '' then
        release_id(s, key, op, lid)
      else
        local m = {}
        for j = 1, op.hits do m[j] = anonymous(i, j) end
        remove(s, key, m)
      end
    elseif op.release then
      local lid = id(op)
      if lid ~= '' then
        release_id(s, key, op, lid)
      elseif s.stored > 0 then
        release_bare(s, key, op)
      end
    elseif op.probe and s.card + op.hits <= op.count then
      -- a probe that would pass takes nothing
    elseif s.card + op.hits <= op.count then
      save(s)
      local lid = id(op)
      local e = now + op.lease
      if lid == '' then
        for j = 1, op.hits do
          s.adds[#s.adds + 1] = -e
          s.adds[#s.adds + 1] = anonymous(i, j)
        end
      else
        -- an id already held (or taken earlier in this call) numbers on after its members, which
        -- move to the later end (ZADD of a member held updates its score)
        local top = s.names[lid]
        if not top then
          local js, score = held(key, lid)
          top = js[1] or 0
          e = max(e, score)
          for x = #js, 1, -1 do
            s.adds[#s.adds + 1] = e
            s.adds[#s.adds + 1] = named(lid, js[x])
          end
        end
        for j = top + 1, top + op.hits do
          s.adds[#s.adds + 1] = e
          s.adds[#s.adds + 1] = named(lid, j)
        end
        s.names[lid] = top + op.hits
      end
      s.card, s.taken = s.card + op.hits, true
    else
      -- as the local engine: the time until the first lease ends (a lease's length when none is
      -- held), a lower bound when more than one must end
      r[1], r[4] = 0, max((first_end(s, key) - now) * 1000, 1)
    end
    r[2] = max(op.count - s.card, 0)
  end
end

local kinds = {bucket, throttle, concurrency}

local out = {1}
local res = {}
for i = 1, n do
  local r = {1, 0, 0, 0, 0, 0, 0}
  res[i] = r
  local op = ops[i]
  if op.release then kinds[op.kind](load(op), op, r, i) end
end
local ok = 1
for i = 1, n do
  local op = ops[i]
  if not op.release then
    kinds[op.kind](load(op), op, res[i], i)
    if res[i][1] == 0 and not op.shadow then ok = 0 end
  end
end

for k, s in pairs(states) do
  local key = KEYS[k]
  if s.taken then
    if ok == 1 then
      s.dirty = true
    else
      s.x, s.y, s.full, s.card, s.adds = s.sx, s.sy, s.sfull, s.scard, {}
    end
  end
  if s.dirty then
    if s.kind == 3 then
      if #s.adds > 0 then chunked('ZADD', key, s.adds) end
      if s.card <= 0 then
        call('DEL', key)
      elseif s.stored <= 0 then
        call('PEXPIREAT', key, cdiv(now + s.lease, 1000))
      elseif #s.adds > 0 then
        call('PEXPIREAT', key, cdiv(now + s.lease, 1000), 'GT')
      end
    elseif s.kind == 1 then
      if s.x >= s.cap then
        if s.held then call('DEL', key) end
      else
        call('SET', key, pack('<ddd', s.x, s.y, s.scale), 'PXAT', cdiv(now + s.full, 1000))
      end
    else
      if s.x < now or (s.x == now and s.y == 0) then
        if s.held then call('DEL', key) end
      else
        call('SET', key, pack('<ddd', s.x, s.y, s.scale), 'PXAT', cdiv(s.x + 1, 1000))
      end
    end
  end
end

-- what the refundable acquisitions of a call that passed consumed, by lease
for i = 1, n do
  local op, r = ops[i], res[i]
  if ok == 1 and op.lk > 0 and not op.release and not op.probe and r[1] == 1 and op.count > 0 then
    local list = records(op.lk)
    list[#list + 1], list[#list + 2] = op.hits, now + op.lease
    keep(op.lk, list)
  end
  local b = 1 + (i - 1) * 7
  out[b + 1], out[b + 2], out[b + 3], out[b + 4], out[b + 5], out[b + 6], out[b + 7] =
    r[1], r[2], r[3], r[4], r[5], r[6], r[7]
end
out[1] = ok
return out

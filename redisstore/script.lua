-- extauthz hot-param check: every op of one slot group, atomic, all or nothing.
--
-- The script is this file, then one section per kind of state (script_bucket.lua,
-- script_throttle.lua, script_concurrency.lua, each documenting its state and adding its
-- functions to kinds), then script_end.lua, which runs the ops and stores the states.
--
-- ARGV[1]  now in microseconds since the Unix epoch, or "" to read redis TIME (once)
-- ARGV[2]  nonce: unique per call, names the anonymous concurrency leases this call adds; "*"
--          makes the call a batch of independent bucket acquisitions (fast path), of any of KEYS
-- ARGV[3..] one op each: 16 little-endian doubles, then the lease id (concurrency; may be empty):
--   key index (1-based into KEYS), kind (1 bucket, 2 throttle, 3 concurrency, 4 a postpaid
--   bucket's charge, 5 a throttle turn given back), count,
--   capacity (count+burst), duration (us), rate, max wait (ns), lease (us), hits,
--   release, refund, shadow, undo (1 or 0; undo: give back what this nonce's call took),
--   refund record key index (1-based into KEYS; 0 for none), probe (1 or 0), book (tokens to
--   book ahead in a batch, see the fast path; 0 elsewhere).
--   rate/duration is count per duration in lowest terms (both divided by their gcd).
--   In a batch, an empty argument is the op before it again (a hot value's calls: one
--   request's op many times), which costs Redis no bytes to read.
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
-- A probe (never a release) is decided as the acquisition it names and consumes nothing: a
-- bucket passes iff hits tokens are there, a throttle iff its next slot is free now (no wait),
-- concurrency iff hits slots are free. It reports the state as it is (remaining, reset after),
-- blocks the call's other ops when refused (unless shadow), and records no refund.
--
-- Keys expire at absolute instants of the script's clock (PXAT, PEXPIREAT): when a bucket is
-- full again, a schedule is past, the last lease ends. The fast path's bucket may outlive that
-- by its slack (the time it takes to fill, at most 10s): a key present past it reads as full,
-- as an absent one does.
--
-- Returns {ok, then per op: allowed, remaining, reset after (ns), retry after (ns), wait (ns),
-- and for a throttle op that took a turn the schedule's end after it (microseconds, fraction;
-- else 0, 0)}. The fast path answers 6 numbers per op, ok and the first five, packed as one
-- string of little-endian doubles (no table to build and convert); in a batch, an acquisition
-- that passes and leaves less than one token has for retry after the time until one is there,
-- and for wait the tokens booked after it (see the fast path).
--
-- All numbers are integers kept below 2^53 (the Go side checks the bounds), so the double
-- arithmetic of Lua is exact. Each state stores its scale; a state read with another scale (the
-- rule's count changed) is converted, rounding down.
--
-- Cost: one TIME, one GET per state read, one write per state changed (on the fast path with
-- one PEXPIRETIME, and a write that keeps the key's expiry while it is far enough); no parsing
-- (struct); a call of one bucket acquisition takes a fast path that builds no table but its
-- answer.

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

-- cdiv and ns do idiv's work inline: a Lua call less each (they run on every fast path call).
local function cdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  if r > 0 then q = q + 1 end
  return q
end

-- ns of a/b microseconds, rounded up: whole microseconds, then the rest's nanoseconds.
local function ns(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1; r = r + b elseif r >= b then q = q + 1; r = r - b end
  r = r * 1000
  local c = floor(r / b)
  local s = r - c * b
  if s < 0 then c = c - 1; s = s + b elseif s >= b then c = c + 1; s = s - b end
  if s > 0 then c = c + 1 end
  return q * 1000 + c
end

-- Fast path: one bucket acquisition with no refund record, the commonest call, or a batch of
-- them (nonce "*"): calls each its own, as if sent one after the other at the same instant,
-- answered one after the other (6 numbers each, as a call of one op). The same arithmetic as
-- bucket() below, without the general path's tables and closures. A batch comes in runs: the
-- consecutive calls of one key with the same rule numbers, for which only hits, shadow and probe
-- differ; each run reads its key once and writes it at most once, before the next run reads.
local batch = nonce == '*'
if n == 1 or batch then
  local k, kind, count, cap, dur, rate, _, _, hits, rel, _, shadow, _, lk, probe, book =
    sunpack('<dddddddddddddddd', ARGV[3])
  if kind == 1 and rel == 0 and lk == 0 and count > 0 then
    local out, one = nil, nil
    if n > 1 then out = {} end -- a batch of one answers as a call of one op
    local i = 1
    while true do
      local key, rk, rcount, rcap, rdur, rrate = KEYS[k], k, count, cap, dur, rate
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
      local taken, last, lbook, lretry = false, 0, 0, 0
      -- again: this op is the one before, which was refused, so its answer is that one's (a
      -- refusal leaves the bucket as it was): the many calls of a hot value that came while
      -- its last tokens were being taken cost a comparison each
      local again, allowed = false, 1
      while true do
        if not again then
          local need, retry = hits * dur, 0
          allowed = 1
          if need > cap then
            allowed, retry = 0, dur * (count / rate) * 1000
          elseif x >= need then
            if probe == 0 then
              x, taken = x - need, true
              -- in a batch, an acquisition that leaves less than a token tells when the next
              -- one is there, in its retry after (the caller keeps it as a refusal of one hit)
              if batch and x < dur then
                retry = ns(dur - x, rate)
                if shadow == 0 then last, lbook, lretry = i, book, retry end
              end
            end
          else
            allowed, retry = 0, ns(need - x, rate)
          end
          local ok = 1
          if allowed == 0 and shadow == 0 then ok = 0 end
          one = pack('<dddddd', ok, allowed, max(floor(x / dur), 0), ns(cap - x, rate), retry, 0)
        end
        if out then out[i] = one end
        i = i + 1
        if i > n then break end
        -- an op the same as the one before (the commonest batch: one request's op, many
        -- times), sent empty or again (Lua's strings are interned, so the test is a
        -- pointer's), is not unpacked again
        local a = ARGV[i + 2]
        local same = a == '' or a == ARGV[i + 1]
        again = allowed == 0 and same
        if not same then
          k, kind, count, cap, dur, rate, _, _, hits, rel, _, shadow, _, lk, probe, book = sunpack('<dddddddddddddddd', a)
          if kind ~= 1 or rel ~= 0 or lk ~= 0 or count <= 0 then
            return redis.error_reply('batch of ops that are not plain bucket acquisitions')
          end
          if k ~= rk or count ~= rcount or cap ~= rcap or dur ~= rdur or rate ~= rrate then break end
          cap = cap * dur
        end
      end
      -- Booking: a call of the run took a token and left less than one (those after it were
      -- refused), and asks for book
      -- more: they are taken now, into debt (at most a bucket), and are its caller's to give
      -- out as they come due (one every dur/rate). Its answer says how many in wait, and in
      -- remaining (0 without them) what the bucket lacked of a token (units), from which the
      -- caller computes when each is due; its other numbers are as without them.
      if last > 0 and lbook > 0 then
        local b = min(lbook, floor((x + rcap * rdur) / rdur))
        if b > 0 then
          one = pack('<dddddd', 1, 1, rdur - x, ns(rcap * rdur - x, rrate), lretry, b)
          x = x - b * rdur
          if out then out[last] = one end
        end
      end
      if taken then
        -- The key must live until the bucket is full again (absent reads as full). It keeps its
        -- expiry while that is far enough (KEEPTTL, half the cost of moving it); else the expiry
        -- moves to then plus the slack: the time an empty bucket takes to fill, at most 10s, so
        -- that a value taking tokens moves its key's expiry about once a slack, not every call.
        local rc = rcap * rdur
        local full = cdiv(now + cdiv(rc - x, rrate), 1000)
        if v and #v == 24 and call('PEXPIRETIME', key) >= full then
          call('SET', key, pack('<ddd', x, now, rdur), 'KEEPTTL')
        else
          call('SET', key, pack('<ddd', x, now, rdur), 'PXAT', full + cdiv(min(cdiv(rc, rrate), 10000000), 1000))
        end
      end
      if i > n then break end
    end
    if out then return table.concat(out) end
    return one
  end
  if batch then return redis.error_reply('batch of ops that are not plain bucket acquisitions') end
end

-- ops, and which kinds of work the call holds: a section makes its functions only for a kind
-- present (booleans, not a table: one table less a call)
local ops = {}
local has_throttle, has_concurrency, has_refund, has_unhold = false, false, false, false
for i = 1, n do
  local a = ARGV[i + 2]
  local k, kind, count, cap, dur, rate, maxwait, lease, hits, rel, refund, shadow, undo, lk, probe =
    sunpack('<dddddddddddddddd', a)
  local charge, unhold = kind == 4, kind == 5
  if charge then kind, rel = 1, 1 elseif unhold then kind, rel = 2, 1 end
  ops[i] = {k = k, kind = kind, count = count, cap = cap, dur = dur, rate = rate, maxwait = maxwait,
    lease = lease, hits = hits, release = rel == 1, refund = refund == 1, shadow = shadow == 1,
    undo = undo == 1, lk = lk, probe = probe == 1 and rel == 0, charge = charge, unhold = unhold, a = a}
  if kind == 2 then has_throttle = true elseif kind == 3 then has_concurrency = true end
  if refund == 1 then has_refund = true end
  if unhold then has_unhold = true end
end

-- kinds[kind](act, s, op, x, i), set by the kinds' sections: act 'check' runs op (the i-th) on
-- its state s, first reading it from KEYS[op.k] (s.loaded), and fills its answer x; 'store'
-- writes s, which the call changed, to key x (op nil). One function a kind, reading the state
-- on its first check: the script makes its functions anew on every call.
local kinds = {false, false, false} -- sized once

-- State per key, read from Redis by its kind's first check. Releases apply to it at once; acquisitions too, after
-- saving it (sx, sy, sfull; card), so that a call that does not pass can restore it.
local states = {}

local function load(op)
  local s = states[op.k]
  if s then return s end
  -- every field named at once: the table is sized once
  s = {kind = op.kind, x = false, y = false, held = false, cap = 0, scale = 0, full = 0,
    saved = false, sx = false, sy = false, sfull = 0, taken = false, dirty = false, old = 0,
    loaded = false}
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

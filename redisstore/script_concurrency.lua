-- Kind 3, concurrency: a value is a sorted set of leases scored by their expiry e (us): +e for
-- a lease with an id, -e for one without (so that the newest of those is the lowest score,
-- found without reading the id's leases). The leases of an id are held by members "=id:1" ..
-- "=id:n", all with one score: an acquisition under an id already held adds "=id:n+1" .. and
-- moves the id's end to the later one (its slots stay held as long as its newest lease). One
-- without an id is held by "nonce:op:1" .. "nonce:op:hits". A release with an id removes that
-- id's members (the highest numbers first), and nothing when the id holds none; a release
-- without an id removes the newest leases acquired without one (highest expiry), never an
-- id's, as the memory engine (hotparam shard.free): bare releases cannot free the slots of
-- requests that named themselves.

if has_concurrency then
  -- the lease id of a concurrency op, after its numbers
  local function id(op) return string.sub(op.a, 129) end -- after the 16 numbers

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
  local function chunked(cmd, key, list)
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

  -- the concurrency set's load, check and store (see kinds)
  kinds[3] = function(act, s, op, r, i)
    if act == 'store' then
      local key = r
      if #s.adds > 0 then chunked('ZADD', key, s.adds) end
      if s.card <= 0 then
        call('DEL', key)
      elseif s.stored <= 0 then
        call('PEXPIREAT', key, cdiv(now + s.lease, 1000))
      elseif #s.adds > 0 then
        call('PEXPIREAT', key, cdiv(now + s.lease, 1000), 'GT')
      end
      return
    end
    local key = KEYS[op.k]
    if not s.loaded then
      s.loaded = true
      call('ZREMRANGEBYSCORE', key, -now, now) -- ended, with an id or without
      s.card = call('ZCARD', key)
      s.stored = s.card
      s.adds = {}
      s.names = {}
    end
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

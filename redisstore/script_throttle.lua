-- Kind 2, a throttle schedule: x = microseconds, y = fraction in 1/rate of the instant the
-- schedule is free, kept as a string of 3 little-endian doubles (x, y, scale).
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

if has_throttle then
  -- the throttle's load, check and store (see kinds)
  kinds[2] = function(act, s, op, r)
    if act == 'store' then
      local key = r
      if s.x < now or (s.x == now and s.y == 0) then
        if s.held then call('DEL', key) end
      else
        call('SET', key, pack('<ddd', s.x, s.y, s.scale), 'PXAT', cdiv(s.x + 1, 1000))
      end
      return
    end
    if not s.loaded then
      s.loaded = true
      local v = call('GET', KEYS[op.k])
      if v and #v == 24 then
        local x, y, old = sunpack('<ddd', v)
        s.x, s.y, s.held, s.old = x, y, true, old
        if old ~= op.rate then s.y = floor(y / old * op.rate) end
      end
    end
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

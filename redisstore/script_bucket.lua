-- Kind 1, a bucket (a reject rule's): x = tokens*dur, y = time of x, kept as a string of 3
-- little-endian doubles (x, y, scale). Tokens are scaled by the (reduced) duration D in
-- microseconds: a bucket of capacity C holds C*D units and gains rate units per microsecond. A
-- missing bucket is full. The fast path (script.lua) does the same arithmetic for a call of
-- one bucket acquisition.
--
-- A charge (kind 4, sent as a release) is a postpaid bucket's: it takes hits from whatever is
-- left, the bucket going into debt (x < 0) down to one bucket below empty, and like a release
-- it is applied whatever the outcome and never refused. A bucket in debt refills from its debt
-- at the same rate; it reports 0 remaining and its reset after counts the debt.

-- The bucket's load, check and store (see kinds). A request that can never pass (count 0, or
-- more hits than the capacity) is told to try again a duration later: dur is the reduced
-- duration, count/rate the factor it was reduced by.
kinds[1] = function(act, s, op, r)
  if act == 'store' then
    local key = r
    if s.x >= s.cap then
      if s.held then call('DEL', key) end
    else
      call('SET', key, pack('<ddd', s.x, s.y, s.scale), 'PXAT', cdiv(now + s.full, 1000))
    end
    return
  end
  if not s.loaded then
    s.loaded = true
    local v = call('GET', KEYS[op.k])
    if v and #v == 24 then
      local x, y, old = sunpack('<ddd', v)
      s.x, s.y, s.held, s.old = x, y, true, old
      if old ~= op.dur then s.x = floor(x / old * op.dur) end
    end
  end
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

-- The run: the releases first, then the acquisitions; then the states the call changed are
-- stored (or restored, when it did not pass) and the answers returned.

local out = {1}
local res = {}
for i = 1, n do
  local r = {1, 0, 0, 0, 0, 0, 0}
  res[i] = r
  local op = ops[i]
  if op.release then kinds[op.kind]('check', load(op), op, r, i) end
end
local ok = 1
for i = 1, n do
  local op = ops[i]
  if not op.release then
    kinds[op.kind]('check', load(op), op, res[i], i)
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
  if s.dirty then kinds[s.kind]('store', s, nil, key) end
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

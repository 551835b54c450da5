-- sliding.lua: sliding window counters ('s': p1 = K, the cells counted
-- behind the current one, p2 = cell µs; driver.CellSpan) in a packed
-- entry. Payload: '<I7' the newest stored cell's index, then '<I7' per
-- stored cell, oldest first, ending at the newest. The entry's expiry is
-- when its newest cell stops counting, leaves(newest) in ms.
--
-- Strict (driver.CellSpan): at cell i = math.floor(now/s) the cells j >= i-K
-- count, the partly expired oldest one too, so no interval of the window
-- ever holds more than L units; cell j stops counting at
-- leaves(j) = (j+K+1)*s.

--@eval
-- The stored cells as a list: cell j is list[j - base]; the counted ones
-- are j >= lo.
local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
local i = math.floor(now / s)
local lo = i - K
local list, base, newest = nil, 0, -1
if p then
  local _, len, _, q = struct.unpack(HDR, v, p)
  local k = (len - 7) / 7
  list = ints(v, q + 7, k)
  base = struct.unpack('<I7', v, q) - k
  for z = math.max(1, lo - base), k do
    local u = list[z]
    if u > 0 then
      used = used + u
      newest = base + z
    end
  end
end
if newest >= 0 then reset = (newest + K + 1) * s - now end
if c > L then
  flags = 2
elseif used + c > L then
  -- Retry when the oldest cells holding the units over stop counting
  -- (cells beyond i, the server clock having gone back: one cell).
  flags, retry = 0, s
  if list then
    local need, acc = used + c - L, 0
    for z = math.max(1, lo - base), math.min(#list, i - base) do
      acc = acc + list[z]
      if acc >= need then
        retry = (base + z + K + 1) * s - now
        break
      end
    end
  end
end
st[r] = {i, lo, K, s, list, base, newest}

--@commit
-- The new list: from the oldest counted cell holding units (or i) to the
-- newest, i with c more.
local i, lo, K, s, list, base = x[1], x[2], x[3], x[4], x[5], x[6]
local hi = math.max(i, x[7])
local first = i
local k = 0
if list then
  k = #list
  for z = math.max(1, lo - base), k do
    if list[z] > 0 then
      first = math.min(first, base + z)
      break
    end
  end
end
local out = {hi}
for j = first, hi do
  local z, u = j - base, 0
  if z >= 1 and z <= k then u = list[z] end
  if j == i then u = u + c end
  out[#out + 1] = u
end
local body = pints(out)
used, reset, exp = used + c, (hi + K + 1) * s - now, math.ceil((hi + K + 1) * s / 1000)
ent = struct.pack(HDR, tag, #body, exp) .. body
if plan then
  plan[#plan + 1] = 'S ' .. key .. ' ' .. tag .. ' ' .. sf('%d', i) .. ' ' .. sf('%d', c) .. ' ' .. sf('%d', (i + K + 1) * s)
end

--@import
-- The one-key-per-rule layout's hash, one field per cell (the same
-- driver.CellSpan): its newest K+1 cells.
local h = redis.pcall('HGETALL', okey)
if type(h) == 'table' and not h.err and #h > 0 then
  local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
  local cs, hi = {}, nil
  for k = 1, #h, 2 do
    local j, u = tonumber(h[k]), tonumber(h[k + 1])
    if j and u and u > 0 then
      cs[j] = u
      if not hi or j > hi then hi = j end
    end
  end
  if hi then
    local list = {hi}
    for j = hi - K, hi do list[#list + 1] = cs[j] or 0 end
    local body = pints(list)
    parts[#parts + 1] = struct.pack(HDR, tag, #body, math.ceil((hi + K + 1) * s / 1000)) .. body
  end
end

--@refund
-- "S <key> <tag> <cell> <cost> <dies µs>": c units back to the cell
-- while it counts (now < dies).
local i, c, dies = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
if now < dies then
  patch(key, f[3], function(v, len, exp, q)
    local k = (len - 7) / 7
    local top = struct.unpack('<I7', v, q)
    local list = ints(v, q + 7, k)
    local z = i - (top - k + 1) + 1
    if z >= 1 and z <= k then list[z] = list[z] - math.min(list[z], c) end
    table.insert(list, 1, top)
    return exp, pints(list)
  end)
end

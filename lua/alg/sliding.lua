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
local K, s = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
local i = math.floor(now / s)
local lo = i - K
local cs, newest = {}, -1
if p then
  local _, len, _, q = struct.unpack(HDR, v, p)
  local k = (len - 7) / 7
  local top = struct.unpack('<I7', v, q)
  local list = ints(v, q + 7, k)
  for z = 1, k do
    local j, u = top - k + z, list[z]
    if j >= lo and u > 0 then
      cs[j] = u
      used = used + u
      if j > newest then newest = j end
    end
  end
end
if newest >= 0 then reset = (newest + K + 1) * s - now end
if c > L then
  flags = 2
elseif used + c > L then
  flags, retry = 0, retryCells(cs, lo, i, used + c - L, K, s, now)
end
st[r] = {cs, i, lo, newest, K, s}

--@commit
local cs, i, lo, K, s = x[1], x[2], x[3], x[5], x[6]
cs[i] = (cs[i] or 0) + c
local hi = math.max(i, x[4])
local first = hi
for j = lo, hi do
  if cs[j] then
    first = j
    break
  end
end
local list = {hi}
for j = first, hi do list[#list + 1] = cs[j] or 0 end
local body = pints(list)
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

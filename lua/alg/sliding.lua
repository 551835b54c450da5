-- sliding.lua: sliding window counters ('s': p1 = K, the cells counted
-- behind the current one, p2 = cell µs; driver.CellSpan) in a packed
-- entry. Payload: '<I7' the newest stored cell's index, then '<I7' per
-- stored cell, oldest first, ending at the newest. The entry's expiry is
-- when its newest cell stops counting, leaves(newest) in ms.
--
-- Strict (driver.CellSpan): at cell i = floor(now/s) the cells j >= i-K
-- count, the partly expired oldest one too, so no interval of the window
-- ever holds more than L units; cell j stops counting at
-- leaves(j) = (j+K+1)*s.

-- slidingCells returns the counted cells of a packed entry (index ->
-- count, only j >= lo and count > 0), their sum and the newest index (-1
-- for none).
local function slidingCells(v, ent, lo)
  local cs, used, newest = {}, 0, -1
  if not ent then return cs, used, newest end
  local top = struct.unpack('<I7', v, ent[1])
  local k = (ent[2] - 7) / 7
  local list = ints(v, ent[1] + 7, k)
  local first = top - k + 1
  for q = 1, k do
    local j, n = first + q - 1, list[q]
    if j >= lo and n > 0 then
      cs[j] = n
      used = used + n
      if j > newest then newest = j end
    end
  end
  return cs, used, newest
end

-- slidingRetry is how long until the oldest cells holding need units
-- stop counting (cells beyond i: the server clock went back: one cell).
local function slidingRetry(cs, lo, i, need, K, s, now)
  local acc = 0
  for j = lo, i do
    acc = acc + (cs[j] or 0)
    if acc >= need then return (j + K + 1) * s - now end
  end
  return s
end

local function slidingEval(x, ru, c)
  local K, s = tonumber(ru.p1), tonumber(ru.p2)
  local i = math.floor(x.now / s)
  local lo = i - K
  local cs, used, newest = slidingCells(x.raws[ru.ki], x.vals[ru.ki][ru.tag], lo)
  local reset, retry, flags = 0, 0, 1
  if newest >= 0 then reset = (newest + K + 1) * s - x.now end
  if c > ru.L then
    flags = 2
  elseif used + c > ru.L then
    flags, retry = 0, slidingRetry(cs, lo, i, used + c - ru.L, K, s, x.now)
  end
  ru.st = {cs, i, lo, newest, K, s, used}
  return flags, used, reset, retry
end

-- slidingPayload packs cells cs (index -> count) from the oldest counted
-- one to hi.
local function slidingPayload(cs, lo, hi)
  local first = hi
  for j = lo, hi do
    if cs[j] then
      first = j
      break
    end
  end
  local list = {}
  for j = first, hi do list[#list + 1] = cs[j] or 0 end
  return struct.pack('<I7', hi) .. pints(list)
end

local function slidingCommit(x, ru, c)
  local cs, i, lo, newest, K, s, used = unpack(ru.st)
  cs[i] = (cs[i] or 0) + c
  local hi = math.max(i, newest)
  local leaves = (i + K + 1) * s
  if x.plan then x.plan[#x.plan + 1] = 'S ' .. x.key(ru.ki) .. ' ' .. ru.tag .. ' ' .. fmt(i) .. ' ' .. fmt(c) .. ' ' .. fmt(leaves) end
  return {ru.tag, math.ceil((hi + K + 1) * s / 1000), slidingPayload(cs, lo, hi)}, used + c, (hi + K + 1) * s - x.now
end

-- slidingRefund gives back c units of cell i while it counts (now <
-- dies).
local function slidingRefund(key, tag, i, c, dies, now)
  if now >= dies then return end
  patch(key, tag, function(v, e)
    local top = struct.unpack('<I7', v, e[1])
    local k = (e[2] - 7) / 7
    local list = ints(v, e[1] + 7, k)
    local q = i - (top - k + 1) + 1
    if q >= 1 and q <= k then list[q] = list[q] - math.min(list[q], c) end
    return e[3], struct.pack('<I7', top) .. pints(list)
  end)
end

-- sliding.lua: sliding window counters ('s': p1 = K, the cells counted
-- behind the current one, p2 = cell µs; driver.CellSpan) in a packed
-- entry. Payload: '<I7I7' the newest stored cell's index (top) and the
-- sum of the stored cells, then '<I7' per stored cell, oldest first,
-- ending at top. The entry's expiry is when top stops counting,
-- leaves(top) in ms. While every stored cell still counts, the sum is
-- the rule's count and the common decision neither decodes nor rebuilds
-- the cells: it reads the sum and the newest count and rewrites the
-- entry around them; when the oldest stored cells have stopped counting,
-- it decodes just those, takes them off the sum and drops them.
--
-- Strict (driver.CellSpan): at cell i = math.floor(now/s) the cells j >= i-K
-- count, the partly expired oldest one too, so no interval of the window
-- ever holds more than L units; cell j stops counting at
-- leaves(j) = (j+K+1)*s.

--@eval
-- Stored cells: k of them, cell j at position base + 7*(j - jb - 1)
-- (jb = top - k); the counted ones are j >= lo.
local K, s = tonumber(ARGV[b + R_P1]), tonumber(ARGV[b + R_P2])
local i = (now - now % s) / s -- math.floor(now / s), inline: no call
local lo = i - K
local newest, k, top, q, list = -1, 0, -1, 0, nil
if p then
  q = pq
  k = (pl - 14) / 7
  local sum
  top, sum = struct.unpack('<I7I7', v, q)
  if top < lo then
    k = 0 -- every stored cell stopped counting: as if none were stored
  elseif top <= i and k > 0 and struct.unpack('<I7', v, q + 7 * (k + 1)) > 0 then
    -- The newest stored cell holds units: the count is the sum less the
    -- oldest d stored cells, those that stopped counting, which are
    -- dropped (q and k then describe the kept cells, for commit).
    local d = lo - (top - k + 1)
    if d > 0 then
      for z = 0, d - 1 do sum = sum - struct.unpack('<I7', v, q + 14 + 7 * z) end
      q, k = q + 7 * d, k - d
    end
    used, newest = sum, top
  elseif top <= i and k == 0 then
    used = sum -- no cells: nothing counts
  else
    list = ints(v, q + 14, k)
    for z = math.max(1, lo - (top - k)), k do
      local u = list[z]
      if u > 0 then
        used = used + u
        newest = top - k + z
      end
    end
  end
end
if newest >= 0 then reset = (newest + K + 1) * s - now end
if c > L then
  flags = RULE_TOOHIGH
elseif used + c > L then
  -- Retry when the oldest cells holding the units over stop counting
  -- (cells beyond i, the server clock having gone back: one cell).
  flags, retry = RULE_DENIED, s
  if p then
    list = list or ints(v, q + 14, k)
    local need, acc = used + c - L, 0
    for z = math.max(1, lo - (top - k)), math.min(k, i - (top - k)) do
      acc = acc + list[z]
      if acc >= need then
        retry = (top - k + z + K + 1) * s - now
        break
      end
    end
  end
end
--@save i, lo, K, s, list, top, newest, k, q

--@commit
-- The fast ways: the same cell gets c more, or a new cell c, the stored
-- bytes copied around them; otherwise the cells are rebuilt from the
-- oldest counted one holding units (or i) to the newest.
--@load i, lo, K, s, list, top, newest, k, q
-- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
-- alg.Exempt): c is what this rule takes, none once it is there.
local c = c
if used + c > MAXUSED then
  c = MAXUSED - used
  if c < 0 then c = 0 end
end
local hi = i
if newest > i then hi = newest end
exp = (hi + K + 1) * s / 1000 -- ms, rounded up
if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
if not list and k > 0 and top == i then
  -- The entry's header and top and sum in one pack, the cells copied.
  local last = struct.unpack('<I7', v, q + 7 * (k + 1))
  ent = struct.pack('<c4I3I6I7I7', tag, 7 * (k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 7 * (k + 1) - 1) .. struct.pack('<I7', last + c)
elseif not list and k > 0 and top < i then
  ent = struct.pack('<c4I3I6I7I7', tag, 7 * (i - top + k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 14 + 7 * k - 1) .. string.rep('\0', 7 * (i - top - 1)) .. struct.pack('<I7', c)
else
  local first, jb = i, top - k
  if list or k > 0 then
    list = list or ints(v, q + 14, k)
    for z = math.max(1, lo - jb), k do
      if list[z] > 0 then
        first = math.min(first, jb + z)
        break
      end
    end
  end
  local out = {hi, used + c}
  for j = first, hi do
    local z, u = j - jb, 0
    if z >= 1 and z <= k then u = list[z] end
    if j == i then u = u + c end
    out[#out + 1] = u
  end
  local body = pints(out)
  ent = struct.pack(HDR, tag, #body, exp) .. body
end
-- None taken (saturated): reported as evaluated (a cell of 0 units
-- holds none).
if c > 0 then used, reset = used + c, (hi + K + 1) * s - now end
if plan then
  plan[#plan + 1] = 'S ' .. key .. ' ' .. tag .. ' ' .. sf('%d', i) .. ' ' .. sf('%d', c) .. ' ' .. sf('%d', (i + K + 1) * s)
end

--@import
-- The one-key-per-rule layout's hash okey, one field per cell (the same
-- driver.CellSpan: K and s, the caller's), as the entry of tag: its newest
-- K+1 cells.
local h = redis.pcall('HGETALL', okey)
if type(h) == 'table' and not h.err and #h > 0 then
  local cs, hi = {}, nil
  for k = 1, #h, 2 do
    local j, u = tonumber(h[k]), tonumber(h[k + 1])
    if j and u and u > 0 then
      cs[j] = u
      if not hi or j > hi then hi = j end
    end
  end
  if hi then
    local list, sum = {hi, 0}, 0
    for j = hi - K, hi do
      list[#list + 1] = cs[j] or 0
      sum = sum + (cs[j] or 0)
    end
    list[2] = sum
    local body = pints(list)
    parts[#parts + 1] = struct.pack(HDR, tag, #body, math.ceil((hi + K + 1) * s / 1000)) .. body
  end
end

--@live
-- The cells of the entry at p of v (K and s, the caller's) that still
-- count at now and hold units, appended to live as {when the cell stops
-- counting (leaves, µs), its units}: what a log carries of them
-- (upgrade.lua's oldLogs).
local _, pl, _, pq = struct.unpack(HDR, v, p)
local k = (pl - 14) / 7
local top = struct.unpack('<I7', v, pq)
local lo = (now - now % s) / s - K
for z = 1, k do
  local j, u = top - k + z, struct.unpack('<I7', v, pq + 7 + 7 * z)
  if u > 0 and j >= lo then live[#live + 1] = {(j + K + 1) * s, u} end
end

--@refund
-- "S <key> <tag> <cell> <cost> <dies µs>": c units back to the cell
-- while it counts (now < dies), and off the sum.
local i, c, dies = tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
if now < dies then
  patch(key, f[3], function(v, len, exp, q)
    local k = (len - 14) / 7
    local top, sum = struct.unpack('<I7I7', v, q)
    local list = ints(v, q + 14, k)
    local z = i - (top - k + 1) + 1
    if z >= 1 and z <= k then
      local d = math.min(list[z], c)
      list[z], sum = list[z] - d, sum - d
    end
    table.insert(list, 1, sum)
    table.insert(list, 1, top)
    return exp, pints(list)
  end)
end

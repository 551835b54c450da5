-- gcra.lua: GCRA in a packed entry ('g': limit = burst+1, p1 = emission
-- interval T µs, p2 = tolerance T*limit µs; integers:
-- driver.Rule.GCRAParams). Payload '<I7': the TAT, µs. The entry's expiry
-- is the TAT in ms, rounded up.
--
-- Computed in exact integers relative to now, in µs: T and tol are
-- integers, so are ttl = max(TAT-now, 0), ttl + c*T and retry; doubles
-- hold integers exactly below 2^53 (the backend bounds tol), and only a
-- division needs care (fdiv).

-- gcrarem is GCRA's Remaining, floor(left/T) clamped to [0, L], where
-- left = tol - ttl.
local function gcrarem(left, T, L)
  local q = fdiv(left, T)
  if q < 0 then return 0 elseif q > L then return L end
  return q
end

local function gcraEval(x, ru, c)
  local T, tol, L = tonumber(ru.p1), tonumber(ru.p2), ru.L
  local ent = x.vals[ru.ki][ru.tag]
  local ttl = 0
  if ent then ttl = math.max(struct.unpack('<I7', x.raws[ru.ki], ent[1]) - x.now, 0) end
  local new, retry, flags = ttl, 0, 1
  if c > L then
    flags = 2
  else
    new = ttl + c * T
    if new > tol then flags, retry = 0, new - tol end
  end
  ru.st = {new, ttl, T, tol}
  return flags, L - gcrarem(tol - ttl, T, L), ttl, retry
end

local function gcraCommit(x, ru, c)
  local new, ttl, T, tol = ru.st[1], ru.st[2], ru.st[3], ru.st[4]
  local tat = x.now + new
  if x.plan then x.plan[#x.plan + 1] = 'G ' .. x.key(ru.ki) .. ' ' .. ru.tag .. ' ' .. fmt(new - ttl) end
  return {ru.tag, math.ceil(tat / 1000), struct.pack('<I7', tat)}, ru.L - gcrarem(tol - new, T, ru.L), new
end

-- gcraRefund takes inc µs off a TAT still ahead of now; an entry whose
-- TAT falls to now or before is dropped.
local function gcraRefund(key, tag, inc, now)
  patch(key, tag, function(v, e)
    local tat = struct.unpack('<I7', v, e[1])
    if tat <= now then return e[3], string.sub(v, e[1], e[1] + e[2] - 1) end
    tat = tat - inc
    if tat <= now then return nil end
    return math.ceil(tat / 1000), struct.pack('<I7', tat)
  end)
end

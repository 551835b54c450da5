-- fixed.lua: fixed windows in a packed entry, epoch-aligned ('f': p1 =
-- window µs) or calendar ('c': p1 = consecutive boundaries, Unix ms,
-- comma-separated). Payload '<I7': the count. The entry's expiry is the
-- window's end in ms: an entry of another window counts nothing.

-- fixedEnd returns the end (µs) of the window around now, or nil when
-- calendar boundaries do not cover it.
local function fixedEnd(ru, now)
  if ru.code == 'f' then
    local W = tonumber(ru.p1)
    return now - now % W + W
  end
  local prev
  for v in string.gmatch(ru.p1, '%d+') do
    local bu = tonumber(v) * 1000
    if bu > now then
      if prev then return bu end
      return nil
    end
    prev = bu
  end
  return nil
end

local function fixedEval(x, ru, c)
  local e = fixedEnd(ru, x.now)
  if not e then
    return nil, redis.error_reply('freqcap: calendar boundaries do not cover the server time (clock skew?)')
  end
  local em = math.ceil(e / 1000)
  local ent = x.vals[ru.ki][ru.tag]
  local used, reset, retry, flags = 0, 0, 0, 1
  if ent and ent[3] == em then used = struct.unpack('<I7', x.raws[ru.ki], ent[1]) end
  if used > 0 then reset = e - x.now end
  if c > ru.L then
    flags = 2
  elseif used + c > ru.L then
    flags, retry = 0, e - x.now
  end
  ru.st = {em, e, used}
  return flags, used, reset, retry
end

-- fixedCommit returns the entry after consuming c, and the rule's used
-- and reset-after.
local function fixedCommit(x, ru, c)
  local em, e, used = ru.st[1], ru.st[2], ru.st[3]
  if x.plan then x.plan[#x.plan + 1] = 'F ' .. x.key(ru.ki) .. ' ' .. ru.tag .. ' ' .. fmt(em) .. ' ' .. fmt(c) end
  return {ru.tag, em, struct.pack('<I7', used + c)}, used + c, e - x.now
end

-- fixedRefund gives back c units of window em, if it is still the
-- entry's window.
local function fixedRefund(key, tag, em, c)
  patch(key, tag, function(v, e)
    if e[3] ~= em then return e[3], string.sub(v, e[1], e[1] + e[2] - 1) end
    local used = struct.unpack('<I7', v, e[1])
    return e[3], struct.pack('<I7', used - math.min(used, c))
  end)
end

-- reset.lua: Backend.Reset where the rules' dimension sets nest
-- (prelude.lua). (lua.go puts prelude.lua and holds.lua first.)
--
-- KEYS[1..m]  roots (m = ARGV[1]): each loses the sections of the nested
--             sets ARGV[1+i] names ("<own>:<KEYS indexes>," own 1: its own
--             entries too, those of the shard dimensions' rules and the
--             hold marker) and keeps the rest; a root left with nothing is
--             deleted (one not named, holding what freqcap did not write,
--             is left alone)
-- KEYS[m+1..2m]  the roots' wide hashes (prelude.lua's wide): a wide
--             root's sections named go from it (HDEL); one left empty is
--             deleted, and its root's wide marker with it
-- KEYS[2m+1..] deleted (the rules' other keys, the nested sets' own keys of
--             the layout before nesting, the reservations)
--
-- Reply: 1.

local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = tonumber(ARGV[1])
for i = 1, m do
  local v = redis.pcall('GET', KEYS[i])
  local vm = type(v) == 'string' and unpackv(v)
  local own = string.sub(ARGV[1 + i], 1, 1) == '1'
  local nv, top = FMT, 0
  if vm and vm[WIDETAG] then
    -- A wide root: the named sections are its hash's fields.
    local hkey, ids = KEYS[m + i], {}
    for k in string.gmatch(string.sub(ARGV[1 + i], 3), '%d+') do ids[#ids + 1] = sectid(KEYS[tonumber(k)]) end
    if #ids > 0 then redis.call('HDEL', hkey, unpack(ids)) end
    local keep = vm
    if redis.call('EXISTS', hkey) == 0 then
      keep = {}
      for tag, p in pairs(vm) do
        if tag ~= WIDETAG then keep[tag] = p end
      end
    end
    if own then keep = {[WIDETAG] = keep[WIDETAG]} end
    nv, top = packv(v, keep, {}, 0, nowms)
  elseif vm and (vm[0] or not own) then
    local secs, keep = {}, vm
    for k in string.gmatch(string.sub(ARGV[1 + i], 3), '%d+') do secs[sectid(KEYS[tonumber(k)])] = false end
    if own then keep = {[0] = vm[0]} end
    nv, top = packv(v, keep, {}, 0, nowms, secs)
  end
  if #nv > 1 then
    redis.call('SET', KEYS[i], nv, 'PXAT', sf('%d', top))
  elseif own or vm then
    redis.call('DEL', KEYS[i])
  end
end
if #KEYS > 2 * m then redis.call('DEL', unpack(KEYS, 2 * m + 1)) end
return 1

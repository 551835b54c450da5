-- settle.lua: commits or cancels one hold (reservation).
-- (lua.go puts prelude.lua and holds.lua first.)
--
-- KEYS[1]     the hold hash
-- KEYS[2..]   every state key the hold's entries name (the caller read the
--             hold first with HGET to learn them; re-verified here)
-- ARGV[1]     hold id
-- ARGV[2]     1 commit (keep the units), 0 cancel (give them back)
--
-- Reply: integer 1 settled; 0 not found (never made, already settled, or
-- lapsed: a lapsed hold is refunded like a cancel and reported not found);
-- -1 the hold names a key missing from KEYS (it changed since it was read:
-- read it again and retry).

local hkey, id = KEYS[1], ARGV[1]
local v = redis.call('HGET', hkey, id)
if not v then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local H = holds(now)
local exp, list = H.entries(v)
local named = {}
for k = 2, #KEYS do named[KEYS[k]] = true end
for _, e in ipairs(list) do
  if not named[H.entrykey(e)] then return -1 end
end
local lapsed = exp <= now
if lapsed or ARGV[2] ~= '1' then
  for _, e in ipairs(list) do H.refund(e) end
end
redis.call('HDEL', hkey, id)
if lapsed then return 0 end
return 1

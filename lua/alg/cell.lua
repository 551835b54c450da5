-- cell.lua: GCRA on redis-cell ('x': limit = burst+1, p1 = emission
-- interval T µs, p2 = "<count>:<period s>" for CL.THROTTLE, count/period
-- = 1/T exactly), one key per rule holding CL.THROTTLE's own TAT (ns since
-- the epoch). redis-cell decides (CL.THROTTLE with quantity 0 peeks: it
-- writes and creates nothing); the numbers it rounds to whole seconds are
-- computed here from its TAT instead, never shorter than the truth.

--@read
-- The key holds a TAT CL.THROTTLE wrote, or nothing: checked before
-- anything is written and before any CL.THROTTLE call (which would abort
-- the server on anything else). A key of another type (WRONGTYPE) is
-- refused the same way. The reply names the rule, never the key.
local nsup, tatok = mods()
local tv = redis.pcall('GET', key)
local bad
if type(tv) == 'table' and tv.err then
  bad = CELL_WRONGTYPE
elseif tv and not tatok(tv) then
  bad = CELL_FOREIGN
end
if bad then
  fail = redis.error_reply('freqcap: rule ' .. ARGV[b + R_NAME] .. ': ' .. CELL_KEY .. ' ' .. bad .. UNTOUCHED)
  break
end
if not tats then tats = {} end
tats[r] = tv

--@eval
local nsup, tatok = mods()
local T = tonumber(ARGV[b + R_P1])
local cnt, per = string.match(ARGV[b + R_P2], '^(%d+):(%d+)$')
local tv = tats[r]
local pk = redis.call('CL.THROTTLE', key, L - 1, cnt, per, 0)
local ttl = 0
if tv then ttl = math.max(nsup(tv) - now, 0) end
local rem = tonumber(pk[3])
if c > L then
  flags = RULE_TOOHIGH
elseif rem < c then
  flags, retry = RULE_DENIED, math.max(1, ttl + c * T - T * L)
end
if rem < 0 then rem = 0 elseif rem > L then rem = L end
used, reset = L - rem, ttl
st[r] = {cnt, per, T, tv}

--@consume
-- redis-cell rules consume first: CL.THROTTLE decides again, in
-- nanoseconds against its own clock, and may deny where its peek (whose
-- remaining is truncated to whole µs) admitted. Then the cell rules
-- already consumed get their exact previous TAT back (an integer string,
-- the only value CL.THROTTLE can read) and the request is denied with
-- nothing else written.
local nsup, tatok = mods()
local saved, out = {}, {}
for r = 1, n do
  local b = ab + HA + (r - 1) * RA
  -- A shadow rule that denied, or an uncounted exempt (override or
  -- rule): not consumed.
  if ARGV[b + R_CODE] == 'x' and not nocount and not (shadow and ((shadow[r] and res[3 + (r - 1) * 4] ~= 1) or exempt[r] == MODE_UNCOUNTED)) then
    local key, xs, L = KEYS[kb + tonumber(ARGV[b + R_KEY])], st[r], tonumber(ARGV[b + R_LIMIT])
    local tv = xs[4]
    saved[#saved + 1] = {key, tv, redis.call('PTTL', key)}
    local cr = redis.call('CL.THROTTLE', key, L - 1, xs[1], xs[2], c)
    local rem = tonumber(cr[3])
    if rem < 0 then rem = 0 elseif rem > L then rem = L end
    local o = 3 + (r - 1) * 4
    if tonumber(cr[1]) ~= 0 and shadow and (shadow[r] or exempt[r]) then
      -- A shadow or exempt rule CL.THROTTLE denies now: reported so, never
      -- denying (a counted exempt is not counted past the limit here:
      -- CL.THROTTLE cannot).
      saved[#saved] = nil
      res[o] = RULE_DENIED
    elseif tonumber(cr[1]) ~= 0 then
      for q = #saved - 1, 1, -1 do
        local sk, sv, sttl = saved[q][1], saved[q][2], saved[q][3]
        -- No TTL left (a peek on a fresh key leaves its TAT = now with
        -- a 0 ms TTL, visible until the script ends): as good as none.
        if sv and sttl > 0 then
          redis.call('SET', sk, sv, 'PX', sttl)
        else
          redis.call('DEL', sk)
        end
      end
      local ttl = 0
      if tv then ttl = math.max(nsup(tv) - now, 0) end
      res[o], res[o + 1], res[o + 3] = RULE_DENIED, L - rem, math.max(1, ttl + c * xs[3] - xs[3] * L)
      res[o + 2] = ttl
      allowed, out = false, nil
      break
    else
      local nv = redis.call('GET', key)
      out[#out + 1] = {o, L - rem, nsup(nv) - now}
      if plan then plan[#plan + 1] = 'x ' .. key .. ' ' .. sf('%d', c * xs[3] * 1000) end
    end
  end
end
if out then
  for _, q in ipairs(out) do res[q[1] + 1], res[q[1] + 2] = q[2], q[3] end
end

--@refund
-- "x <key> <TAT increment ns>": the TAT is ns since the epoch, too long
-- for a double, so it is split into seconds and nanoseconds. A redis-cell
-- key is only ever given an integer TAT or deleted.
local nsup, tatok = mods()
local tv = redis.pcall('GET', key) -- a table for another type
if type(tv) == 'string' and #tv > 9 and tatok(tv) then
  local inc = tonumber(f[3])
  local sec = tonumber(string.sub(tv, 1, -10)) - math.floor(inc / 1e9)
  local ns = tonumber(string.sub(tv, -9)) - inc % 1e9
  if ns < 0 then ns, sec = ns + 1e9, sec - 1 end
  local left = (sec - math.floor(now / 1e6)) * 1e6 + (ns / 1000 - now % 1e6) -- µs
  if left + inc / 1000 > 0 then
    if left > 0 then
      redis.call('SET', key, sf('%d%09d', sec, ns), 'PX', sf('%d', math.ceil(left / 1000)))
    else
      redis.call('DEL', key)
    end
  end
end

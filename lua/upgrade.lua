-- upgrade.lua: reading through the one-key-per-rule layout (freqcap
-- before the packed layout; Options.Upgrade in backends/redis), where a
-- rule's state was a key of its own (driver.Rule.Key): a counter string,
-- a hash of cells, a TAT string, a sorted set. The frame calls it only for
-- a packed value, or a packed log, that does not exist yet; the per-rule
-- keys are read, not changed, and expire on their own. A packed log is
-- also built from the sorted-set logs of the layout before packed logs,
-- and a sliding window's (driver.LogLine) from the cells it counted in
-- before it was a log.

-- upgrade returns oldState, oldLog and oldLogs, built only where an attempt reads
-- through (ARGV's old key indices, a packed log's p2).
local function upgrade()
  -- oldState returns the packed value the packed rules of attempt (kb, ab)
  -- stored at key index ki would have, built from their per-rule keys (the
  -- rule's ARGV b+8 names it, 0 for none), or nil when none has state.
  local function oldState(kb, ab, n, ki, now)
    local parts = {}
    for r = 1, n do
      local b = ab + HA + (r - 1) * RA
      local oi = tonumber(ARGV[b + R_OLD])
      if oi > 0 and tonumber(ARGV[b + R_KEY]) == ki then
        local code, tag, okey = ARGV[b + R_CODE], ARGV[b + R_TAG], KEYS[kb + oi]
        if code == C_FIXED or code == C_CALENDAR then
          --@fixed.import
        elseif code == C_SLIDING then
          local K, s = tonumber(ARGV[b + R_P1]), tonumber(ARGV[b + R_P2])
          --@sliding.import
        elseif code == C_GCRA then
          --@gcra.import
        end
      end
    end
    if #parts == 0 then return nil end
    return FMT .. table.concat(parts)
  end

  -- oldLog fills the sorted set key, shared by the sliding-log rules whose
  -- per-rule logs are olds (keys), from them when key does not exist:
  -- every admission added the same member to each rule's log, so their
  -- union (by member) is the shared log. It lives as long as the longest
  -- window w (µs).
  local function oldLog(key, olds, w)
    if #olds == 0 or redis.call('EXISTS', key) == 1 then return end
    local args = {'ZUNIONSTORE', key, #olds}
    for _, k in ipairs(olds) do args[#args + 1] = k end
    args[#args + 1] = 'AGGREGATE'
    args[#args + 1] = 'MAX'
    if redis.call(unpack(args)) > 0 then redis.call('PEXPIRE', key, math.ceil(w / 1000)) end
  end
  -- oldLogs returns the entry (tag) of a packed log of window w (µs) and
  -- limit L read from what its rule counted in before, or nil when that
  -- holds nothing in the window (alg/log.lua's import): a sliding log's
  -- sorted-set logs srcs; a sliding window's cells (cells: {K, s, their
  -- entry's tag, the one-key-per-rule layout's hash or nil}), the entry
  -- of that tag in the set's value v (m: unpackv's map of it), else the
  -- hash's (alg/sliding.lua's import), each live cell's units carried
  -- (alg/sliding.lua's live).
  local function oldLogs(srcs, w, L, tag, now, cells, v, m)
    local parts, live = {}, {}
    if cells then
      local K, s, p = cells[1], cells[2], m[cells[3]]
      if not p and cells[4] then
        local okey, tag = cells[4], cells[3]
        --@sliding.import
        if parts[1] then v, p, parts = FMT .. parts[1], 2, {} end
      end
      if p then
        --@sliding.live
      end
    end
    --@log.import
    return parts[1]
  end
  return oldState, oldLog, oldLogs
end

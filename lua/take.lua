-- take.lua: the decide script's frame. One EVALSHA decides one or more
-- attempts in order, each over all its rules, all-or-nothing. (lua.go
-- puts prelude.lua and holds.lua first, and pastes the sections of the
-- algorithm fragments, alg/*.lua, where a "--@<fragment>.<section>" line
-- names them; backends/redis/args.go writes what this reads.)
--
-- The upper-case names (A_*, R_*, OP_*, C_*, HA, RA, HDR, REC, …) are
-- declared in Go (internal/lua/tokens.go, which declares each position, code
-- and format once): lua.go writes their values in when it builds the
-- script.
--
-- What the sections see: r (the rule's number), b (its ARGV offset: code
-- b+R_CODE, name b+R_NAME, limit b+R_LIMIT, p1 b+R_P1, p2 b+R_P2, tag
-- b+R_TAG, key index b+R_KEY, old key index b+R_OLD),
-- code, L (limit), tag, ki, key, c (cost), now, st (per rule: what eval
-- hands to commit), plan (a reservation's entries, or nil); a packed
-- rule's v (the value read) and p (its entry's start, or nil) with, when
-- p, the entry's payload length pl, expiry pe and payload start pq; a log
-- rule's lg (its log's state). eval sets flags (RULE_ALLOWED,
-- RULE_DENIED or RULE_TOOHIGH: the cost could never fit), used, reset and retry (µs), and saves what commit
-- needs with a line "--@save a, b" (here st[r] = {a, b}; lua.go); commit
-- gets them back with "--@load a, b" (here from x = st[r]) and used
-- (before), sets used and reset after consuming and, for
-- a packed rule, ent (the whole entry) and exp (its expiry, ms); a
-- fragment may name its entry's values instead, with a last line
-- "--@entry FORMAT, tag, len, exp, …" (here ent = struct.pack(FORMAT,
-- tag, len, exp, …); a fast script packs its set's value from them). A
-- section that refuses the attempt sets fail to the error reply and
-- breaks out of the rule loop.
--
-- ARGV[1]  m, the number of attempts; then each attempt's arguments, from
-- offset a (the first attempt: a = 1), naming its keys from offset k
-- (the first: k = 0) as "index i" = KEYS[k+i]:
-- ARGV[a+A_OP]   op: t take, p peek, r reserve, i inspect (peek of 1 + trail)
-- ARGV[a+A_COST]   cost (>= 1)
-- ARGV[a+A_RULES]   n, the number of rules
-- ARGV[a+A_KEYS]   nk, the number of keys of this attempt
-- ARGV[a+A_TRAIL]   tk: index of the trail (list), 0 = none
-- ARGV[a+A_HOLDS]   hk: index of the reservations (hash), 0 = none
-- ARGV[a+A_RECORD]   ik: index of the idempotency record, 0 = none (ops t, r)
-- ARGV[a+A_TRAIL_MAX]   trail: max entries (0: none written; op i: 0 reads all)
-- ARGV[a+A_TRAIL_TTL]   trail: TTL, ms
-- ARGV[a+A_POLICY]  policy name (trail entries)
-- ARGV[a+A_TRAIL_VALUES]  trail: the attempt's values (driver.Request.TrailValues,
--             opaque, never holding '|'), "" = none
-- ARGV[a+A_RECORD_TTL]  the idempotency record's TTL, ms
-- ARGV[a+A_HOLD_ID]  op r: hold id; ARGV[a+A_HOLD_LIFE] its lifetime µs; ARGV[a+A_HOLDS_TTL] the
--             reservations key's TTL, ms
-- ARGV[a+A_OVERRIDES]  ok: index of the overrides (hash, driver.Request.OverrideKey),
--             0 = none
-- ARGV[a+A_MODES]  modes: "" (none) or, joined by MODESEP, one character
--             per rule (MODE_SHADOW a shadow rule, driver.Rule.Shadow;
--             MODE_COUNTED, MODE_UNCOUNTED an exempt one, driver.Rule.Exempt;
--             '0' otherwise), "" or per rule its headroom (driver.Rule.Keep),
--             comma-separated, and "" or the quiet spans (driver.Request.Quiet),
--             start and end µs, comma-separated (internal/lua/tokens.go's ArgModes)
-- ARGV[a+A_SEEDS]  seeds: "" (none) or per rule its seed (driver.Rule.Seed, the
--             1-based index of an earlier rule; 0 = none), comma-separated
-- ARGV[a+A_WINDOWS]  windows: "" or, when ok > 0 and a rule is GCRA, per rule its window in µs,
--             comma-separated (a GCRA rule's rate under a limit override)
-- ARGV[a+A_NEST]  nested sets: "" or per dimension set whose value is a
--             section of a root's (prelude.lua) struct NESTREC: its key
--             index, its root's, its root's wide hash's (prelude.lua's
--             wide: where its section is a field once the root is wide),
--             flags (NEST_UPGRADE: Options.Upgrade, a set without its
--             section yet is then read from its own key, the layout before
--             nesting, deleted once the section is written; NEST_HFE: the
--             server has HPEXPIREAT, for a root going wide), its id
-- then RA per rule: code, name, limit, p1, p2, tag, ki (the index of the
-- rule's state key) and oi (the index of its key in the one-key-per-rule
-- layout, read through while the packed layout has no state there:
-- upgrade.lua; 0 = none), where code is
--   f  fixed window, epoch-aligned   packed   (alg/fixed.lua)
--   c  calendar fixed window         packed   (alg/fixed.lua)
--   s  sliding window counters       packed   (alg/sliding.lua)
--   g  GCRA                          packed   (alg/gcra.lua)
--   l  sliding log, limit at most    packed (alg/log.lua; p2, under
--      driver.LogLine (and sliding   Options.Upgrade, what the log is
--      windows evaluated as logs)    built from once: the index of the
--                                    set's sorted-set log, or a sliding
--                                    window's cells, CARRYREC)
--   z  sliding log, larger limit     the dimension set's sorted set
--                                    (alg/zlog.lua; p2: the index of its
--                                    key in the previous layout, read
--                                    through under Options.Upgrade)
--   t  sliding window on TairHash    own key  (alg/modsliding.lua)
--   h  sliding window on native hash-field expiry  own key
--   x  GCRA on redis-cell            own key  (alg/cell.lua)
-- Packed rules (prelude.lua) sharing a key are read with one GET and
-- written with one SET; tag identifies the rule's entry there ("" for the
-- others). Unused p's are "0".
--
-- Reply, per attempt: {REPLY_ALLOWED or 0 (plus REPLY_OVERRIDE when an
--   override applied, REPLY_QUIET when denied for quiet hours), now µs,
--   the rules' bytes: per rule
--   struct '<Bi7i7i7' flags (RULE_ALLOWED, RULE_DENIED, RULE_TOOHIGH),
--   used, reset-after µs, retry-after µs; then, when an override applied,
--   "<its ID>|<every rule's limit as reported, comma-separated>|<its
--   stored value>"; then, with REPLY_QUIET, the end of the quiet span (µs,
--   an integer); then (op i) the trail entries,
--   newest first, strings "at µs|policy|rule|used|limit|cost|retry
--   µs|flags" (prelude.lua's TRAIL), then "|values" when
--   ARGV[a+A_TRAIL_VALUES] is not empty}.
-- The caller knows each rule's limit (but for overrides), hence remaining
-- = math.max(0, limit-used).
-- A replay (a live idempotency record exists) returns the stored reply
-- with REPLY_REPLAYED added to its first element and the original hold id ("" for a
-- take) appended; nothing else happens.
--
-- Shadow rules (ARGV[a+A_MODES]) are evaluated and reported but never deny;
-- they are committed only when they admit and the attempt consumes; a
-- take or reserve they would have denied writes a trail entry flagged TRAIL_SHADOW,
-- allowed or not. Exempt rules too, but that a counted one is committed
-- whenever the attempt consumes (past its limit: the fragments' commits
-- stop at MAXUSED), an uncounted one never, and their entries are flagged
-- TRAIL_EXEMPT. A rule keeping headroom (Keep) is evaluated against its
-- limit (an override's if one applies) less Keep: L is that in its eval
-- section; its reported limit stays the rule's. Quiet hours: when now
-- falls in a quiet span, the attempt is denied (REPLY_QUIET, the span's
-- end in the reply), nothing consumed, every rule evaluated; a take or
-- reserve writes one entry flagged TRAIL_QUIET (not the denying rules').
-- A block override comes first (quiet hours then do not apply), an
-- exempt override after them (it does not apply in quiet hours). A seeded rule (ARGV[a+A_SEEDS]) whose state shows nothing
-- (used 0) is first given the state a take of u units at now leaves on
-- empty state (its fragment's eval and commit run on no state with cost
-- u), u being its seed rule's used as evaluated in this attempt; the
-- seeded state is written by a take or reserve, allowed or denied (a
-- denied one writes the carried units alone), never by a peek. Overrides
-- (ARGV[a+A_OVERRIDES], a hash: field = ID, value = storage.go's override format, of
-- which the script reads "<kind>|<counted>|<until µs>|<created µs>|
-- <limits>|"): live ones (until 0 or after now) apply, block over exempt
-- over limits (the latest ID of each kind; per rule for limits).
-- One attempt (m = 1): the script's reply is the attempt's. Several: an
-- array of them, where an attempt that failed is an error element.
-- Errors: redis.error_reply with a "freqcap:" message (never naming a
-- key: keys hold subject values), returned before the attempt writes
-- anything. Among them: a state key holding a value freqcap did not write
-- (CL.THROTTLE would abort the server on a foreign redis-cell key).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local nowms = math.floor(now / 1000)

-- The attempts run in order in one loop (not a function per attempt: Lua
-- would build it anew on every run of the script). An attempt ends early
-- by setting its reply (fail, from inside a rule loop) and breaking out of
-- its repeat block.
-- vkey returns the name of the attempt's key index k (keys from kb) in
-- reservations and to holds.lua: a nested set's VKEY (nest: the
-- attempt's nested sets), else its key.
local function vkey(kb, nest, k)
  local nk = nest and nest[k]
  if not nk then return KEYS[kb + k] end
  local root = KEYS[kb + nk[1]]
  return root .. '%n' .. string.sub(KEYS[kb + k], #root + 1)
end

local attempts = tonumber(ARGV[1])
local replies = {}
local NONE = {} -- no logs (most attempts): read-only
local kb, ab = 0, 1
for a = 1, attempts do
  local n = tonumber(ARGV[ab + A_RULES])
  local nk = tonumber(ARGV[ab + A_KEYS])
  local tk, hk, ik = tonumber(ARGV[ab + A_TRAIL]), tonumber(ARGV[ab + A_HOLDS]), tonumber(ARGV[ab + A_RECORD])
  local op = ARGV[ab + A_OP]
  local reply, fail
  -- nest: key index -> {its root's key index, Options.Upgrade, its id,
  -- (set once imported), its root's wide hash's key index}, for the
  -- nested sets; nil (most attempts) when none. hfe: the server has
  -- HPEXPIREAT (prelude.lua's wide).
  local nest, hfe, decl -- decl: root key index -> a nested set of it is declared wide (NEST_WIDE)
  local nspec = ARGV[ab + A_NEST]
  if nspec ~= '' then
    nest = {}
    for p = 1, #nspec, NESTLEN do
      local ki, ri, wi, fl, id = struct.unpack(NESTREC, nspec, p)
      nest[ki] = {ri, fl % 2 == NEST_UPGRADE, id, false, wi}
      hfe = math.floor(fl / NEST_HFE) % 2 == 1
      if fl >= NEST_WIDE then
        decl = decl or {}
        decl[ri] = true
      end
    end
  end
  repeat
    -- Idempotency: a live record means this attempt was decided before.
    -- A record (internal/lua/tokens.go declares it; bare mode writes it
    -- too) is REC, then struct RECHDR (the first element, now, the rules'
    -- bytes' length), the rules' bytes as the reply has them, then with
    -- an override (first element >= 4) its element (RECLEN length, then
    -- bytes), then the hold id. The legacy text "<hold id>|<the reply's
    -- integers, comma-separated>" (the one-key-per-rule layout's and bare
    -- mode's before they wrote REC) is still read, never written.
    if ik > 0 then
      local rec = redis.call('GET', KEYS[kb + ik])
      if rec then
        if string.sub(rec, 1, 1) == REC then
          local al, at, len, p = struct.unpack(RECHDR, rec, 2)
          reply = {al + REPLY_REPLAYED, at, string.sub(rec, p, p + len - 1)}
          p = p + len
          if al % (2 * REPLY_OVERRIDE) >= REPLY_OVERRIDE then
            local ol, q = struct.unpack(RECLEN, rec, p)
            reply[4], p = string.sub(rec, q, q + ol - 1), q + ol
          end
          if al % (2 * REPLY_QUIET) >= REPLY_QUIET then
            reply[#reply + 1], p = struct.unpack(RECQUIET, rec, p)
          end
          if al >= REPLY_KEEP then
            local kl, q = struct.unpack(RECLEN, rec, p)
            reply[#reply + 1], p = string.sub(rec, q, q + kl - 1), q + kl
          end
          reply[#reply + 1] = string.sub(rec, p)
          break
        end
        local sep = string.find(rec, '|', 1, true)
        local ints = {}
        for d in string.gmatch(string.sub(rec, sep + 1), '[^,]+') do ints[#ints + 1] = tonumber(d) end
        local k = (#ints - 2) / 4
        local bin = ''
        if k > 0 then bin = struct.pack('<' .. string.rep(string.sub(RULEREC, 2), k), unpack(ints, 3)) end
        reply = {ints[1] + REPLY_REPLAYED, ints[2], bin, string.sub(rec, 1, sep - 1)}
        break
      end
    end

    -- Read: every packed value once, every log once (trimmed), and every
    -- redis-cell key checked, before anything is written. Twice when
    -- lapsed reservations were given back in between.
    local vals, raws, logs, tats, own, built, olds
    for pass = 1, 2 do
      vals, raws, logs, tats, own, olds = {}, {}, NONE, nil, false, nil
      for r = 1, n do
        local b = ab + HA + (r - 1) * RA
        local code = ARGV[b + R_CODE]
        local ki = tonumber(ARGV[b + R_KEY])
        local key = KEYS[kb + ki]
        if code == C_LOG and ARGV[b + R_P2] ~= '0' then
          -- Options.Upgrade: what the rule's packed log is built from when
          -- it is not there yet: a sliding log's sorted-set logs (the
          -- set's, p2, and the rule's own), a sliding window's cells (p2 a
          -- CARRYREC: the set's value's entry of their tag, else the rule's
          -- own hash).
          local p2, srcs, cells, oi = ARGV[b + R_P2], {}, nil, tonumber(ARGV[b + R_OLD])
          if string.sub(p2, 1, 1) == C_SLIDING then
            local _, K, s, ctag = struct.unpack(CARRYREC, p2)
            cells = {K, s, ctag}
            if oi > 0 then cells[4] = KEYS[kb + oi] end
          else
            srcs[1] = KEYS[kb + tonumber(p2)]
            if oi > 0 then srcs[2] = KEYS[kb + oi] end
          end
          olds = olds or {}
          olds[#olds + 1] = {ki, ARGV[b + R_TAG], tonumber(ARGV[b + R_P1]), srcs, cells, tonumber(ARGV[b + R_LIMIT])}
        end
        if code == C_FIXED or code == C_SLIDING or code == C_GCRA or code == C_CALENDAR or code == C_LOG then
          local ns = nest and nest[ki]
          if ns and not vals[ns[1]] then
            -- A nested set: its root's value first (read through as its own
            -- rules would under Options.Upgrade).
            local rv, rm = redis.pcall('GET', KEYS[kb + ns[1]]), nil
            if not rv and ns[2] then
              rv = (upgrade())(kb, ab, n, ns[1], now)
              if rv then
                built = built or {}
                built[ns[1]] = true
              end
            end
            if type(rv) ~= 'table' then rm = unpackv(rv) end
            if not rm then
              fail = redis.error_reply('freqcap: rule ' .. ARGV[b + R_NAME] .. FOREIGN)
              break
            end
            vals[ns[1]], raws[ns[1]] = rm, rv
          end
          if not vals[ki] then
            local v
            if ns then
              if vals[ns[1]][WIDETAG] then
                v = wide(nowms).get(KEYS[kb + ns[5]], ns[3])
              else
                v = sectv(raws[ns[1]], vals[ns[1]], ns[3])
              end
              if not v and ns[2] then
                v = redis.pcall('GET', key) -- Options.Upgrade: the set's own key, before nesting
                if v then
                  built = built or {}
                  built[ki], ns[4] = true, true
                end
              end
            else
              v = redis.pcall('GET', key)
            end
            if not v and tonumber(ARGV[b + R_OLD]) > 0 then
              v = (upgrade())(kb, ab, n, ki, now)
              if v then
                built = built or {}
                built[ki] = true -- not stored yet: written whole
              end
            end
            local m
            if type(v) ~= 'table' then m = unpackv(v) end
            if not m then
              fail = redis.error_reply('freqcap: rule ' .. ARGV[b + R_NAME] .. FOREIGN)
              break
            end
            vals[ki], raws[ki] = m, v
          end
        elseif code == C_ZLOG then
          local w = tonumber(ARGV[b + R_P1])
          if logs == NONE then logs = {} end
          local lg = logs[ki]
          if not lg then
            lg = {w = w, name = ARGV[b + R_NAME], olds = {}}
            logs[ki] = lg
          elseif lg.w < w then
            lg.w = w
          end
          local oi = tonumber(ARGV[b + R_OLD])
          if oi > 0 then lg.olds[#lg.olds + 1] = KEYS[kb + oi] end
          local pk = tonumber(ARGV[b + R_P2]) -- the previous layout's log (log.lua's read)
          if pk > 0 then lg.prev = KEYS[kb + pk] end
        else
          own = true -- a rule with a key of its own (t, h, x)
          if code == C_CELL then
            --@cell.read
          end
        end
      end
      if fail then break end
      for _, o in ipairs(olds or NONE) do
        local ki, tag = o[1], o[2]
        if not vals[ki][tag] then
          local _, _, oldLogs = upgrade()
          local ent = oldLogs(o[4], o[3], o[6], tag, now, o[5], raws[ki], vals[ki])
          if ent then
            local sv = packv(raws[ki], vals[ki], {ent}, 0, nowms)
            raws[ki], vals[ki] = sv, unpackv(sv)
            built = built or {}
            built[ki] = true
          end
        end
      end
      for ki, lg in pairs(logs) do
        local key = KEYS[kb + ki]
        if #lg.olds > 0 then
          local _, oldLog = upgrade()
          oldLog(key, lg.olds, lg.w)
        end
        --@zlog.read
      end
      if fail or pass == 2 or hk == 0 then break end
      -- Lapsed reservations: their units go back (only on keys this
      -- attempt names). The reservations are read only when a hold marker
      -- says one may have lapsed, or a rule keeps a key of its own.
      local need = own
      if not need then
        for ki, m in pairs(vals) do
          local mp = m[MARK]
          if mp then
            local _, _, exp = struct.unpack(HDR, raws[ki], mp)
            if exp * 1000 <= now then need = true end
          end
        end
        for _, lg in pairs(logs) do
          if lg.mark and lg.mark * 1000 <= now then need = true end
        end
      end
      if not need then break end
      local named = {}
      for k = 1, nk do named[vkey(kb, nest, k)] = k end
      holds(now).lapse(KEYS[kb + hk], named, function(k) return vkey(kb, nest, k) end, vals, logs)
    end
    if fail then
      reply = fail
      break
    end
    if op == OP_RESERVE and redis.call('HEXISTS', KEYS[kb + hk], ARGV[ab + A_HOLD_ID]) == 1 then
      reply = redis.error_reply('freqcap: hold id already in use')
      break
    end

    local c = 1
    if op ~= OP_INSPECT then c = tonumber(ARGV[ab + A_COST]) end
    local consume = op == OP_TAKE or op == OP_RESERVE

    -- Shadow and exempt rules, headroom, quiet hours, seeds and
    -- overrides: nil (the common case) or tables (quiet: the end of the
    -- quiet span now falls in, µs).
    local shadow, exempt, keep, quiet, seeds, blk, ex, lims, wins
    local md = ARGV[ab + A_MODES]
    if md ~= '' then
      local rs, ks, qs = string.match(md, '^([^' .. MODESEP .. ']*)' .. MODESEP .. '([^' .. MODESEP .. ']*)' .. MODESEP .. '(.*)$')
      shadow, exempt = {}, {}
      for r = 1, n do
        local m = string.byte(rs, r)
        shadow[r] = m == MODE_SHADOW
        if m == MODE_COUNTED or m == MODE_UNCOUNTED then exempt[r] = m end
      end
      if ks ~= '' then
        keep = {ks = ks}
        for d in string.gmatch(ks, '%d+') do keep[#keep + 1] = tonumber(d) end
      end
      local qa
      for d in string.gmatch(qs, '%d+') do
        if not qa then
          qa = tonumber(d)
        else
          if not quiet and qa <= now and now < tonumber(d) then quiet = tonumber(d) end
          qa = nil
        end
      end
    end
    if ARGV[ab + A_SEEDS] ~= '' then
      seeds = {}
      for d in string.gmatch(ARGV[ab + A_SEEDS], '%d+') do seeds[#seeds + 1] = tonumber(d) end
    end
    local ok = tonumber(ARGV[ab + A_OVERRIDES])
    if ok > 0 then
      local h = redis.pcall('HGETALL', KEYS[kb + ok])
      if h.err then
        reply = redis.error_reply('freqcap: the overrides key is not a hash (WRONGTYPE); not evaluated, nothing written')
        break
      end
      blk, ex, lims = overrides(h, now)
      if blk then
        quiet = nil -- a block denies first
      elseif quiet then
        ex = nil -- quiet hours come before an exempt override
      end
      if lims and ARGV[ab + A_WINDOWS] ~= '' then
        wins = {}
        for d in string.gmatch(ARGV[ab + A_WINDOWS], '%d+') do wins[#wins + 1] = tonumber(d) end
      end
    end
    -- lim: the limits reported per rule once an override applied; ov: the
    -- override that decided or changed a limit ({ID, stored value});
    -- seededk: the packed values holding a seeded entry.
    local lim, ov, seededk
    if blk then ov = blk elseif ex then ov = ex end

    -- Phase 1: evaluate every rule, writing nothing.
    local res = {0, now}
    local st = {}
    local allowed = true
    for r = 1, n do
      local b = ab + HA + (r - 1) * RA
      local code = ARGV[b + R_CODE]
      local L = tonumber(ARGV[b + R_LIMIT])
      local tag = ARGV[b + R_TAG]
      local ki = tonumber(ARGV[b + R_KEY])
      local key = KEYS[kb + ki]
      if lims then
        -- A limit override: the rule's limit (GCRA: its rate, per its
        -- window, the burst kept: T and the tolerance as
        -- driver.Rule.GCRAParams computes them, the tolerance bounded at
        -- 2^52 µs).
        local lo = lims[ARGV[b + R_NAME]]
        if lo then
          if code == C_GCRA then
            ARGV[b + R_P1], ARGV[b + R_P2] = gcraRate(wins[r], lo[2], L)
          else
            L = lo[2]
          end
          lim = lim or {}
          lim[r] = L
          if not blk and not ex and (not ov or lo[1] > ov[1]) then ov = {lo[1], lo[3]} end
        end
      end
      if keep and keep[r] > 0 then L = L - keep[r] end -- headroom: the attempt's limit
      local flags, used, reset, retry
      local seedu = 0
      if seeds and seeds[r] and seeds[r] > 0 then seedu = res[3 + (seeds[r] - 1) * 4 + 1] end
      for pass = 1, 2 do
        flags, used, reset, retry = RULE_ALLOWED, 0, 0, 0
        local v, p, _, pl, pe, pq -- a packed rule's value and entry
        if vals[ki] then
          v, p = raws[ki], vals[ki][tag]
          if p then _, pl, pe, pq = struct.unpack(HDR, v, p) end
        end
        if code == C_SLIDING then
          --@sliding.eval
        elseif code == C_FIXED or code == C_CALENDAR then
          --@fixed.eval
        elseif code == C_GCRA then
          --@gcra.eval
        elseif code == C_LOG then
          --@log.eval
        elseif code == C_ZLOG then
          local lg = logs[ki]
          --@zlog.eval
        elseif code == C_TAIRHASH or code == C_HFE then
          --@modsliding.eval
        elseif code == C_CELL then
          --@cell.eval
        else
          fail = redis.error_reply('freqcap: unknown algorithm code ' .. tostring(code))
          break
        end
        if fail or pass == 2 or seedu <= 0 or used > 0 then break end
        -- Seeding: the rule's state shows nothing. A packed rule gets the
        -- entry its fragment's commit writes for a take of seedu units on
        -- no state (its eval run first, as commit needs), spliced into the
        -- value read, and is evaluated again on it (pass 2); the value is
        -- then written whole by a take or reserve, allowed or denied.
        if code == C_SLIDING or code == C_FIXED or code == C_CALENDAR or code == C_GCRA or code == C_LOG then
          local ent, exp
          do
            local c, L, p, plan, st = seedu, math.max(L, seedu), nil, nil, {}
            local flags, used, reset, retry = RULE_ALLOWED, 0, 0, 0
            if code == C_SLIDING then
              --@sliding.eval
            elseif code == C_GCRA then
              --@gcra.eval
            elseif code == C_LOG then
              --@log.eval
            else
              --@fixed.eval
            end
            local x = st[r]
            used, reset = 0, 0
            if code == C_SLIDING then
              --@sliding.commit
            elseif code == C_GCRA then
              --@gcra.commit
            elseif code == C_LOG then
              --@log.commit
            else
              --@fixed.commit
            end
          end
          local sv = packv(raws[ki], vals[ki], {ent}, exp, nowms)
          raws[ki], vals[ki] = sv, unpackv(sv)
          built = built or {}
          built[ki] = true
          seededk = seededk or {}
          seededk[ki] = true
        elseif code == C_ZLOG then
          -- A sliding log: seedu members at now (at most L: more would
          -- change nothing but the count), added by a take or reserve,
          -- allowed or denied, before its own (phase 2); until then as if
          -- there.
          local lg, W = logs[ki], tonumber(ARGV[b + R_P1])
          local u = math.min(seedu, L)
          used, reset, retry, flags = u, W, 0, RULE_ALLOWED
          if c > L then
            flags = RULE_TOOHIGH
          elseif u + c > L then
            flags, retry = RULE_DENIED, W
          end
          if not lg.seedu or lg.seedu < u then lg.seedu = u end
          break
        else
          break -- (module codes: the encoder sends no seed with them)
        end
      end
      if fail then break end
      if flags ~= RULE_ALLOWED and not (shadow and (shadow[r] or exempt[r])) then allowed = false end
      local o = 3 + (r - 1) * 4
      res[o], res[o + 1], res[o + 2], res[o + 3] = flags, used, reset, retry
    end
    if fail then
      reply = fail
      break
    end

    -- Overrides: a block denies, else an exempt admits (an uncounted one
    -- consuming nothing: nocount).
    local nocount
    if blk or quiet then
      allowed = false
    elseif ex then
      allowed, nocount = true, not ex[3]
    end

    -- Seeded state is stored by any take or reserve, allowed or denied
    -- (a denied one stores the carried units alone): the logs' seeded
    -- members now (the commit's own are named after them), the packed
    -- values after phase 2 where it did not write them.
    if consume then
      for ki, lg in pairs(logs) do
        if lg.seedu then
          local key = KEYS[kb + ki]
          local pre, seq = sf('%d', now), 0
          if lg.newest == now and string.sub(lg.top, 1, #pre) == pre then
            seq = tonumber(string.sub(lg.top, #pre + 2)) or 0
          end
          local za = {}
          for k = 1, lg.seedu do
            local q = sf('%d', seq + k)
            za[#za + 1] = pre
            za[#za + 1] = pre .. #q .. q
          end
          for k = 1, #za, 1998 do redis.call('ZADD', key, unpack(za, k, math.min(#za, k + 1997))) end
          lg.newest, lg.top = now, za[#za]
          local at = (now + lg.w) / 1000 -- ms, rounded up
          if at % 1 ~= 0 then at = at - at % 1 + 1 end
          redis.call('PEXPIREAT', key, sf('%d', at + EXPSLACK))
        end
      end
    end

    -- Phase 2: consume from every rule, only if all admit (a shadow rule
    -- only if it admits too).
    local plan
    local ours, tops = {}, {} -- key index -> the entries written there, their latest expiry
    if allowed and op == OP_RESERVE then plan = {sf('%d', now + tonumber(ARGV[ab + A_HOLD_LIFE]))} end
    if allowed and consume and own then
      --@cell.consume
    end
    if allowed and consume then
      for r = 1, n do
        local b = ab + HA + (r - 1) * RA
        local code = ARGV[b + R_CODE]
        local L = tonumber(ARGV[b + R_LIMIT])
        local tag = ARGV[b + R_TAG]
        local ki = tonumber(ARGV[b + R_KEY])
        local key = vkey(kb, nest, ki)
        local o = 3 + (r - 1) * 4
        local x = st[r]
        local used, reset = res[o + 1], res[o + 2]
        local ent, exp
        if nocount or (shadow and ((shadow[r] and res[o] ~= RULE_ALLOWED) or exempt[r] == MODE_UNCOUNTED)) then
          -- not consumed: reported as evaluated
        elseif code == C_SLIDING then
          local v = raws[ki]
          --@sliding.commit
        elseif code == C_FIXED or code == C_CALENDAR then
          --@fixed.commit
        elseif code == C_GCRA then
          --@gcra.commit
        elseif code == C_LOG then
          local v = raws[ki]
          local p, pl, pq = vals[ki][tag], nil, nil
          if p then
            local _
            _, pl, _, pq = struct.unpack(HDR, v, p)
          end
          --@log.commit
        elseif code == C_ZLOG then
          local lg = logs[ki]
          --@zlog.commit
        elseif code == C_TAIRHASH or code == C_HFE then
          --@modsliding.commit
        end
        res[o + 1], res[o + 2] = used, reset
        if ent then
          local l = ours[ki]
          if not l then
            ours[ki], tops[ki] = {ent}, exp
          else
            l[#l + 1] = ent
            if exp > tops[ki] then tops[ki] = exp end
          end
        end
      end
      -- A new hold marks every packed value and log it has units in with
      -- the earliest lapse of the holds there (in ms, rounded down: a marker
      -- at or before now means one may have lapsed).
      local at
      if plan then at = math.floor(tonumber(plan[1]) / 1000) end
      if at then
        for ki, list in pairs(ours) do
          local m, mat = vals[ki], at
          if m[MARK] then
            local _, _, exp = struct.unpack(HDR, raws[ki], m[MARK])
            if exp < mat then mat = exp end
          end
          list[#list + 1] = struct.pack(HDR, MARK, 0, mat)
        end
      end
      if plan then
        local H = holds(now)
        for ki, lg in pairs(logs) do
          local mat = at
          if lg.mark and lg.mark < mat then mat = lg.mark end
          H.logMark(KEYS[kb + ki], lg, mat)
        end
        local hkey = KEYS[kb + hk]
        redis.call('HSET', hkey, ARGV[ab + A_HOLD_ID], table.concat(plan, '\n'))
        local ttl = tonumber(ARGV[ab + A_HOLDS_TTL])
        if redis.call('PTTL', hkey) < ttl then redis.call('PEXPIRE', hkey, ttl) end
      end
    end
    -- Seeded values not written above are written whole.
    if seededk and consume then
      for ki in pairs(seededk) do
        if not ours[ki] then ours[ki], tops[ki] = {}, 0 end
      end
    end
    -- The writes: a nested set's new value becomes its section (secs: root
    -- key index -> {id -> section}), written with its root's value; the
    -- others in place (SETRANGE, the TTL kept) when the new entries have
    -- the old ones' places, lengths and expiries and nothing else is stored
    -- (the same window, the same cell, as most decisions), else whole.
    local secs, names -- root key index -> id -> its new section; id -> its value's name
    for ki, list in pairs(ours) do
      local ns = nest and nest[ki]
      if ns then
        local sv, top = packv(raws[ki], vals[ki], list, tops[ki], nowms)
        secs, names = secs or {}, names or {}
        secs[ns[1]] = secs[ns[1]] or {}
        secs[ns[1]][ns[3]] = section(ns[3], sv, top)
        names[ns[3]] = string.sub(KEYS[kb + ki], #KEYS[kb + ns[1]] + 1)
      end
    end
    -- wk: root key index -> its wide hash's key index (a root with a
    -- section written goes through prelude.lua's wide, which may widen it).
    local wk
    if secs then
      wk = {}
      for _, ns in pairs(nest) do wk[ns[1]] = ns[5] end
    end
    for ki, list in pairs(ours) do
      if not (nest and nest[ki]) then
        local m, raw, pos = vals[ki], raws[ki], 2
        local sc = secs and secs[ki]
        if raw and #list > 0 and not sc and not (built and built[ki]) then
          for e = 1, #list do
            local ent = list[e]
            local _, len, exp = struct.unpack(HDR, ent, 1)
            if m[string.sub(ent, 1, 4)] ~= pos then
              pos = nil
              break
            end
            local _, olen, oexp = struct.unpack(HDR, raw, pos)
            if olen ~= len or oexp ~= exp then
              pos = nil
              break
            end
            pos = pos + 13 + len
          end
        end
        if raw and #list > 0 and not sc and not (built and built[ki]) and pos == #raw + 1 then
          redis.call('SETRANGE', KEYS[kb + ki], 1, table.concat(list))
        elseif sc then
          wide(nowms).root(KEYS[kb + ki], KEYS[kb + wk[ki]], raw, m, list, tops[ki], sc, hfe, names, decl and decl[ki])
        else
          local v, top = packv(raw, m, list, tops[ki], nowms, sc)
          if top > 0 then redis.call('SET', KEYS[kb + ki], v, 'PXAT', sf('%d', top)) end
        end
        if sc then secs[ki] = nil end
      end
    end
    for ri, sc in pairs(secs or NONE) do -- roots without entries of their own written
      wide(nowms).root(KEYS[kb + ri], KEYS[kb + wk[ri]], raws[ri], vals[ri], {}, 0, sc, hfe, names, decl and decl[ri])
    end
    for ki in pairs(ours) do
      local ns = nest and nest[ki]
      if ns and ns[4] then redis.call('DEL', KEYS[kb + ki]) end -- imported (Options.Upgrade)
    end
    res[1] = allowed and REPLY_ALLOWED or 0

    -- The denial trail, same atomic step: one entry per denying rule of a
    -- denied attempt (not under a block or in quiet hours: their entry
    -- instead), and per denying shadow or exempt rule, allowed or not.
    if consume and (not allowed or shadow) and tk > 0 and tonumber(ARGV[ab + A_TRAIL_MAX]) > 0 then
      local tkey = KEYS[kb + tk]
      local tv = ARGV[ab + A_TRAIL_VALUES]
      if tv ~= '' then tv = TRAILSEP .. tv end
      local ent = {}
      for r = n, 1, -1 do
        local o = 3 + (r - 1) * 4
        local fl = res[o]
        local sh, xr = shadow and shadow[r], shadow and exempt[r]
        if fl ~= RULE_ALLOWED and (sh or xr or (not allowed and not blk and not quiet)) then
          local b = ab + HA + (r - 1) * RA
          local fg = fl == RULE_TOOHIGH and TRAIL_TOOHIGH or 0
          if sh then fg = fg + TRAIL_SHADOW end
          if xr then fg = fg + TRAIL_EXEMPT end
          ent[#ent + 1] = sf(TRAIL, now, ARGV[ab + A_POLICY], ARGV[b + R_NAME],
            res[o + 1], (lim and lim[r]) or ARGV[b + R_LIMIT], c, res[o + 3], fg) .. tv
        end
      end
      if blk then
        local ra = 0
        if blk[3] > 0 then ra = blk[3] - now end
        ent[#ent + 1] = sf(TRAIL, now, ARGV[ab + A_POLICY], sf('%d', blk[1]), 0, 0, c, ra, TRAIL_OVERRIDE) .. tv
      elseif quiet then
        ent[#ent + 1] = sf(TRAIL, now, ARGV[ab + A_POLICY], '', 0, 0, c, quiet - now, TRAIL_QUIET) .. tv
      end
      if #ent > 0 then pushTrail(tkey, ent, tonumber(ARGV[ab + A_TRAIL_MAX]), nowms + tonumber(ARGV[ab + A_TRAIL_TTL])) end
    end

    -- The reply: the rules' four numbers as bytes (struct '<Bi7i7i7' per
    -- rule: one string, not 4 integers a rule, for both sides to convert).
    local bin = ''
    if n > 0 then bin = struct.pack('<' .. string.rep(string.sub(RULEREC, 2), n), unpack(res, 3, 2 + 4 * n)) end
    -- out is the reply: {allowed, now, bin, [override], trail entries…}.
    local out = {res[1], now, bin}
    local ovs = '' -- the override element, stored in the record too
    if ov then
      local ls = {}
      for r = 1, n do
        ls[r] = (lim and lim[r]) or ARGV[ab + HA + (r - 1) * RA + R_LIMIT]
        if type(ls[r]) == 'number' then ls[r] = sf('%d', ls[r]) end
      end
      ovs = sf('%d', ov[1]) .. '|' .. table.concat(ls, ',') .. '|' .. ov[2]
      out[1], out[4] = out[1] + REPLY_OVERRIDE, ovs
    end
    if quiet then out[1], out[#out + 1] = out[1] + REPLY_QUIET, quiet end

    -- Store the decision for retries of the same attempt, in the same
    -- step (the record read above): with an override (first element >=
    -- 4), its element after the rules' bytes, RECLEN length then bytes.
    if ik > 0 and consume then
      local hid = ''
      if op == OP_RESERVE and allowed then hid = ARGV[ab + A_HOLD_ID] end
      local ovr = ''
      if ov then ovr = struct.pack(RECLEN, #ovs) .. ovs end
      if quiet then ovr = ovr .. struct.pack(RECQUIET, quiet) end
      local first = out[1]
      if keep then -- the room this attempt had, for its replays
        first, ovr = first + REPLY_KEEP, ovr .. struct.pack(RECLEN, #keep.ks) .. keep.ks
      end
      redis.call('SET', KEYS[kb + ik], REC .. struct.pack(RECHDR, first, now, #bin) .. bin .. ovr .. hid, 'PX', ARGV[ab + A_RECORD_TTL])
    end

    if op == OP_INSPECT and tk > 0 then
      local tr = redis.call('LRANGE', KEYS[kb + tk], 0, tonumber(ARGV[ab + A_TRAIL_MAX]) - 1)
      local at = #out
      for k = 1, #tr do out[at + k] = tr[k] end
    end
    reply = out
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + nk
  ab = ab + HA + n * RA
end
return replies

-- A fast script (lua.Fast, fast.lua.tmpl): take.lua specialised to one
-- policy's rules, built per set of rule specifications (prelude.lua and
-- holds.lua come first). It takes and peeks on packed rules (fixed
-- windows, sliding window counters, GCRA) and sliding logs, running the
-- same eval and commit sections of alg/fixed.lua, alg/sliding.lua,
-- alg/gcra.lua and alg/log.lua as take.lua, but with each rule's code,
-- limit, parameters and tag written in as constants, the rule loops
-- unrolled and what eval hands to commit kept in locals: the interpreter
-- does the decision's arithmetic and little else. Its decisions, errors
-- and writes are take.lua's, byte for byte, lapsed reservations included
-- (holds.lua, as take.lua runs it); its ARGV and reply are shorter
-- encodings of take.lua's (below). The helpers of prelude.lua and
-- holds.lua that a decision rarely needs are built on first use (L(),
-- lua.Fast's lazy).
--
-- Its names: G, the dimension sets (keys) of an attempt, and GO, the keys
-- before its trail; V<g>, dimension set g's value (one GET each), where
-- its rules' entries are found: P<r>, with their payload lengths N<r> and
-- expiries T<r> (O<g>: anything else is stored there; lapsed: a hold
-- marker there says a reservation may have lapsed, then they are given
-- back and the values read again). A set nested in a root (prelude.lua:
-- a section of the root's value) is read out of the root's, read first:
-- its id, IT<g> and IX<g> (its tag and last 4 bytes), Q<g> and QN<g>,
-- where its entries lie in the root's value (or in its wide field's:
-- below); K<g> and KT<g>, the
-- root's other sections kept, their latest expiry. Each rule's eval section, then its
-- commit section, runs in its own block that sees take.lua's rule
-- variables (those of r, code, L, tag, ki and key it reads; v, p, pl, pe,
-- pq, flags, used, reset, retry; ent, exp in commit), and leaves its
-- results in F<r> flags, U<r> used, Z<r> reset, Y<r> retry, E<r> its new
-- entry (or, for a rule whose fragment names its entry's values on an
-- --@entry line, those values, in <name>_<r>) and X<r> its expiry; then
-- each dimension set's packed value is written (SETRANGE in place when
-- the entries keep their places, lengths and expiries, as take.lua; in
-- one struct.pack or one concatenation; a nested set's as its new section,
-- S<g> of expiry ST<g>, which its root's write puts in), and the denial trail and the
-- reply are built from the results. A script that reads overrides
-- (lua.FastOverrides) reads the subject's overrides after the values
-- (OVS: nil, or take.lua's block, exempt and limits as blk, ex and lims;
-- lim, the limits applied per rule, and ovl, the latest limit override
-- applied, which the rules' heads set), and after eval a block denies
-- and an exempt admits.
--
-- ARGV has one of two forms (backends/redis/args.go): the short form,
-- one attempt, is its values alone; the full form is the number of
-- attempts m, then each attempt's values. An attempt's values are its
-- head, then one per calendar rule, in rule order: its boundaries
-- (take.lua's p1 of a calendar rule). The head is one binary value
-- (tokens.go's FastHead): struct FHEAD, op (t take, p peek), cost (>= 1),
-- tk and hk, the trail's and the reservations' index among the
-- attempt's keys (0 = none), the trail's max entries and TTL (ms), nq,
-- the number of quiet spans; then in a script with nested sets their
-- ids, 8 bytes each, in the order of their keys (backends/redis's
-- sectionID: the same as sectid's of their keys); then nq quiet spans,
-- struct FSPAN each (start and end µs, in order, none overlapping:
-- take.lua's ARGV[a+A_MODES]'s last part), which a script for quiet hours
-- (lua.FastOptions.Quiet) reads: the attempt is denied in one, as by
-- take.lua (REPLY_QUIET; a block override first, an exempt one after);
-- last, struct FTRAIL, the policy name and the trail values after
-- TRAILSEP (empty when none), each its length then its bytes, read for a
-- denial's trail only.
-- KEYS per attempt: its dimension-set keys, then in a script with nested
-- sets each root's wide hash (its key plus WIDESUFFIX, in the order of
-- the roots' keys), then its overrides in a script that reads them (GO,
-- the keys before the trail, counts them), then its trail if tk > 0,
-- then its reservations if hk > 0. Redis builds the ARGV table on every
-- call, a string per value: one head costs less than a value per field,
-- and struct.unpack reads numbers faster than tonumber parses them.
--
-- Reply, per attempt: struct '<Bi7' (REPLY_ALLOWED or 0, now µs), then
-- '<Bi7i7i7' per rule (flags, used, reset µs, retry µs), as one string;
-- denied for quiet hours, REPLY_QUIET is added to the first byte and the
-- quiet span's end µs follows the rules, '<i7'; where an override applied,
-- REPLY_OVERRIDE is added and the reply is {that string, take.lua's
-- override element};
-- in the full form of m > 1 attempts, a table of them (an attempt's error
-- in its place). Redis converts a string reply faster than a table.
--
-- Wide roots (prelude.lua's wide; docs/DESIGN.md, "Wide subjects"): a
-- root holding the wide marker keeps its sets' sections in the hash at
-- its key plus WIDESUFFIX, which KEYS names after the dimension sets (one
-- per root, in the order of the roots' keys: WK<g>, before the
-- overrides). The script reads such a root's value (its own entries and
-- the marker), then with wide.get the one field of each of its nested
-- sets (WD, the wide helpers, built once per run): V<g>, the string a
-- nested set's entries lie in (the field's value, else the root's). A
-- wide root, or a root whose value the decision could push past WIDEAT
-- bytes (its length above WideBelow, fast.go), WB<g>, is written by
-- wide.root, as take.lua writes every root with a section to write: the
-- fields (HSET, the trailer: when, and the value's name), their expiry
-- (HPEXPIREAT or the sweep, by the marker's mode), the hash's
-- PEXPIREAT and the root's own value, or, for a narrow root, the move
-- of all its live sections into the hash when the value would pass
-- WIDEAT (the mode: HPEXPIREAT where the script was built for a server
-- that has it, lua.FastOptions.HFE, else the sweep), or its packed
-- value when it would not. Every decision is the script's own: none is
-- handed back to take.lua.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local nowms = (now - now % 1000) / 1000
local G, GO = 2, 3 -- dimension sets (keys) per attempt, and the keys before the trail

local attempts, replies = 1, nil
local WD -- prelude.lua's wide helpers (get, root), built at the first wide root of a run
local kb, ab = 0, 1 -- key base, the attempt's head's ARGV index
if #ARGV ~= 2 then -- the full form: the number of attempts first
  attempts, replies, ab = tonumber(ARGV[1]), {}, 2
end
for a = 1, attempts do
  local h = ARGV[ab] -- the attempt's head
  local op, c, tk, hk, tmax, tttl, nq = struct.unpack('<c1i8BBi8i8B', h)
  local reply, fail, lapsed
  local look = hk > 0 -- whether to look at hold markers
  repeat
    local P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4, P5, N5, T5
    local V1, O1, V2, O2
    local QT -- quiet hours: the end (µs) of the quiet span now falls in, or nil
    do
      local q = 37
      for _ = 1, nq do
        local qa, qe = struct.unpack('<i8i8', h, q)
        if now < qa then break end -- the spans are in order: none holds now
        if now < qe then
          QT = qe
          break
        end
        q = q + 16
      end
    end
    local CB5 = ARGV[ab + 1] -- a calendar rule's boundaries
    local K1, KT1 -- the other sets' sections kept (start, end pairs, adjacent ones merged), their latest expiry
    local WB1 -- its write is wide.root's: it is wide, or the decision could make it pass WIDEAT
    local Q2, QN2, S2, ST2 -- its entries' start and length (in its wide field's value, or the root's); its section when built alone, its expiry
    local IT2, IX2 = struct.unpack('c4c4', h, 29) -- its id (in the head): its section's tag, then the payload's first 4 bytes
    V1 = redis.pcall('GET', KEYS[kb + 1])
    O1 = false
    K1, KT1, WB1 = nil, 0, false
    Q2, QN2, V2 = nil, nil, nil
    if V1 and not fail then
      local n = type(V1) == 'string' and #V1 or 0
      local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
      if n == 0 or string.byte(V1, 1) ~= 1 then
        q = nil
        if n > 0 and string.sub(V1, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
      elseif n > 1875 then
        WB1 = true -- the decision could make it pass WIDEAT: wide.root writes it
      end
      while q and q <= n do
        if q + 13 - 1 > n then q = nil break end
        local tag, len, exp, d = struct.unpack('<c4I3I6', V1, q)
        if d + len - 1 > n then q = nil break end
        if tag == 'r01m' then P1, N1, T1 = q, len, exp
        elseif tag == 'r24h' then P2, N2, T2 = q, len, exp
        elseif tag == 'dayc' then P5, N5, T5 = q, len, exp
        elseif string.byte(tag, 1) >= 128 then -- a nested set's section
          if len < 4 or wf then q = nil break end
          if tag == IT2 and string.sub(V1, d, d + 3) == IX2 then Q2, QN2 = d + 4, len - 4
          elseif exp > nowms then
            if K1 and K1[#K1] + 1 == q then
              K1[#K1] = d + len - 1
            else
              K1 = K1 or {}
              K1[#K1 + 1], K1[#K1 + 2] = q, d + len - 1
            end
            if exp > KT1 then KT1 = exp end
          end
        else
          O1 = true
          if tag == MARK and look and exp * 1000 <= now then lapsed = true end
          if tag == '\000\000\000\001' then mk = true end
        end
        q = d + len
      end
      if wf and not mk then q = nil end -- a wide root's value without its marker
      if not q and not fail then
        fail = redis.error_reply('freqcap: rule ' .. 'recv-1m' .. FOREIGN)
      end
      if mk and not fail then
        -- A wide root: each nested set's section is its hash's field (one HGET).
        WB1 = true
        WD = WD or L().wide(nowms)
        V2, Q2, QN2 = WD.get(KEYS[kb + 3], IT2 .. IX2), nil, nil
        if V2 == '' then
          fail = redis.error_reply('freqcap: rule ' .. 'content-59s' .. FOREIGN)
        elseif V2 then
          Q2, QN2 = 2, #V2 - 1
        end
      end
    end
    V2 = Q2 and (V2 or V1) -- its entries lie in its wide field's value (the root's read set it) or the root's (Q, QN)
    O2 = false
    if V2 and not fail then
      local n, q = Q2 + QN2 - 1, Q2
      while q and q <= n do
        if q + 13 - 1 > n then q = nil break end
        local tag, len, exp, d = struct.unpack('<c4I3I6', V2, q)
        if d + len - 1 > n then q = nil break end
        if tag == 'c59s' then P3, N3, T3 = q, len, exp
        elseif tag == 'c59m' then P4, N4, T4 = q, len, exp
        else
          O2 = true
          if tag == MARK and look and exp * 1000 <= now then lapsed = true end
        end
        q = d + len
      end
      if not q and not fail then
        fail = redis.error_reply('freqcap: rule ' .. 'content-59s' .. FOREIGN)
      end
    end
    if fail then
      reply = fail
      break
    end
    if lapsed then
      -- Lapsed reservations give their units back (on this attempt's
      -- dimension sets), then the values are read again.
      local named, vals, logs, vk = {}, {}, {}, {}
      vk[1] = KEYS[kb + 1]
      named[vk[1]], vals[1] = 1, L().unpackv(V1)
      vk[2] = KEYS[kb + 1] .. '%n' .. string.sub(KEYS[kb + 2], #KEYS[kb + 1] + 1)
      named[vk[2]], vals[2] = 2, L().unpackv(Q2 and FMT .. string.sub(V2, Q2, Q2 + QN2 - 1))
      L().holds(now).lapse(KEYS[kb + hk], named, function(k) return vk[k] end, vals, logs)
      look = false -- read once more, markers aside
      P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4, P5, N5, T5 = nil
      V1 = redis.pcall('GET', KEYS[kb + 1])
      O1 = false
      K1, KT1, WB1 = nil, 0, false
      Q2, QN2, V2 = nil, nil, nil
      if V1 and not fail then
        local n = type(V1) == 'string' and #V1 or 0
        local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
        if n == 0 or string.byte(V1, 1) ~= 1 then
          q = nil
          if n > 0 and string.sub(V1, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
        elseif n > 1875 then
          WB1 = true -- the decision could make it pass WIDEAT: wide.root writes it
        end
        while q and q <= n do
          if q + 13 - 1 > n then q = nil break end
          local tag, len, exp, d = struct.unpack('<c4I3I6', V1, q)
          if d + len - 1 > n then q = nil break end
          if tag == 'r01m' then P1, N1, T1 = q, len, exp
          elseif tag == 'r24h' then P2, N2, T2 = q, len, exp
          elseif tag == 'dayc' then P5, N5, T5 = q, len, exp
          elseif string.byte(tag, 1) >= 128 then -- a nested set's section
            if len < 4 or wf then q = nil break end
            if tag == IT2 and string.sub(V1, d, d + 3) == IX2 then Q2, QN2 = d + 4, len - 4
            elseif exp > nowms then
              if K1 and K1[#K1] + 1 == q then
                K1[#K1] = d + len - 1
              else
                K1 = K1 or {}
                K1[#K1 + 1], K1[#K1 + 2] = q, d + len - 1
              end
              if exp > KT1 then KT1 = exp end
            end
          else
            O1 = true
            if tag == MARK and look and exp * 1000 <= now then lapsed = true end
            if tag == '\000\000\000\001' then mk = true end
          end
          q = d + len
        end
        if wf and not mk then q = nil end -- a wide root's value without its marker
        if not q and not fail then
          fail = redis.error_reply('freqcap: rule ' .. 'recv-1m' .. FOREIGN)
        end
        if mk and not fail then
          -- A wide root: each nested set's section is its hash's field (one HGET).
          WB1 = true
          WD = WD or L().wide(nowms)
          V2, Q2, QN2 = WD.get(KEYS[kb + 3], IT2 .. IX2), nil, nil
          if V2 == '' then
            fail = redis.error_reply('freqcap: rule ' .. 'content-59s' .. FOREIGN)
          elseif V2 then
            Q2, QN2 = 2, #V2 - 1
          end
        end
      end
      V2 = Q2 and (V2 or V1) -- its entries lie in its wide field's value (the root's read set it) or the root's (Q, QN)
      O2 = false
      if V2 and not fail then
        local n, q = Q2 + QN2 - 1, Q2
        while q and q <= n do
          if q + 13 - 1 > n then q = nil break end
          local tag, len, exp, d = struct.unpack('<c4I3I6', V2, q)
          if d + len - 1 > n then q = nil break end
          if tag == 'c59s' then P3, N3, T3 = q, len, exp
          elseif tag == 'c59m' then P4, N4, T4 = q, len, exp
          else
            O2 = true
            if tag == MARK and look and exp * 1000 <= now then lapsed = true end
          end
          q = d + len
        end
        if not q and not fail then
          fail = redis.error_reply('freqcap: rule ' .. 'content-59s' .. FOREIGN)
        end
      end
    end

    -- Phase 1: evaluate every rule, writing nothing.
    local F1, U1, Z1, Y1, E1, X1
    local j_1, nl_1, before_1, top_1
    local mid_1, base_1, lt_1, lc_1
    local F2, U2, Z2, Y2, E2, X2
    local j_2, nl_2, before_2, top_2
    local mid_2, base_2, lt_2, lc_2
    local F3, U3, Z3, Y3, E3, X3
    local j_3, nl_3, before_3, top_3
    local mid_3, base_3, lt_3, lc_3
    local F4, U4, Z4, Y4, E4, X4
    local j_4, nl_4, before_4, top_4
    local mid_4, base_4, lt_4, lc_4
    local F5, U5, Z5, Y5, E5, X5
    local em_5, e_5
    local used_5
    local allowed = true
    if not fail then repeat
      local L = 15
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P1, N1, T1, P1 and P1 + 13
      -- The first record in (now-W, ...] is j (k+1: none); before, the
      -- cumulative count before it (base when j = 1); nl and top, the newest
      -- record's µs and cumulative count (0 and before: none in the window).
      local W = 60000000
      local k, j, before, nl, top = 0, 1, 0, 0, 0
      if p then
        k = (pl - 7) / 14
        local hi, from = k + 1, now - W
        while j < hi do
          local m = (j + hi - (j + hi) % 2) / 2
          if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
        end
        before = struct.unpack('<I7', v, pq + 14 * j - 14)
      end
      top = before
      if j <= k then
        nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
        used = top - before
        reset = nl + W - now
        if c <= L and used + c > L then
          -- Retry when the record where the count reaches the need leaves.
          local need, lo, hi = before + used + c - L, j, k
          while lo < hi do
            local m = (lo + hi - (lo + hi) % 2) / 2
            if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
          end
          retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
        end
      end
      if c > L then
        flags = 2
      elseif used + c > L then
        flags = 0
      end
      j_1, nl_1, before_1, top_1 = j, nl, before, top
      if flags ~= 1 then allowed = false end
      F1, U1, Z1, Y1 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local L = 40
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P2, N2, T2, P2 and P2 + 13
      -- The first record in (now-W, ...] is j (k+1: none); before, the
      -- cumulative count before it (base when j = 1); nl and top, the newest
      -- record's µs and cumulative count (0 and before: none in the window).
      local W = 86400000000
      local k, j, before, nl, top = 0, 1, 0, 0, 0
      if p then
        k = (pl - 7) / 14
        local hi, from = k + 1, now - W
        while j < hi do
          local m = (j + hi - (j + hi) % 2) / 2
          if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
        end
        before = struct.unpack('<I7', v, pq + 14 * j - 14)
      end
      top = before
      if j <= k then
        nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
        used = top - before
        reset = nl + W - now
        if c <= L and used + c > L then
          -- Retry when the record where the count reaches the need leaves.
          local need, lo, hi = before + used + c - L, j, k
          while lo < hi do
            local m = (lo + hi - (lo + hi) % 2) / 2
            if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
          end
          retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
        end
      end
      if c > L then
        flags = 2
      elseif used + c > L then
        flags = 0
      end
      j_2, nl_2, before_2, top_2 = j, nl, before, top
      if flags ~= 1 then allowed = false end
      F2, U2, Z2, Y2 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local L = 2
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V2, P3, N3, T3, P3 and P3 + 13
      -- The first record in (now-W, ...] is j (k+1: none); before, the
      -- cumulative count before it (base when j = 1); nl and top, the newest
      -- record's µs and cumulative count (0 and before: none in the window).
      local W = 59000000
      local k, j, before, nl, top = 0, 1, 0, 0, 0
      if p then
        k = (pl - 7) / 14
        local hi, from = k + 1, now - W
        while j < hi do
          local m = (j + hi - (j + hi) % 2) / 2
          if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
        end
        before = struct.unpack('<I7', v, pq + 14 * j - 14)
      end
      top = before
      if j <= k then
        nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
        used = top - before
        reset = nl + W - now
        if c <= L and used + c > L then
          -- Retry when the record where the count reaches the need leaves.
          local need, lo, hi = before + used + c - L, j, k
          while lo < hi do
            local m = (lo + hi - (lo + hi) % 2) / 2
            if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
          end
          retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
        end
      end
      if c > L then
        flags = 2
      elseif used + c > L then
        flags = 0
      end
      j_3, nl_3, before_3, top_3 = j, nl, before, top
      if flags ~= 1 then allowed = false end
      F3, U3, Z3, Y3 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local L = 5
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V2, P4, N4, T4, P4 and P4 + 13
      -- The first record in (now-W, ...] is j (k+1: none); before, the
      -- cumulative count before it (base when j = 1); nl and top, the newest
      -- record's µs and cumulative count (0 and before: none in the window).
      local W = 3540000000
      local k, j, before, nl, top = 0, 1, 0, 0, 0
      if p then
        k = (pl - 7) / 14
        local hi, from = k + 1, now - W
        while j < hi do
          local m = (j + hi - (j + hi) % 2) / 2
          if struct.unpack('<I7', v, pq + 14 * m - 7) > from then hi = m else j = m + 1 end
        end
        before = struct.unpack('<I7', v, pq + 14 * j - 14)
      end
      top = before
      if j <= k then
        nl, top = struct.unpack('<I7I7', v, pq + 14 * k - 7)
        used = top - before
        reset = nl + W - now
        if c <= L and used + c > L then
          -- Retry when the record where the count reaches the need leaves.
          local need, lo, hi = before + used + c - L, j, k
          while lo < hi do
            local m = (lo + hi - (lo + hi) % 2) / 2
            if struct.unpack('<I7', v, pq + 14 * m) >= need then hi = m else lo = m + 1 end
          end
          retry = struct.unpack('<I7', v, pq + 14 * lo - 7) + W - now
        end
      end
      if c > L then
        flags = 2
      elseif used + c > L then
        flags = 0
      end
      j_4, nl_4, before_4, top_4 = j, nl, before, top
      if flags ~= 1 then allowed = false end
      F4, U4, Z4, Y4 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local code, L = "c", 20
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P5, N5, T5, P5 and P5 + 13
      local e
      if code == 'f' then
        local W = CB5
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch(CB5, '%d+') do
          local bu = tonumber(bv) * 1000
          if bu > now then
            if prev then e = bu end
            break
          end
          prev = bu
        end
        if not e then
          fail = redis.error_reply('freqcap: calendar boundaries do not cover the server time (clock skew?)')
          break
        end
      end
      local em = e / 1000 -- ms, rounded up (inline: no call)
      if em % 1 ~= 0 then em = em - em % 1 + 1 end
      if p and pe == em then used = struct.unpack('<I7', v, pq) end
      if used > 0 then reset = e - now end
      if c > L then
        flags = 2
      elseif used + c > L then
        flags, retry = 0, e - now
      end
      em_5, e_5 = em, e
      if flags ~= 1 then allowed = false end
      F5, U5, Z5, Y5 = flags, used, reset, retry
    until true end
    if fail then
      reply = fail
      break
    end
    if QT then allowed = false end -- quiet hours

    -- Phase 2: consume from every rule, only if all admit.
    if allowed and op == 't' then
      do
        local v, p, pl, pq, used, reset = V1, P1, N1, P1 and P1 + 13, U1, Z1
        local ent, exp
        -- Trimmed to the window, c units at now added: the entry is base (before),
        -- the records kept but the last (mid, as stored), then the last record
        -- (lt µs, lc units), packed in one struct.pack (eval read every number it
        -- needs: commit reads none).
        local j, nl, before, top = j_1, nl_1, before_1, top_1
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        local W = 60000000
        local k = 0
        if p then k = (pl - 7) / 14 end
        local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
        if c == 0 then
          -- None taken (saturated, so j <= k): the records in the window kept.
          mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
        elseif j <= k and nl == now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
        elseif j <= k and nl < now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
        elseif j <= k then
          -- The server clock went back: c units at now, in order (added to a
          -- record at now), the later records' counts up by c; the newest record
          -- stays the last.
          local out, prev, added = {}, before, false
          for z = j, k - 1 do
            local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
            if not added and t > now then
              out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
            end
            prev = u
            if added then
              u = u + c
            elseif t == now then
              u, added = u + c, true
            end
            out[#out + 1] = struct.pack('<I7I7', t, u)
          end
          if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
          mid, lt = table.concat(out), nl
        end
        local hi = now
        if nl > now or c == 0 then hi = nl end
        exp = (hi + W) / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        -- The cumulative counts start again from 0 before they leave the range
        -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
        -- window): every record less the base, the counts the same.
        local base = before
        if base >= 4503599627370496 / 2 then
          local out = {}
          for z = 1, #mid / 14 do
            local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
            out[z] = struct.pack('<I7I7', t, u - base)
          end
          mid, lc, base = table.concat(out), lc - base, 0
        end
        -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
        -- packs its set's whole value in one struct.pack from these values.
        mid_1, base_1, lt_1, lc_1 = mid, base, lt, lc
        used, reset = used + c, hi + W - now
        U1, Z1, E1, X1 = used, reset, ent, exp
      end
      do
        local v, p, pl, pq, used, reset = V1, P2, N2, P2 and P2 + 13, U2, Z2
        local ent, exp
        -- Trimmed to the window, c units at now added: the entry is base (before),
        -- the records kept but the last (mid, as stored), then the last record
        -- (lt µs, lc units), packed in one struct.pack (eval read every number it
        -- needs: commit reads none).
        local j, nl, before, top = j_2, nl_2, before_2, top_2
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        local W = 86400000000
        local k = 0
        if p then k = (pl - 7) / 14 end
        local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
        if c == 0 then
          -- None taken (saturated, so j <= k): the records in the window kept.
          mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
        elseif j <= k and nl == now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
        elseif j <= k and nl < now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
        elseif j <= k then
          -- The server clock went back: c units at now, in order (added to a
          -- record at now), the later records' counts up by c; the newest record
          -- stays the last.
          local out, prev, added = {}, before, false
          for z = j, k - 1 do
            local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
            if not added and t > now then
              out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
            end
            prev = u
            if added then
              u = u + c
            elseif t == now then
              u, added = u + c, true
            end
            out[#out + 1] = struct.pack('<I7I7', t, u)
          end
          if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
          mid, lt = table.concat(out), nl
        end
        local hi = now
        if nl > now or c == 0 then hi = nl end
        exp = (hi + W) / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        -- The cumulative counts start again from 0 before they leave the range
        -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
        -- window): every record less the base, the counts the same.
        local base = before
        if base >= 4503599627370496 / 2 then
          local out = {}
          for z = 1, #mid / 14 do
            local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
            out[z] = struct.pack('<I7I7', t, u - base)
          end
          mid, lc, base = table.concat(out), lc - base, 0
        end
        -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
        -- packs its set's whole value in one struct.pack from these values.
        mid_2, base_2, lt_2, lc_2 = mid, base, lt, lc
        used, reset = used + c, hi + W - now
        U2, Z2, E2, X2 = used, reset, ent, exp
      end
      do
        local v, p, pl, pq, used, reset = V2, P3, N3, P3 and P3 + 13, U3, Z3
        local ent, exp
        -- Trimmed to the window, c units at now added: the entry is base (before),
        -- the records kept but the last (mid, as stored), then the last record
        -- (lt µs, lc units), packed in one struct.pack (eval read every number it
        -- needs: commit reads none).
        local j, nl, before, top = j_3, nl_3, before_3, top_3
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        local W = 59000000
        local k = 0
        if p then k = (pl - 7) / 14 end
        local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
        if c == 0 then
          -- None taken (saturated, so j <= k): the records in the window kept.
          mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
        elseif j <= k and nl == now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
        elseif j <= k and nl < now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
        elseif j <= k then
          -- The server clock went back: c units at now, in order (added to a
          -- record at now), the later records' counts up by c; the newest record
          -- stays the last.
          local out, prev, added = {}, before, false
          for z = j, k - 1 do
            local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
            if not added and t > now then
              out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
            end
            prev = u
            if added then
              u = u + c
            elseif t == now then
              u, added = u + c, true
            end
            out[#out + 1] = struct.pack('<I7I7', t, u)
          end
          if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
          mid, lt = table.concat(out), nl
        end
        local hi = now
        if nl > now or c == 0 then hi = nl end
        exp = (hi + W) / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        -- The cumulative counts start again from 0 before they leave the range
        -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
        -- window): every record less the base, the counts the same.
        local base = before
        if base >= 4503599627370496 / 2 then
          local out = {}
          for z = 1, #mid / 14 do
            local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
            out[z] = struct.pack('<I7I7', t, u - base)
          end
          mid, lc, base = table.concat(out), lc - base, 0
        end
        -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
        -- packs its set's whole value in one struct.pack from these values.
        mid_3, base_3, lt_3, lc_3 = mid, base, lt, lc
        used, reset = used + c, hi + W - now
        U3, Z3, E3, X3 = used, reset, ent, exp
      end
      do
        local v, p, pl, pq, used, reset = V2, P4, N4, P4 and P4 + 13, U4, Z4
        local ent, exp
        -- Trimmed to the window, c units at now added: the entry is base (before),
        -- the records kept but the last (mid, as stored), then the last record
        -- (lt µs, lc units), packed in one struct.pack (eval read every number it
        -- needs: commit reads none).
        local j, nl, before, top = j_4, nl_4, before_4, top_4
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        local W = 3540000000
        local k = 0
        if p then k = (pl - 7) / 14 end
        local mid, lt, lc = '', now, top + c -- none left in the window: one record at now
        if c == 0 then
          -- None taken (saturated, so j <= k): the records in the window kept.
          mid, lt = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8), nl
        elseif j <= k and nl == now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k - 8)
        elseif j <= k and nl < now then
          mid = string.sub(v, pq + 14 * j - 7, pq + 14 * k + 6)
        elseif j <= k then
          -- The server clock went back: c units at now, in order (added to a
          -- record at now), the later records' counts up by c; the newest record
          -- stays the last.
          local out, prev, added = {}, before, false
          for z = j, k - 1 do
            local t, u = struct.unpack('<I7I7', v, pq + 14 * z - 7)
            if not added and t > now then
              out[#out + 1], added = struct.pack('<I7I7', now, prev + c), true
            end
            prev = u
            if added then
              u = u + c
            elseif t == now then
              u, added = u + c, true
            end
            out[#out + 1] = struct.pack('<I7I7', t, u)
          end
          if not added then out[#out + 1] = struct.pack('<I7I7', now, prev + c) end
          mid, lt = table.concat(out), nl
        end
        local hi = now
        if nl > now or c == 0 then hi = nl end
        exp = (hi + W) / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        -- The cumulative counts start again from 0 before they leave the range
        -- doubles hold exactly (2^53: a counted exempt adds up to MAXUSED a
        -- window): every record less the base, the counts the same.
        local base = before
        if base >= 4503599627370496 / 2 then
          local out = {}
          for z = 1, #mid / 14 do
            local t, u = struct.unpack('<I7I7', mid, 14 * z - 13)
            out[z] = struct.pack('<I7I7', t, u - base)
          end
          mid, lc, base = table.concat(out), lc - base, 0
        end
        -- The entry, struct LOGENT: take.lua packs it here (ent); a fast script
        -- packs its set's whole value in one struct.pack from these values.
        mid_4, base_4, lt_4, lc_4 = mid, base, lt, lc
        used, reset = used + c, hi + W - now
        U4, Z4, E4, X4 = used, reset, ent, exp
      end
      do
        local v, used, reset = V1, U5, Z5
        local ent, exp
        local em, e = em_5, e_5
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_5 = used
        U5, Z5, E5, X5 = used, reset, ent, exp
      end
      do
        local top = X3
        if X4 > top then top = X4 end
        ST2 = top
        if O2 then -- other entries kept: its section built alone
          E3 = struct.pack('<c4I3I6I7c0I7I7', 'c59s', 21 + #mid_3, X3, base_3, mid_3, lt_3, lc_3)
          E4 = struct.pack('<c4I3I6I7c0I7I7', 'c59m', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4)
          local sv = Q2 and FMT .. string.sub(V2, Q2, Q2 + QN2 - 1)
          local v, vtop = L().packv(sv, L().unpackv(sv), {E3, E4}, top, nowms)
          S2, ST2 = struct.pack('<c4I3I6c4', IT2, #v + 3, vtop, IX2) .. string.sub(v, 2), vtop
        end
      end
      do
        local top = X1
        if X2 > top then top = X2 end
        if X5 > top then top = X5 end
        if WB1 then
          -- A wide root, or one this decision could make pass WIDEAT:
          -- prelude.lua's wide.root writes it, as take.lua does (the
          -- sections into its hash's fields, all its live sections moved
          -- there, or its packed value).
          if not S2 then S2 = struct.pack('<c4I3I6c4c4I3I6I7c0I7I7c4I3I6I7c0I7I7', IT2, 4 + (13 + (21 + #mid_3) + 13 + (21 + #mid_4)), ST2, IX2, 'c59s', 21 + #mid_3, X3, base_3, mid_3, lt_3, lc_3, 'c59m', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4) end
          E1 = struct.pack('<c4I3I6I7c0I7I7', 'r01m', 21 + #mid_1, X1, base_1, mid_1, lt_1, lc_1)
          E2 = struct.pack('<c4I3I6I7c0I7I7', 'r24h', 21 + #mid_2, X2, base_2, mid_2, lt_2, lc_2)
          E5 = struct.pack('<c4I3I6I7', 'dayc', 7, X5, used_5)
          local rk = KEYS[kb + 1]
          WD = WD or L().wide(nowms)
          WD.root(rk, KEYS[kb + 3], V1, L().unpackv(V1), {E1, E2, E5}, top,
            {[IT2 .. IX2] = S2}, false,
            {[IT2 .. IX2] = string.sub(KEYS[kb + 2], #rk + 1)}, false)
        else
          if ST2 > top then top = ST2 end
          if KT1 > top then top = KT1 end
          local rest = '' -- the other sets' sections kept
          if K1 then
            if #K1 == 2 then
              rest = string.sub(V1, K1[1], K1[2])
            else
              local o = {}
              for j = 1, #K1, 2 do o[#o + 1] = string.sub(V1, K1[j], K1[j + 1]) end
              rest = table.concat(o)
            end
          end
          if not O1 and not S2 then
            -- The root's value in one struct.pack: its entries, then each nested
            -- set's section (header, the id's last 4 bytes, its entries), then
            -- the other sections kept.
            redis.call('SET', KEYS[kb + 1], struct.pack('<c0c4I3I6I7c0I7I7c4I3I6I7c0I7I7c4I3I6I7c4I3I6c4c4I3I6I7c0I7I7c4I3I6I7c0I7I7c0', FMT, 'r01m', 21 + #mid_1, X1, base_1, mid_1, lt_1, lc_1, 'r24h', 21 + #mid_2, X2, base_2, mid_2, lt_2, lc_2, 'dayc', 7, X5, used_5, IT2, 4 + (13 + (21 + #mid_3) + 13 + (21 + #mid_4)), ST2, IX2, 'c59s', 21 + #mid_3, X3, base_3, mid_3, lt_3, lc_3, 'c59m', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4, rest), 'PXAT', top)
          else
            if not S2 then S2 = struct.pack('<c4I3I6c4c4I3I6I7c0I7I7c4I3I6I7c0I7I7', IT2, 4 + (13 + (21 + #mid_3) + 13 + (21 + #mid_4)), ST2, IX2, 'c59s', 21 + #mid_3, X3, base_3, mid_3, lt_3, lc_3, 'c59m', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4) end
            if not O1 then
              redis.call('SET', KEYS[kb + 1], struct.pack('<c0c4I3I6I7c0I7I7c4I3I6I7c0I7I7c4I3I6I7', FMT, 'r01m', 21 + #mid_1, X1, base_1, mid_1, lt_1, lc_1, 'r24h', 21 + #mid_2, X2, base_2, mid_2, lt_2, lc_2, 'dayc', 7, X5, used_5) .. S2 .. rest, 'PXAT', top)
            else
              E1 = struct.pack('<c4I3I6I7c0I7I7', 'r01m', 21 + #mid_1, X1, base_1, mid_1, lt_1, lc_1)
              E2 = struct.pack('<c4I3I6I7c0I7I7', 'r24h', 21 + #mid_2, X2, base_2, mid_2, lt_2, lc_2)
              E5 = struct.pack('<c4I3I6I7', 'dayc', 7, X5, used_5)
              local v, vtop = L().packv(V1, L().unpackv(V1), {E1, E2, E5}, top, nowms, {[IT2 .. IX2] = S2})
              redis.call('SET', KEYS[kb + 1], v, 'PXAT', sf('%d', vtop))
            end
          end
        end
      end
    end

    -- The denial trail, as take.lua writes it.
    if not allowed and op == 't' and tk > 0 and tmax > 0 then
      local tkey = KEYS[kb + tk]
      local pol, tv = struct.unpack('<i4c0i4c0', h, 37 + 16 * nq)
      local ent = {}
      if QT then
        ent[#ent + 1] = sf('%d|%s||0|0|%d|%d|16%s', now, pol, c, QT - now, tv)
      else
        if F5 ~= 1 then
          ent[#ent + 1] = sf('%d|%s|day|%d|20|%d|%d|%d%s', now, pol, U5, c, Y5, F5 == 2 and 1 or 0, tv)
        end
        if F4 ~= 1 then
          ent[#ent + 1] = sf('%d|%s|content-59m|%d|5|%d|%d|%d%s', now, pol, U4, c, Y4, F4 == 2 and 1 or 0, tv)
        end
        if F3 ~= 1 then
          ent[#ent + 1] = sf('%d|%s|content-59s|%d|2|%d|%d|%d%s', now, pol, U3, c, Y3, F3 == 2 and 1 or 0, tv)
        end
        if F2 ~= 1 then
          ent[#ent + 1] = sf('%d|%s|recv-24h|%d|50|%d|%d|%d%s', now, pol, U2, c, Y2, F2 == 2 and 1 or 0, tv)
        end
        if F1 ~= 1 then
          ent[#ent + 1] = sf('%d|%s|recv-1m|%d|15|%d|%d|%d%s', now, pol, U1, c, Y1, F1 == 2 and 1 or 0, tv)
        end
      end
      L().pushTrail(tkey, ent, tmax, nowms + tttl)
    end
    reply = struct.pack('<Bi7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7', (allowed and 1 or 0) + (QT and 8 or 0), now,
      F1, U1, Z1, Y1,
      F2, U2, Z2, Y2,
      F3, U3, Z3, Y3,
      F4, U4, Z4, Y4,
      F5, U5, Z5, Y5)
    if QT then reply = reply .. struct.pack('<i7', QT) end
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + GO + (tk > 0 and 1 or 0) + (hk > 0 and 1 or 0)
  ab = ab + 2
end
return replies

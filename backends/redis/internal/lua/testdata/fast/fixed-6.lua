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
local G, GO = 3, 3 -- dimension sets (keys) per attempt, and the keys before the trail

local attempts, replies = 1, nil
local WD -- prelude.lua's wide helpers (get, root), built at the first wide root of a run
local kb, ab = 0, 1 -- key base, the attempt's head's ARGV index
if #ARGV ~= 1 then -- the full form: the number of attempts first
  attempts, replies, ab = tonumber(ARGV[1]), {}, 2
end
for a = 1, attempts do
  local h = ARGV[ab] -- the attempt's head
  local op, c, tk, hk, tmax, tttl, nq = struct.unpack('<c1i8BBi8i8B', h)
  local reply, fail, lapsed
  local look = hk > 0 -- whether to look at hold markers
  repeat
    local P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4, P5, N5, T5, P6, N6, T6
    local V1, O1, V2, O2, V3, O3
    V1 = redis.pcall('GET', KEYS[kb + 1])
    O1 = false
    if V1 and not fail then
      local n = type(V1) == 'string' and #V1 or 0
      local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
      if n == 0 or string.byte(V1, 1) ~= 1 then
        q = nil
        if n > 0 and string.sub(V1, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
      end
      while q and q <= n do
        if q + 13 - 1 > n then q = nil break end
        local tag, len, exp, d = struct.unpack('<c4I3I6', V1, q)
        if d + len - 1 > n then q = nil break end
        if tag == 'f001' then P1, N1, T1 = q, len, exp
        elseif tag == 'f003' then P3, N3, T3 = q, len, exp
        else
          if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
          O1 = true
          if tag == MARK and look and exp * 1000 <= now then lapsed = true end
          if tag == '\000\000\000\001' then mk = true end
        end
        q = d + len
      end
      if wf and not mk then q = nil end -- a wide root's value without its marker
      if not q and not fail then
        fail = redis.error_reply('freqcap: rule ' .. 'a' .. FOREIGN)
      end
    end
    V2 = redis.pcall('GET', KEYS[kb + 2])
    O2 = false
    if V2 and not fail then
      local n = type(V2) == 'string' and #V2 or 0
      local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
      if n == 0 or string.byte(V2, 1) ~= 1 then
        q = nil
        if n > 0 and string.sub(V2, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
      end
      while q and q <= n do
        if q + 13 - 1 > n then q = nil break end
        local tag, len, exp, d = struct.unpack('<c4I3I6', V2, q)
        if d + len - 1 > n then q = nil break end
        if tag == 'f002' then P2, N2, T2 = q, len, exp
        elseif tag == 'f005' then P5, N5, T5 = q, len, exp
        else
          if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
          O2 = true
          if tag == MARK and look and exp * 1000 <= now then lapsed = true end
          if tag == '\000\000\000\001' then mk = true end
        end
        q = d + len
      end
      if wf and not mk then q = nil end -- a wide root's value without its marker
      if not q and not fail then
        fail = redis.error_reply('freqcap: rule ' .. 'b' .. FOREIGN)
      end
    end
    V3 = redis.pcall('GET', KEYS[kb + 3])
    O3 = false
    if V3 and not fail then
      local n = type(V3) == 'string' and #V3 or 0
      local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
      if n == 0 or string.byte(V3, 1) ~= 1 then
        q = nil
        if n > 0 and string.sub(V3, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
      end
      while q and q <= n do
        if q + 13 - 1 > n then q = nil break end
        local tag, len, exp, d = struct.unpack('<c4I3I6', V3, q)
        if d + len - 1 > n then q = nil break end
        if tag == 'f004' then P4, N4, T4 = q, len, exp
        elseif tag == 'f006' then P6, N6, T6 = q, len, exp
        else
          if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
          O3 = true
          if tag == MARK and look and exp * 1000 <= now then lapsed = true end
          if tag == '\000\000\000\001' then mk = true end
        end
        q = d + len
      end
      if wf and not mk then q = nil end -- a wide root's value without its marker
      if not q and not fail then
        fail = redis.error_reply('freqcap: rule ' .. 'd' .. FOREIGN)
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
      vk[2] = KEYS[kb + 2]
      named[vk[2]], vals[2] = 2, L().unpackv(V2)
      vk[3] = KEYS[kb + 3]
      named[vk[3]], vals[3] = 3, L().unpackv(V3)
      L().holds(now).lapse(KEYS[kb + hk], named, function(k) return vk[k] end, vals, logs)
      look = false -- read once more, markers aside
      P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4, P5, N5, T5, P6, N6, T6 = nil
      V1 = redis.pcall('GET', KEYS[kb + 1])
      O1 = false
      if V1 and not fail then
        local n = type(V1) == 'string' and #V1 or 0
        local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
        if n == 0 or string.byte(V1, 1) ~= 1 then
          q = nil
          if n > 0 and string.sub(V1, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
        end
        while q and q <= n do
          if q + 13 - 1 > n then q = nil break end
          local tag, len, exp, d = struct.unpack('<c4I3I6', V1, q)
          if d + len - 1 > n then q = nil break end
          if tag == 'f001' then P1, N1, T1 = q, len, exp
          elseif tag == 'f003' then P3, N3, T3 = q, len, exp
          else
            if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
            O1 = true
            if tag == MARK and look and exp * 1000 <= now then lapsed = true end
            if tag == '\000\000\000\001' then mk = true end
          end
          q = d + len
        end
        if wf and not mk then q = nil end -- a wide root's value without its marker
        if not q and not fail then
          fail = redis.error_reply('freqcap: rule ' .. 'a' .. FOREIGN)
        end
      end
      V2 = redis.pcall('GET', KEYS[kb + 2])
      O2 = false
      if V2 and not fail then
        local n = type(V2) == 'string' and #V2 or 0
        local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
        if n == 0 or string.byte(V2, 1) ~= 1 then
          q = nil
          if n > 0 and string.sub(V2, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
        end
        while q and q <= n do
          if q + 13 - 1 > n then q = nil break end
          local tag, len, exp, d = struct.unpack('<c4I3I6', V2, q)
          if d + len - 1 > n then q = nil break end
          if tag == 'f002' then P2, N2, T2 = q, len, exp
          elseif tag == 'f005' then P5, N5, T5 = q, len, exp
          else
            if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
            O2 = true
            if tag == MARK and look and exp * 1000 <= now then lapsed = true end
            if tag == '\000\000\000\001' then mk = true end
          end
          q = d + len
        end
        if wf and not mk then q = nil end -- a wide root's value without its marker
        if not q and not fail then
          fail = redis.error_reply('freqcap: rule ' .. 'b' .. FOREIGN)
        end
      end
      V3 = redis.pcall('GET', KEYS[kb + 3])
      O3 = false
      if V3 and not fail then
        local n = type(V3) == 'string' and #V3 or 0
        local q, wf, mk = 2, false, false -- wf: a wide root's format; mk: the wide marker seen
        if n == 0 or string.byte(V3, 1) ~= 1 then
          q = nil
          if n > 0 and string.sub(V3, 1, 1) == '\002' then q, wf = 2, true end -- a wide root: its entries and the marker, no section
        end
        while q and q <= n do
          if q + 13 - 1 > n then q = nil break end
          local tag, len, exp, d = struct.unpack('<c4I3I6', V3, q)
          if d + len - 1 > n then q = nil break end
          if tag == 'f004' then P4, N4, T4 = q, len, exp
          elseif tag == 'f006' then P6, N6, T6 = q, len, exp
          else
            if wf and string.byte(tag, 1) >= 128 then q = nil break end -- a section in a wide root's value
            O3 = true
            if tag == MARK and look and exp * 1000 <= now then lapsed = true end
            if tag == '\000\000\000\001' then mk = true end
          end
          q = d + len
        end
        if wf and not mk then q = nil end -- a wide root's value without its marker
        if not q and not fail then
          fail = redis.error_reply('freqcap: rule ' .. 'd' .. FOREIGN)
        end
      end
    end

    -- Phase 1: evaluate every rule, writing nothing.
    local F1, U1, Z1, Y1, E1, X1
    local em_1, e_1
    local used_1
    local F2, U2, Z2, Y2, E2, X2
    local em_2, e_2
    local used_2
    local F3, U3, Z3, Y3, E3, X3
    local em_3, e_3
    local used_3
    local F4, U4, Z4, Y4, E4, X4
    local em_4, e_4
    local used_4
    local F5, U5, Z5, Y5, E5, X5
    local em_5, e_5
    local used_5
    local F6, U6, Z6, Y6, E6, X6
    local em_6, e_6
    local used_6
    local allowed = true
    if not fail then repeat
      local code, L = "f", 1
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P1, N1, T1, P1 and P1 + 13
      local e
      if code == 'f' then
        local W = 1000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('1000000', '%d+') do
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
      em_1, e_1 = em, e
      if flags ~= 1 then allowed = false end
      F1, U1, Z1, Y1 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local code, L = "f", 2
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V2, P2, N2, T2, P2 and P2 + 13
      local e
      if code == 'f' then
        local W = 2000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('2000000', '%d+') do
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
      em_2, e_2 = em, e
      if flags ~= 1 then allowed = false end
      F2, U2, Z2, Y2 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local code, L = "f", 3
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P3, N3, T3, P3 and P3 + 13
      local e
      if code == 'f' then
        local W = 3000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('3000000', '%d+') do
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
      em_3, e_3 = em, e
      if flags ~= 1 then allowed = false end
      F3, U3, Z3, Y3 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local code, L = "f", 4
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V3, P4, N4, T4, P4 and P4 + 13
      local e
      if code == 'f' then
        local W = 4000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('4000000', '%d+') do
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
      em_4, e_4 = em, e
      if flags ~= 1 then allowed = false end
      F4, U4, Z4, Y4 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local code, L = "f", 5
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V2, P5, N5, T5, P5 and P5 + 13
      local e
      if code == 'f' then
        local W = 5000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('5000000', '%d+') do
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
    if not fail then repeat
      local code, L = "f", 6
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V3, P6, N6, T6, P6 and P6 + 13
      local e
      if code == 'f' then
        local W = 6000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('6000000', '%d+') do
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
      em_6, e_6 = em, e
      if flags ~= 1 then allowed = false end
      F6, U6, Z6, Y6 = flags, used, reset, retry
    until true end
    if fail then
      reply = fail
      break
    end

    -- Phase 2: consume from every rule, only if all admit.
    if allowed and op == 't' then
      do
        local v, used, reset = V1, U1, Z1
        local ent, exp
        local em, e = em_1, e_1
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_1 = used
        U1, Z1, E1, X1 = used, reset, ent, exp
      end
      do
        local v, used, reset = V2, U2, Z2
        local ent, exp
        local em, e = em_2, e_2
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_2 = used
        U2, Z2, E2, X2 = used, reset, ent, exp
      end
      do
        local v, used, reset = V1, U3, Z3
        local ent, exp
        local em, e = em_3, e_3
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_3 = used
        U3, Z3, E3, X3 = used, reset, ent, exp
      end
      do
        local v, used, reset = V3, U4, Z4
        local ent, exp
        local em, e = em_4, e_4
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_4 = used
        U4, Z4, E4, X4 = used, reset, ent, exp
      end
      do
        local v, used, reset = V2, U5, Z5
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
        local v, used, reset = V3, U6, Z6
        local ent, exp
        local em, e = em_6, e_6
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        used, reset, exp = used + c, e - now, em
        used_6 = used
        U6, Z6, E6, X6 = used, reset, ent, exp
      end
      do
        local top = X1
        if X3 > top then top = X3 end
        if V1 and not O1 and #V1 == 1 + 13 + (7) + 13 + (7) and P1 == 2 and N1 == (7) and T1 == X1
            and P3 == P1 + 13 + (7) and N3 == (7) and T3 == X3 then
          redis.call('SETRANGE', KEYS[kb + 1], 1, struct.pack('<c4I3I6I7c4I3I6I7', 'f001', 7, X1, used_1, 'f003', 7, X3, used_3))
        elseif not O1 then
          redis.call('SET', KEYS[kb + 1], struct.pack('<c0c4I3I6I7c4I3I6I7', FMT, 'f001', 7, X1, used_1, 'f003', 7, X3, used_3), 'PXAT', top)
        else
          E1 = struct.pack('<c4I3I6I7', 'f001', 7, X1, used_1)
          E3 = struct.pack('<c4I3I6I7', 'f003', 7, X3, used_3)
          local v, vtop = L().packv(V1, L().unpackv(V1), {E1, E3}, top, nowms)
          redis.call('SET', KEYS[kb + 1], v, 'PXAT', sf('%d', vtop))
        end
      end
      do
        local top = X2
        if X5 > top then top = X5 end
        if V2 and not O2 and #V2 == 1 + 13 + (7) + 13 + (7) and P2 == 2 and N2 == (7) and T2 == X2
            and P5 == P2 + 13 + (7) and N5 == (7) and T5 == X5 then
          redis.call('SETRANGE', KEYS[kb + 2], 1, struct.pack('<c4I3I6I7c4I3I6I7', 'f002', 7, X2, used_2, 'f005', 7, X5, used_5))
        elseif not O2 then
          redis.call('SET', KEYS[kb + 2], struct.pack('<c0c4I3I6I7c4I3I6I7', FMT, 'f002', 7, X2, used_2, 'f005', 7, X5, used_5), 'PXAT', top)
        else
          E2 = struct.pack('<c4I3I6I7', 'f002', 7, X2, used_2)
          E5 = struct.pack('<c4I3I6I7', 'f005', 7, X5, used_5)
          local v, vtop = L().packv(V2, L().unpackv(V2), {E2, E5}, top, nowms)
          redis.call('SET', KEYS[kb + 2], v, 'PXAT', sf('%d', vtop))
        end
      end
      do
        local top = X4
        if X6 > top then top = X6 end
        if V3 and not O3 and #V3 == 1 + 13 + (7) + 13 + (7) and P4 == 2 and N4 == (7) and T4 == X4
            and P6 == P4 + 13 + (7) and N6 == (7) and T6 == X6 then
          redis.call('SETRANGE', KEYS[kb + 3], 1, struct.pack('<c4I3I6I7c4I3I6I7', 'f004', 7, X4, used_4, 'f006', 7, X6, used_6))
        elseif not O3 then
          redis.call('SET', KEYS[kb + 3], struct.pack('<c0c4I3I6I7c4I3I6I7', FMT, 'f004', 7, X4, used_4, 'f006', 7, X6, used_6), 'PXAT', top)
        else
          E4 = struct.pack('<c4I3I6I7', 'f004', 7, X4, used_4)
          E6 = struct.pack('<c4I3I6I7', 'f006', 7, X6, used_6)
          local v, vtop = L().packv(V3, L().unpackv(V3), {E4, E6}, top, nowms)
          redis.call('SET', KEYS[kb + 3], v, 'PXAT', sf('%d', vtop))
        end
      end
    end

    -- The denial trail, as take.lua writes it.
    if not allowed and op == 't' and tk > 0 and tmax > 0 then
      local tkey = KEYS[kb + tk]
      local pol, tv = struct.unpack('<i4c0i4c0', h, 29)
      local ent = {}
      if F6 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|f|%d|6|%d|%d|%d%s', now, pol, U6, c, Y6, F6 == 2 and 1 or 0, tv)
      end
      if F5 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|e|%d|5|%d|%d|%d%s', now, pol, U5, c, Y5, F5 == 2 and 1 or 0, tv)
      end
      if F4 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|d|%d|4|%d|%d|%d%s', now, pol, U4, c, Y4, F4 == 2 and 1 or 0, tv)
      end
      if F3 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|c|%d|3|%d|%d|%d%s', now, pol, U3, c, Y3, F3 == 2 and 1 or 0, tv)
      end
      if F2 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|b|%d|2|%d|%d|%d%s', now, pol, U2, c, Y2, F2 == 2 and 1 or 0, tv)
      end
      if F1 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|a|%d|1|%d|%d|%d%s', now, pol, U1, c, Y1, F1 == 2 and 1 or 0, tv)
      end
      L().pushTrail(tkey, ent, tmax, nowms + tttl)
    end
    reply = struct.pack('<Bi7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7', allowed and 1 or 0, now,
      F1, U1, Z1, Y1,
      F2, U2, Z2, Y2,
      F3, U3, Z3, Y3,
      F4, U4, Z4, Y4,
      F5, U5, Z5, Y5,
      F6, U6, Z6, Y6)
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + GO + (tk > 0 and 1 or 0) + (hk > 0 and 1 or 0)
  ab = ab + 1
end
return replies

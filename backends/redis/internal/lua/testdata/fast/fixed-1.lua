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
local G, GO = 1, 1 -- dimension sets (keys) per attempt, and the keys before the trail

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
    local P1, N1, T1
    local V1, O1
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
        if tag == 'aaaa' then P1, N1, T1 = q, len, exp
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
        fail = redis.error_reply('freqcap: rule ' .. 'per-min' .. FOREIGN)
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
      L().holds(now).lapse(KEYS[kb + hk], named, function(k) return vk[k] end, vals, logs)
      look = false -- read once more, markers aside
      P1, N1, T1 = nil
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
          if tag == 'aaaa' then P1, N1, T1 = q, len, exp
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
          fail = redis.error_reply('freqcap: rule ' .. 'per-min' .. FOREIGN)
        end
      end
    end

    -- Phase 1: evaluate every rule, writing nothing.
    local F1, U1, Z1, Y1, E1, X1
    local em_1, e_1
    local used_1
    local allowed = true
    if not fail then repeat
      local code, L = "f", 15
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P1, N1, T1, P1 and P1 + 13
      local e
      if code == 'f' then
        local W = 60000000
        e = now - now % W + W
      elseif p and pe * 1000 > now then
        e = pe * 1000 -- the stored window, until it ends
      else
        local prev
        for bv in string.gmatch('60000000', '%d+') do
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
        local top = X1
        if V1 and not O1 and #V1 == 1 + 13 + (7) and P1 == 2 and N1 == (7) and T1 == X1 then
          redis.call('SETRANGE', KEYS[kb + 1], 1, struct.pack('<c4I3I6I7', 'aaaa', 7, X1, used_1))
        elseif not O1 then
          redis.call('SET', KEYS[kb + 1], struct.pack('<c0c4I3I6I7', FMT, 'aaaa', 7, X1, used_1), 'PXAT', top)
        else
          E1 = struct.pack('<c4I3I6I7', 'aaaa', 7, X1, used_1)
          local v, vtop = L().packv(V1, L().unpackv(V1), {E1}, top, nowms)
          redis.call('SET', KEYS[kb + 1], v, 'PXAT', sf('%d', vtop))
        end
      end
    end

    -- The denial trail, as take.lua writes it.
    if not allowed and op == 't' and tk > 0 and tmax > 0 then
      local tkey = KEYS[kb + tk]
      local pol, tv = struct.unpack('<i4c0i4c0', h, 29)
      local ent = {}
      if F1 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|per-min|%d|15|%d|%d|%d%s', now, pol, U1, c, Y1, F1 == 2 and 1 or 0, tv)
      end
      L().pushTrail(tkey, ent, tmax, nowms + tttl)
    end
    reply = struct.pack('<Bi7Bi7i7i7', allowed and 1 or 0, now,
      F1, U1, Z1, Y1)
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + GO + (tk > 0 and 1 or 0) + (hk > 0 and 1 or 0)
  ab = ab + 1
end
return replies

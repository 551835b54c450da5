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
    local P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4
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
        if tag == 't001' then P1, N1, T1 = q, len, exp
        elseif tag == 't002' then P2, N2, T2 = q, len, exp
        elseif tag == 't003' then P3, N3, T3 = q, len, exp
        elseif tag == 't004' then P4, N4, T4 = q, len, exp
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
        fail = redis.error_reply('freqcap: rule ' .. 'f' .. FOREIGN)
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
      P1, N1, T1, P2, N2, T2, P3, N3, T3, P4, N4, T4 = nil
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
          if tag == 't001' then P1, N1, T1 = q, len, exp
          elseif tag == 't002' then P2, N2, T2 = q, len, exp
          elseif tag == 't003' then P3, N3, T3 = q, len, exp
          elseif tag == 't004' then P4, N4, T4 = q, len, exp
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
          fail = redis.error_reply('freqcap: rule ' .. 'f' .. FOREIGN)
        end
      end
    end

    -- Phase 1: evaluate every rule, writing nothing.
    local F1, U1, Z1, Y1, E1, X1
    local em_1, e_1
    local used_1
    local F2, U2, Z2, Y2, E2, X2
    local i_2, lo_2, K_2, s_2, list_2, top_2, newest_2, k_2, q_2
    local F3, U3, Z3, Y3, E3, X3
    local new_3, ttl_3, T_3, tol_3
    local tat_3
    local F4, U4, Z4, Y4, E4, X4
    local j_4, nl_4, before_4, top_4
    local mid_4, base_4, lt_4, lc_4
    local allowed = true
    if not fail then repeat
      local code, L = "f", 3
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
      local L = 50
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P2, N2, T2, P2 and P2 + 13
      -- Stored cells: k of them, cell j at position base + 7*(j - jb - 1)
      -- (jb = top - k); the counted ones are j >= lo.
      local K, s = 60000000, 6000000
      local i = (now - now % s) / s -- math.floor(now / s), inline: no call
      local lo = i - K
      local newest, k, top, q, list = -1, 0, -1, 0, nil
      if p then
        q = pq
        k = (pl - 14) / 7
        local sum
        top, sum = struct.unpack('<I7I7', v, q)
        if top < lo then
          k = 0 -- every stored cell stopped counting: as if none were stored
        elseif top <= i and k > 0 and struct.unpack('<I7', v, q + 7 * (k + 1)) > 0 then
          -- The newest stored cell holds units: the count is the sum less the
          -- oldest d stored cells, those that stopped counting, which are
          -- dropped (q and k then describe the kept cells, for commit).
          local d = lo - (top - k + 1)
          if d > 0 then
            for z = 0, d - 1 do sum = sum - struct.unpack('<I7', v, q + 14 + 7 * z) end
            q, k = q + 7 * d, k - d
          end
          used, newest = sum, top
        elseif top <= i and k == 0 then
          used = sum -- no cells: nothing counts
        else
          list = ints(v, q + 14, k)
          for z = math.max(1, lo - (top - k)), k do
            local u = list[z]
            if u > 0 then
              used = used + u
              newest = top - k + z
            end
          end
        end
      end
      if newest >= 0 then reset = (newest + K + 1) * s - now end
      if c > L then
        flags = 2
      elseif used + c > L then
        -- Retry when the oldest cells holding the units over stop counting
        -- (cells beyond i, the server clock having gone back: one cell).
        flags, retry = 0, s
        if p then
          list = list or ints(v, q + 14, k)
          local need, acc = used + c - L, 0
          for z = math.max(1, lo - (top - k)), math.min(k, i - (top - k)) do
            acc = acc + list[z]
            if acc >= need then
              retry = (top - k + z + K + 1) * s - now
              break
            end
          end
        end
      end
      i_2, lo_2, K_2, s_2, list_2, top_2, newest_2, k_2, q_2 = i, lo, K, s, list, top, newest, k, q
      if flags ~= 1 then allowed = false end
      F2, U2, Z2, Y2 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local L = 20
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P3, N3, T3, P3 and P3 + 13
      local T, tol = 3000000, 57000000
      local ttl = 0
      if p then
        ttl = struct.unpack('<I7', v, pq) - now
        if ttl < 0 then ttl = 0 end
      end
      local new = ttl + c * T
      if c > L then
        flags = 2
      elseif new > tol then
        flags, retry = 0, new - tol
      end
      -- What commit stores: a counted exempt takes c whatever the limit, the
      -- TAT at most MAXDEBT µs ahead of now (driver.MaxDebt, alg.GCRAExempt;
      -- never less far than it is). Exact: below MAXDEBT, new is an exact sum;
      -- above, the double is too, and the cap replaces it.
      if new > 35184372088832 then
        if ttl > 35184372088832 then new = ttl else new = 35184372088832 end
      end
      local left = tol - ttl
      local q = left / T
      q = q - q % 1
      if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
      if q < 0 then q = 0 elseif q > L then q = L end
      used, reset = L - q, ttl
      new_3, ttl_3, T_3, tol_3 = new, ttl, T, tol
      if flags ~= 1 then allowed = false end
      F3, U3, Z3, Y3 = flags, used, reset, retry
    until true end
    if not fail then repeat
      local L = 8
      local flags, used, reset, retry = 1, 0, 0, 0
      local v, p, pl, pe, pq = V1, P4, N4, T4, P4 and P4 + 13
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
      j_4, nl_4, before_4, top_4 = j, nl, before, top
      if flags ~= 1 then allowed = false end
      F4, U4, Z4, Y4 = flags, used, reset, retry
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
        local tag = 't002'
        local v, used, reset = V1, U2, Z2
        local ent, exp
        -- The fast ways: the same cell gets c more, or a new cell c, the stored
        -- bytes copied around them; otherwise the cells are rebuilt from the
        -- oldest counted one holding units (or i) to the newest.
        local i, lo, K, s, list, top, newest, k, q = i_2, lo_2, K_2, s_2, list_2, top_2, newest_2, k_2, q_2
        -- A counted exempt counts past the limit up to MAXUSED (driver.MaxUsed,
        -- alg.Exempt): c is what this rule takes, none once it is there.
        local c = c
        if used + c > 4503599627370496 then
          c = 4503599627370496 - used
          if c < 0 then c = 0 end
        end
        local hi = i
        if newest > i then hi = newest end
        exp = (hi + K + 1) * s / 1000 -- ms, rounded up
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        if not list and k > 0 and top == i then
          -- The entry's header and top and sum in one pack, the cells copied.
          local last = struct.unpack('<I7', v, q + 7 * (k + 1))
          ent = struct.pack('<c4I3I6I7I7', tag, 7 * (k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 7 * (k + 1) - 1) .. struct.pack('<I7', last + c)
        elseif not list and k > 0 and top < i then
          ent = struct.pack('<c4I3I6I7I7', tag, 7 * (i - top + k + 2), exp, i, used + c) .. string.sub(v, q + 14, q + 14 + 7 * k - 1) .. string.rep('\0', 7 * (i - top - 1)) .. struct.pack('<I7', c)
        else
          local first, jb = i, top - k
          if list or k > 0 then
            list = list or ints(v, q + 14, k)
            for z = math.max(1, lo - jb), k do
              if list[z] > 0 then
                first = math.min(first, jb + z)
                break
              end
            end
          end
          local out = {hi, used + c}
          for j = first, hi do
            local z, u = j - jb, 0
            if z >= 1 and z <= k then u = list[z] end
            if j == i then u = u + c end
            out[#out + 1] = u
          end
          local body = pints(out)
          ent = struct.pack('<c4I3I6', tag, #body, exp) .. body
        end
        -- None taken (saturated): reported as evaluated (a cell of 0 units
        -- holds none).
        if c > 0 then used, reset = used + c, (hi + K + 1) * s - now end
        U2, Z2, E2, X2 = used, reset, ent, exp
      end
      do
        local L = 20
        local v, used, reset = V1, U3, Z3
        local ent, exp
        local new, ttl, T, tol = new_3, ttl_3, T_3, tol_3
        local tat = now + new
        local left = tol - new
        local q = left / T
        q = q - q % 1
        if q * T > left then q = q - 1 elseif (q + 1) * T <= left then q = q + 1 end
        if q < 0 then q = 0 elseif q > L then q = L end
        exp = tat / 1000
        if exp % 1 ~= 0 then exp = exp - exp % 1 + 1 end
        used, reset = L - q, new
        tat_3 = tat
        U3, Z3, E3, X3 = used, reset, ent, exp
      end
      do
        local v, p, pl, pq, used, reset = V1, P4, N4, P4 and P4 + 13, U4, Z4
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
        mid_4, base_4, lt_4, lc_4 = mid, base, lt, lc
        used, reset = used + c, hi + W - now
        U4, Z4, E4, X4 = used, reset, ent, exp
      end
      do
        local top = X1
        if X2 > top then top = X2 end
        if X3 > top then top = X3 end
        if X4 > top then top = X4 end
        if V1 and not O1 and #V1 == 1 + 13 + (7) + 13 + (#E2 - 13) + 13 + (7) + 13 + (21 + #mid_4) and P1 == 2 and N1 == (7) and T1 == X1
            and P2 == P1 + 13 + (7) and N2 == (#E2 - 13) and T2 == X2
            and P3 == P2 + 13 + (#E2 - 13) and N3 == (7) and T3 == X3
            and P4 == P3 + 13 + (7) and N4 == (21 + #mid_4) and T4 == X4 then
          redis.call('SETRANGE', KEYS[kb + 1], 1, struct.pack('<c4I3I6I7c0c4I3I6I7c4I3I6I7c0I7I7', 't001', 7, X1, used_1, E2, 't003', 7, X3, tat_3, 't004', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4))
        elseif not O1 then
          redis.call('SET', KEYS[kb + 1], struct.pack('<c0c4I3I6I7c0c4I3I6I7c4I3I6I7c0I7I7', FMT, 't001', 7, X1, used_1, E2, 't003', 7, X3, tat_3, 't004', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4), 'PXAT', top)
        else
          E1 = struct.pack('<c4I3I6I7', 't001', 7, X1, used_1)
          E3 = struct.pack('<c4I3I6I7', 't003', 7, X3, tat_3)
          E4 = struct.pack('<c4I3I6I7c0I7I7', 't004', 21 + #mid_4, X4, base_4, mid_4, lt_4, lc_4)
          local v, vtop = L().packv(V1, L().unpackv(V1), {E1, E2, E3, E4}, top, nowms)
          redis.call('SET', KEYS[kb + 1], v, 'PXAT', sf('%d', vtop))
        end
      end
    end

    -- The denial trail, as take.lua writes it.
    if not allowed and op == 't' and tk > 0 and tmax > 0 then
      local tkey = KEYS[kb + tk]
      local pol, tv = struct.unpack('<i4c0i4c0', h, 29)
      local ent = {}
      if F4 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|l|%d|8|%d|%d|%d%s', now, pol, U4, c, Y4, F4 == 2 and 1 or 0, tv)
      end
      if F3 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|g|%d|20|%d|%d|%d%s', now, pol, U3, c, Y3, F3 == 2 and 1 or 0, tv)
      end
      if F2 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|s|%d|50|%d|%d|%d%s', now, pol, U2, c, Y2, F2 == 2 and 1 or 0, tv)
      end
      if F1 ~= 1 then
        ent[#ent + 1] = sf('%d|%s|f|%d|3|%d|%d|%d%s', now, pol, U1, c, Y1, F1 == 2 and 1 or 0, tv)
      end
      L().pushTrail(tkey, ent, tmax, nowms + tttl)
    end
    reply = struct.pack('<Bi7Bi7i7i7Bi7i7i7Bi7i7i7Bi7i7i7', allowed and 1 or 0, now,
      F1, U1, Z1, Y1,
      F2, U2, Z2, Y2,
      F3, U3, Z3, Y3,
      F4, U4, Z4, Y4)
  until true
  if attempts == 1 then return reply end
  replies[a] = reply
  kb = kb + GO + (tk > 0 and 1 or 0) + (hk > 0 and 1 or 0)
  ab = ab + 1
end
return replies

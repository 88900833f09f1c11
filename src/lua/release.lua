-- release: compare-and-delete, in either place a token can hold, and hand
-- the name to the first live ticket if any waits (lib/tickets.lua).
--
-- With a fence (not 0) only the grant with that fence is released (a
-- counter that is not an integer proves nothing: the token decides), so a
-- release sent again later never deletes a newer grant to the same token.
-- A release the broker makes by itself (done 0: a disconnect, a lost hold)
-- leaves a grant brokers share (its entry names several) to its lease: a
-- connection of another broker holds it too. A grant whose entry names
-- other brokers is told to them (lib/tell.lua) as "<name> released
-- <fence> <broker>": holds of it there are lost. A FILL leader's RELEASE (done 2), or a
-- client's RELEASE of a lock FILL waiters wait on (done 1, :fill set; it
-- is set only with :waiting), marks the work done with its fence.
--
-- Once the name is free, the first live ticket gets it in the same script
-- if it is an exclusive one
-- (its fence made here, so the name is never free in between; the writer
-- mark goes, the new holder being a writer). A ticket of this broker gets
-- its own ttl, counted by the broker from before this release was sent;
-- another broker's gets at most handoff ms, and a message on that
-- broker's channel ("<name> <n> <fence> <token> <ttl>"): that broker
-- confirms the grant (EXTEND with the fence), so a grant to a broker that
-- died is free again after handoff ms. It may answer its client before
-- the confirmation: its first try with the ticket ran before this script,
-- so ttl counted from sending that try is a lower bound of this lease.
-- When the first ticket is a reader's (SHARED or LIMIT), free name or not, the
-- brokers of the first readers' tickets are told "<name>" on their
-- channels and try (share.lua lets them in in the queue's order). With no
-- ticket, the name is published to the brokers whose waiters marked it
-- (:waiting) and were not told already.
--
-- A hand-over is a grant: it is made only through an open incarnation
-- gate (lib/gate.lua); else the tickets wait, and their brokers' tries
-- take the name once the gate opens.
--
-- KEYS: lock waiting holders who fence fill done queue tickets brokers writer /incarnation
-- ARGV: token, channel, name, done (0/1/2), how long done is kept (ms),
--   fence (0: any), broker, handoff (ms), the brokers' channel prefix,
--   live (ms, as acquire.lua's), incarnation, run_id
-- Returns {1} if released, {0} if not ours; handed to a ticket: {1, fence,
--   n, token} for this broker's ticket "<broker>#<n>", {1, fence, 0} for
--   another broker's.

-- include keep.lua
-- include holds.lua
-- include plain.lua
if not v and ARGV[6] ~= '0' and redis.call('GET', KEYS[5]) == ARGV[6] and
    redis.call('PTTL', KEYS[5]) > keep_ms() and
    redis.call('EXISTS', KEYS[3]) == 0 then
  -- An exclusive grant's lock key went (deleted or renamed by hand) while
  -- its lease runs, and the counter remembers it (lib/fence.lua; no shared
  -- holder is left, whose fence it could be): still this grant's,
  -- released as if the key were there. Which brokers hold it went with
  -- the key: its broker is unknown ("?"), so the release is announced,
  -- and the grant's holds on any other broker are lost at once.
  v, holds = ARGV[1] .. ' EXCLUSIVE ?', true
end
-- include tell.lua
local told = {} -- the brokers told of this release
local fs, by, c -- the grant's fence, the broker its entry names, and
-- the counter's value if read (false: none)
-- Whether waiting (and so fill, set only with waiting) or the queue may
-- exist (marks), and whether the queue does: none for a plain grant
-- (lib/plain.lua); another exclusive holder's release asks for the queue
-- (a hand-over needs to know), then for waiters if there is none.
local marks, queued = true, false
local done = false -- whether this release marked a FILL's work done
if holds then
  fs = plain_fence(v)
  marks = not fs
  if marks then
    c = redis.call('GET', KEYS[5])
    fs = c or '0'
  end
  if ARGV[6] ~= '0' and fs ~= ARGV[6] and tonumber(fs) then return {0} end
  by = string.match(v, '^%S+ %S+ (%S+)')
  if ARGV[4] == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('DEL', KEYS[1])
  redis.call('PEXPIRE', KEYS[5], keep_ms() / 2) -- no lease left (lib/fence.lua)
  queued = marks and redis.call('EXISTS', KEYS[8]) == 1
  marks = queued or (marks and redis.call('EXISTS', KEYS[2]) == 1)
  if ARGV[4] == '2' or (ARGV[4] == '1' and marks and
      redis.call('EXISTS', KEYS[6]) == 1) then
    redis.call('SET', KEYS[7], fs, 'PX', ARGV[5])
    done = true
  end
else
-- include now.lua
-- include holders.lua
  local s = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not s then return {0} end
  local info = redis.call('HGET', KEYS[4], ARGV[1]) or ''
  fs = string.match(info, '^%d+') or '0'
  if ARGV[6] ~= '0' and fs ~= ARGV[6] then return {0} end
  by = string.match(info, '^%S+ %S+ (%S+)')
  if ARGV[4] == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  local now = now_ms()
  if prune(KEYS[1], KEYS[3], KEYS[4], now) == 0 then
    redis.call('DEL', KEYS[4])
    redis.call('PEXPIRE', KEYS[5], keep_ms() / 2) -- no lease (lib/fence.lua)
  else
    stretch(KEYS[1], KEYS[3], KEYS[4], now, KEYS[5]) -- the longest left
  end
  if tonumber(s) <= now then return {0} end
  queued = redis.call('EXISTS', KEYS[8]) == 1
end
-- Another broker's entry (as lib/foreign.lua): its holds there hear of it.
if by ~= ARGV[7] then
  tell(ARGV[2], by, ARGV[7], ARGV[3] .. ' released ' .. fs .. ' ' ..
    ARGV[7], told)
end
if queued then
-- include now.lua
-- include fence.lua
-- include gate.lua
-- include tickets.lua
  -- The gate's TIME is the clock of the queue and of the fence.
  local closed, t = gate(KEYS[12], ARGV[11], ARGV[12])
  local now, tk, b, d, m
  if not closed then
    now = now_ms(t)
    tk, b = qhead(KEYS[8], KEYS[9], KEYS[10], now, ARGV[10])
    d = tk and redis.call('HGET', KEYS[9], tk)
    m = string.match(d or '', '^%S+ %S+ (%S+)') -- the ticket's mode
  end
  if m and m ~= 'EXCLUSIVE' then -- readers: their brokers try now
    qwake(KEYS[8], KEYS[9], KEYS[10], now, m, ARGV[7], ARGV[9], ARGV[3])
    tk = nil
  elseif not holds and redis.call('EXISTS', KEYS[1]) == 1 then
    -- (an exclusive holder's lock key is gone: deleted above)
    tk = nil -- readers still hold it: the writer waits for the last
  end
  local tok, ttl, info = string.match(tk and d or '',
    '^(%S+) (%d+) (.*)$')
  if tk and not tok then -- no data for it: it cannot be granted
    redis.call('ZREM', KEYS[8], tk)
  end
  if tok and b ~= ARGV[7] and tonumber(ttl) > tonumber(ARGV[8]) then
    ttl = ARGV[8]
  end
  local f = tok and next_fence(KEYS[5], t, ttl, c)
  if type(f) == 'number' then
    qdrop(KEYS[8], KEYS[9], tk)
    local n = tonumber(string.match(tk, '#(%d+)$'))
    redis.call('SET', KEYS[1], tok .. ' ' .. info, 'PX', ttl)
    redis.call('DEL', KEYS[11])
    -- FILL waiters elsewhere learn that their leader is done.
    if done then wake(KEYS[2], ARGV[2], ARGV[3], told) end
    if b == ARGV[7] then return {1, f, n, tok} end
    redis.call('PUBLISH', ARGV[9] .. b, ARGV[3] .. ' ' .. n .. ' ' ..
      ms(f) .. ' ' .. tok .. ' ' .. ttl)
    return {1, f, 0}
  end
end
if marks then wake(KEYS[2], ARGV[2], ARGV[3], told) end
return {1}

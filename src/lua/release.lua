#!lua flags=allow-oom
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
-- Flags: allow-oom. A release frees memory, and a Redis above maxmemory
-- that refused it would keep the name held to its lease's end; what it
-- may write besides (a hand-over's grant, :done, news) is small. A master
-- that min-replicas-to-write stops still refuses it (NOREPLICAS).
--
-- KEYS: lock waiting holders who fence fill done queue tickets brokers writer /incarnation
-- Returns {1} if released, {0} if not ours; handed to a ticket: {1, fence,
--   n, token} for this broker's ticket "<broker>#<n>", {1, fence, 0} for
--   another broker's.

local lockKey = KEYS[1]
local waitingKey = KEYS[2]
local holdersKey = KEYS[3]
local whoKey = KEYS[4]
local fenceKey = KEYS[5]
local fillKey = KEYS[6]
local doneKey = KEYS[7]
local queueKey = KEYS[8]
local ticketsKey = KEYS[9]
local brokersKey = KEYS[10]
local writerKey = KEYS[11]
local incarnationKey = KEYS[12]
local token = ARGV[1]
local channel = ARGV[2] -- the release channel (lib/tell.lua)
local lockName = ARGV[3]
local doneMode = ARGV[4] -- 0: the broker's own release, 1: a client's,
--   2: a FILL leader's
local doneKeepMs = ARGV[5] -- how long :done is kept
local grantFence = ARGV[6] -- the grant's fence (0: any)
local broker = ARGV[7] -- this broker
local handoffMs = ARGV[8] -- the longest lease handed to another broker
local toPrefix = ARGV[9] -- the brokers' channel prefix
local liveMs = ARGV[10] -- as acquire.lua's
local incarnation = ARGV[11] -- the id the broker knows (lib/gate.lua)
local runId = ARGV[12] -- its connection's Redis, or "" (lib/gate.lua)

-- include keep.lua
-- include fields.lua
-- include now.lua
-- include holds.lua
-- include plain.lua
-- include holders.lua
-- include tell.lua
if not v and grantFence ~= '0' and
    redis.call('GET', fenceKey) == grantFence and
    redis.call('PTTL', fenceKey) > KEEP_MS and
    redis.call('EXISTS', holdersKey) == 0 then
  -- An exclusive grant's lock key went (deleted or renamed by hand) while
  -- its lease runs, and the counter remembers it (lib/fence.lua; no shared
  -- holder is left, whose fence it could be): still this grant's,
  -- released as if the key were there. Which brokers hold it went with
  -- the key: its broker is unknown ("?"), so the release is announced,
  -- and the grant's holds on any other broker are lost at once.
  v, holds = token .. ' EXCLUSIVE ?', true
end
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
    c = redis.call('GET', fenceKey)
    fs = c or '0'
  end
  if grantFence ~= '0' and fs ~= grantFence and tonumber(fs) then
    return {0}
  end
  by = string.match(v, THIRD_WORD)
  if doneMode == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('DEL', lockKey)
  redis.call('PEXPIRE', fenceKey, KEEP_MS / 2) -- no lease (lib/fence.lua)
  queued = marks and redis.call('EXISTS', queueKey) == 1
  marks = queued or (marks and redis.call('EXISTS', waitingKey) == 1)
  if doneMode == '2' or (doneMode == '1' and marks and
      redis.call('EXISTS', fillKey) == 1) then
    redis.call('SET', doneKey, fs, 'PX', doneKeepMs)
    done = true
  end
else
  local s = redis.call('ZSCORE', holdersKey, token)
  if not s then return {0} end
  local info = redis.call('HGET', whoKey, token) or ''
  fs = string.match(info, ENTRY_FENCE) or '0'
  if grantFence ~= '0' and fs ~= grantFence then return {0} end
  by = string.match(info, THIRD_WORD)
  if doneMode == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('ZREM', holdersKey, token)
  redis.call('HDEL', whoKey, token)
  local now = now_ms()
  if prune(lockKey, holdersKey, whoKey, now) == 0 then
    redis.call('DEL', whoKey)
    redis.call('PEXPIRE', fenceKey, KEEP_MS / 2) -- no lease (lib/fence.lua)
  else
    stretch(lockKey, holdersKey, whoKey, now, fenceKey) -- the longest left
  end
  if tonumber(s) <= now then return {0} end
  queued = redis.call('EXISTS', queueKey) == 1
end
-- Another broker's entry (as lib/foreign.lua): its holds there hear of it.
if by ~= broker then
  tell(channel, by, broker, lockName .. ' released ' .. fs .. ' ' ..
    broker, told)
end
if not queued then
  if marks then wake(waitingKey, channel, lockName, told) end
  return {1}
end
-- A hand-over, from here on: its functions are made only when one may be.
-- include fence.lua
-- include process.lua
-- include gate.lua
-- include tickets.lua
-- The gate's TIME is the clock of the queue and of the fence.
local closed, clock = gate(incarnationKey, incarnation, runId)
local now, tk, b, d, m
if not closed then
  now = now_ms(clock)
  tk, b = qhead(queueKey, ticketsKey, brokersKey, now, liveMs)
  d = tk and redis.call('HGET', ticketsKey, tk)
  m = string.match(d or '', THIRD_WORD) -- the ticket's mode
end
if m and m ~= 'EXCLUSIVE' then -- readers: their brokers try now
  qwake(queueKey, ticketsKey, brokersKey, now, m, broker, toPrefix, lockName)
  tk = nil
elseif not holds and redis.call('EXISTS', lockKey) == 1 then
  -- (an exclusive holder's lock key is gone: deleted above)
  tk = nil -- readers still hold it: the writer waits for the last
end
local tok, ttl, info = string.match(tk and d or '', '^(%S+) (%d+) (.*)$')
if tk and not tok then -- no data for it: it cannot be granted
  redis.call('ZREM', queueKey, tk)
end
if tok and b ~= broker and tonumber(ttl) > tonumber(handoffMs) then
  ttl = handoffMs
end
local f = tok and next_fence(fenceKey, clock, ttl, c)
if type(f) == 'number' then
  qdrop(queueKey, ticketsKey, tk)
  local n = tonumber(string.match(tk, TICKET_N))
  redis.call('SET', lockKey, tok .. ' ' .. info, 'PX', ttl)
  redis.call('DEL', writerKey)
  -- FILL waiters elsewhere learn that their leader is done.
  if done then wake(waitingKey, channel, lockName, told) end
  if b == broker then return {1, f, n, tok} end
  redis.call('PUBLISH', toPrefix .. b, lockName .. ' ' .. n .. ' ' ..
    ms(f) .. ' ' .. tok .. ' ' .. ttl)
  return {1, f, 0}
end
if marks then wake(waitingKey, channel, lockName, told) end
return {1}

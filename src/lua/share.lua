#!lua
-- share: an ACQUIRE ... SHARED or ... LIMIT n.
--
-- Not granted while an exclusive holder or a waiting writer is there, nor
-- past n holders, nor in another mode ({3, n}: n = 0 for SHARED, -1 when
-- this token holds it exclusively). Each holder has its own lease in the
-- set, its own fence from the same counter, and its WHO entry in the hash.
-- A same-token re-grant through another broker is treated as acquire.lua's.
--
-- A waiter takes its place in the name's one queue (lib/tickets.lua), as
-- an exclusive one does, and is let in only in the queue's order: every
-- live ticket before its own in its mode (readers behind a waiting writer
-- stay behind it, on every broker), and under LIMIT n only if the holders
-- and those before it leave room. A try without a ticket (WAIT 0) is let
-- in only while nobody queues. A writer without a ticket (a FILL waiter)
-- keeps new readers out with the writer mark, as before tickets.
--
-- Gated as acquire.lua is (lib/gate.lua); in a grace period a waiter
-- still takes its place.
--
-- Flags: none, as acquire.lua: refused whole, before anything runs, by a
-- Redis above maxmemory (OOM) or a master without its replicas
-- (NOREPLICAS).
--
-- KEYS: lock fence waiting holders who writer /incarnation queue tickets brokers
-- Returns {1, fence}, {0, ms to look again (-1: none known), 0, 0, n (as
--   acquire.lua's: the first ticket when another of this broker's)}, {3, n},
--   or gate.lua's {-1, 0} or {-2, ms}.

local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local waitingKey = KEYS[3]
local holdersKey = KEYS[4]
local whoKey = KEYS[5]
local writerKey = KEYS[6]
local incarnationKey = KEYS[7]
local queueKey = KEYS[8]
local ticketsKey = KEYS[9]
local brokersKey = KEYS[10]
local token = ARGV[1] -- the arguments are as acquire.lua's, but:
local ttlMs = ARGV[2]
local markMs = ARGV[3]
local whoEntry = ARGV[4]
local shareMode = ARGV[5] -- "SHARED" or "LIMIT=<n>"
local limitN = ARGV[6] -- n (0: none)
local channel = ARGV[7]
local lockName = ARGV[8]
local incarnation = ARGV[9]
local runId = ARGV[10]
local ticket = ARGV[11]
local leastN = ARGV[12]
local liveMs = ARGV[13]

-- include keep.lua
-- include fields.lua
-- include now.lua
-- include fence.lua
-- include process.lua
-- include gate.lua
-- include plain.lua
-- include tickets.lua
local closed, clock = gate(incarnationKey, incarnation, runId)
if closed and closed[1] == -1 then return closed end
local now = now_ms(clock)
local tk = ticket
local function place()
  if tk ~= '' and markMs ~= '0' then
    qtake(queueKey, ticketsKey, brokersKey, tk,
      token .. ' ' .. ttlMs .. ' ' .. whoEntry, leastN, liveMs, now)
    return true
  end
end
if closed then
  if place() then unplain(lockKey) end
  return closed
end
-- include holds.lua
-- include holders.lua
-- include foreign.lua
-- include tell.lua
-- include leftover.lua
local me = string.match(whoEntry, SECOND_WORD) -- this broker
local hn = 0 -- as acquire.lua's: the first ticket, another of ours
local function refuse(t)
  if markMs ~= '0' then unplain(lockKey, v) end
  if markMs ~= '0' and tk == '' then -- as acquire.lua's
    redis.call('HSET', waitingKey, me, ms(now + tonumber(markMs)))
    if redis.call('PTTL', waitingKey) < tonumber(markMs) then
      redis.call('PEXPIRE', waitingKey, markMs)
    end
  end
  place()
  return {0, t, 0, 0, hn}
end
if v and v ~= SHARED then
  if holds then return {3, -1} end
  return refuse(redis.call('PTTL', lockKey))
end
local n = prune(lockKey, holdersKey, whoKey, now)
local kept = n == 0 and remembered(fenceKey) or 0
if kept > 0 then
  -- a holder's keys gone by hand (lib/fence.lua): still held
  return refuse(kept)
end
if n > 0 then
  local m = redis.call('HGET', whoKey, MODE_FIELD)
  if m ~= shareMode then
    local l = string.match(m or '', LIMIT_N)
    return {3, tonumber(l or '0')}
  end
  local s = redis.call('ZSCORE', holdersKey, token)
  local info = s and redis.call('HGET', whoKey, token) or ''
  if s and leftover(incarnationKey, incarnation, lockKey .. ' ' .. token,
      string.match(info, ENTRY_FENCE) or '0') then
    redis.call('ZREM', holdersKey, token)  -- released since, in data lost
    redis.call('HDEL', whoKey, token)
    s = nil
  end
  if s then
    local fs = string.match(info, ENTRY_FENCE) or '0'
    local e = whoEntry
    if foreign(info, me) then
      local by = string.match(info, THIRD_WORD)
      if tonumber(s) - now > tonumber(ttlMs) then
        tell(channel, by, me, lockName .. SHORTENED .. fs .. ' ' .. me,
          {})
      end
      e = rebroker(e, ENTRY_BROKER, joined(by, me))
    end
    local at = ms(now + tonumber(ttlMs))
    redis.call('ZADD', holdersKey, at, token)
    stretch(lockKey, holdersKey, whoKey, now, fenceKey)
    redis.call('HSET', whoKey, token, fs .. ' ' .. e)
    qdrop(queueKey, ticketsKey, tk)
    return {1, tonumber(fs)}
  end
end
local t = redis.call('PTTL', writerKey)
if t > 0 then return refuse(t) end
local before = 0
local first, hb = qhead(queueKey, ticketsKey, brokersKey, now, liveMs)
if first and first ~= tk and hb == me then
  hn = tonumber(string.match(first, TICKET_N))
end
if first then
  before = tk ~= '' and qbefore(queueKey, ticketsKey, brokersKey, now, tk,
    shareMode)
  if not before then return refuse(-1) end
end
if limitN ~= '0' and n + before >= tonumber(limitN) then
  local low = redis.call('ZRANGE', holdersKey, 0, 0, 'WITHSCORES')
  return refuse(n > 0 and tonumber(low[2]) - now or -1)
end
local f = next_fence(fenceKey, clock, ttlMs)
if type(f) ~= 'number' then return f end
qdrop(queueKey, ticketsKey, tk)
redis.call('ZADD', holdersKey, ms(now + tonumber(ttlMs)), token)
redis.call('HSET', whoKey, token, ms(f) .. ' ' .. whoEntry,
  MODE_FIELD, shareMode)
stretch(lockKey, holdersKey, whoKey, now, fenceKey)
return {1, f}

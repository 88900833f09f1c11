#!lua
-- acquire: an exclusive ACQUIRE, or a FILL's (docs/internals.md, Scripts,
-- says why each step is as it is).
--
-- After the incarnation gate (lib/gate.lua): a FILL whose watched leader
-- is done is DONE; a free name nobody waits for is a plain grant, SET NX
-- and the next fence (lib/plain.lua, lib/fence.lua); else the first live
-- ticket of the name's queue (lib/tickets.lua) or, with none, anyone gets
-- a free name; the same token asking again gets its own fence back; a
-- refused waiter takes its ticket's place or marks :waiting (and :fill,
-- :writer). A name whose lock key went by hand while the counter
-- remembers its lease is held.
--
-- Flags: none. It may write (a grant, a ticket's place, marks), so a Redis
-- above maxmemory refuses the call whole with OOM before anything runs,
-- and so does a master that min-replicas-to-write stops (NOREPLICAS).
--
-- KEYS: lock fence queue tickets brokers waiting holders who writer /incarnation done fill
-- Returns {1, fence}; {0, ms to look again (-1: none known), holder's
--   fence, marked, n: the queue's first ticket "<broker>#<n>" when it is
--   another of this broker's (the broker of whoEntry), else 0}; {2, done};
--   {3, n} when the token is a shared holder (n as share.lua's); gate.lua's
--   {-1, 0} or {-2, ms}; or next_fence's error.

local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local queueKey = KEYS[3]
local ticketsKey = KEYS[4]
local brokersKey = KEYS[5]
local waitingKey = KEYS[6]
local holdersKey = KEYS[7]
local whoKey = KEYS[8]
local writerKey = KEYS[9]
local incarnationKey = KEYS[10]
local doneKey = KEYS[11]
local fillKey = KEYS[12]
local token = ARGV[1]
local ttlMs = ARGV[2] -- the lease
local markMs = ARGV[3] -- how long a refusal's marks last (0: a try-once)
local whoEntry = ARGV[4] -- "<mode> <broker> <client> <since_ms>"
local isFill = ARGV[5] -- 1: a FILL, 0: not
local watchFence = ARGV[6] -- the watched leader's fence, or 0
local clearWriter = ARGV[7] -- 1: this waiter set :writer, 0: not
local channel = ARGV[8] -- the release channel (lib/tell.lua)
local lockName = ARGV[9]
local ticket = ARGV[10] -- "<broker>#<n>", or "" for none
local leastN = ARGV[11] -- the least n of its broker's live tickets here
local liveMs = ARGV[12] -- the longest a broker with waiters goes unheard
local incarnation = ARGV[13] -- the id the broker knows (lib/gate.lua)
local runId = ARGV[14] -- its connection's Redis, or "" (lib/gate.lua)

-- include keep.lua
-- include fields.lua
-- include now.lua
-- include fence.lua
-- include process.lua
-- include gate.lua
-- include plain.lua
local closed, clock = gate(incarnationKey, incarnation, runId)
if closed and closed[1] == -1 then return closed end
if closed and ticket == '' then return closed end
if watchFence ~= '0' then
  -- (a :done that is not a number, a counter's set by hand, says nothing)
  local d = tonumber(redis.call('GET', doneKey) or '0') or 0
  if d >= tonumber(watchFence) then return {2, d} end
end
local val = token .. ' ' .. whoEntry
local c -- the counter's value once read (false: none; nil: not read)
if not closed and
    redis.call('EXISTS', queueKey, waitingKey, holdersKey) == 0 and
    remembered(fenceKey) == 0 then
  -- Nobody waits (fill is set only with :waiting), no shared holder is
  -- left (a "=shared" deleted by hand): a plain grant (lib/plain.lua), or
  -- the slow path below.
  local f
  f, c = fence_of(fenceKey, clock)
  local fs = type(f) == 'number' and ms(f)
  if fs and redis.call('SET', lockKey, val .. ' ' .. fs, 'NX', 'PX',
      ttlMs) then
    -- (as lib/fence.lua's next_fence)
    redis.call('SET', fenceKey, fs, 'PX', tonumber(ttlMs) + KEEP_MS)
    if clearWriter == '1' then redis.call('DEL', writerKey) end
    return {1, f}
  end
end
-- The slow path, from here on: its functions are made only when a call
-- gets here.
-- include holds.lua
-- include holders.lua
-- include foreign.lua
-- include tell.lua
-- include tickets.lua
-- include leftover.lua
local now = now_ms(clock)
local me = string.match(whoEntry, SECOND_WORD) -- this broker
local tk = ticket
local first = qhead(queueKey, ticketsKey, brokersKey, now, liveMs)
if closed then -- a grace period: a waiter keeps its place, nothing more
  if markMs ~= '0' then
    qtake(queueKey, ticketsKey, brokersKey, tk,
      token .. ' ' .. ttlMs .. ' ' .. whoEntry, leastN, liveMs, now)
    unplain(lockKey)
  end
  return closed
end
-- The queue's first ticket when it is another of this broker's: its
-- waiter is asked to try (the one trying here may be queued behind it).
local hb, hn = string.match(first or '', TICKET)
if first == tk or hb ~= me then hn = 0 end
local function refuse(pt, f, w)
  if tk ~= '' then w = 0 end -- its place keeps later readers out
  if markMs ~= '0' then
    unplain(lockKey, v)
    -- :fill before :waiting, so that it never outlives it (the fast
    -- path and a plain release look for :waiting alone).
    if isFill == '1' then
      redis.call('SET', fillKey, '1', 'PX', markMs)
    end
    -- A ticket needs no announcement: a release hands the name to it.
    if tk == '' then
      redis.call('HSET', waitingKey, me, ms(now + tonumber(markMs)))
      if redis.call('PTTL', waitingKey) < tonumber(markMs) then
        redis.call('PEXPIRE', waitingKey, markMs)
      end
    end
    if w == 1 then
      redis.call('SET', writerKey, '1', 'PX', markMs)
    end
  end
  if tk ~= '' and markMs ~= '0' then
    qtake(queueKey, ticketsKey, brokersKey, tk,
      token .. ' ' .. ttlMs .. ' ' .. whoEntry, leastN, liveMs, now)
  end
  return {0, pt, f, markMs ~= '0' and w or 0, tonumber(hn)}
end
local function grant()
  redis.call('SET', lockKey, val, 'PX', ttlMs)
  local f = next_fence(fenceKey, clock, ttlMs, c)
  if type(f) ~= 'number' then
    redis.call('DEL', lockKey)
    return f
  end
  if clearWriter == '1' then redis.call('DEL', writerKey) end
  qdrop(queueKey, ticketsKey, tk)
  return {1, f}
end
-- Shared holders whose "=shared" went (deleted by hand) still hold it.
if not v and redis.call('EXISTS', holdersKey) == 1 then v = SHARED end
if v == SHARED then
  if prune(lockKey, holdersKey, whoKey, now) > 0 then
    if redis.call('ZSCORE', holdersKey, token) then
      local m = redis.call('HGET', whoKey, MODE_FIELD) or ''
      return {3, tonumber(string.match(m, LIMIT_N) or '0')}
    end
    local top = redis.call('ZRANGE', holdersKey, -1, -1, 'WITHSCORES')
    return refuse(tonumber(top[2]) - now, 0, 1)
  end
  v = false
end
if c == nil then c = redis.call('GET', fenceKey) end
local fs = c or '0'
local kept = 0 -- ms of lease the counter remembers for a missing key
if v and leftover(incarnationKey, incarnation, lockKey, fs) then
  redis.call('DEL', lockKey)  -- released since, in data Redis lost
  v, holds = false, false
elseif not v then
  kept = remembered(fenceKey)
end
if kept > 0 then
  -- The lock key went (deleted or renamed by hand) while its lease runs:
  -- still held, and its broker puts it back (lib/fence.lua).
  return refuse(kept, tonumber(fs), clearWriter == '1' and 1 or 0)
end
if not v then
  if first == nil or first == tk then return grant() end
  -- A writer without a ticket that keeps readers out goes before them.
  if tk == '' and clearWriter == '1' and
      qmode(ticketsKey, first) ~= 'EXCLUSIVE' then
    return grant()
  end
  -- Free, but the first ticket's: no holder to watch or wait for.
  return refuse(-1, 0, clearWriter == '1' and 1 or 0)
end
if holds then
  if foreign(v, me) then
    local by = string.match(v, THIRD_WORD)
    if redis.call('PTTL', lockKey) > tonumber(ttlMs) then
      tell(channel, by, me, lockName .. SHORTENED .. fs .. ' ' .. me, {})
    end
    val = token .. ' ' .. rebroker(whoEntry, ENTRY_BROKER, joined(by, me))
  end
  redis.call('SET', lockKey, val, 'PX', ttlMs)
  redis.call('PEXPIRE', fenceKey, tonumber(ttlMs) + KEEP_MS) -- fence.lua
  qdrop(queueKey, ticketsKey, tk)
  return {1, tonumber(fs)}
end
return refuse(redis.call('PTTL', lockKey), tonumber(fs),
  clearWriter == '1' and 1 or 0)

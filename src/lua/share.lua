-- share: an ACQUIRE ... SHARED or ... LIMIT n. Each holder has its own
-- lease in the set, its own fence from the same counter, and its WHO
-- entry in the hash.
--
-- KEYS: lock fence waiting holders who writer /incarnation queue tickets brokers
-- ARGV: token ttl mark info mode limit channel name incarnation run_id ticket least live
-- Returns {1, fence}, {0, ms to look again (-1: none known), 0, 0, n (as
--   acquire.lua's: the first ticket when another of this broker's)}, {3, n},
--   or gate.lua's {-1, 0} or {-2, ms}.

local lock_key = KEYS[1]
local fence_key = KEYS[2]
local waiting_key = KEYS[3]
local holders_key = KEYS[4]
local who_key = KEYS[5]
local writer_key = KEYS[6]
local incarnation_key = KEYS[7]
local queue_key = KEYS[8]
local tickets_key = KEYS[9]
local brokers_key = KEYS[10]
local token = ARGV[1]       -- ttl, mark, info: as acquire.lua's
local ttl = ARGV[2]
local mark = ARGV[3]
local info = ARGV[4]
local mode = ARGV[5]        -- "SHARED", "LIMIT=<n>"
local limit = ARGV[6]       -- n; 0: none
local channel = ARGV[7]
local name = ARGV[8]
local incarnation = ARGV[9] -- incarnation, run_id, ticket, least, live:
local run_id = ARGV[10]     -- as acquire.lua's
local ticket = ARGV[11]
local least = ARGV[12]
local live = ARGV[13]

-- include keep.lua
-- include now.lua
-- include fields.lua
-- include fence.lua
-- include gate.lua
-- include plain.lua
-- include holds.lua
-- include holders.lua
-- include foreign.lua
-- include tell.lua
-- include tickets.lua
-- include leftover.lua

-- Gated as acquire.lua is; in a grace period a waiter still takes its
-- place in the name's one queue (lib/tickets.lua).
local closed, clock = gate(incarnation_key, incarnation, run_id)
if closed and closed[1] == -1 then return closed end
local now = now_ms(clock)
local function place()
  if ticket ~= '' and mark ~= '0' then
    qtake(queue_key, tickets_key, brokers_key, ticket,
      token .. ' ' .. ttl .. ' ' .. info, least, live, now)
    return true
  end
end
if closed then
  if place() then unplain(lock_key) end
  return closed
end
local v, holds = held(lock_key, token)
local me = info_broker(info) -- this broker
local hn = 0 -- as acquire.lua's: the first ticket, another of ours
local function refuse(t)
  if mark ~= '0' then unplain(lock_key, v) end
  if mark ~= '0' and ticket == '' then -- as acquire.lua's
    redis.call('HSET', waiting_key, me, int(now + tonumber(mark)))
    if redis.call('PTTL', waiting_key) < tonumber(mark) then
      redis.call('PEXPIRE', waiting_key, mark)
    end
  end
  place()
  return {0, t, 0, 0, hn}
end
-- Not granted while an exclusive holder is there ({3, -1} when it is this
-- token), nor in another mode ({3, n}: n = 0 for SHARED).
if v and v ~= '=shared' then
  if holds then return {3, -1} end
  return refuse(redis.call('PTTL', lock_key))
end
local n = prune(lock_key, holders_key, who_key, now)
local kept = n == 0 and remembered(fence_key) or 0
if kept > 0 then
  -- a holder's keys gone by hand (lib/fence.lua): still held
  return refuse(kept)
end
if n > 0 then
  local m = redis.call('HGET', who_key, '=mode')
  if m ~= mode then return {3, limit_of(m)} end
  local s = redis.call('ZSCORE', holders_key, token)
  local entry = s and redis.call('HGET', who_key, token) or ''
  if s and leftover(incarnation_key, incarnation, lock_key .. ' ' .. token,
      entry_fence(entry) or '0') then
    redis.call('ZREM', holders_key, token)  -- released since, in data lost
    redis.call('HDEL', who_key, token)
    s = nil
  end
  -- The same token again: as acquire.lua's.
  if s then
    local fs = entry_fence(entry) or '0'
    local e = fs .. ' ' .. info
    if foreign(entry, me) then
      local by = third(entry)
      if tonumber(s) - now > tonumber(ttl) then
        tell(channel, by, me, name .. ' shortened ' .. fs .. ' ' .. me,
          {})
      end
      e = with_broker(e, joined(by, me))
    end
    local at = int(now + tonumber(ttl))
    redis.call('ZADD', holders_key, at, token)
    stretch(lock_key, holders_key, who_key, now, fence_key)
    redis.call('HSET', who_key, token, e)
    qdrop(queue_key, tickets_key, ticket)
    return {1, tonumber(fs)}
  end
end
-- Nor while a waiting writer is there. A writer without a ticket (a FILL
-- waiter) keeps new readers out with the writer mark.
local t = redis.call('PTTL', writer_key)
if t > 0 then return refuse(t) end
-- A waiter is let in only in the queue's order: every live ticket before
-- its own in its mode (readers behind a waiting writer stay behind it, on
-- every broker), and under LIMIT n only if the holders and those before
-- it leave room. A try without a ticket (WAIT 0) is let in only while
-- nobody queues.
local before = 0
local first, hb = qhead(queue_key, tickets_key, brokers_key, now, live)
if first and first ~= ticket and hb == me then
  hn = qnum(first)
end
if first then
  before = ticket ~= '' and qbefore(queue_key, tickets_key, brokers_key,
    now, ticket, mode)
  if not before then return refuse(-1) end
end
if limit ~= '0' and n + before >= tonumber(limit) then
  local low = redis.call('ZRANGE', holders_key, 0, 0, 'WITHSCORES')
  return refuse(n > 0 and tonumber(low[2]) - now or -1)
end
local f = next_fence(fence_key, clock, ttl)
if type(f) ~= 'number' then return f end
qdrop(queue_key, tickets_key, ticket)
redis.call('ZADD', holders_key, int(now + tonumber(ttl)), token)
redis.call('HSET', who_key, token, int(f) .. ' ' .. info,
  '=mode', mode)
stretch(lock_key, holders_key, who_key, now, fence_key)
return {1, f}

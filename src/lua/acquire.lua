-- acquire: an exclusive ACQUIRE, or a FILL's: SET NX PX and the next
-- fence (lib/fence.lua) in one script, so a grant and its fence can never
-- be split, and two grants can never share a fence.
--
-- KEYS: lock fence queue tickets brokers waiting holders who writer /incarnation done fill
-- ARGV: token ttl mark info fill watch clear channel name ticket least live incarnation run_id
-- Returns {1, fence}; {0, ms to look again (-1: none known), holder's
--   fence, marked, n: the queue's first ticket "<broker>#<n>" when it is
--   another of this broker's, else 0}; {2, done}; {3, n} when the token
--   is a shared holder (n as share.lua's); gate.lua's {-1, 0} or {-2, ms};
--   or next_fence's error.

local lock_key = KEYS[1]
local fence_key = KEYS[2]
local queue_key = KEYS[3]
local tickets_key = KEYS[4]
local brokers_key = KEYS[5]
local waiting_key = KEYS[6]
local holders_key = KEYS[7]
local who_key = KEYS[8]
local writer_key = KEYS[9]
local incarnation_key = KEYS[10]
local done_key = KEYS[11]
local fill_key = KEYS[12]
local token = ARGV[1]
local ttl = ARGV[2]         -- ms
local mark = ARGV[3]        -- ms to mark a refusal for; 0: a try-once
local info = ARGV[4]        -- "<mode> <broker> <client> <since_ms>"
local fill = ARGV[5]        -- 0/1: a FILL's
local watch = ARGV[6]       -- the leader's fence a FILL waits on, or 0
local clear = ARGV[7]       -- 0/1: it marked itself a waiting writer
local channel = ARGV[8]     -- every broker's (lib/tell.lua)
local name = ARGV[9]
local ticket = ARGV[10]     -- "<broker>#<n>", or "" for none
local least = ARGV[11]      -- the least n of its broker's live tickets
local live = ARGV[12]       -- ms: the longest a broker with waiters
                            -- goes without asking
local incarnation = ARGV[13] -- the id the broker knows (lib/gate.lua)
local run_id = ARGV[14]     -- of its connection's Redis; "": not read

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

-- Nothing is granted (nor refused: the broker asks again) unless the
-- incarnation gate is open. In a grace period a waiter with a ticket still
-- takes its place in the queue, so the order of waiters survives it.
local closed, clock = gate(incarnation_key, incarnation, run_id)
if closed and closed[1] == -1 then return closed end
if closed and ticket == '' then return closed end
if watch ~= '0' then
  -- (a :done that is not a number, a counter's set by hand, says nothing)
  local d = tonumber(redis.call('GET', done_key) or '0') or 0
  if d >= tonumber(watch) then return {2, d} end -- DONE
end
-- The key's value is the token and the holder's WHO entry, and a plain
-- grant's fence after them (lib/plain.lua). A counter that is not an
-- integer fails the fence before a plain grant's SET, or undoes the SET
-- after the others', so no grant is left that nobody was told of.
local val = token .. ' ' .. info
local c -- the counter's value once read (false: none; nil: not read)
if not closed and redis.call('EXISTS', queue_key, waiting_key,
    holders_key) == 0 and remembered(fence_key) == 0 then
  -- Nobody waits (no queue or :waiting; fill is set only with :waiting),
  -- no shared holder is left (a "=shared" deleted by hand): the SET NX of
  -- a free name and its fence are all a grant costs (a plain grant), or
  -- the slow path below.
  local f
  f, c = fence_of(fence_key, clock)
  local fs = type(f) == 'number' and int(f)
  if fs and redis.call('SET', lock_key, val .. ' ' .. fs, 'NX', 'PX',
      ttl) then
    remember(fence_key, ttl, fs)
    if clear == '1' then redis.call('DEL', writer_key) end
    return {1, f}
  end
end
local v, holds = held(lock_key, token)
local now = now_ms(clock)
local me = info_broker(info) -- this broker
-- Waiting is one queue for every broker (lib/tickets.lua): a waiter's
-- try carries its ticket, which takes its place at its first refusal; a
-- free name goes only to the first live ticket (or, with none, to
-- anyone), so a try without a ticket (WAIT 0, FILL) never jumps the
-- queue. A grant takes its ticket out of the queue.
local first = qhead(queue_key, tickets_key, brokers_key, now, live)
if closed then -- a grace period: a waiter keeps its place, nothing more
  if mark ~= '0' then
    qtake(queue_key, tickets_key, brokers_key, ticket,
      token .. ' ' .. ttl .. ' ' .. info, least, live, now)
    unplain(lock_key)
  end
  return closed
end
-- The queue's first ticket when it is another of this broker's: its
-- waiter is asked to try (the one trying here may be queued behind it).
local hb, hn = qsplit(first or '')
if first == ticket or hb ~= me then hn = 0 end
-- A refused waiter without a ticket marks the name as waited for by its
-- broker (:waiting, for mark ms), so that its release wakes that broker
-- (lib/tell.lua); a FILL waiter also asks for its end to be marked done.
-- A writer shared holders keep out marks itself (w: no new reader comes
-- in meanwhile, and the reply's fourth element says so), and marks it
-- again while an exclusive holder keeps it out after that; its grant
-- clears the mark (clear). A writer with a ticket needs no mark: readers
-- with tickets queue behind it, and a reader without one is let in only
-- while nobody queues (share.lua).
local function refuse(pt, f, w)
  if ticket ~= '' then w = 0 end -- its place keeps later readers out
  if mark ~= '0' then
    unplain(lock_key, v)
    -- :fill before :waiting, so that it never outlives it (the fast
    -- path and a plain release look for :waiting alone).
    if fill == '1' then
      redis.call('SET', fill_key, '1', 'PX', mark)
    end
    -- A ticket needs no announcement: a release hands the name to it.
    if ticket == '' then
      redis.call('HSET', waiting_key, me, int(now + tonumber(mark)))
      if redis.call('PTTL', waiting_key) < tonumber(mark) then
        redis.call('PEXPIRE', waiting_key, mark)
      end
    end
    if w == 1 then
      redis.call('SET', writer_key, '1', 'PX', mark)
    end
  end
  if ticket ~= '' and mark ~= '0' then
    qtake(queue_key, tickets_key, brokers_key, ticket,
      token .. ' ' .. ttl .. ' ' .. info, least, live, now)
  end
  return {0, pt, f, mark ~= '0' and w or 0, tonumber(hn)}
end
local function grant()
  redis.call('SET', lock_key, val, 'PX', ttl)
  local f = next_fence(fence_key, clock, ttl, c)
  if type(f) ~= 'number' then
    redis.call('DEL', lock_key)
    return f
  end
  if clear == '1' then redis.call('DEL', writer_key) end
  qdrop(queue_key, tickets_key, ticket)
  return {1, f}
end
-- A token that is one of the shared holders is in the other family.
-- Shared holders whose "=shared" went (deleted by hand) still hold it.
if not v and redis.call('EXISTS', holders_key) == 1 then v = '=shared' end
if v == '=shared' then
  if prune(lock_key, holders_key, who_key, now) > 0 then
    if redis.call('ZSCORE', holders_key, token) then
      return {3, limit_of(redis.call('HGET', who_key, '=mode'))}
    end
    local top = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
    return refuse(tonumber(top[2]) - now, 0, 1)
  end
  v = false
end
if c == nil then c = redis.call('GET', fence_key) end
local fs = c or '0'
local kept = 0 -- ms of lease the counter remembers for a missing key
if v and leftover(incarnation_key, incarnation, lock_key, fs) then
  redis.call('DEL', lock_key)  -- released since, in data Redis lost
  v, holds = false, false
elseif not v then
  kept = remembered(fence_key)
end
if kept > 0 then
  -- The lock key went (deleted or renamed by hand) while the fence
  -- counter still remembers its lease: still held, and its holder's
  -- broker puts it back (lib/fence.lua, check.lua).
  return refuse(kept, tonumber(fs), clear == '1' and 1 or 0)
end
if not v then
  if first == nil or first == ticket then return grant() end
  -- A writer without a ticket that keeps readers out goes before them.
  if ticket == '' and clear == '1' and qmode(tickets_key, first) ~= 'EXCLUSIVE'
  then
    return grant()
  end
  -- Free, but the first ticket's: no holder to watch or wait for.
  return refuse(-1, 0, clear == '1' and 1 or 0)
end
-- The same token asking again gets its own fence back (a retried request
-- grants once), its lease set to the new ttl and its entry renewed; asked
-- through another broker than the one that stored it, that broker joins
-- the entry's (lib/tell.lua: releases and shortenings of the grant are
-- told to the others from then on) and a shorter lease is told to them
-- now ("<name> shortened <fence> <broker>").
if holds then
  if foreign(v, me) then
    local by = third(v)
    if redis.call('PTTL', lock_key) > tonumber(ttl) then
      tell(channel, by, me, name .. ' shortened ' .. fs .. ' ' .. me, {})
    end
    val = with_broker(val, joined(by, me))
  end
  redis.call('SET', lock_key, val, 'PX', ttl)
  remember(fence_key, ttl)
  qdrop(queue_key, tickets_key, ticket)
  return {1, tonumber(fs)}
end
return refuse(redis.call('PTTL', lock_key), tonumber(fs),
  clear == '1' and 1 or 0)

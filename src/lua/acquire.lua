-- acquire: an exclusive ACQUIRE, or a FILL's.
--
-- SET NX PX and the next fence (lib/fence.lua) in one script, so a grant
-- and its fence can never be split, and two grants can never share a
-- fence. The holder's fence is the counter's value: nothing moves it
-- while the key exists. A counter that is not an integer fails the fence
-- before a plain grant's SET, or undoes the SET after the others', so no
-- grant is left that nobody was told of. The key's value is the token and
-- the holder's WHO entry (info), and a plain grant's fence after them
-- (lib/plain.lua); shared holders keep the key at "=shared", so while
-- nobody waits (no queue or waiting key) the SET NX of a free name and
-- its fence are all an uncontended grant costs.
--
-- Waiting is one queue for every broker (lib/tickets.lua): a waiter's
-- try carries its ticket, which takes its place at its first refusal; a
-- free name goes only to the first live ticket (or, with none, to anyone),
-- so a try without a ticket (WAIT 0, FILL) never jumps the queue. A grant
-- takes its ticket out of the queue.
--
-- The same token asking again gets its own fence back (a retried request
-- grants once), its lease set to the new ttl and its entry renewed; asked
-- through another broker than the one that stored it, that broker joins
-- the entry's (lib/tell.lua: releases and shortenings of the grant are
-- told to the others from then on) and a shorter lease is told to them
-- now ("<name> shortened <fence> <broker>"). A writer shared holders keep out marks itself (writer: no
-- new reader comes in meanwhile, and the reply's fourth element says so),
-- and marks it again while an exclusive holder keeps it out after that;
-- its grant clears the mark (clear); a writer with a ticket needs no mark
-- (readers with tickets queue behind it, and a reader without one is let
-- in only while nobody queues), and a writer that set one goes before
-- readers' tickets (share.lua). A token that is one of the shared
-- holders is in the other family. A refused waiter without a ticket marks
-- the name as waited for by its broker (:waiting, for mark ms), so that
-- its release wakes that broker (lib/tell.lua); a FILL
-- waiter also asks for its end to be marked done, and a FILL whose watched
-- leader is done (done >= watch) is DONE.
--
-- A name whose lock key is gone while the fence counter still remembers
-- its lease (lib/fence.lua) is held: someone deleted or renamed the key
-- by hand, and its holder's broker puts it back.
--
-- Nothing is granted (nor refused: the broker asks again) unless the
-- incarnation marker names the broker's incarnation and its grace period
-- is over (lib/gate.lua). In a grace period a waiter with a ticket still
-- takes its place in the queue, so the order of waiters survives it.
--
-- KEYS: lock fence queue tickets brokers waiting holders who writer /incarnation done fill
-- ARGV: token, ttl (ms), mark (ms; 0: a try-once), info ("<mode> <broker>
--   <client> <since_ms>"), fill (0/1), watch (a leader's fence, or 0),
--   clear (0/1), channel, name, ticket ("<broker>#<n>", or "" for none),
--   least (the least n of its broker's live tickets on the name), live
--   (ms: the longest a broker with waiters goes without asking),
--   incarnation (the id the broker knows), run_id (of its connection's
--   Redis; "" if it may not read it)
-- Returns {1, fence}; {0, ms to look again (-1: none known), holder's
--   fence, marked, n: the queue's first ticket "<broker>#<n>" when it is
--   another of this broker's (the broker of info), else 0}; {2, done}; {3, n} when the token is a shared holder (n
--   as share.lua's); gate.lua's {-1, 0} or {-2, ms}; or next_fence's error.

-- include keep.lua
-- include fence.lua
-- include gate.lua
-- include plain.lua
local closed, clock = gate(KEYS[10], ARGV[13], ARGV[14])
if closed and closed[1] == -1 then return closed end
if closed and ARGV[10] == '' then return closed end
if ARGV[6] ~= '0' then
  -- (a :done that is not a number, a counter's set by hand, says nothing)
  local d = tonumber(redis.call('GET', KEYS[11]) or '0') or 0
  if d >= tonumber(ARGV[6]) then return {2, d} end
end
local val = ARGV[1] .. ' ' .. ARGV[4]
local c -- the counter's value once read (false: none; nil: not read)
if not closed and redis.call('EXISTS', KEYS[3], KEYS[6], KEYS[7]) == 0 and
    remembered(KEYS[2]) == 0 then
  -- Nobody waits (fill is set only with :waiting), no shared holder is
  -- left (a "=shared" deleted by hand): a plain grant (lib/plain.lua), or
  -- the slow path below.
  local f
  f, c = fence_of(KEYS[2], clock)
  local fs = type(f) == 'number' and string.format('%d', f)
  if fs and redis.call('SET', KEYS[1], val .. ' ' .. fs, 'NX', 'PX',
      ARGV[2]) then
    redis.call('SET', KEYS[2], fs, 'PX', tonumber(ARGV[2]) + keep_ms()) -- fence.lua
    if ARGV[7] == '1' then redis.call('DEL', KEYS[9]) end
    return {1, f}
  end
end
-- include now.lua
-- include holds.lua
-- include holders.lua
-- include foreign.lua
-- include tell.lua
-- include tickets.lua
local now = now_ms(clock)
local me = string.match(ARGV[4], '^%S+ (%S+)') -- this broker
local tk = ARGV[10]
local first = qhead(KEYS[3], KEYS[4], KEYS[5], now, ARGV[12])
if closed then -- a grace period: a waiter keeps its place, nothing more
  if ARGV[3] ~= '0' then
    qtake(KEYS[3], KEYS[4], KEYS[5], tk,
      ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4], ARGV[11], ARGV[12], now)
    unplain(KEYS[1])
  end
  return closed
end
-- The queue's first ticket when it is another of this broker's: its
-- waiter is asked to try (the one trying here may be queued behind it).
local hb, hn = string.match(first or '', '^(.+)#(%d+)$')
if first == tk or hb ~= me then hn = 0 end
local function refuse(pt, f, w)
  if tk ~= '' then w = 0 end -- its place keeps later readers out
  if ARGV[3] ~= '0' then
    unplain(KEYS[1], v)
    -- :fill before :waiting, so that it never outlives it (the fast
    -- path and a plain release look for :waiting alone).
    if ARGV[5] == '1' then
      redis.call('SET', KEYS[12], '1', 'PX', ARGV[3])
    end
    -- A ticket needs no announcement: a release hands the name to it.
    if tk == '' then
      redis.call('HSET', KEYS[6], me, ms(now + tonumber(ARGV[3])))
      if redis.call('PTTL', KEYS[6]) < tonumber(ARGV[3]) then
        redis.call('PEXPIRE', KEYS[6], ARGV[3])
      end
    end
    if w == 1 then
      redis.call('SET', KEYS[9], '1', 'PX', ARGV[3])
    end
  end
  if tk ~= '' and ARGV[3] ~= '0' then
    qtake(KEYS[3], KEYS[4], KEYS[5], tk,
      ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4], ARGV[11], ARGV[12], now)
  end
  return {0, pt, f, ARGV[3] ~= '0' and w or 0, tonumber(hn)}
end
local function grant()
  redis.call('SET', KEYS[1], val, 'PX', ARGV[2])
  local f = next_fence(KEYS[2], clock, ARGV[2], c)
  if type(f) ~= 'number' then
    redis.call('DEL', KEYS[1])
    return f
  end
  if ARGV[7] == '1' then redis.call('DEL', KEYS[9]) end
  qdrop(KEYS[3], KEYS[4], tk)
  return {1, f}
end
-- Shared holders whose "=shared" went (deleted by hand) still hold it.
if not v and redis.call('EXISTS', KEYS[7]) == 1 then v = '=shared' end
if v == '=shared' then
  if prune(KEYS[1], KEYS[7], KEYS[8], now) > 0 then
    if redis.call('ZSCORE', KEYS[7], ARGV[1]) then
      local m = redis.call('HGET', KEYS[8], '=mode') or ''
      return {3, tonumber(string.match(m, '^LIMIT=(%d+)$') or '0')}
    end
    local top = redis.call('ZRANGE', KEYS[7], -1, -1, 'WITHSCORES')
    return refuse(tonumber(top[2]) - now, 0, 1)
  end
  v = false
end
if c == nil then c = redis.call('GET', KEYS[2]) end
local fs = c or '0'
-- include leftover.lua
local kept = 0 -- ms of lease the counter remembers for a missing key
if v and leftover(KEYS[10], ARGV[13], KEYS[1], fs) then
  redis.call('DEL', KEYS[1])  -- released since, in data Redis lost
  v, holds = false, false
elseif not v then
  kept = remembered(KEYS[2])
end
if kept > 0 then
  -- The lock key went (deleted or renamed by hand) while its lease runs:
  -- still held, and its broker puts it back (lib/fence.lua).
  return refuse(kept, tonumber(fs), ARGV[7] == '1' and 1 or 0)
end
if not v then
  if first == nil or first == tk then return grant() end
  -- A writer without a ticket that keeps readers out goes before them.
  if tk == '' and ARGV[7] == '1' and qmode(KEYS[4], first) ~= 'EXCLUSIVE'
  then
    return grant()
  end
  -- Free, but the first ticket's: no holder to watch or wait for.
  return refuse(-1, 0, ARGV[7] == '1' and 1 or 0)
end
if holds then
  if foreign(v, me) then
    local by = string.match(v, '^%S+ %S+ (%S+)')
    if redis.call('PTTL', KEYS[1]) > tonumber(ARGV[2]) then
      tell(ARGV[8], by, me, ARGV[9] .. ' shortened ' .. fs .. ' ' .. me, {})
    end
    val = ARGV[1] .. ' ' ..
      string.gsub(ARGV[4], '^(%S+) %S+', '%1 ' .. joined(by, me))
  end
  redis.call('SET', KEYS[1], val, 'PX', ARGV[2])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) + keep_ms()) -- fence.lua
  qdrop(KEYS[3], KEYS[4], tk)
  return {1, tonumber(fs)}
end
return refuse(redis.call('PTTL', KEYS[1]), tonumber(fs),
  ARGV[7] == '1' and 1 or 0)

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
-- KEYS: lock fence waiting holders who writer /incarnation queue tickets brokers
-- ARGV: token, ttl, mark, info, mode ("SHARED", "LIMIT=<n>"), n (0: none),
--   channel, name, incarnation, run_id, ticket ("<broker>#<n>", or ""),
--   least, live (as acquire.lua's)
-- Returns {1, fence}, {0, ms to look again (-1: none known), 0, 0, n (as
--   acquire.lua's: the first ticket when another of this broker's)}, {3, n},
--   or gate.lua's {-1, 0} or {-2, ms}.

-- include keep.lua
-- include now.lua
-- include fence.lua
-- include gate.lua
-- include plain.lua
-- include tickets.lua
local closed, clock = gate(KEYS[7], ARGV[9], ARGV[10])
if closed and closed[1] == -1 then return closed end
local now = now_ms(clock)
local tk = ARGV[11]
local function place()
  if tk ~= '' and ARGV[3] ~= '0' then
    qtake(KEYS[8], KEYS[9], KEYS[10], tk,
      ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[4], ARGV[12], ARGV[13], now)
    return true
  end
end
if closed then
  if place() then unplain(KEYS[1]) end
  return closed
end
-- include holds.lua
-- include holders.lua
-- include foreign.lua
-- include tell.lua
local me = string.match(ARGV[4], '^%S+ (%S+)') -- this broker
local hn = 0 -- as acquire.lua's: the first ticket, another of ours
local function refuse(t)
  if ARGV[3] ~= '0' then unplain(KEYS[1], v) end
  if ARGV[3] ~= '0' and tk == '' then -- as acquire.lua's
    redis.call('HSET', KEYS[3], me, ms(now + tonumber(ARGV[3])))
    if redis.call('PTTL', KEYS[3]) < tonumber(ARGV[3]) then
      redis.call('PEXPIRE', KEYS[3], ARGV[3])
    end
  end
  place()
  return {0, t, 0, 0, hn}
end
if v and v ~= '=shared' then
  if holds then return {3, -1} end
  return refuse(redis.call('PTTL', KEYS[1]))
end
local n = prune(KEYS[1], KEYS[4], KEYS[5], now)
local kept = n == 0 and remembered(KEYS[2]) or 0
if kept > 0 then
  -- a holder's keys gone by hand (lib/fence.lua): still held
  return refuse(kept)
end
if n > 0 then
  local m = redis.call('HGET', KEYS[5], '=mode')
  if m ~= ARGV[5] then
    local l = string.match(m or '', '^LIMIT=(%d+)$')
    return {3, tonumber(l or '0')}
  end
  local s = redis.call('ZSCORE', KEYS[4], ARGV[1])
  local info = s and redis.call('HGET', KEYS[5], ARGV[1]) or ''
-- include leftover.lua
  if s and leftover(KEYS[7], ARGV[9], KEYS[1] .. ' ' .. ARGV[1],
      string.match(info, '^%d+') or '0') then
    redis.call('ZREM', KEYS[4], ARGV[1])  -- released since, in data lost
    redis.call('HDEL', KEYS[5], ARGV[1])
    s = nil
  end
  if s then
    local fs = string.match(info, '^%d+') or '0'
    local e = ARGV[4]
    if foreign(info, me) then
      local by = string.match(info, '^%S+ %S+ (%S+)')
      if tonumber(s) - now > tonumber(ARGV[2]) then
        tell(ARGV[7], by, me, ARGV[8] .. ' shortened ' .. fs .. ' ' .. me,
          {})
      end
      e = string.gsub(e, '^(%S+) %S+', '%1 ' .. joined(by, me))
    end
    local at = ms(now + tonumber(ARGV[2]))
    redis.call('ZADD', KEYS[4], at, ARGV[1])
    stretch(KEYS[1], KEYS[4], KEYS[5], now, KEYS[2])
    redis.call('HSET', KEYS[5], ARGV[1], fs .. ' ' .. e)
    qdrop(KEYS[8], KEYS[9], tk)
    return {1, tonumber(fs)}
  end
end
local t = redis.call('PTTL', KEYS[6])
if t > 0 then return refuse(t) end
local before = 0
local first, hb = qhead(KEYS[8], KEYS[9], KEYS[10], now, ARGV[13])
if first and first ~= tk and hb == me then
  hn = tonumber(string.match(first, '#(%d+)$'))
end
if first then
  before = tk ~= '' and qbefore(KEYS[8], KEYS[9], KEYS[10], now, tk,
    ARGV[5])
  if not before then return refuse(-1) end
end
if ARGV[6] ~= '0' and n + before >= tonumber(ARGV[6]) then
  local low = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  return refuse(n > 0 and tonumber(low[2]) - now or -1)
end
local f = next_fence(KEYS[2], clock, ARGV[2])
if type(f) ~= 'number' then return f end
qdrop(KEYS[8], KEYS[9], tk)
redis.call('ZADD', KEYS[4], ms(now + tonumber(ARGV[2])), ARGV[1])
redis.call('HSET', KEYS[5], ARGV[1], ms(f) .. ' ' .. ARGV[4],
  '=mode', ARGV[5])
stretch(KEYS[1], KEYS[4], KEYS[5], now, KEYS[2])
return {1, f}

#!lua flags=allow-oom
-- extend: compare-and-PEXPIRE, in either place.
--
-- With a fence (not 0), only the grant with that fence; an exclusive
-- grant's whose lock key was deleted by hand while its lease runs moves
-- the lease the fence counter remembers (lib/fence.lua). A lease shortened
-- in a grant another broker stored too is told to the others ("<name>
-- shortened <fence> <broker>", lib/tell.lua): their holds can no longer
-- trust their end.
--
-- Only in the incarnation the broker knows: else -1, and the broker asks
-- which one Redis serves (incarnation.lua) before it trusts an answer.
--
-- Flags: allow-oom. A renewal on a Redis above maxmemory must go on, or
-- every hold there would be lost at its lease's end; it changes a lease
-- (PEXPIRE, a holder's score) and makes nothing new. A master that
-- min-replicas-to-write stops still refuses it (NOREPLICAS).
--
-- KEYS: lock holders who fence /incarnation
-- Returns 1, 0 or -1.

local lockKey = KEYS[1]
local holdersKey = KEYS[2]
local whoKey = KEYS[3]
local fenceKey = KEYS[4]
local incarnationKey = KEYS[5]
local token = ARGV[1]
local ttlMs = ARGV[2] -- the new lease
local grantFence = ARGV[3] -- the grant's fence (0: any)
local broker = ARGV[4] -- this broker
local channel = ARGV[5] -- the release channel (lib/tell.lua)
local lockName = ARGV[6]
local incarnation = ARGV[7] -- the id the broker knows (lib/gate.lua)
local runId = ARGV[8] -- its connection's Redis, or "" (lib/gate.lua)

-- include process.lua
local m = redis.call('HMGET', incarnationKey, 'id', 'runid', 'replid')
if m[1] ~= incarnation or not same_process(m[2], m[3], runId) then
  return -1
end

-- include keep.lua
-- include fields.lua
-- include now.lua
-- include holds.lua
-- include tell.lua
if holds then
  local c = redis.call('GET', fenceKey) or '0'
  if grantFence ~= '0' and c ~= grantFence then return 0 end
  local by = string.match(v, THIRD_WORD)
  if by ~= broker and redis.call('PTTL', lockKey) > tonumber(ttlMs) then
    tell(channel, by, broker, lockName .. SHORTENED .. c .. ' ' ..
      broker, {})
  end
  redis.call('PEXPIRE', fenceKey, tonumber(ttlMs) + KEEP_MS) -- fence.lua
  return redis.call('PEXPIRE', lockKey, ttlMs)
end
if v and v ~= SHARED then return 0 end
local kept = not v and grantFence ~= '0' and
  redis.call('GET', fenceKey) == grantFence and
  redis.call('PTTL', fenceKey) - KEEP_MS
if kept and kept > 0 and redis.call('EXISTS', holdersKey) == 0 then
  -- An exclusive grant whose lock key went by hand while the counter
  -- remembers its lease (lib/fence.lua): the lease it remembers is moved
  -- (the holder's broker puts the key back when it confirms the hold),
  -- and a shorter one told to every broker, as which brokers hold it went
  -- with the key.
  if kept > tonumber(ttlMs) then
    tell(channel, '?', broker, lockName .. SHORTENED .. grantFence ..
      ' ' .. broker, {})
  end
  return redis.call('PEXPIRE', fenceKey, tonumber(ttlMs) + KEEP_MS)
end
-- include holders.lua
local s = redis.call('ZSCORE', holdersKey, token)
if not s then return 0 end
local info = redis.call('HGET', whoKey, token) or ''
local fs = string.match(info, ENTRY_FENCE) or '0'
if grantFence ~= '0' and fs ~= grantFence then return 0 end
local now = now_ms()
if tonumber(s) <= now then return 0 end
local by = string.match(info, THIRD_WORD)
if by ~= broker and tonumber(s) - now > tonumber(ttlMs) then
  tell(channel, by, broker, lockName .. SHORTENED .. fs .. ' ' ..
    broker, {})
end
redis.call('ZADD', holdersKey, ms(now + tonumber(ttlMs)), token)
stretch(lockKey, holdersKey, whoKey, now, fenceKey)
return 1

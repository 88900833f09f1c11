-- extend: compare-and-PEXPIRE, in either place. Only in the incarnation
-- the broker knows: else -1, and the broker asks which one Redis serves
-- (incarnation.lua) before it trusts an answer.
--
-- KEYS: lock holders who fence /incarnation
-- ARGV: token ttl fence broker channel name incarnation run_id
-- Returns 1, 0 or -1.

local lock_key = KEYS[1]
local holders_key = KEYS[2]
local who_key = KEYS[3]
local fence_key = KEYS[4]
local incarnation_key = KEYS[5]
local token = ARGV[1]
local ttl = ARGV[2]         -- ms
local fence = ARGV[3]       -- only the grant with this fence; 0: any
local broker = ARGV[4]      -- this broker
local channel = ARGV[5]     -- every broker's (lib/tell.lua)
local name = ARGV[6]
local incarnation = ARGV[7] -- incarnation, run_id: as lib/gate.lua's
local run_id = ARGV[8]

-- include keep.lua
-- include now.lua
-- include fields.lua
-- include fence.lua
-- include holds.lua
-- include holders.lua
-- include tell.lua

local m = redis.call('HMGET', incarnation_key, 'id', 'runid')
if m[1] ~= incarnation or (run_id ~= '' and m[2] ~= run_id) then
  return -1
end
local v, holds = held(lock_key, token)
-- A lease shortened in a grant another broker stored too is told to the
-- others ("<name> shortened <fence> <broker>", lib/tell.lua): their holds
-- can no longer trust their end.
if holds then
  local c = redis.call('GET', fence_key) or '0'
  if fence ~= '0' and c ~= fence then return 0 end
  local by = third(v)
  if by ~= broker and redis.call('PTTL', lock_key) > tonumber(ttl) then
    tell(channel, by, broker, name .. ' shortened ' .. c .. ' ' ..
      broker, {})
  end
  remember(fence_key, ttl)
  return redis.call('PEXPIRE', lock_key, ttl)
end
if v and v ~= '=shared' then return 0 end
local kept = not v and fence ~= '0' and
  redis.call('GET', fence_key) == fence and remembered(fence_key)
if kept and kept > 0 and redis.call('EXISTS', holders_key) == 0 then
  -- An exclusive grant whose lock key went by hand while the counter
  -- remembers its lease (lib/fence.lua): the lease it remembers is moved
  -- (the holder's broker puts the key back when it confirms the hold),
  -- and a shorter one told to every broker, as which brokers hold it went
  -- with the key.
  if kept > tonumber(ttl) then
    tell(channel, '?', broker, name .. ' shortened ' .. fence ..
      ' ' .. broker, {})
  end
  return remember(fence_key, ttl)
end
local s = redis.call('ZSCORE', holders_key, token)
if not s then return 0 end
local info = redis.call('HGET', who_key, token) or ''
local fs = entry_fence(info) or '0'
if fence ~= '0' and fs ~= fence then return 0 end
local now = now_ms()
if tonumber(s) <= now then return 0 end
local by = third(info)
if by ~= broker and tonumber(s) - now > tonumber(ttl) then
  tell(channel, by, broker, name .. ' shortened ' .. fs .. ' ' ..
    broker, {})
end
redis.call('ZADD', holders_key, int(now + tonumber(ttl)), token)
stretch(lock_key, holders_key, who_key, now, fence_key)
return 1

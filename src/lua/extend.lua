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
-- KEYS: lock holders who fence /incarnation
-- ARGV: token, ttl, fence (0: any), broker, channel, name, incarnation,
--   run_id (as lib/gate.lua's)
-- Returns 1, 0 or -1.

local m = redis.call('HMGET', KEYS[5], 'id', 'runid')
if m[1] ~= ARGV[7] or (ARGV[8] ~= '' and m[2] ~= ARGV[8]) then
  return -1
end

-- include keep.lua
-- include holds.lua
-- include tell.lua
if holds then
  local c = redis.call('GET', KEYS[4]) or '0'
  if ARGV[3] ~= '0' and c ~= ARGV[3] then return 0 end
  local by = string.match(v, '^%S+ %S+ (%S+)')
  if by ~= ARGV[4] and redis.call('PTTL', KEYS[1]) > tonumber(ARGV[2]) then
    tell(ARGV[5], by, ARGV[4], ARGV[6] .. ' shortened ' .. c .. ' ' ..
      ARGV[4], {})
  end
  redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[2]) + keep_ms()) -- fence.lua
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if v and v ~= '=shared' then return 0 end
local kept = not v and ARGV[3] ~= '0' and
  redis.call('GET', KEYS[4]) == ARGV[3] and
  redis.call('PTTL', KEYS[4]) - keep_ms()
if kept and kept > 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  -- An exclusive grant whose lock key went by hand while the counter
  -- remembers its lease (lib/fence.lua): the lease it remembers is moved
  -- (the holder's broker puts the key back when it confirms the hold),
  -- and a shorter one told to every broker, as which brokers hold it went
  -- with the key.
  if kept > tonumber(ARGV[2]) then
    tell(ARGV[5], '?', ARGV[4], ARGV[6] .. ' shortened ' .. ARGV[3] ..
      ' ' .. ARGV[4], {})
  end
  return redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[2]) + keep_ms())
end
-- include now.lua
-- include holders.lua
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s then return 0 end
local info = redis.call('HGET', KEYS[3], ARGV[1]) or ''
local fs = string.match(info, '^%d+') or '0'
if ARGV[3] ~= '0' and fs ~= ARGV[3] then return 0 end
local now = now_ms()
if tonumber(s) <= now then return 0 end
local by = string.match(info, '^%S+ %S+ (%S+)')
if by ~= ARGV[4] and tonumber(s) - now > tonumber(ARGV[2]) then
  tell(ARGV[5], by, ARGV[4], ARGV[6] .. ' shortened ' .. fs .. ' ' ..
    ARGV[4], {})
end
redis.call('ZADD', KEYS[2], ms(now + tonumber(ARGV[2])), ARGV[1])
stretch(KEYS[1], KEYS[2], KEYS[3], now, KEYS[4])
return 1

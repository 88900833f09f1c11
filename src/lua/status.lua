#!lua flags=no-writes
-- status: STATUS and VALIDATE.
--
-- An exclusive grant left over from older data (lib/leftover.lua) is
-- free; a shared one is not valid.
--
-- Flags: no-writes: it only reads, so it is answered whatever Redis's
-- memory and replicas.
--
-- KEYS: lock fence holders who /incarnation
-- Returns {0} when free, else {1, pttl, fence, holders, n, valid} with
--   n = -1 exclusive, 0 SHARED, else LIMIT n; pttl the longest lease left.

local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local holdersKey = KEYS[3]
local whoKey = KEYS[4]
local incarnationKey = KEYS[5]
local grantFence = ARGV[1] -- a fence to look for, or 0
local token = ARGV[2] -- the token it must be held under, or ""
local incarnation = ARGV[3] -- the incarnation the broker knows

-- include fields.lua
-- include now.lua
-- include leftover.lua
local c = tonumber(redis.call('GET', fenceKey) or '0')
local v, t = redis.call('GET', lockKey), token
if v and v ~= SHARED and leftover(incarnationKey, incarnation, lockKey, c) then
  return {0}
end
if v and v ~= SHARED then
  local mine = t == '' or v == t or
    string.sub(v, 1, #t + 1) == t .. ' '
  return {1, redis.call('PTTL', lockKey), c, 1, -1,
    (mine and c == tonumber(grantFence)) and 1 or 0}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', holdersKey, '(' .. ms(now),
  '+inf', 'WITHSCORES')
if #live == 0 then return {0} end
local valid = 0
if grantFence ~= '0' then
  for i = 1, #live, 2 do
    if t == '' or live[i] == t then
      local info = redis.call('HGET', whoKey, live[i]) or ''
      if string.match(info, ENTRY_FENCE) == grantFence and
          not leftover(incarnationKey, incarnation,
            lockKey .. ' ' .. live[i], grantFence) then
        valid = 1
      end
    end
  end
end
local m = redis.call('HGET', whoKey, MODE_FIELD) or ''
return {1, tonumber(live[#live]) - now, c, #live / 2,
  tonumber(string.match(m, LIMIT_N) or '0'), valid}

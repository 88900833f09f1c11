-- status: STATUS and VALIDATE.
--
-- An exclusive grant left over from older data (lib/leftover.lua) is
-- free; a shared one is not valid.
--
-- KEYS: lock fence holders who /incarnation
-- ARGV: fence token incarnation
-- Returns {0} when free, else {1, pttl, fence, holders, n, valid} with
--   n = -1 exclusive, 0 SHARED, else LIMIT n; pttl the longest lease left.

local lock_key = KEYS[1]
local fence_key = KEYS[2]
local holders_key = KEYS[3]
local who_key = KEYS[4]
local incarnation_key = KEYS[5]
local fence = ARGV[1]       -- a fence to look for, or 0
local token = ARGV[2]       -- a token it must be held under, or ""
local incarnation = ARGV[3] -- the id the broker knows

-- include now.lua
-- include fields.lua
-- include holds.lua
-- include leftover.lua

local c = tonumber(redis.call('GET', fence_key) or '0')
local v, holds = held(lock_key, token)
if v and v ~= '=shared' and leftover(incarnation_key, incarnation,
    lock_key, c) then
  return {0}
end
if v and v ~= '=shared' then
  local mine = token == '' or holds
  return {1, redis.call('PTTL', lock_key), c, 1, -1,
    (mine and c == tonumber(fence)) and 1 or 0}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', holders_key, '(' .. int(now),
  '+inf', 'WITHSCORES')
if #live == 0 then return {0} end
local valid = 0
if fence ~= '0' then
  for i = 1, #live, 2 do
    if token == '' or live[i] == token then
      local info = redis.call('HGET', who_key, live[i]) or ''
      if entry_fence(info) == fence and not leftover(incarnation_key,
          incarnation, lock_key .. ' ' .. live[i], fence) then
        valid = 1
      end
    end
  end
end
local m = redis.call('HGET', who_key, '=mode')
return {1, tonumber(live[#live]) - now, c, #live / 2, limit_of(m), valid}

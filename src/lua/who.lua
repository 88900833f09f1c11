-- who: every holder, for WHO.
--
-- KEYS: lock holders who fence
-- ARGV:
-- Returns {pttl, "<fence> <entry>", ...}, one pair per holder (at most
--   10000); "" for an entry not stored.

local lock_key = KEYS[1]
local holders_key = KEYS[2]
local who_key = KEYS[3]
local fence_key = KEYS[4]

-- include now.lua
local v = redis.call('GET', lock_key)
if v and v ~= '=shared' then
  -- (a plain grant's fence follows the entry: lib/plain.lua)
  local entry = string.match(v, '^%S+ (%S+ %S+ %S+ %S+)') or
    string.match(v, '^%S+ (.+)$')
  local f = redis.call('GET', fence_key) or '0'
  return {redis.call('PTTL', lock_key), entry and f .. ' ' .. entry or ''}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', holders_key, '(' .. int(now),
  '+inf', 'WITHSCORES', 'LIMIT', 0, 10000)
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = tonumber(live[i + 1]) - now
  out[#out + 1] = redis.call('HGET', who_key, live[i]) or ''
end
return out

-- who: every holder, for WHO.
--
-- KEYS: lock holders who fence
-- ARGV: none
-- Returns {pttl, "<fence> <entry>", ...}, one pair per holder (at most
--   10000); "" for an entry not stored.

-- include now.lua
local v = redis.call('GET', KEYS[1])
if v and v ~= '=shared' then
  -- (a plain grant's fence follows the entry: lib/plain.lua)
  local entry = string.match(v, '^%S+ (%S+ %S+ %S+ %S+)') or
    string.match(v, '^%S+ (.+)$')
  local f = redis.call('GET', KEYS[4]) or '0'
  return {redis.call('PTTL', KEYS[1]), entry and f .. ' ' .. entry or ''}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ms(now), '+inf', 'WITHSCORES', 'LIMIT', 0, 10000)
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = tonumber(live[i + 1]) - now
  out[#out + 1] = redis.call('HGET', KEYS[3], live[i]) or ''
end
return out

#!lua flags=no-writes
-- who: every holder, for WHO.
--
-- Flags: no-writes: it only reads, so it is answered whatever Redis's
-- memory and replicas.
--
-- KEYS: lock holders who fence
-- Returns {pttl, "<fence> <entry>", ...}, one pair per holder (at most
--   10000); "" for an entry not stored.

local lockKey = KEYS[1]
local holdersKey = KEYS[2]
local whoKey = KEYS[3]
local fenceKey = KEYS[4]

-- include fields.lua
-- include now.lua
local v = redis.call('GET', lockKey)
if v and v ~= SHARED then
  -- (a plain grant's fence follows the entry: lib/plain.lua)
  local entry = string.match(v, '^%S+ (%S+ %S+ %S+ %S+)') or
    string.match(v, '^%S+ (.+)$')
  local f = redis.call('GET', fenceKey) or '0'
  return {redis.call('PTTL', lockKey), entry and f .. ' ' .. entry or ''}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', holdersKey, '(' .. ms(now),
  '+inf', 'WITHSCORES', 'LIMIT', 0, 10000)
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = tonumber(live[i + 1]) - now
  out[#out + 1] = redis.call('HGET', whoKey, live[i]) or ''
end
return out

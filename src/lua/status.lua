-- status: STATUS and VALIDATE.
--
-- An exclusive grant left over from older data (lib/leftover.lua) is
-- free; a shared one is not valid.
--
-- KEYS: lock fence holders who /incarnation
-- ARGV: a fence to look for, or 0; a token it must be held under, or "";
--   the incarnation the broker knows
-- Returns {0} when free, else {1, pttl, fence, holders, n, valid} with
--   n = -1 exclusive, 0 SHARED, else LIMIT n; pttl the longest lease left.

-- include now.lua
-- include leftover.lua
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
local v, t = redis.call('GET', KEYS[1]), ARGV[2]
if v and v ~= '=shared' and leftover(KEYS[5], ARGV[3], KEYS[1], c) then
  return {0}
end
if v and v ~= '=shared' then
  local mine = t == '' or v == t or
    string.sub(v, 1, #t + 1) == t .. ' '
  return {1, redis.call('PTTL', KEYS[1]), c, 1, -1,
    (mine and c == tonumber(ARGV[1])) and 1 or 0}
end
local now = now_ms()
local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ms(now), '+inf', 'WITHSCORES')
if #live == 0 then return {0} end
local valid = 0
if ARGV[1] ~= '0' then
  for i = 1, #live, 2 do
    if t == '' or live[i] == t then
      local info = redis.call('HGET', KEYS[4], live[i]) or ''
      if string.match(info, '^%d+') == ARGV[1] and not leftover(KEYS[5],
          ARGV[3], KEYS[1] .. ' ' .. live[i], ARGV[1]) then
        valid = 1
      end
    end
  end
end
local m = redis.call('HGET', KEYS[4], '=mode') or ''
return {1, tonumber(live[#live]) - now, c, #live / 2,
  tonumber(string.match(m, '^LIMIT=(%d+)$') or '0'), valid}

-- handover: release straight to the next waiter.
--
-- Compare (token and fence, unless the counter is no integer), then set the
-- new holder and its fence, so the lock is never free in between and the
-- hand-over is one round trip. Nothing is published, the lock not being
-- free, unless another broker stored the grant (released, as release.lua
-- says). A counter that is not an integer makes no fence: the lock is then
-- only released ({2}), and the waiter tries on its own.
--
-- KEYS: lock fence writer waiters
-- ARGV: token, next token, ttl, next's info, clear (next marked the
--   writer), fence, broker, channel, name
-- Returns {1, fence}, {2} or {0}.

-- include holds.lua
local c = redis.call('GET', KEYS[2])
if not holds or (c ~= ARGV[6] and tonumber(c)) then return {0} end
-- Another broker's entry (as lib/foreign.lua, inline: defines nothing).
if string.match(v, '^%S+ %S+ (%S+)') ~= ARGV[7] then
  redis.call('PUBLISH', ARGV[8],
    ARGV[9] .. ' released ' .. ARGV[6] .. ' ' .. ARGV[7])
end
local f = redis.pcall('INCR', KEYS[2])
if type(f) ~= 'number' then
  redis.call('DEL', KEYS[1])
  if redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('PUBLISH', ARGV[8], ARGV[9])
  end
  return {2}
end
redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. ARGV[4], 'PX', ARGV[3])
if ARGV[5] == '1' then redis.call('DEL', KEYS[3]) end
return {1, f}

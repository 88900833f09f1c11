-- check: whether the grant with this token and fence still holds the name
-- (in either place), asked after the subscriber missed messages; when not,
-- the fence of the last REVOKE of it, if one is remembered.
--
-- KEYS: lock holders revoked fence who
-- ARGV: token, fence
-- Returns {1} or {0, fence}.

-- include now.lua
-- include holds.lua
if holds and redis.call('GET', KEYS[4]) == ARGV[2] then
  return {1}
end
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s and tonumber(s) > now_ms() and string.match(redis.call('HGET',
    KEYS[5], ARGV[1]) or '', '^%d+') == ARGV[2] then
  return {1}
end
return {0, tonumber(redis.call('GET', KEYS[3]) or '0')}

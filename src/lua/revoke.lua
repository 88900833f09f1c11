-- revoke: take the name from every holder, and tell every broker.
--
-- "<name> revoked <fence>" on the release channel (names hold no space):
-- holds with that fence or an older one are lost, and waiters may go. A
-- broker that missed the message (its subscriber was away) finds the fence
-- in :revoked (kept for keep_ms, the longest lease) when it checks its
-- holds again.
--
-- KEYS: lock holders who fence writer revoked
-- ARGV: channel, name, keep_ms
-- Returns how many holders there were.

-- include now.lua
local now = now_ms()
local v = redis.call('GET', KEYS[1])
local n = redis.call('ZCOUNT', KEYS[2], '(' .. ms(now), '+inf')
if v and v ~= '=shared' then n = n + 1 end
if not v and n == 0 and redis.call('PTTL', KEYS[4]) > 86400000 then
  n = 1 -- a grant whose lock key was deleted by hand (lib/fence.lua)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5])
redis.call('PEXPIRE', KEYS[4], 43200000) -- no lease left (lib/fence.lua)
if n > 0 then
  local f = redis.call('GET', KEYS[4]) or '0'
  redis.call('SET', KEYS[6], f, 'PX', ARGV[3])
  redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' revoked ' .. f)
end
return n

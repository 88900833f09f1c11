-- revoke: take the name from every holder, and tell their brokers.
--
-- "<name> revoked <fence>" to the brokers of the holders' entries
-- (lib/tell.lua; to every broker when one is unknown): holds with that
-- fence or an older one are lost, and waiters may go; "<name>" to the
-- brokers with a ticket in the queue or a mark on :waiting not told
-- already, whose waiters may go. A broker that missed the message (its
-- subscriber was away) finds the fence in :revoked (kept for keep_ms, the
-- longest lease) when it checks its holds again.
--
-- KEYS: lock holders who fence writer revoked brokers waiting
-- ARGV: channel, name, keep_ms
-- Returns how many holders there were.

-- include keep.lua
-- include now.lua
-- include tell.lua
local now = now_ms()
local v = redis.call('GET', KEYS[1])
local n = redis.call('ZCOUNT', KEYS[2], '(' .. ms(now), '+inf')
local fields = {} -- the holders' entries' broker fields
if v and v ~= '=shared' then
  n = n + 1
  fields[1] = string.match(v, '^%S+ %S+ (%S+)') or '?'
end
if not v and n == 0 and redis.call('PTTL', KEYS[4]) > keep_ms() then
  n, fields[1] = 1, '?' -- a grant whose lock key went by hand (fence.lua)
end
if n > 0 and (not v or v == '=shared') then
  local who = redis.call('HGETALL', KEYS[3])
  for i = 1, #who, 2 do
    if who[i] ~= '=mode' then
      fields[#fields + 1] = string.match(who[i + 1], '^%S+ %S+ (%S+)') or '?'
    end
  end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5])
redis.call('PEXPIRE', KEYS[4], keep_ms() / 2) -- no lease left (lib/fence.lua)
if n > 0 then
  local f = redis.call('GET', KEYS[4]) or '0'
  local told = {}
  redis.call('SET', KEYS[6], f, 'PX', ARGV[3])
  for _, b in ipairs(fields) do
    tell(ARGV[1], b, '', ARGV[2] .. ' revoked ' .. f, told)
  end
  for _, b in ipairs(redis.call('HKEYS', KEYS[7])) do
    if b ~= '=last' then tell(ARGV[1], b, '', ARGV[2], told) end
  end
  wake(KEYS[8], ARGV[1], ARGV[2], told)
end
return n

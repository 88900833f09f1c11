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
-- ARGV: channel name revoked_ms
-- Returns how many holders there were.

local lock_key = KEYS[1]
local holders_key = KEYS[2]
local who_key = KEYS[3]
local fence_key = KEYS[4]
local writer_key = KEYS[5]
local revoked_key = KEYS[6]
local brokers_key = KEYS[7]
local waiting_key = KEYS[8]
local channel = ARGV[1]     -- every broker's (lib/tell.lua)
local name = ARGV[2]
local revoked_ms = ARGV[3]  -- how long :revoked keeps the fence

-- include keep.lua
-- include now.lua
-- include fields.lua
-- include fence.lua
-- include tell.lua

local now = now_ms()
local v = redis.call('GET', lock_key)
local n = redis.call('ZCOUNT', holders_key, '(' .. int(now), '+inf')
local fields = {} -- the holders' entries' broker fields
if v and v ~= '=shared' then
  n = n + 1
  fields[1] = third(v) or '?'
end
if not v and n == 0 and remembered(fence_key) > 0 then
  n, fields[1] = 1, '?' -- a grant whose lock key went by hand (fence.lua)
end
if n > 0 and (not v or v == '=shared') then
  local who = redis.call('HGETALL', who_key)
  for i = 1, #who, 2 do
    if who[i] ~= '=mode' then
      fields[#fields + 1] = third(who[i + 1]) or '?'
    end
  end
end
redis.call('DEL', lock_key, holders_key, who_key, writer_key)
forget(fence_key) -- no lease left
if n > 0 then
  local f = redis.call('GET', fence_key) or '0'
  local told = {}
  redis.call('SET', revoked_key, f, 'PX', revoked_ms)
  for _, b in ipairs(fields) do
    tell(channel, b, '', name .. ' revoked ' .. f, told)
  end
  for _, b in ipairs(redis.call('HKEYS', brokers_key)) do
    if b ~= '=last' then tell(channel, b, '', name, told) end
  end
  wake(waiting_key, channel, name, told)
end
return n

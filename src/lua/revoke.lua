#!lua flags=allow-oom
-- revoke: take the name from every holder, and tell their brokers.
--
-- "<name> revoked <fence>" to the brokers of the holders' entries
-- (lib/tell.lua; to every broker when one is unknown): holds with that
-- fence or an older one are lost, and waiters may go; "<name>" to the
-- brokers with a ticket in the queue or a mark on :waiting not told
-- already, whose waiters may go. A broker that missed the message (its
-- subscriber was away) finds the fence in :revoked (kept for
-- revokedKeepMs, the longest lease) when it checks its holds again.
--
-- Flags: allow-oom: a REVOKE takes the name away and frees memory, so it
-- runs on a Redis above maxmemory too.
--
-- KEYS: lock holders who fence writer revoked brokers waiting
-- Returns how many holders there were.

local lockKey = KEYS[1]
local holdersKey = KEYS[2]
local whoKey = KEYS[3]
local fenceKey = KEYS[4]
local writerKey = KEYS[5]
local revokedKey = KEYS[6]
local brokersKey = KEYS[7]
local waitingKey = KEYS[8]
local channel = ARGV[1] -- the release channel (lib/tell.lua)
local lockName = ARGV[2]
local revokedKeepMs = ARGV[3] -- how long :revoked is kept

-- include keep.lua
-- include fields.lua
-- include now.lua
-- include tell.lua
local now = now_ms()
local v = redis.call('GET', lockKey)
local n = redis.call('ZCOUNT', holdersKey, '(' .. ms(now), '+inf')
local fields = {} -- the holders' entries' broker fields
if v and v ~= SHARED then
  n = n + 1
  fields[1] = string.match(v, THIRD_WORD) or '?'
end
if not v and n == 0 and redis.call('PTTL', fenceKey) > KEEP_MS then
  n, fields[1] = 1, '?' -- a grant whose lock key went by hand (fence.lua)
end
if n > 0 and (not v or v == SHARED) then
  local who = redis.call('HGETALL', whoKey)
  for i = 1, #who, 2 do
    if who[i] ~= MODE_FIELD then
      fields[#fields + 1] = string.match(who[i + 1], THIRD_WORD) or '?'
    end
  end
end
redis.call('DEL', lockKey, holdersKey, whoKey, writerKey)
redis.call('PEXPIRE', fenceKey, KEEP_MS / 2) -- no lease left (lib/fence.lua)
if n > 0 then
  local f = redis.call('GET', fenceKey) or '0'
  local told = {}
  redis.call('SET', revokedKey, f, 'PX', revokedKeepMs)
  for _, b in ipairs(fields) do
    tell(channel, b, '', lockName .. ' revoked ' .. f, told)
  end
  for _, b in ipairs(redis.call('HKEYS', brokersKey)) do
    if b ~= '=last' then tell(channel, b, '', lockName, told) end
  end
  wake(waitingKey, channel, lockName, told)
end
return n

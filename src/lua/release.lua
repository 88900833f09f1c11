-- release: compare-and-delete, in either place a token can hold.
--
-- With a fence (not 0) only the grant with that fence is released (a
-- counter that is not an integer proves nothing: the token decides), so a
-- release sent again later never deletes a newer grant to the same token.
-- A release the broker makes by itself (done 0: a disconnect, a lost hold)
-- leaves a grant brokers share ("*") to its lease: a connection of another
-- broker holds it too. A grant whose entry another broker stored (or
-- several share) is announced as "<name> released <fence> <broker>", which
-- also wakes waiters: holds of it elsewhere are lost; else the name is
-- published if anyone waits (:waiters). A FILL leader's RELEASE (done 2),
-- or a client's RELEASE of a lock FILL waiters wait on (done 1, :fill set;
-- it is set only with :waiters), marks the work done with its fence.
--
-- KEYS: lock waiters holders who fence fill done
-- ARGV: token, channel, name, done (0/1/2), how long done is kept (ms),
--   fence (0: any), broker
-- Returns 1 if released, 0 if not ours.

-- include holds.lua
local fs, by -- the grant's fence, and the broker its entry names
if holds then
  fs = redis.call('GET', KEYS[5]) or '0'
  if ARGV[6] ~= '0' and fs ~= ARGV[6] and tonumber(fs) then return 0 end
  by = string.match(v, '^%S+ %S+ (%S+)')
  if ARGV[4] == '0' and by == '*' then return 0 end
  redis.call('DEL', KEYS[1])
  if ARGV[4] == '2' or (ARGV[4] == '1' and
      redis.call('EXISTS', KEYS[6]) == 1) then
    redis.call('SET', KEYS[7], fs, 'PX', ARGV[5])
  end
else
-- include now.lua
-- include holders.lua
  local s = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if not s then return 0 end
  local info = redis.call('HGET', KEYS[4], ARGV[1]) or ''
  fs = string.match(info, '^%d+') or '0'
  if ARGV[6] ~= '0' and fs ~= ARGV[6] then return 0 end
  by = string.match(info, '^%S+ %S+ (%S+)')
  if ARGV[4] == '0' and by == '*' then return 0 end
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[4], ARGV[1])
  local now = now_ms()
  if prune(KEYS[1], KEYS[3], KEYS[4], now) == 0 then
    redis.call('DEL', KEYS[4])
  end
  if tonumber(s) <= now then return 0 end
end
-- Another broker's entry (as lib/foreign.lua, kept inline: a release
-- defines no function): its holds there hear of it, waiters here too.
if by ~= ARGV[7] then
  redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' released ' .. fs .. ' ' ..
    ARGV[7])
elseif redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1

-- check: whether the grant with this token and fence still holds the name
-- (in either place), and for how long: asked for every hold at least once
-- every redis.trust_ms (many in one batch.lua call), after the subscriber
-- missed messages, after Redis's clock ran ahead, and after the broker
-- learned of a new incarnation (incarnation.lua); when not, the fence of
-- the last REVOKE of it, if one is remembered. With a ttl, a hold Redis
-- forgot is put back.
--
-- KEYS: lock holders revoked fence who /incarnation
-- ARGV: token fence ttl value incarnation run_id
-- Returns {1, ms of its lease left (-1: no end)} when held or put back,
-- {0, fence}, or {-1, 0} when Redis serves another incarnation than the
-- broker's (it asks which, then again).

local lock_key = KEYS[1]
local holders_key = KEYS[2]
local revoked_key = KEYS[3]
local fence_key = KEYS[4]
local who_key = KEYS[5]
local incarnation_key = KEYS[6]
local token = ARGV[1]
local fence = ARGV[2]
local ttl = ARGV[3]         -- ms to put it back for; 0: only look
local value = ARGV[4]       -- the lock key's value to set: "<token> <mode>
                            -- <broker> <client> <since_ms>"
local incarnation = ARGV[5] -- incarnation, run_id: as lib/gate.lua's
local run_id = ARGV[6]

-- include keep.lua
-- include now.lua
-- include fields.lua
-- include fence.lua
-- include holds.lua
-- include tell.lua
-- include leftover.lua

local m = redis.call('HMGET', incarnation_key, 'id', 'grace', 'runid')
if m[1] ~= incarnation or (run_id ~= '' and m[3] ~= run_id) then
  return {-1, 0}
end
local v, holds = held(lock_key, token)
-- A grant from before this incarnation found held, or put back, is
-- marked as current in it (the marker's 'k:<key>', lib/leftover.lua).
local function kept(k, left)
  local id = tonumber(incarnation)
  if id and tonumber(fence) < id then
    redis.call('HSET', incarnation_key, 'k:' .. k, incarnation)
  end
  return {1, left}
end
if holds and redis.call('GET', fence_key) == fence then
  -- Held through several brokers and put back by another (a new
  -- incarnation): this one joins the entry again, so that what the
  -- others do to the grant is told to it (lib/tell.lua).
  local by, me = third(v), third(value)
  if by and me and joined(by, me) ~= by then
    redis.call('SET', lock_key, with_broker(v, joined(by, me)), 'KEEPTTL')
  end
  return kept(lock_key, redis.call('PTTL', lock_key))
end
local s = redis.call('ZSCORE', holders_key, token)
local now = now_ms()
if s and tonumber(s) > now and entry_fence(redis.call('HGET', who_key,
    token) or '') == fence then
  return kept(lock_key .. ' ' .. token, tonumber(s) - now)
end
local c = tonumber(redis.call('GET', fence_key) or '0')
if ttl ~= '0' and v and v ~= '=shared' and c and
    leftover(incarnation_key, incarnation, lock_key, c) then
  v = false  -- a grant released since, in older data: nobody's
end
-- Putting a hold back: with a ttl (not 0), an exclusive grant that Redis
-- forgot (the key and its fence counter gone or lower) is set again, as it
-- was, for ttl ms, while the incarnation the broker names is in its grace
-- period, when nothing else can have been granted (lib/gate.lua). A
-- shared holder is not put back: it is told it lost the name.
if ttl ~= '0' and not v then
  if tonumber(m[2] or '0') > now and
      c and c <= tonumber(fence) and
      redis.call('EXISTS', holders_key) == 0 then
    redis.call('SET', lock_key, value, 'PX', ttl)
    remember(fence_key, ttl, fence)
    return kept(lock_key, tonumber(ttl))
  end
end
-- The lock key went (deleted or renamed by hand) while the counter names
-- this grant and remembers its lease (lib/fence.lua): nobody else can have
-- been granted the name, so it is put back, for that lease, with its
-- broker unknown ("?": other brokers may hold the grant too, so its
-- release and shortening are announced to every broker, but a broker's own
-- release still frees it).
if not v and c == tonumber(fence) and string.find(value, ' %S') and
    redis.call('EXISTS', holders_key) == 0 then
  local left = remembered(fence_key)
  if left > 0 then
    redis.call('SET', lock_key, with_broker(value, '?'), 'PX', left)
    return kept(lock_key, left)
  end
end
return {0, tonumber(redis.call('GET', revoked_key) or '0')}

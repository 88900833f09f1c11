#!lua flags=allow-oom
-- check: whether the grant with this token and fence still holds the name
-- (in either place), and for how long: asked for every hold at least once
-- every redis.trust_ms (many in one batch.lua call), after the subscriber
-- missed messages, after Redis's clock ran ahead, and after the broker
-- learned of a new incarnation (incarnation.lua); when not, the fence of
-- the last REVOKE of it, if one is remembered.
--
-- Putting a hold back: with a ttl (not 0), an exclusive grant that Redis
-- forgot (the key and its fence counter gone or lower) is set again, as
-- it was, for ttl ms, while the incarnation the broker names is in its
-- grace period, when nothing else can have been granted (lib/gate.lua).
-- A shared holder is not put back: it is told it lost the name. An
-- exclusive grant whose lock key alone went (deleted or renamed by hand)
-- is put back whenever the counter still names it and remembers its lease.
--
-- Flags: allow-oom. The check and the put-back must work on a Redis above
-- maxmemory: a hold it cannot confirm is lost, and a put-back only sets
-- again a grant Redis forgot (and marks it in the incarnation). A master
-- that min-replicas-to-write stops still refuses it (NOREPLICAS).
--
-- KEYS: lock holders revoked fence who /incarnation
-- A grant from before the incarnation that is held, or put back, is
-- marked current in it (the marker's 'k:<key>', lib/leftover.lua).
--
-- Returns {1, ms of its lease left (-1: no end)} when held or put back,
-- {0, fence}, or {-1, 0} when Redis serves another incarnation than the
-- broker's (it asks which, then again).

local lockKey = KEYS[1]
local holdersKey = KEYS[2]
local revokedKey = KEYS[3]
local fenceKey = KEYS[4]
local whoKey = KEYS[5]
local incarnationKey = KEYS[6]
local token = ARGV[1]
local grantFence = ARGV[2]
local restoreMs = ARGV[3] -- the lease to put back (0: only look)
local lockValue = ARGV[4] -- the lock key's value to put back:
--   "<token> <mode> <broker> <client> <since_ms>"
local incarnation = ARGV[5] -- the id the broker knows (lib/gate.lua)
local runId = ARGV[6] -- its connection's Redis, or "" (lib/gate.lua)

-- include process.lua
local m = redis.call('HMGET', incarnationKey, 'id', 'grace', 'runid',
  'replid')
if m[1] ~= incarnation or not same_process(m[3], m[4], runId) then
  return {-1, 0}
end
-- include keep.lua
-- include fields.lua
-- include now.lua
-- include tell.lua
-- include foreign.lua
-- include fence.lua
-- include holds.lua
-- include leftover.lua
-- A grant from before this incarnation found held, or put back, is
-- marked as current in it (lib/leftover.lua).
local function kept(k, left)
  local id = tonumber(incarnation)
  if id and tonumber(grantFence) < id then
    redis.call('HSET', incarnationKey, 'k:' .. k, incarnation)
  end
  return {1, left}
end
if holds and redis.call('GET', fenceKey) == grantFence then
  -- Held through several brokers and put back by another (a new
  -- incarnation): this one joins the entry again, so that what the
  -- others do to the grant is told to it (lib/tell.lua).
  local by, me = string.match(v, THIRD_WORD),
    string.match(lockValue, THIRD_WORD)
  if by and me and joined(by, me) ~= by then
    redis.call('SET', lockKey, rebroker(v, VALUE_BROKER, joined(by, me)),
      'KEEPTTL')
  end
  return kept(lockKey, redis.call('PTTL', lockKey))
end
local s = redis.call('ZSCORE', holdersKey, token)
local now = now_ms()
if s and tonumber(s) > now and string.match(redis.call('HGET',
    whoKey, token) or '', ENTRY_FENCE) == grantFence then
  return kept(lockKey .. ' ' .. token, tonumber(s) - now)
end
local c = tonumber(redis.call('GET', fenceKey) or '0')
if restoreMs ~= '0' and v and v ~= SHARED and c and
    leftover(incarnationKey, incarnation, lockKey, c) then
  v = false  -- a grant released since, in older data: nobody's
end
if restoreMs ~= '0' and not v then
  if tonumber(m[2] or '0') > now and
      c and c <= tonumber(grantFence) and
      redis.call('EXISTS', holdersKey) == 0 then
    redis.call('SET', lockKey, lockValue, 'PX', restoreMs)
    redis.call('SET', fenceKey, grantFence, 'PX',
      tonumber(restoreMs) + KEEP_MS)
    return kept(lockKey, tonumber(restoreMs))
  end
end
-- The lock key went (deleted or renamed by hand) while the counter names
-- this grant and remembers its lease (lib/fence.lua): nobody else can have
-- been granted the name, so it is put back, for that lease, with its
-- broker unknown ("?": other brokers may hold the grant too, so its
-- release and shortening are announced to every broker, but a broker's own
-- release still frees it).
if not v and c == tonumber(grantFence) and string.find(lockValue, ' %S') and
    redis.call('EXISTS', holdersKey) == 0 then
  local left = remembered(fenceKey)
  if left > 0 then
    redis.call('SET', lockKey, rebroker(lockValue, VALUE_BROKER, '?'),
      'PX', left)
    return kept(lockKey, left)
  end
end
return {0, tonumber(redis.call('GET', revokedKey) or '0')}

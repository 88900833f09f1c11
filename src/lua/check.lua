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
-- KEYS: lock holders revoked fence who /incarnation
-- ARGV: token, fence, ttl (ms; 0: only look), value (the key's value to
--   set: "<token> <mode> <broker> <client> <since_ms>"), incarnation,
--   run_id (as lib/gate.lua's)
-- A grant from before the incarnation that is held, or put back, is
-- marked current in it (the marker's 'k:<key>', lib/leftover.lua).
--
-- Returns {1, ms of its lease left (-1: no end)} when held or put back,
-- {0, fence}, or {-1, 0} when Redis serves another incarnation than the
-- broker's (it asks which, then again).

local m = redis.call('HMGET', KEYS[6], 'id', 'grace', 'runid')
if m[1] ~= ARGV[5] or (ARGV[6] ~= '' and m[3] ~= ARGV[6]) then
  return {-1, 0}
end
-- include keep.lua
-- include tell.lua
-- include now.lua
-- include fence.lua
-- include holds.lua
-- include leftover.lua
-- A grant from before this incarnation found held, or put back, is
-- marked as current in it (lib/leftover.lua).
local function kept(k, left)
  local id = tonumber(ARGV[5])
  if id and tonumber(ARGV[2]) < id then
    redis.call('HSET', KEYS[6], 'k:' .. k, ARGV[5])
  end
  return {1, left}
end
if holds and redis.call('GET', KEYS[4]) == ARGV[2] then
  -- Held through several brokers and put back by another (a new
  -- incarnation): this one joins the entry again, so that what the
  -- others do to the grant is told to it (lib/tell.lua).
  local by, me = string.match(v, '^%S+ %S+ (%S+)'),
    string.match(ARGV[4], '^%S+ %S+ (%S+)')
  if by and me and joined(by, me) ~= by then
    redis.call('SET', KEYS[1], (string.gsub(v, '^(%S+ %S+) %S+',
      '%1 ' .. joined(by, me))), 'KEEPTTL')
  end
  return kept(KEYS[1], redis.call('PTTL', KEYS[1]))
end
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
local now = now_ms()
if s and tonumber(s) > now and string.match(redis.call('HGET',
    KEYS[5], ARGV[1]) or '', '^%d+') == ARGV[2] then
  return kept(KEYS[1] .. ' ' .. ARGV[1], tonumber(s) - now)
end
local c = tonumber(redis.call('GET', KEYS[4]) or '0')
if ARGV[3] ~= '0' and v and v ~= '=shared' and c and
    leftover(KEYS[6], ARGV[5], KEYS[1], c) then
  v = false  -- a grant released since, in older data: nobody's
end
if ARGV[3] ~= '0' and not v then
  if tonumber(m[2] or '0') > now and
      c and c <= tonumber(ARGV[2]) and
      redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
    redis.call('SET', KEYS[4], ARGV[2], 'PX', tonumber(ARGV[3]) + keep_ms())
    return kept(KEYS[1], tonumber(ARGV[3]))
  end
end
-- The lock key went (deleted or renamed by hand) while the counter names
-- this grant and remembers its lease (lib/fence.lua): nobody else can have
-- been granted the name, so it is put back, for that lease, with its
-- broker unknown ("?": other brokers may hold the grant too, so its
-- release and shortening are announced to every broker, but a broker's own
-- release still frees it).
if not v and c == tonumber(ARGV[2]) and string.find(ARGV[4], ' %S') and
    redis.call('EXISTS', KEYS[2]) == 0 then
  local left = remembered(KEYS[4])
  if left > 0 then
    redis.call('SET', KEYS[1], (string.gsub(ARGV[4], '^(%S+ %S+) %S+',
      '%1 ?')), 'PX', left)
    return kept(KEYS[1], left)
  end
end
return {0, tonumber(redis.call('GET', KEYS[3]) or '0')}

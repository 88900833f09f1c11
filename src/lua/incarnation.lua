#!lua flags=allow-oom
-- incarnation: which incarnation of the lock data this Redis serves, and
-- whether grants must wait (docs/protocol.md §8, "When Redis forgets").
--
-- The marker is a hash: id (Redis's TIME in microseconds when it was
-- made), runid and replid (the run_id and master_replid of the Redis
-- process it was last confirmed on, lib/process.lua) and grace (ms on
-- TIME's clock until which nothing is granted). It is made anew when it
-- is missing (a first start, FLUSHALL, a restart without persistence,
-- eviction) or when another Redis process serves it than the one that
-- last did (a failover, a restart, a former master made master again):
-- what that Redis has may be older than what was granted. Then every
-- grant waits grace ms (at least
-- the longest a broker trusts its holds without hearing this marker, and
-- the time a master cut off from its replicas goes on taking writes), and
-- brokers put their holds back meanwhile (check.lua). The first line
-- flags the script as one that may write (no no-writes), which a master
-- that min-replicas-to-write stops refuses (NOREPLICAS) whatever it does:
-- such a master vouches for nothing, and a beat that finds all as it was
-- writes nothing (a thousand idle brokers' beats cost no AOF). It is
-- allow-oom: the beat must go on on a Redis above maxmemory, where every
-- hold is trusted only while it does, and a marker is a few bytes.
--
-- A marker without replid (made by an older broker) is another
-- process's, once (lib/process.lua); one made on a slot's importing
-- master (ASK: the script runs on another Redis than the run_id it is
-- given) gets none there.
--
-- A broker that finds its master through Sentinel passes the master's
-- config-epoch, which every failover raises, and the marker keeps it
-- (epoch): a master stopped past a failover and made master again before
-- it was ever a replica keeps its run_id and replid, and only a marker
-- epoch below the broker's says that another master served meanwhile.
-- A marker without epoch is behind such a broker's, once.
--
-- Every broker's grace (its trust) must be the same; the marker keeps the
-- longest one any broker asked with (need), a new incarnation of a marker
-- that is still there waits at least that long, and each answer says it:
-- a broker that trusts its holds longer than the grace period others make
-- can see them granted (docs/operations.md, When Redis forgets).
--
-- Eviction loses keys as a failover does, but in the same Redis process:
-- the marker remembers Redis's evicted_keys (INFO stats) as evicted, and a
-- count that moved since (up, or reset to above zero) makes a new
-- incarnation too, even if the policy is back to noeviction by now. A
-- broker that allows eviction (redis.allow_eviction) does not ask, nor
-- does one whose Redis user may not run INFO (the count is then -1).
--
-- A broker that knew a later incarnation than the marker's (known, its
-- id) followed the master to another Redis and back, as a failover that
-- Sentinel undid, or two Redis that both acted as masters for a while,
-- can make it do: this marker may have missed what was granted under
-- the one it knew, so a new incarnation is made. Each broker does so
-- once at most: the new id is later than anything it knew.
--
-- The id is Redis's TIME in microseconds plus skew ms: a grant from before
-- the incarnation (its fence below the id) is a leftover unless a broker
-- found it held (lib/leftover.lua), and the host that made the id may
-- run behind the one that granted by up to skew (redis.clock_step_ms).
-- No grant in it takes a fence below the id (lib/gate.lua).
--
-- KEYS: /incarnation
-- Returns {id, ms of the grace period left, 1 if made now else 0, need,
--   Redis's time in ms, evicted_keys or -1} (by that time the broker sees
--   whether Redis's clock ran ahead of its own: a step that ends keys
--   early).

local incarnationKey = KEYS[1]
local runId = ARGV[1] -- its connection's Redis ("": may not be read)
local graceMs = ARGV[2]
local readEvictions = ARGV[3] -- 1: look at evicted_keys, 0: not
local skewMs = ARGV[4]
local knownId = ARGV[5] -- the incarnation the broker knows, "" for none
local epoch = ARGV[6] -- Sentinel's config-epoch of this master, "" for none

-- include now.lua
local t = redis.call('TIME')
local now = now_ms(t)
-- include process.lua
local m = redis.call('HMGET', incarnationKey, 'id', 'runid', 'grace', 'need',
  'evicted', 'replid', 'epoch')
local need = math.max(tonumber(m[4] or '0') or 0, tonumber(graceMs))
local ev = -1
if readEvictions == '1' then
  local s = redis.pcall('INFO', 'stats')
  if type(s) == 'string' then
    ev = tonumber(string.match(s, 'evicted_keys:(%d+)') or '-1')
  end
end
local was = tonumber(m[5] or '')
local evicted = ev >= 0 and was and ev ~= was and (ev > was or ev > 0)
local older = (tonumber(m[1] or '') or 0) < (tonumber(knownId or '') or 0)
local epochNow = tonumber(epoch or '')
local behind = epochNow and (tonumber(m[7] or '') or -1) < epochNow
local rep, any = nil, false
if runId ~= '' then rep, any = replid_now() end
if m[1] and same_process(m[2], m[6], runId, rep, any) and not evicted and
    not older and not behind then
  if need ~= tonumber(m[4] or '') then
    redis.call('HSET', incarnationKey, 'need', ms(need))
  end
  if ev >= 0 and ev ~= was then
    redis.call('HSET', incarnationKey, 'evicted', ms(ev))
  end
  return {m[1], math.max(0, tonumber(m[3] or '0') - now), 0, need, now, ev}
end
local id = ms(now_us(t) + tonumber(skewMs) * 1000)
redis.call('DEL', incarnationKey)  -- and the old one's marks of kept grants
redis.call('HSET', incarnationKey, 'id', id, 'runid', runId, 'grace',
  ms(now + need), 'need', ms(need))
if ev >= 0 then
  redis.call('HSET', incarnationKey, 'evicted', ms(ev))
end
if epochNow then
  redis.call('HSET', incarnationKey, 'epoch', ms(epochNow))
end
if rep and on_rid(runId) then -- not a slot's importing master's (ASK)
  redis.call('HSET', incarnationKey, 'replid', rep)
end
return {id, need, 1, need, now, ev}

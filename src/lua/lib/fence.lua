-- Fences: a name's next fence is its counter + 1, or Redis's clock in
-- microseconds when that is higher. A counter Redis forgot (a failover to
-- a replica that missed it, a restart without persistence, FLUSHALL) then
-- still gives fences above every one granted before, as long as the
-- clocks of the Redis hosts agree within the grace period that follows
-- such a loss (docs/operations.md, "When Redis forgets"). 2^53
-- microseconds is the year 2255: fences stay exact in every language's
-- numbers, and a counter at or above 2^53 is refused, as one that is not
-- an integer is. fence_of(k, t) reads the counter and gives the next
-- fence without writing it; next_fence(k, t, ttl) also writes it back
-- with one SET that keeps it (a plain grant in acquire.lua writes it
-- itself, as here): the counter is only needed while a grant may still be
-- compared with it, so it lives KEEP_MS past the lease ttl (ms) just
-- set (lib/keep.lua: ten minutes; a
-- release, renewal and VALIDATE may read it; a renewal keeps it as long),
-- and the names nobody uses any more leave nothing in Redis; a counter
-- gone gives the clock's fence, above it by then. t: a TIME this script
-- read already (the clock only has to be read in the same script as the
-- counter), or nil; c: the counter's value this script read already
-- (false: none), or nil. Both return the fence, or an error reply, having
-- changed nothing else; fence_of also returns the counter's value it read.
-- A fence is never below t's third element, the incarnation's id when the
-- gate read t (lib/gate.lua).
local function fence_of(k, t, c)
  if c == nil then c = redis.pcall('GET', k) end
  if type(c) == 'table' then return c end
  local n = 0
  if c then
    n = string.match(c, '^%-?%d+$') and tonumber(c)
    if not n or n >= 9007199254740992 then
      return redis.error_reply('ERR value is not an integer or out of range')
    end
  end
  t = t or redis.call('TIME')
  local f, now = n + 1, now_us(t)
  -- (the chaos build's no_clock_fence variant patches out these words)
  if f < now then f = now end
  if t[3] and f < t[3] then f = t[3] end
  return f, c
end
-- The counter also remembers the lease: every grant, renewal, EXTEND and
-- put-back sets its expiry KEEP_MS past the lease it sets (shared
-- holders': past the longest, lib/holders.lua), and a release or REVOKE
-- sets it to half that (so that Redis's clock stepped back by up to that
-- much does not make a lease seem to run again). remembered(k) is the ms of lease
-- the counter k remembers (0: none): an exclusive grant's lock key
-- deleted or renamed by hand while its lease runs does not free the name
-- (acquire.lua, share.lua), and its holder's broker puts it back
-- (check.lua).
local function remembered(k)
  return math.max(0, redis.call('PTTL', k) - KEEP_MS)
end
local function next_fence(k, t, ttl, c)
  local f = fence_of(k, t, c)
  if type(f) == 'number' then
    redis.call('SET', k, ms(f), 'PX',
      tonumber(ttl) + KEEP_MS)
  end
  return f
end

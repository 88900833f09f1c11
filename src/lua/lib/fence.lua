-- Fences: a name's next fence is its counter + 1, or Redis's clock in
-- microseconds when that is higher. A counter Redis forgot (a failover to
-- a replica that missed it, a restart without persistence, FLUSHALL) then
-- still gives fences above every one granted before, as long as the
-- clocks of the Redis hosts agree within the grace period that follows
-- such a loss (docs/operations.md, "When Redis forgets"). 2^53
-- microseconds is the year 2255: fences stay exact in every language's
-- numbers. Returns the fence, or the INCR's error (a counter that is not
-- an integer), having changed nothing. The counter is only needed while a
-- grant may still be compared with it: keep_fence makes it live a day past
-- the lease just set (an exclusive holder's release, renewal and VALIDATE
-- read it), so the names nobody uses any more leave nothing in Redis; a
-- counter gone gives the clock's fence, above it by then. t: a TIME this
-- script read already (the clock only has to be read in the same script
-- as the INCR), or nil.
local function next_fence(k, t)
  t = t or redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = redis.pcall('INCR', k)
  if type(f) ~= 'number' then return f end
  if f < now then
    redis.call('SET', k, string.format('%d', now))
    f = now
  end
  return f
end
local function keep_fence(k, ttl)
  redis.call('PEXPIRE', k, tonumber(ttl) + 86400000)
end

-- Leftovers of older data (docs/protocol.md §8, When Redis forgets): a
-- Redis that came back with older data (a restart from an older snapshot,
-- a failover to a replica that missed writes) may still have a grant that
-- was released since. In a new incarnation a grant is current if it was
-- made in it (its fence is at least the incarnation's id, Redis's TIME in
-- µs when it was made) or a broker put it back or found it held in it
-- (check.lua marks the marker's field 'k:<key>' with the incarnation);
-- any other is a leftover: nobody holds it. leftover(mk, inc, k, fence)
-- says whether the grant at k (the lock key, or the lock key, a space and
-- a shared holder's token) with fence is one. An id that is not a number
-- (a marker written by hand) never makes one.
local function leftover(mk, inc, k, fence)
  local id = tonumber(inc)
  if not id or (tonumber(fence) or 0) >= id then return false end
  return redis.call('HGET', mk, 'k:' .. k) ~= inc
end

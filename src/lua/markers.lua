#!lua flags=no-writes,allow-cross-slot-keys
-- markers: which of a cluster node's slots have an incarnation marker
-- (docs/protocol.md §8, When Redis forgets), read when the broker first
-- reaches the node, so that the slots a fresh cluster has never used get
-- their first incarnation, and its grace period, all at once then, not
-- each at its first grant (lockdb_inc.c, lockdb_seed).
--
-- The one script that touches keys it does not declare: one call reads
-- the markers of many slots, which no declared keys could name (Redis
-- refuses declared keys of several slots, CROSSSLOT). It writes nothing,
-- so there is nothing to leave half done; a marker whose slot is not
-- served here (moved, or moving: "non local key") is read with pcall and
-- answered -1, and the broker asks that slot again later.
--
-- Flags: no-writes (it only reads, so a replica-less master that
-- min-replicas-to-write stops still answers), allow-cross-slot-keys (its
-- keys are of many slots, all of this node's).
--
-- KEYS:
-- ARGV: the markers' keys ("<prefix>{<tag>}incarnation", lockdb_script.c
--   makes them), each of a slot served here.
-- Returns, for each in order, 1 if it is there, 0 if not, -1 if it could
--   not be read here.

local out = {}
for i, key in ipairs(ARGV) do
  local r = redis.pcall('EXISTS', key)
  if type(r) == 'number' then out[i] = r else out[i] = -1 end
end
return out

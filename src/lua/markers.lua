#!lua flags=no-writes,allow-cross-slot-keys
-- markers: which of a cluster node's slots have an incarnation marker
-- made or confirmed on this node's Redis process (docs/protocol.md §8,
-- When Redis forgets), read when the broker first reaches the node (and
-- again when another process serves the slots), so that the slots a
-- fresh cluster has never used, and those a failover brought to a new
-- master, get their new incarnation, and its grace period, all at once
-- then, not each at its first grant (lockdb_inc.c, lockdb_seed).
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
-- ARGV: the node's run_id as the broker read it ("": not known), then the
--   markers' keys ("<prefix>{<tag>}incarnation", lockdb_script.c makes
--   them), each of a slot served here.
-- Returns, for each key in order, 1 if it is there and was last confirmed
--   on this Redis process (lib/process.lua; or the run_id is not known), 2
--   if it is there but was last confirmed on another Redis process (a
--   failover, a restart or a failback since: its slot needs a new
--   incarnation), 0 if it is not there, -1 if it could not be read here.

local runId = ARGV[1]

-- include process.lua
local rep, any = nil, false
if runId ~= '' then rep, any = replid_now() end
local out = {}
for i, key in ipairs(ARGV) do
  if i > 1 then
    local r = redis.pcall('HMGET', key, 'id', 'runid', 'replid')
    if type(r) ~= 'table' or r.err then
      out[i - 1] = -1
    elseif not r[1] then
      out[i - 1] = 0
    elseif same_process(r[2], r[3], runId, rep, any) then
      out[i - 1] = 1
    else
      out[i - 1] = 2
    end
  end
end
return out

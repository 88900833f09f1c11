-- Whether the incarnation marker was last confirmed on the Redis process
-- running this script (docs/protocol.md §8, "When Redis forgets"): its
-- runid (INFO's run_id, m_run) is rid, the run_id its broker's
-- connection found, and its replid (INFO's master_replid, m_rep) is
-- this Redis's now. A promoted replica has its master's
-- marker but not its run_id; a former master made master again (a
-- failback: it may have missed what its successor granted) keeps its
-- run_id, but Redis gives a master a new replication id each time it is
-- made one, so its replid is another. rid "" (the broker may not read
-- INFO) vouches for any. A marker without replid (an older broker's, or
-- one made where INFO may not be run) cannot tell a failback either: it
-- is another process's, once, and incarnation.lua makes a new one with
-- this Redis's replid. rep, any: replid_now() as the script read it
-- already (nil: it is read here).
--
-- A script can run on another Redis than rid's: a cluster's slot being
-- migrated, where ASK sends it to the master importing the slot, which
-- has the marker rid's Redis confirmed (MIGRATE moved it as it was).
-- There the replid is not this Redis's, and the marker is judged by its
-- runid alone, as before the slot began to move; on_rid() tells, at the
-- cost of INFO server, read only when the replid differs. (A request
-- that MOVED sends elsewhere carries that Redis's run_id: redisc's
-- resend hook, lockdb_moved.)
-- This Redis's replication id, and whether no promotion made it: Redis
-- makes a new one when a master first gets a replica, or frees its
-- backlog after repl-backlog-ttl, and clears its second id
-- (master_replid2) then, where a promotion keeps the old id as the
-- second. Such an id leaves any marker's replid as good as it was.
local function replid_now()
  local s = redis.pcall('INFO', 'replication')
  if type(s) ~= 'string' then return nil, false end
  return string.match(s, 'master_replid:(%x+)'),
    string.match(s, 'master_replid2:0+\r') ~= nil
end
local function on_rid(rid)
  local s = redis.pcall('INFO', 'server')
  return type(s) == 'string' and string.match(s, 'run_id:(%x+)') == rid
end
local function same_process(m_run, m_rep, rid, rep, any)
  if rid == '' then return true end
  if m_run ~= rid then return false end
  if rep == nil then rep, any = replid_now() end
  if not rep or (m_rep and (m_rep == rep or any)) then return true end
  return not on_rid(rid)
end

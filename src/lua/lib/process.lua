-- Whether the incarnation marker was last confirmed on the Redis process
-- running this script (docs/protocol.md §8, "When Redis forgets"): its
-- runid (INFO's run_id, m_run) is rid, the run_id its broker's
-- connection found, and its replid (INFO's master_replid, m_rep), if it
-- has one, is this Redis's now. A promoted replica has its master's
-- marker but not its run_id; a former master made master again (a
-- failback: it may have missed what its successor granted) keeps its
-- run_id, but Redis gives a master a new replication id each time it is
-- made one, so its replid is another. rid "" (the broker may not read
-- INFO) vouches for any. A marker without replid (an older broker's)
-- is judged by its runid alone; incarnation.lua adds the replid. rep:
-- replid_now() as the script read it already (nil: it is read here).
local function replid_now()
  local s = redis.pcall('INFO', 'replication')
  return type(s) == 'string' and string.match(s, 'master_replid:(%x+)') or
    nil
end
local function same_process(m_run, m_rep, rid, rep)
  return rid == '' or
    (m_run == rid and (not m_rep or m_rep == (rep or replid_now())))
end

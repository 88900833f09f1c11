-- release: compare-and-delete, in either place a token can hold, and hand
-- the name to the first live ticket if any waits (lib/tickets.lua).
--
-- KEYS: lock waiting holders who fence fill done queue tickets brokers writer /incarnation
-- ARGV: token channel name done done_ms fence broker handoff to live incarnation run_id
-- Returns {1} if released, {0} if not ours; handed to a ticket: {1, fence,
--   n, token} for this broker's ticket "<broker>#<n>", {1, fence, 0} for
--   another broker's.

local lock_key = KEYS[1]
local waiting_key = KEYS[2]
local holders_key = KEYS[3]
local who_key = KEYS[4]
local fence_key = KEYS[5]
local fill_key = KEYS[6]
local done_key = KEYS[7]
local queue_key = KEYS[8]
local tickets_key = KEYS[9]
local brokers_key = KEYS[10]
local writer_key = KEYS[11]
local incarnation_key = KEYS[12]
local token = ARGV[1]
local channel = ARGV[2]     -- every broker's (lib/tell.lua)
local name = ARGV[3]
local done = ARGV[4]        -- 0/1/2: whether to mark a FILL's work done
local done_ms = ARGV[5]     -- how long :done is kept
local fence = ARGV[6]       -- 0: any
local broker = ARGV[7]      -- this broker
local handoff = ARGV[8]     -- ms: the longest lease for another broker's
local to = ARGV[9]          -- the prefix of the brokers' own channels
local live = ARGV[10]       -- incarnation, run_id: as acquire.lua's
local incarnation = ARGV[11]
local run_id = ARGV[12]

-- include keep.lua
-- include now.lua
-- include fields.lua
-- include fence.lua
-- include gate.lua
-- include plain.lua
-- include holds.lua
-- include holders.lua
-- include tell.lua
-- include tickets.lua

-- With a fence (not 0) only the grant with that fence is released (a
-- counter that is not an integer proves nothing: the token decides), so a
-- release sent again later never deletes a newer grant to the same token.
local v, holds = held(lock_key, token)
if not v and fence ~= '0' and redis.call('GET', fence_key) == fence and
    remembered(fence_key) > 0 and
    redis.call('EXISTS', holders_key) == 0 then
  -- An exclusive grant's lock key went (deleted or renamed by hand) while
  -- its lease runs, and the counter remembers it (lib/fence.lua; no shared
  -- holder is left, whose fence it could be): still this grant's,
  -- released as if the key were there. Which brokers hold it went with
  -- the key: its broker is unknown ("?"), so the release is announced,
  -- and the grant's holds on any other broker are lost at once.
  v, holds = token .. ' EXCLUSIVE ?', true
end
local told = {} -- the brokers told of this release
local fs, by, c -- the grant's fence, the broker its entry names, and
-- the counter's value if read (false: none)
-- Whether waiting (and so fill, set only with waiting) or the queue may
-- exist (marks), and whether the queue does: none for a plain grant
-- (lib/plain.lua); another exclusive holder's release asks for the queue
-- (a hand-over needs to know), then for waiters if there is none.
local marks, queued = true, false
local marked = false -- whether this release marked a FILL's work done
if holds then
  fs = plain_fence(v)
  marks = not fs
  if marks then
    c = redis.call('GET', fence_key)
    fs = c or '0'
  end
  if fence ~= '0' and fs ~= fence and tonumber(fs) then return {0} end
  by = third(v)
  if done == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('DEL', lock_key)
  forget(fence_key)
  queued = marks and redis.call('EXISTS', queue_key) == 1
  marks = queued or (marks and redis.call('EXISTS', waiting_key) == 1)
  -- A FILL leader's RELEASE (done 2), or a client's RELEASE of a lock
  -- FILL waiters wait on (done 1, :fill set; it is set only with
  -- :waiting), marks the work done with its fence.
  if done == '2' or (done == '1' and marks and
      redis.call('EXISTS', fill_key) == 1) then
    redis.call('SET', done_key, fs, 'PX', done_ms)
    marked = true
  end
else
  local s = redis.call('ZSCORE', holders_key, token)
  if not s then return {0} end
  local info = redis.call('HGET', who_key, token) or ''
  fs = entry_fence(info) or '0'
  if fence ~= '0' and fs ~= fence then return {0} end
  by = third(info)
  if done == '0' and string.find(by or '', ',', 1, true) then
    return {0}
  end
  redis.call('ZREM', holders_key, token)
  redis.call('HDEL', who_key, token)
  local now = now_ms()
  if prune(lock_key, holders_key, who_key, now) == 0 then
    redis.call('DEL', who_key)
    forget(fence_key)
  else
    stretch(lock_key, holders_key, who_key, now, fence_key) -- the longest left
  end
  if tonumber(s) <= now then return {0} end
  queued = redis.call('EXISTS', queue_key) == 1
end
-- A release the broker makes by itself (done 0: a disconnect, a lost
-- hold) leaves a grant brokers share (its entry names several, above) to
-- its lease: a connection of another broker holds it too. A grant whose
-- entry names other brokers (as lib/foreign.lua) is told to them
-- (lib/tell.lua) as "<name> released <fence> <broker>": holds of it
-- there are lost.
if by ~= broker then
  tell(channel, by, broker, name .. ' released ' .. fs .. ' ' ..
    broker, told)
end
-- Once the name is free, the first live ticket gets it in the same script
-- if it is an exclusive one (its fence made here, so the name is never
-- free in between; the writer mark goes, the new holder being a writer).
-- A hand-over is a grant: it is made only through an open incarnation
-- gate (lib/gate.lua); else the tickets wait, and their brokers' tries
-- take the name once the gate opens.
if queued then
  -- The gate's TIME is the clock of the queue and of the fence.
  local closed, t = gate(incarnation_key, incarnation, run_id)
  local now, tk, b, d, m
  if not closed then
    now = now_ms(t)
    tk, b = qhead(queue_key, tickets_key, brokers_key, now, live)
    d = tk and redis.call('HGET', tickets_key, tk)
    m = third(d or '') -- the ticket's mode
  end
  -- When the first ticket is a reader's (SHARED or LIMIT), free name or
  -- not, the brokers of the first readers' tickets are told "<name>" on
  -- their channels and try (share.lua lets them in in the queue's order).
  if m and m ~= 'EXCLUSIVE' then
    qwake(queue_key, tickets_key, brokers_key, now, m, broker, to, name)
    tk = nil
  elseif not holds and redis.call('EXISTS', lock_key) == 1 then
    -- (an exclusive holder's lock key is gone: deleted above)
    tk = nil -- readers still hold it: the writer waits for the last
  end
  local tok, ttl, info = string.match(tk and d or '',
    '^(%S+) (%d+) (.*)$')
  if tk and not tok then -- no data for it: it cannot be granted
    redis.call('ZREM', queue_key, tk)
  end
  -- A ticket of this broker gets its own ttl, counted by the broker from
  -- before this release was sent; another broker's gets at most handoff
  -- ms, and a message on that broker's channel ("<name> <n> <fence>
  -- <token> <ttl>"): that broker confirms the grant (EXTEND with the
  -- fence), so a grant to a broker that died is free again after handoff
  -- ms. It may answer its client before the confirmation: its first try
  -- with the ticket ran before this script, so ttl counted from sending
  -- that try is a lower bound of this lease.
  if tok and b ~= broker and tonumber(ttl) > tonumber(handoff) then
    ttl = handoff
  end
  local f = tok and next_fence(fence_key, t, ttl, c)
  if type(f) == 'number' then
    qdrop(queue_key, tickets_key, tk)
    local n = qnum(tk)
    redis.call('SET', lock_key, tok .. ' ' .. info, 'PX', ttl)
    redis.call('DEL', writer_key)
    -- FILL waiters elsewhere learn that their leader is done.
    if marked then wake(waiting_key, channel, name, told) end
    if b == broker then return {1, f, n, tok} end
    redis.call('PUBLISH', to .. b, name .. ' ' .. n .. ' ' ..
      int(f) .. ' ' .. tok .. ' ' .. ttl)
    return {1, f, 0}
  end
end
-- With no ticket, the name is published to the brokers whose waiters
-- marked it (:waiting) and were not told already.
if marks then wake(waiting_key, channel, name, told) end
return {1}

-- Tickets: one first-come-first-served queue of a name's waiters across
-- every broker (docs/protocol.md §3 Waiting, §8). q is a sorted set
-- (ticket -> place), qt a hash (ticket -> "<token> <ttl> <WHO entry>"),
-- qb a hash (broker -> "<until ms on TIME's clock> <least n>", and
-- "=last" -> when a broker last asked) that its broker's tries keep
-- fresh. A ticket is "<broker>#<n>", n counting up in its broker; it is
-- live while its broker's entry is and n is at least the least one its
-- broker last named (its earlier waiters there left). A live broker asks
-- at least every live ms: when nobody asked for longer, Redis itself
-- stood still (a pause, a slow disk) or every broker went, so every
-- broker's time starts again from now rather than all dying at once.
-- qhead forgets the dead tickets in front and gives the first live one
-- and its broker, or nil (an empty queue has no time to start again:
-- only the brokers of tickets in it matter); it reads the first ticket's
-- broker's entry with "=last", in one HMGET. qtake puts ticket tk (data d) at the back if it
-- is not queued yet, and keeps its broker's entry. The keys go two
-- minutes (or ten live times) after the last ask. A ticket's mode is its
-- WHO entry's first word (qmode): EXCLUSIVE, SHARED or LIMIT=<n>.
-- qbefore says whether tk may be granted in mode m by the queue's order:
-- the live tickets before it (among the first 32) all in m, and how many;
-- nil when one in another mode is before it or it is further back.
-- qwake tells the brokers of the first live tickets in the head's mode
-- (up to 16; not broker self, which kicks its own queue) that they may
-- try now: "<name>" on their channels. qdrop takes ticket tk (if any: ""
-- is none) out of the queue, as a grant does. Needs now.lua.
-- qlive(qb, tk, now, e): tk's broker if tk is live; e is that broker's
-- entry if read already (false: none), nil to read it.
local function qlive(qb, tk, now, e)
  local b, n = string.match(tk, TICKET)
  if e == nil then e = redis.call('HGET', qb, b or '') end
  local til, least = string.match(e or '', BROKER_ENTRY)
  if til and tonumber(til) > now and tonumber(n) >= tonumber(least) then
    return b
  end
  return nil
end
local function qhead(q, qt, qb, now, live)
  local tk = redis.call('ZRANGE', q, 0, 0)[1]
  if not tk then return nil end
  local e = redis.call('HMGET', qb, '=last',
    string.match(tk, '^(.+)#%d+$') or '')
  local last = tonumber(e[1] or '')
  if last and now - last > tonumber(live) then
    local all = redis.call('HGETALL', qb)
    for i = 1, #all, 2 do
      local til, least = string.match(all[i + 1], BROKER_ENTRY)
      if til then
        redis.call('HSET', qb, all[i],
          ms(tonumber(til) + now - last) .. ' ' .. least)
      end
    end
    redis.call('HSET', qb, '=last', ms(now))
    e = {}
  end
  while true do
    local b = qlive(qb, tk, now, e[2])
    if b then return tk, b end
    redis.call('ZREM', q, tk)
    redis.call('HDEL', qt, tk)
    tk, e = redis.call('ZRANGE', q, 0, 0)[1], {}
    if not tk then return nil end
  end
end
local function qdrop(q, qt, tk)
  if tk ~= '' then
    redis.call('ZREM', q, tk)
    redis.call('HDEL', qt, tk)
  end
end
local function qmode(qt, tk)
  return string.match(redis.call('HGET', qt, tk) or '', THIRD_WORD)
end
local function qbefore(q, qt, qb, now, tk, m)
  local k = 0
  for _, t in ipairs(redis.call('ZRANGE', q, 0, 31)) do
    if t == tk then return k end
    if qlive(qb, t, now) then
      if qmode(qt, t) ~= m then return nil end
      k = k + 1
    end
  end
  return nil
end
local function qwake(q, qt, qb, now, m, self, prefix, name)
  local told = {}
  for _, t in ipairs(redis.call('ZRANGE', q, 0, 15)) do
    local b = qlive(qb, t, now)
    if b then
      if qmode(qt, t) ~= m then return end
      if b ~= self and not told[b] then
        redis.call('PUBLISH', prefix .. b, name)
        told[b] = true
      end
    end
  end
end
local function qtake(q, qt, qb, tk, d, least, live, now)
  if not redis.call('ZSCORE', q, tk) then
    local last = redis.call('ZRANGE', q, -1, -1, 'WITHSCORES')
    redis.call('ZADD', q, (tonumber(last[2]) or 0) + 1, tk)
    redis.call('HSET', qt, tk, d)
  end
  redis.call('HSET', qb, string.match(tk, '^(.+)#'),
    ms(now + tonumber(live)) .. ' ' .. least, '=last', ms(now))
  local keep = math.max(10 * tonumber(live), 120000)
  redis.call('PEXPIRE', q, keep)
  redis.call('PEXPIRE', qt, keep)
  redis.call('PEXPIRE', qb, keep)
end

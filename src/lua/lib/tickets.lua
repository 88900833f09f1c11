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
-- and its broker, or nil. qtake puts ticket tk (data d) at the back if it
-- is not queued yet, and keeps its broker's entry. The keys go two
-- minutes (or ten live times) after the last ask. Needs now.lua.
local function qhead(q, qt, qb, now, live)
  local last = tonumber(redis.call('HGET', qb, '=last') or '')
  if last and now - last > tonumber(live) then
    local all = redis.call('HGETALL', qb)
    for i = 1, #all, 2 do
      local til, least = string.match(all[i + 1], '^(%d+) (%d+)$')
      if til then
        redis.call('HSET', qb, all[i],
          ms(tonumber(til) + now - last) .. ' ' .. least)
      end
    end
    redis.call('HSET', qb, '=last', ms(now))
  end
  while true do
    local tk = redis.call('ZRANGE', q, 0, 0)[1]
    if not tk then return nil end
    local b, n = string.match(tk, '^(.+)#(%d+)$')
    local til, least = string.match(redis.call('HGET', qb, b or '') or '',
      '^(%d+) (%d+)$')
    if til and tonumber(til) > now and tonumber(n) >= tonumber(least) then
      return tk, b
    end
    redis.call('ZREM', q, tk)
    redis.call('HDEL', qt, tk)
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

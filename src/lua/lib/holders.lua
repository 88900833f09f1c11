-- Shared holders: the set h (token -> lease end) and the hash who (token
-- -> WHO's entry, and '=mode'), with the lock key l saying "=shared" for
-- as long as the last lease. prune forgets the ended ones (and l with the
-- last) and says how many are left; stretch makes the three keys live as
-- long as the last lease: until a millisecond past its end on TIME's clock
-- (l must be free or "=shared"; l must not go while a lease in h is still
-- running), and the fence counter f remember it KEEP_MS past that
-- (lib/fence.lua's remembered). Needs now.lua.
local function prune(l, h, who, now)
  local old = redis.call('ZRANGEBYSCORE', h, '-inf', ms(now))
  for _, t in ipairs(old) do redis.call('HDEL', who, t) end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', h, '-inf', ms(now)) end
  local n = redis.call('ZCARD', h)
  if n == 0 then
    if #old > 0 then redis.call('DEL', who) end
    if redis.call('GET', l) == SHARED then redis.call('DEL', l) end
  end
  return n
end
local function stretch(l, h, who, now, f)
  local top = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')
  local at = ms(tonumber(top[2]) + 1)
  redis.call('SET', l, SHARED, 'PXAT', at)
  redis.call('PEXPIREAT', h, at)
  redis.call('PEXPIREAT', who, at)
  redis.call('PEXPIREAT', f, tonumber(at) + KEEP_MS)
end

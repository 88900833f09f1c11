-- The lock key k holds "<token> <WHO entry>" for an exclusive holder (or,
-- from an older broker, just "<token>"), or "=shared" while shared
-- holders hold the name: held(k, t) is its value and whether it is token
-- t's.
local function held(k, t)
  local v = redis.call('GET', k)
  return v, v == t or (type(v) == 'string' and
    string.sub(v, 1, #t + 1) == t .. ' ')
end

-- The lock key k holds "<token> <WHO entry>" for an exclusive holder (or,
-- from an older broker, just "<token>"), or SHARED while shared holders
-- hold the name: exclusive(v) says whether its value v is an exclusive
-- holder's, held(k, t) is its value and whether it is token t's.
local SHARED = '=shared'
local function exclusive(v) return v and v ~= SHARED end
local function held(k, t)
  local v = redis.call('GET', k)
  return v, v == t or (type(v) == 'string' and
    string.sub(v, 1, #t + 1) == t .. ' ')
end

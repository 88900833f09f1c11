-- The lock key (the script's lockKey) holds "<token> <WHO entry>" for an
-- exclusive holder (or, from an older broker, just "<token>"), or
-- "=shared" while shared holders hold the name: v is its value, holds
-- whether it is the token's (the script's token). The script names both.
local v, t = redis.call('GET', lockKey), token
local holds = v == t or (type(v) == 'string' and
  string.sub(v, 1, #t + 1) == t .. ' ')

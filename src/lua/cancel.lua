-- cancel: a waiter left (its WAIT ran out, its client went, the broker
-- stops): its ticket leaves the queue. A ticket handed the lock already
-- is gone from the queue; its broker releases that grant instead.
--
-- KEYS: lock queue tickets
-- ARGV: ticket
-- Returns 1 if the ticket was queued, else 0.

local queue_key = KEYS[2]
local tickets_key = KEYS[3]
local ticket = ARGV[1]

local n = redis.call('ZREM', queue_key, ticket)
redis.call('HDEL', tickets_key, ticket)
return n

-- cancel: a waiter left (its WAIT ran out, its client went, the broker
-- stops): its ticket leaves the queue. A ticket handed the lock already
-- is gone from the queue; its broker releases that grant instead.
--
-- KEYS: lock queue tickets
-- ARGV: ticket
-- Returns 1 if the ticket was queued, else 0.

local n = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return n

#!lua flags=allow-oom
-- cancel: a waiter left (its WAIT ran out, its client went, the broker
-- stops): its ticket leaves the queue. A ticket handed the lock already
-- is gone from the queue; its broker releases that grant instead.
--
-- Flags: allow-oom: it only removes, so it runs on a Redis above
-- maxmemory too.
--
-- KEYS: lock queue tickets
-- Returns 1 if the ticket was queued, else 0.

local lockKey = KEYS[1]
local queueKey = KEYS[2]
local ticketsKey = KEYS[3]
local ticket = ARGV[1] -- "<broker>#<n>"

local n = redis.call('ZREM', queueKey, ticket)
redis.call('HDEL', ticketsKey, ticket)
return n

-- blind_release: CHAOS_BLIND_RELEASE (test builds only): delete without
-- comparing, for the chaos suite's self-test.
--
-- KEYS: lock waiting holders who fence fill done queue tickets brokers writer /incarnation
-- ARGV: as release.lua's
-- Returns {1}.

local lock_key = KEYS[1]
local fence_key = KEYS[5]
local channel = ARGV[2]
local name = ARGV[3]

-- include keep.lua
-- include now.lua
-- include fence.lua

redis.call('DEL', lock_key)
forget(fence_key) -- and the lease it remembered
redis.call('PUBLISH', channel, name)
return {1}

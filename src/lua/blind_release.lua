#!lua flags=allow-oom
-- blind_release: CHAOS_BLIND_RELEASE (test builds only): delete without
-- comparing, for the chaos suite's self-test.
--
-- Flags: allow-oom, as release.lua's, which it stands in for.
--
-- KEYS: lock fence
-- Returns {1}.

local lockKey = KEYS[1]
local fenceKey = KEYS[2]
local token = ARGV[1] -- release.lua's arguments: it uses the first three
local channel = ARGV[2]
local lockName = ARGV[3]

-- include keep.lua
redis.call('DEL', lockKey)
redis.call('PEXPIRE', fenceKey, KEEP_MS / 2) -- and the lease it remembered
redis.call('PUBLISH', channel, lockName)
return {1}

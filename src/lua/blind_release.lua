-- blind_release: CHAOS_BLIND_RELEASE (test builds only): delete without
-- comparing, for the chaos suite's self-test.
--
-- KEYS: lock waiters holders who fence fill done queue tickets brokers writer /incarnation
-- ARGV: as release.lua's
-- Returns {1}.

-- include keep.lua
redis.call('DEL', KEYS[1])
redis.call('PEXPIRE', KEYS[5], keep_ms() / 2) -- and the lease it remembered
redis.call('PUBLISH', ARGV[2], ARGV[3])
return {1}

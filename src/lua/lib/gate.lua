-- The incarnation gate (docs/protocol.md §8, "When Redis forgets"): a
-- grant needs the marker k to name the incarnation inc its broker knows,
-- confirmed on this Redis process (lib/process.lua: rid is the run_id its
-- connection found, "" when the broker may not read it), and that
-- incarnation's grace period to be over. gate(k, inc, rid) is nil when
-- it is open, else the reply to give:
-- {-1, 0} when the marker is gone or names another incarnation or Redis
-- (the broker asks incarnation.lua), {-2, ms} while the grace period has
-- ms left; with nil, the TIME it read (next_fence may use it: a grant in
-- the same script comes after it), its third element the incarnation's
-- id as a number (no fence granted in it is lower: lib/leftover.lua).
-- Needs now.lua and process.lua.
local function gate(k, inc, rid)
  local m = redis.call('HMGET', k, 'id', 'grace', 'runid', 'replid')
  if m[1] ~= inc or not same_process(m[3], m[4], rid) then
    return {-1, 0}
  end
  local t = redis.call('TIME')
  local left = tonumber(m[2] or '0') - now_ms(t)
  if left > 0 then return {-2, left} end
  t[3] = tonumber(m[1])
  return nil, t
end

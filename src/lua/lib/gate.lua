-- The incarnation gate (docs/protocol.md §8, "When Redis forgets"): a
-- grant needs the marker k to name the incarnation inc its broker knows,
-- confirmed on the Redis process rid its connection found (INFO's run_id:
-- a promoted replica has its master's marker, but not its run_id; "" when
-- the broker may not read it), and that incarnation's grace period to be
-- over. gate(k, inc, rid) is nil when it is open, else the reply to give:
-- {-1, 0} when the marker is gone or names another incarnation or Redis
-- (the broker asks incarnation.lua), {-2, ms} while the grace period has
-- ms left; with nil, the TIME it read (next_fence may use it: a grant in
-- the same script comes after it), its third element the incarnation's
-- id as a number (no fence granted in it is lower: lib/leftover.lua).
-- Needs now.lua.
--
-- Asked again with the same k, inc and rid in one call (batch.lua's
-- calls), it gives the same answer without asking Redis: nothing a
-- script does changes the marker, and a grant's fence from that TIME is
-- still the counter + 1 when two calls grant one name.
local gate_seen = {}
local function gate(k, inc, rid)
  local s = gate_seen
  if s[1] == k and s[2] == inc and s[3] == rid then return s[4], s[5] end
  local m = redis.call('HMGET', k, 'id', 'grace', 'runid')
  local closed, t
  if m[1] ~= inc or (rid ~= '' and m[3] ~= rid) then
    closed = {-1, 0}
  else
    t = redis.call('TIME')
    local left = tonumber(m[2] or '0') - now_ms(t)
    if left > 0 then
      closed, t = {-2, left}, nil
    else
      t[3] = tonumber(m[1])
    end
  end
  gate_seen = {k, inc, rid, closed, t}
  return closed, t
end

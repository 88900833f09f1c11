-- Telling brokers (docs/protocol.md §8, Channels): news of a name goes to
-- the brokers it concerns, each on its own channel P .. 'to:' .. broker,
-- where ch, the channel every broker hears, is P .. 'released'.
-- An entry's broker field is a broker ("<hostname>:<pid>:<random>"), the
-- brokers that share a grant joined by "," (its token acquired it again
-- through another broker), or "?" (unknown: its lock key was put back
-- after a deletion by hand; an older broker's key has no field at all).
-- joined(f, b) is field f with broker b in it. tell(ch, f, actor, msg,
-- told) publishes msg to each broker of f but actor, or on ch when f is
-- unknown; told (a table) gets the brokers told. wake(w, ch, name, told)
-- publishes name to each broker whose waiter marked :waiting (w: broker
-- -> until, ms on TIME's clock) and is not in told. Needs now.lua.
local function joined(f, b)
  if not f or f == '?' then return '?' end
  for x in string.gmatch(f, EACH_BROKER) do
    if x == b then return f end
  end
  return f .. ',' .. b
end
local function tell(ch, f, actor, msg, told)
  if not f or f == '?' then
    redis.call('PUBLISH', ch, msg)
    return
  end
  local to = string.sub(ch, 1, -9) .. 'to:'
  for b in string.gmatch(f, EACH_BROKER) do
    if b ~= actor and not told[b] then
      redis.call('PUBLISH', to .. b, msg)
      told[b] = true
    end
  end
end
local function wake(w, ch, name, told)
  local m = redis.call('HGETALL', w)
  if #m == 0 then return end
  local now = now_ms()
  for i = 1, #m, 2 do
    if (tonumber(m[i + 1]) or 0) > now then tell(ch, m[i], '', name, told) end
  end
end

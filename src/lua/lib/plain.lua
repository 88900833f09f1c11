-- A plain grant: an exclusive grant made while no waiter marked the name
-- (no :queue or :waiting; :fill is set only with :waiting, by the same
-- refusal of a FILL waiter with the same expiry, every other waiter
-- having a ticket) carries its fence as the lock key's last word,
-- "<token> <mode> <broker> <client> <since_ms> <fence>", and its release
-- is compare-and-delete, a GET and a DEL: nobody is waiting to be told. A
-- waiter that marks a name an exclusive holder holds takes the fence off
-- (unplain; the lease is kept), so that its release looks for the marks
-- and reads the counter, as it does for any other value. plain_fence(v)
-- is the fence of value v, or nil; unplain(k, v) takes it off key k, v
-- being its value read in this script (nil: read it).
local function plain_fence(v)
  return string.match(v or '', '^%S+ %S+ %S+ %S+ %S+ (%d+)$')
end
local function unplain(k, v)
  if v == nil then v = redis.call('GET', k) end
  local s = string.match(v or '', '^(%S+ %S+ %S+ %S+ %S+) %d+$')
  if s then redis.call('SET', k, s, 'KEEPTTL') end
end

-- The words of the values scripts keep. A lock key's value is "<token>
-- <mode> <broker> <client> <since_ms>" (lib/plain.lua: and a fence), a
-- shared holder's entry in :who "<fence> <mode> <broker> ...", a WHO entry
-- as a broker sends it ("info") "<mode> <broker> <client> <since_ms>", a
-- ticket's data "<token> <ttl> <mode> <broker> ..." (lib/tickets.lua).
-- third(s) is the third word: a value's or entry's broker, a ticket's
-- mode. with_broker(v, b) is value or entry v with broker b. The broker
-- field is a broker, several joined by ",", or "?" (lib/tell.lua).
local function third(s)
  return string.match(s, '^%S+ %S+ (%S+)')
end
local function with_broker(v, b)
  return (string.gsub(v, '^(%S+ %S+) %S+', '%1 ' .. b))
end
local function info_broker(info)
  return string.match(info, '^%S+ (%S+)')
end
-- A holder's entry's fence (its first word), and a :who '=mode' LIMIT's
-- n (0: SHARED, or no mode).
local function entry_fence(e)
  return string.match(e, '^%d+')
end
local function limit_of(m)
  return tonumber(string.match(m or '', '^LIMIT=(%d+)$') or '0')
end

-- Whether the broker that stored a holder's entry ("<token or fence>
-- <mode> <broker> ..."; "*" once brokers share it) is not broker b: holds
-- of the grant on other brokers must then hear of what b does to it.
local function foreign(e, b)
  return string.match(e or '', THIRD_WORD) ~= b
end
-- rebroker(s, p, f): s with the broker field that follows pattern p's
-- capture (VALUE_BROKER in a value, ENTRY_BROKER in a WHO entry) made f.
local function rebroker(s, p, f)
  return (string.gsub(s, p, '%1 ' .. f))
end

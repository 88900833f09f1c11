-- Whether the broker that stored a holder's entry ("<token or fence>
-- <mode> <broker> ..."; "*" once brokers share it) is not broker b: holds
-- of the grant on other brokers must then hear of what b does to it.
local function foreign(e, b)
  return string.match(e or '', THIRD_WORD) ~= b
end

-- The fields of what the scripts store, read with these patterns. They
-- are constants: embed.py writes each as its string where code uses it,
-- so naming one costs a call nothing. A lock key's value and a holder's
-- WHO entry are "<token or fence> <mode> <broker> <client> <since_ms>"
-- (a plain grant's value has its fence after them: lib/plain.lua); the
-- WHO entry a broker sends is "<mode> <broker> <client> <since_ms>"; a
-- ticket is "<broker>#<n>", its data "<token> <ttl> <WHO entry>", its
-- broker's entry "<until ms> <least n>" (lib/tickets.lua).
local THIRD_WORD = '^%S+ %S+ (%S+)'
local SECOND_WORD = '^%S+ (%S+)'
local VALUE_BROKER = '^(%S+ %S+) %S+'
local ENTRY_BROKER = '^(%S+) %S+'
local ENTRY_FENCE = '^%d+'
local LIMIT_N = '^LIMIT=(%d+)$'
local TICKET = '^(.+)#(%d+)$'
local TICKET_N = '#(%d+)$'
local BROKER_ENTRY = '^(%d+) (%d+)$'
local SHARED = '=shared'
local MODE_FIELD = '=mode'
local SHORTENED = ' shortened '
local EACH_BROKER = '[^,]+' -- each broker of a field several share

-- How long a name's fence counter outlives what it is needed for
-- (docs/protocol.md §8, the counter's row): keep_ms() past the end of the
-- lease it remembers (lib/fence.lua's remembered: its PTTL less this), and
-- keep_ms() / 2 once that lease is given up (a release, REVOKE). A
-- counter gone gives the next fence from Redis's clock in µs, higher by
-- then than every fence it gave unless Redis's clock stepped back by more
-- than keep_ms() / 2 (five minutes) meanwhile; and a released counter's
-- PTTL seems to remember a lease only after a step back of more than
-- that. Names nobody uses any more leave nothing in Redis after that.
local function keep_ms() return 600000 end

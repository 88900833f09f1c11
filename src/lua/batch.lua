#!lua
-- (The line above is the flags of the script whose calls a batch carries:
-- embed.py writes acquire.lua's, release.lua's or check.lua's there.)
--
-- batch: the acquire.lua, release.lua or check.lua calls one turn of the
-- broker's loop made, run as one call, in the order they were made.
--
-- Each call runs the text of its own script unchanged (wrapped below as a
-- function of where its keys and arguments are: embed.py names its KEYS[j]
-- KEYS[keys_at + j] and its ARGV[j] ARGV[args_at + j]), with all its own
-- keys, so it decides exactly what it would have decided alone, and its
-- reply is the one it would have had alone. What a batch saves is what a
-- call costs besides its script's commands: the EVALSHA, the argument
-- tables Redis makes, the functions of lib/ made again at each call (here
-- once), and the incarnation gate's HMGET and TIME (here once for the calls
-- that ask one marker the same: nothing a call does changes the marker, and
-- a grant's fence from that TIME is still the counter + 1 when two calls
-- grant one name; calls that name different markers each ask their own). A
-- call whose commands raise an error (a key of another type) has that error
-- as its reply, and a Lua error names the line of this text as Redis runs
-- it (embed.py's expand()), not of its script; the calls after it still
-- run.
--
-- The broker sends one script's calls in a batch (redisc_batch.c), and
-- the batch has that script's flags: a batch of acquires is refused
-- whole, before anything runs, by a Redis above maxmemory, as each of
-- its calls would be alone, while releases and checks (allow-oom) still
-- run there. On Redis Cluster a batch's keys must all be in one slot:
-- Redis refuses a call whose keys span slots (CROSSSLOT) whatever its
-- flags.
--
-- KEYS: lock
--   (KEYS[1] is the first call's lock key; the keys of every call follow
--   one another, each call's in its script's order)
-- Returns one reply for each call, in order.

local lockKey = KEYS[1] -- the first call's; every call's keys follow
local calls = ARGV[1] -- n, how many calls
local callArgs = ARGV -- after n, for each call: its script (1: acquire,
--   2: release, 3: check), how many keys it has, how many arguments,
--   and those arguments

local n = tonumber(calls)
-- wrap acquire.lua as acquire
-- wrap release.lua as release
-- wrap check.lua as check
local scripts = {acquire, release, check}
-- The gate each call passes: the incarnation gate's, asked once per
-- marker key for the calls that ask it the same.
local seen = {}
local function gate_seen(mk, inc, rid)
  local s = seen[mk]
  if not (s and s[1] == inc and s[2] == rid) then
    local closed, clock = gate(mk, inc, rid)
    s = {inc, rid, closed, clock}
    seen[mk] = s
  end
  return s[3], s[4]
end
local out, p, k = {}, 2, 0
for i = 1, n do
  local ok, r = pcall(scripts[tonumber(callArgs[p])], k, p + 2, gate_seen)
  if not ok and type(r) ~= 'table' then
    -- A command's error as it is ("OOM ..."); a Lua error's line is ours.
    local e = tostring(r)
    local line, what = string.match(e, '^user_script:(%d+): (.*)$')
    if line then
      e = 'ERR batch.lua as Redis runs it, line ' .. line .. ': ' .. what
    end
    r = redis.error_reply(e)
  end
  out[i] = r
  k = k + tonumber(callArgs[p + 1])
  p = p + 3 + tonumber(callArgs[p + 2])
end
return out

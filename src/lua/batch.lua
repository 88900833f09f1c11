-- batch: the acquire.lua, release.lua and check.lua calls one turn of the
-- broker's loop made, run as one call, in the order they were made.
--
-- Each call runs the text of its own script unchanged (wrapped below as
-- a function of where its keys and arguments are: embed.py names its
-- KEYS[1] KEYS[i], its other keys the ones after the n lock keys, and its
-- ARGV[j] ARGV[o + j]), so it decides exactly what it would have decided
-- alone, and its reply is the one it would have had alone. What a batch
-- saves is what a call costs besides its script's commands: the EVALSHA,
-- the argument tables Redis makes, the functions of lib/ made again at
-- each call (here once), and the incarnation gate's HMGET and TIME (here
-- once for the calls that ask it the same: nothing a call does changes
-- the marker, and a grant's fence from that TIME is still the counter + 1
-- when two calls grant one name). A call whose commands raise an error
-- (a key of another type) has that error as its reply, and a Lua error
-- names the line of this text as Redis runs it (embed.py's expand()),
-- not of its script; the calls after it still run. The broker sends one
-- script's calls in a batch (redisc_batch.c: Redis checks a script against
-- maxmemory only until its first write).
--
-- KEYS: lock /incarnation
--   (KEYS[1..n]: each call's lock key; then the keys of no name its
--   script is passed, the same for every call)
-- Returns one reply for each call, in order.

local lockKey = KEYS[1] -- the first call's; the others' follow it
local incarnationKey = KEYS[2] -- (after the n lock keys)
local calls = ARGV[1] -- n, how many calls
local callArgs = ARGV -- after n, for each call: its script (1: acquire,
--   2: release, 3: check), how many arguments it has, and those arguments

local n = tonumber(calls)
-- wrap acquire.lua as acquire
-- wrap release.lua as release
-- wrap check.lua as check
local scripts = {acquire, release, check}
-- The gate each call passes: the incarnation gate's, asked once for the
-- calls that ask it the same.
local seen
local function gate_seen(k, inc, rid)
  if not (seen and seen[1] == k and seen[2] == inc and seen[3] == rid) then
    local closed, clock = gate(k, inc, rid)
    seen = {k, inc, rid, closed, clock}
  end
  return seen[4], seen[5]
end
local out, p = {}, 2
for i = 1, n do
  local ok, r = pcall(scripts[tonumber(callArgs[p])], i, p + 1, gate_seen)
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
  p = p + 2 + tonumber(callArgs[p + 1])
end
return out

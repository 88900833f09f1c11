/*
 * lockdb: keys, scripts and reply parsing. Every compare-and-act runs as one
 * Lua script, so nothing ever deletes or extends a lock it does not own.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"
#include "lockdb.h"
#include "log.h"
#include "proto.h"
#include "redisc.h"
#include "xmalloc.h"

/* Redis's own clock in ms: shared holders' leases are on it, as their
 * expiry is one clock for every broker. */
#define LUA_NOW                                                                \
	"local function now_ms()\n"                                            \
	"  local t = redis.call('TIME')\n"                                     \
	"  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n" \
	"end\n"                                                                \
	"local function ms(x) return string.format('%d', x) end\n"

/* The lock key (KEYS[1]) holds "<token> <WHO entry>" for an exclusive
 * holder (or, from an older broker, just "<token>"), or "=shared" while
 * shared holders hold the name: v is its value, holds whether it is the
 * token's (ARGV[1]). */
#define LUA_HOLDS                                                              \
	"local v, t = redis.call('GET', KEYS[1]), ARGV[1]\n"                   \
	"local holds = v == t or (type(v) == 'string' and\n"                   \
	"  string.sub(v, 1, #t + 1) == t .. ' ')\n"

/* Shared holders: the set h (token -> lease end) and the hash who (token
 * -> WHO's entry, and '=mode'), with the lock key l saying "=shared" for
 * as long as the last lease. prune forgets the ended ones (and l with the
 * last) and says how many are left; stretch makes the three keys live as
 * long as the last lease: until a millisecond past its end on TIME's
 * clock (l must be free or "=shared"; l must not go while a lease in h is
 * still running). */
#define LUA_HOLDERS                                                            \
	"local function prune(l, h, who, now)\n"                               \
	"  local old = redis.call('ZRANGEBYSCORE', h, '-inf', ms(now))\n"      \
	"  for _, t in ipairs(old) do redis.call('HDEL', who, t) end\n"        \
	"  if #old > 0 then redis.call('ZREMRANGEBYSCORE', h, '-inf', "        \
	"ms(now)) "                                                            \
	"end\n"                                                                \
	"  local n = redis.call('ZCARD', h)\n"                                 \
	"  if n == 0 then\n"                                                   \
	"    if #old > 0 then redis.call('DEL', who) end\n"                    \
	"    if redis.call('GET', l) == '=shared' then redis.call('DEL', l) "  \
	"end\n"                                                                \
	"  end\n"                                                              \
	"  return n\n"                                                         \
	"end\n"                                                                \
	"local function stretch(l, h, who, now)\n"                             \
	"  local top = redis.call('ZRANGE', h, -1, -1, 'WITHSCORES')\n"        \
	"  local at = ms(tonumber(top[2]) + 1)\n"                              \
	"  redis.call('SET', l, '=shared', 'PXAT', at)\n"                      \
	"  redis.call('PEXPIREAT', h, at)\n"                                   \
	"  redis.call('PEXPIREAT', who, at)\n"                                 \
	"end\n"

/* The broker that stored a holder's entry ("<token or fence> <mode>
 * <broker> ..."; "*" once brokers share it) is not broker b: holds of
 * the grant elsewhere must hear of what b does to it. */
#define LUA_FOREIGN                                                            \
	"local function foreign(e, b)\n"                                       \
	"  return string.match(e or '', '^%S+ %S+ (%S+)') ~= b\n"              \
	"end\n"

/*
 * Grant an exclusive lock (or a FILL's): SET NX PX and the fence INCR in
 * one script, so a grant and its fence can never be split, and two grants
 * can never share a fence. The holder's fence is the counter's value:
 * nothing increments it while the key exists. A counter that is not an
 * integer fails the INCR: the SET is undone, so no grant is left that
 * nobody was told of. The key's value is the token and the holder's WHO
 * entry (info); shared holders keep the key at "=shared", so the SET NX of
 * a free name is all an uncontended grant costs. The same token asking
 * again gets its own fence back (a retried request grants once), its lease
 * set to the new ttl and its entry renewed; asked through another broker
 * than the one that stored it, the entry's broker becomes "*" (releases
 * and shortenings of the grant are announced from then on) and a shorter
 * lease is announced now ("<name> shortened <fence> <broker>"). A writer
 * shared holders keep out marks itself (writer: no new reader comes in
 * meanwhile, and the reply's fourth element says so), and marks it again
 * while an exclusive holder keeps it out after that; its grant clears the
 * mark (clear). A token that is one of the shared holders is in the other
 * family. A refused waiter marks the name as waited for (for mark ms), so
 * that its release is announced; a FILL waiter also asks for its end to be
 * marked done, and a FILL whose watched leader is done (done >= watch) is
 * DONE.
 * KEYS: lock, fence, waiters, holders, who, writer, done, fill.
 * ARGV: token, ttl, mark (0: a try-once), info, fill (0/1), watch,
 * clear (0/1), channel, name.
 * Returns {1, fence}, {0, ms to look again, holder's fence, marked},
 * {2, done}, or {3, n} when the token is a shared holder (n as the share
 * script's).
 */
static struct redisc_script lockdb_acquire_lua = { "acquire",
	"if ARGV[6] ~= '0' then\n"
	"  local d = tonumber(redis.call('GET', KEYS[7]) or '0')\n"
	"  if d >= tonumber(ARGV[6]) then return {2, d} end\n"
	"end\n"
	"local val = ARGV[1] .. ' ' .. ARGV[4]\n"
	"if redis.call('SET', KEYS[1], val, 'NX', 'PX', ARGV[2]) then\n"
	"  local f = redis.pcall('INCR', KEYS[2])\n"
	"  if type(f) ~= 'number' then\n"
	"    redis.call('DEL', KEYS[1])\n"
	"    return f\n"
	"  end\n"
	"  if ARGV[7] == '1' then redis.call('DEL', KEYS[6]) end\n"
	"  return {1, f}\n"
	"end\n" LUA_NOW LUA_HOLDS LUA_HOLDERS LUA_FOREIGN
	"local function refuse(t, f, w)\n"
	"  if ARGV[3] ~= '0' then\n"
	"    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])\n"
	"    if ARGV[5] == '1' then\n"
	"      redis.call('SET', KEYS[8], '1', 'PX', ARGV[3])\n"
	"    end\n"
	"    if w == 1 then\n"
	"      redis.call('SET', KEYS[6], '1', 'PX', ARGV[3])\n"
	"    end\n"
	"  end\n"
	"  return {0, t, f, ARGV[3] ~= '0' and w or 0}\n"
	"end\n"
	"if v == '=shared' then\n"
	"  local now = now_ms()\n"
	"  if prune(KEYS[1], KEYS[4], KEYS[5], now) > 0 then\n"
	"    if redis.call('ZSCORE', KEYS[4], ARGV[1]) then\n"
	"      local m = redis.call('HGET', KEYS[5], '=mode') or ''\n"
	"      return {3, tonumber(string.match(m, '^LIMIT=(%d+)$') or '0')}\n"
	"    end\n"
	"    local top = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')\n"
	"    return refuse(tonumber(top[2]) - now, 0, 1)\n"
	"  end\n"
	"  redis.call('SET', KEYS[1], val, 'PX', ARGV[2])\n"
	"  local f = redis.pcall('INCR', KEYS[2])\n"
	"  if type(f) ~= 'number' then\n"
	"    redis.call('DEL', KEYS[1])\n"
	"    return f\n"
	"  end\n"
	"  if ARGV[7] == '1' then redis.call('DEL', KEYS[6]) end\n"
	"  return {1, f}\n"
	"end\n"
	"local fs = redis.call('GET', KEYS[2]) or '0'\n"
	"if holds then\n"
	"  local b = string.match(ARGV[4], '^%S+ (%S+)')\n"
	"  if foreign(v, b) then\n"
	"    if redis.call('PTTL', KEYS[1]) > tonumber(ARGV[2]) then\n"
	"      redis.call('PUBLISH', ARGV[8],\n"
	"        ARGV[9] .. ' shortened ' .. fs .. ' ' .. b)\n"
	"    end\n"
	"    val = ARGV[1] .. ' ' ..\n"
	"      string.gsub(ARGV[4], '^(%S+) %S+', '%1 *')\n"
	"  end\n"
	"  redis.call('SET', KEYS[1], val, 'PX', ARGV[2])\n"
	"  return {1, tonumber(fs)}\n"
	"end\n"
	"return refuse(redis.call('PTTL', KEYS[1]), tonumber(fs),\n"
	"  ARGV[7] == '1' and 1 or 0)\n",
	"" };

/*
 * Grant a shared place (SHARED, or LIMIT n): not while an exclusive holder
 * or a waiting writer is there, nor past n holders, nor in another mode
 * (then {3, n}, n = 0 for SHARED, -1 when this token holds it
 * exclusively). Each holder has its own lease in the set, its own fence
 * from the same counter, and its WHO entry in the hash. A same-token
 * re-grant through another broker is treated as the acquire script's.
 * KEYS: lock, fence, waiters, holders, who, writer.
 * ARGV: token, ttl, mark, info, mode ("SHARED", "LIMIT=<n>"), n (0: none),
 * channel, name.
 * Returns {1, fence}, {0, ms to look again, 0, 0} or {3, n}.
 */
static struct redisc_script lockdb_share_lua = { "share",
	LUA_NOW LUA_HOLDS LUA_HOLDERS LUA_FOREIGN
	"local function refuse(t)\n"
	"  if ARGV[3] ~= '0' then\n"
	"    redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])\n"
	"  end\n"
	"  return {0, t, 0, 0}\n"
	"end\n"
	"if v and v ~= '=shared' then\n"
	"  if holds then return {3, -1} end\n"
	"  return refuse(redis.call('PTTL', KEYS[1]))\n"
	"end\n"
	"local now = now_ms()\n"
	"local n = prune(KEYS[1], KEYS[4], KEYS[5], now)\n"
	"if n > 0 then\n"
	"  local m = redis.call('HGET', KEYS[5], '=mode')\n"
	"  if m ~= ARGV[5] then\n"
	"    local l = string.match(m or '', '^LIMIT=(%d+)$')\n"
	"    return {3, tonumber(l or '0')}\n"
	"  end\n"
	"  local s = redis.call('ZSCORE', KEYS[4], ARGV[1])\n"
	"  if s then\n"
	"    local info = redis.call('HGET', KEYS[5], ARGV[1]) or ''\n"
	"    local fs = string.match(info, '^%d+') or '0'\n"
	"    local e, b = ARGV[4], string.match(ARGV[4], '^%S+ (%S+)')\n"
	"    if foreign(info, b) then\n"
	"      if tonumber(s) - now > tonumber(ARGV[2]) then\n"
	"        redis.call('PUBLISH', ARGV[7],\n"
	"          ARGV[8] .. ' shortened ' .. fs .. ' ' .. b)\n"
	"      end\n"
	"      e = string.gsub(e, '^(%S+) %S+', '%1 *')\n"
	"    end\n"
	"    local at = ms(now + tonumber(ARGV[2]))\n"
	"    redis.call('ZADD', KEYS[4], at, ARGV[1])\n"
	"    stretch(KEYS[1], KEYS[4], KEYS[5], now)\n"
	"    redis.call('HSET', KEYS[5], ARGV[1], fs .. ' ' .. e)\n"
	"    return {1, tonumber(fs)}\n"
	"  end\n"
	"end\n"
	"local t = redis.call('PTTL', KEYS[6])\n"
	"if t > 0 then return refuse(t) end\n"
	"if ARGV[6] ~= '0' and n >= tonumber(ARGV[6]) then\n"
	"  local low = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')\n"
	"  return refuse(tonumber(low[2]) - now)\n"
	"end\n"
	"local f = redis.call('INCR', KEYS[2])\n"
	"redis.call('ZADD', KEYS[4], ms(now + tonumber(ARGV[2])), ARGV[1])\n"
	"redis.call('HSET', KEYS[5], ARGV[1], ms(f) .. ' ' .. ARGV[4],\n"
	"  '=mode', ARGV[5])\n"
	"stretch(KEYS[1], KEYS[4], KEYS[5], now)\n"
	"return {1, f}\n",
	"" };

/*
 * Compare-and-delete, in either place a token can hold, then tell other
 * brokers' waiters, if there are any. With a fence (not 0) only the grant
 * with that fence is released: a release sent again later never deletes a
 * newer grant to the same token. A grant whose entry another broker
 * stored (or several share) is announced as "<name> released <fence>
 * <broker>", which also wakes waiters: holds of it elsewhere are lost. A
 * FILL leader's RELEASE (done 2), or a client's RELEASE of a lock FILL
 * waiters wait on (done 1, :fill set; it is set only with :waiters),
 * marks the work done with its fence. A release the broker makes by
 * itself (done 0: a disconnect, a lost hold) leaves a grant brokers share
 * ("*") to its lease: a connection of another broker holds it too.
 * KEYS: lock, waiters, holders, who, fence, fill, done.
 * ARGV: token, channel, name, done (0/1/2), how long done is kept, fence
 * (0: any), broker.
 * Returns 1 if released, 0 if not ours.
 */
static struct redisc_script lockdb_release_lua = { "release",
	LUA_HOLDS LUA_FOREIGN
	"if holds then\n"
	"  local c = redis.call('GET', KEYS[5]) or '0'\n"
	"  if ARGV[6] ~= '0' and c ~= ARGV[6] and tonumber(c) then\n"
	"    return 0\n"
	"  end\n"
	"  local by = string.match(v, '^%S+ %S+ (%S+)')\n"
	"  if ARGV[4] == '0' and by == '*' then return 0 end\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  local f = ARGV[4] == '2' or (ARGV[4] == '1' and\n"
	"    redis.call('EXISTS', KEYS[6]) == 1)\n"
	"  if f then redis.call('SET', KEYS[7], c, 'PX', ARGV[5]) end\n"
	"  if foreign(v, ARGV[7]) then\n"
	"    redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' released ' .. c ..\n"
	"      ' ' .. ARGV[7])\n"
	"    return 1\n"
	"  end\n"
	"  if redis.call('EXISTS', KEYS[2]) == 0 then return 1 end\n"
	"else\n" LUA_NOW LUA_HOLDERS
	"  local s = redis.call('ZSCORE', KEYS[3], ARGV[1])\n"
	"  if not s then return 0 end\n"
	"  local info = redis.call('HGET', KEYS[4], ARGV[1]) or ''\n"
	"  local fs = string.match(info, '^%d+') or '0'\n"
	"  if ARGV[6] ~= '0' and fs ~= ARGV[6] then return 0 end\n"
	"  if ARGV[4] == '0' and string.match(info, '^%S+ %S+ (%S+)') == '*'\n"
	"  then\n"
	"    return 0\n"
	"  end\n"
	"  redis.call('ZREM', KEYS[3], ARGV[1])\n"
	"  redis.call('HDEL', KEYS[4], ARGV[1])\n"
	"  local now = now_ms()\n"
	"  if prune(KEYS[1], KEYS[3], KEYS[4], now) == 0 then\n"
	"    redis.call('DEL', KEYS[4])\n"
	"  end\n"
	"  if tonumber(s) <= now then return 0 end\n"
	"  if foreign(info, ARGV[7]) then\n"
	"    redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' released ' .. fs ..\n"
	"      ' ' .. ARGV[7])\n"
	"    return 1\n"
	"  end\n"
	"  if redis.call('EXISTS', KEYS[2]) == 0 then return 1 end\n"
	"end\n"
	"redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
	"return 1\n",
	"" };

/* CHAOS_BLIND_RELEASE (test builds): delete without comparing. */
static struct redisc_script lockdb_blind_release_lua = { "blind-release",
	"redis.call('DEL', KEYS[1])\n"
	"redis.call('PUBLISH', ARGV[2], ARGV[3])\n"
	"return 1\n",
	"" };

/*
 * Release straight to the next waiter: compare (token and fence, unless the
 * counter is no integer), then set
 * the new holder and its fence, so the lock is never free in between and
 * the handover is one round trip. Nothing is published, the lock not
 * being free, unless another broker stored the grant (released, as the
 * release script says). A counter that is not an integer makes no fence:
 * the lock is then only released ({2}), and the waiter tries on its own.
 * KEYS: lock, fence, writer, waiters. ARGV: token, next token, ttl, next's
 * info, clear (next marked the writer), fence, broker, channel, name.
 * Returns {1, fence}, {2} or {0}.
 */
static struct redisc_script lockdb_handover_lua = { "handover",
	LUA_HOLDS LUA_FOREIGN
	"local c = redis.call('GET', KEYS[2])\n"
	"if not holds or (c ~= ARGV[6] and tonumber(c)) then return {0} end\n"
	"if foreign(v, ARGV[7]) then\n"
	"  redis.call('PUBLISH', ARGV[8],\n"
	"    ARGV[9] .. ' released ' .. ARGV[6] .. ' ' .. ARGV[7])\n"
	"end\n"
	"local f = redis.pcall('INCR', KEYS[2])\n"
	"if type(f) ~= 'number' then\n"
	"  redis.call('DEL', KEYS[1])\n"
	"  if redis.call('EXISTS', KEYS[4]) == 1 then\n"
	"    redis.call('PUBLISH', ARGV[8], ARGV[9])\n"
	"  end\n"
	"  return {2}\n"
	"end\n"
	"redis.call('SET', KEYS[1], ARGV[2] .. ' ' .. ARGV[4], 'PX', ARGV[3])\n"
	"if ARGV[5] == '1' then redis.call('DEL', KEYS[3]) end\n"
	"return {1, f}\n",
	"" };

/*
 * Compare-and-PEXPIRE, in either place; with a fence (not 0) only the
 * grant with that fence. A lease shortened in a grant another broker
 * stored is announced ("<name> shortened <fence> <broker>"): its holds
 * elsewhere can no longer trust their end.
 * KEYS: lock, holders, who, fence. ARGV: token, ttl, fence (0: any),
 * broker, channel, name. Returns 1 or 0.
 */
static struct redisc_script lockdb_extend_lua = { "extend",
	LUA_HOLDS LUA_FOREIGN
	"local function shortened(left, fs, e)\n"
	"  if left > tonumber(ARGV[2]) and foreign(e, ARGV[4]) then\n"
	"    redis.call('PUBLISH', ARGV[5], ARGV[6] .. ' shortened ' .. fs ..\n"
	"      ' ' .. ARGV[4])\n"
	"  end\n"
	"end\n"
	"if holds then\n"
	"  local c = redis.call('GET', KEYS[4]) or '0'\n"
	"  if ARGV[3] ~= '0' and c ~= ARGV[3] then return 0 end\n"
	"  shortened(redis.call('PTTL', KEYS[1]), c, v)\n"
	"  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
	"end\n"
	"if v and v ~= '=shared' then return 0 end\n" LUA_NOW LUA_HOLDERS
	"local s = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"
	"if not s then return 0 end\n"
	"local info = redis.call('HGET', KEYS[3], ARGV[1]) or ''\n"
	"local fs = string.match(info, '^%d+') or '0'\n"
	"if ARGV[3] ~= '0' and fs ~= ARGV[3] then return 0 end\n"
	"local now = now_ms()\n"
	"if tonumber(s) <= now then return 0 end\n"
	"shortened(tonumber(s) - now, fs, info)\n"
	"redis.call('ZADD', KEYS[2], ms(now + tonumber(ARGV[2])), ARGV[1])\n"
	"stretch(KEYS[1], KEYS[2], KEYS[3], now)\n"
	"return 1\n",
	"" };

/*
 * KEYS: lock, fence, holders, who. ARGV: a fence to look for, or 0; a
 * token it must be held under, or "".
 * Returns {0} when free, else {1, pttl, fence, holders, n, valid} with
 * n = -1 exclusive, 0 SHARED, else LIMIT n; pttl the longest lease left.
 */
static struct redisc_script lockdb_status_lua = { "status",
	LUA_NOW
	"local c = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
	"local v, t = redis.call('GET', KEYS[1]), ARGV[2]\n"
	"if v and v ~= '=shared' then\n"
	"  local mine = t == '' or v == t or\n"
	"    string.sub(v, 1, #t + 1) == t .. ' '\n"
	"  return {1, redis.call('PTTL', KEYS[1]), c, 1, -1,\n"
	"    (mine and c == tonumber(ARGV[1])) and 1 or 0}\n"
	"end\n"
	"local now = now_ms()\n"
	"local live = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. ms(now), "
	"'+inf', 'WITHSCORES')\n"
	"if #live == 0 then return {0} end\n"
	"local valid = 0\n"
	"if ARGV[1] ~= '0' then\n"
	"  for i = 1, #live, 2 do\n"
	"    if t == '' or live[i] == t then\n"
	"      local info = redis.call('HGET', KEYS[4], live[i]) or ''\n"
	"      if string.match(info, '^%d+') == ARGV[1] then valid = 1 end\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local m = redis.call('HGET', KEYS[4], '=mode') or ''\n"
	"return {1, tonumber(live[#live]) - now, c, #live / 2,\n"
	"  tonumber(string.match(m, '^LIMIT=(%d+)$') or '0'), valid}\n",
	"" };

/* KEYS: lock, holders, who, fence. Returns {pttl, "<fence> <entry>", ...},
 * one pair per holder (at most 10000); "" for an entry not stored. */
static struct redisc_script lockdb_who_lua = { "who",
	LUA_NOW
	"local v = redis.call('GET', KEYS[1])\n"
	"if v and v ~= '=shared' then\n"
	"  local entry = string.match(v, '^%S+ (.+)$')\n"
	"  local f = redis.call('GET', KEYS[4]) or '0'\n"
	"  return {redis.call('PTTL', KEYS[1]), entry and f .. ' ' .. entry "
	"or ''}\n"
	"end\n"
	"local now = now_ms()\n"
	"local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ms(now), "
	"'+inf', 'WITHSCORES', 'LIMIT', 0, 10000)\n"
	"local out = {}\n"
	"for i = 1, #live, 2 do\n"
	"  out[#out + 1] = tonumber(live[i + 1]) - now\n"
	"  out[#out + 1] = redis.call('HGET', KEYS[3], live[i]) or ''\n"
	"end\n"
	"return out\n",
	"" };

/*
 * Whether the grant with this token and fence still holds the name (in
 * either place); when not, the fence of the last REVOKE of it, if one is
 * remembered.
 * KEYS: lock, holders, revoked, fence, who. ARGV: token, fence.
 * Returns {1} or {0, fence}.
 */
static struct redisc_script lockdb_check_lua = { "check",
	LUA_NOW LUA_HOLDS
	"if holds and redis.call('GET', KEYS[4]) == ARGV[2] then\n"
	"  return {1}\n"
	"end\n"
	"local s = redis.call('ZSCORE', KEYS[2], ARGV[1])\n"
	"if s and tonumber(s) > now_ms() and string.match(redis.call('HGET',\n"
	"    KEYS[5], ARGV[1]) or '', '^%d+') == ARGV[2] then\n"
	"  return {1}\n"
	"end\n"
	"return {0, tonumber(redis.call('GET', KEYS[3]) or '0')}\n",
	"" };

/*
 * Take the name from every holder, and tell every broker: "<name> revoked
 * <fence>" on the release channel (names hold no space), so that holds
 * with that fence or an older one are lost, and waiters may go.
 * A broker that missed the message (its subscriber was away) finds the
 * fence in :revoked (kept for keep_ms, the longest lease) when it checks
 * its holds again.
 * KEYS: lock, holders, who, fence, writer, revoked.
 * ARGV: channel, name, keep_ms.
 * Returns how many holders there were.
 */
static struct redisc_script lockdb_revoke_lua = { "revoke",
	LUA_NOW
	"local now = now_ms()\n"
	"local v = redis.call('GET', KEYS[1])\n"
	"local n = redis.call('ZCOUNT', KEYS[2], '(' .. ms(now), '+inf')\n"
	"if v and v ~= '=shared' then n = n + 1 end\n"
	"redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5])\n"
	"if n > 0 then\n"
	"  local f = redis.call('GET', KEYS[4]) or '0'\n"
	"  redis.call('SET', KEYS[6], f, 'PX', ARGV[3])\n"
	"  redis.call('PUBLISH', ARGV[1], ARGV[2] .. ' revoked ' .. f)\n"
	"end\n"
	"return n\n",
	"" };

enum lockdb_op {
	LDB_ACQUIRE,
	LDB_RELEASE,
	LDB_HANDOVER,
	LDB_EXTEND,
	LDB_STATUS,
	LDB_WHO,
	LDB_REVOKE,
	LDB_CHECK,
	LDB_WAIT
};

struct lockdb_req {
	enum lockdb_op op;
	lockdb_cb *cb;
	void *arg;
	char name[]; /* for logs */
};

static struct {
	const char *prefix;
	const char *broker; /* "<host>:<pid>", as WHO entries name it */
	char channel[128];
} ldb;

const char *
lockdb_channel(void)
{
	return ldb.channel;
}

/* Replies that mean "Redis cannot serve now", as opposed to a bug: the
 * code word, or NULL. */
static const char *
lockdb_busy_error(const char *err)
{
	static const char *const busy[] = { "LOADING", "BUSY", "READONLY",
		"MASTERDOWN", "OOM", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",
		"NOAUTH", "WRONGPASS" };
	size_t n;

	for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++) {
		n = strlen(busy[i]);
		if (strncmp(err, busy[i], n) == 0 &&
		    (err[n] == ' ' || err[n] == '\0'))
			return busy[i];
	}
	return NULL;
}

/* The scripts' array replies hold integers; v gets up to six. */
static bool
lockdb_ints(const redisReply *r, size_t min, long long *v)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements < min)
		return false;
	for (size_t i = 0; i < r->elements && i < 6; i++) {
		if (r->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
		v[i] = r->element[i]->integer;
	}
	return true;
}

/* WHO's {pttl, info, ...} pairs; the infos point into r. */
static bool
lockdb_parse_who(const redisReply *r, struct lockdb_reply *out)
{
	struct lockdb_holder *h;

	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
		return false;
	out->nholders = r->elements / 2;
	if (out->nholders == 0)
		return true;
	out->holders = h = xcalloc(out->nholders, sizeof *h);
	for (size_t i = 0; i < out->nholders; i++) {
		const redisReply *t = r->element[2 * i];
		const redisReply *info = r->element[2 * i + 1];

		if (t->type != REDIS_REPLY_INTEGER ||
		    info->type != REDIS_REPLY_STRING)
			return false;
		h[i].pttl = t->integer > 0 ? (uint64_t)t->integer : 0;
		h[i].info = info->str;
	}
	return true;
}

/* An ACQUIRE's {1, fence}, {0, pttl, fence, marked}, {2, done} or
 * {3, n}. */
static bool
lockdb_parse_acquire(const long long *v, struct lockdb_reply *out)
{
	switch (v[0]) {
	case 1:
		out->status = LDB_OK;
		out->fence = (uint64_t)v[1];
		return v[1] > 0;
	case 0:
		out->status = LDB_NO;
		/* No expiry (-1): none to wait for. */
		out->pttl = v[1] == -1 ? UINT64_MAX
		    : v[1] > 0	       ? (uint64_t)v[1]
				       : 0;
		out->fence = v[2] > 0 ? (uint64_t)v[2] : 0;
		out->marked = v[3] == 1;
		return v[1] >= -2;
	case 2:
		out->status = LDB_DONE;
		out->fence = (uint64_t)v[1];
		return v[1] > 0;
	case 3:
		out->status = LDB_CONFLICT;
		out->mode = v[1] > 0 ? LDB_LIMIT
		    : v[1] == 0	     ? LDB_SHARED
				     : LDB_EXCLUSIVE;
		out->limit =
		    v[1] > 0 && v[1] <= UINT32_MAX ? (unsigned)v[1] : 0;
		return true;
	}
	return false;
}

/* Turn one script reply into a lockdb_reply; false if malformed. */
static bool
lockdb_parse(enum lockdb_op op, const redisReply *r, struct lockdb_reply *out)
{
	long long v[6] = { 0, 0, 0, 0, 0, 0 };

	switch (op) {
	case LDB_ACQUIRE:
		return lockdb_ints(r, 2, v) && lockdb_parse_acquire(v, out);
	case LDB_HANDOVER:
		/* {2}: released, but no fence could be made for the next. */
		if (!lockdb_ints(r, 1, v) || (v[0] == 1 && r->elements < 2))
			return false;
		out->status = v[0] >= 1 ? LDB_OK : LDB_NO;
		out->fence = v[0] == 1 ? (uint64_t)v[1] : 0;
		return v[0] != 1 || v[1] > 0;
	case LDB_RELEASE:
	case LDB_EXTEND:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		out->status = r->integer == 1 ? LDB_OK : LDB_NO;
		return true;
	case LDB_WAIT:
		if (r->type != REDIS_REPLY_INTEGER)
			return false;
		out->status = LDB_OK;
		out->fence = r->integer > 0 ? (uint64_t)r->integer : 0;
		return true;
	case LDB_STATUS:
		if (!lockdb_ints(r, 1, v) || (v[0] == 1 && r->elements < 6))
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->pttl = v[1] > 0 ? (uint64_t)v[1] : 0;
		out->fence = v[2] > 0 ? (uint64_t)v[2] : 0;
		out->count = v[3] > 0 ? (uint64_t)v[3] : 0;
		out->mode = v[4] < 0 ? LDB_EXCLUSIVE
		    : v[4] == 0	     ? LDB_SHARED
				     : LDB_LIMIT;
		out->limit =
		    v[4] > 0 && v[4] <= UINT32_MAX ? (unsigned)v[4] : 0;
		out->valid = v[5] == 1;
		return true;
	case LDB_WHO:
		out->status = LDB_OK;
		return lockdb_parse_who(r, out);
	case LDB_CHECK:
		if (!lockdb_ints(r, 1, v) || (v[0] == 0 && r->elements < 2))
			return false;
		out->status = v[0] == 1 ? LDB_OK : LDB_NO;
		out->fence = v[0] == 0 && v[1] > 0 ? (uint64_t)v[1] : 0;
		return true;
	case LDB_REVOKE:
		if (r->type != REDIS_REPLY_INTEGER || r->integer < 0)
			return false;
		out->status = LDB_OK;
		out->count = (uint64_t)r->integer;
		return true;
	}
	return false;
}

static void
lockdb_reply_cb(const redisReply *r, void *arg)
{
	struct lockdb_req *req = arg;
	struct lockdb_reply out = { .status = LDB_UNAVAILABLE };

	if (r != NULL && r->type == REDIS_REPLY_ERROR) {
		log_warnx("redis: lock %s: %s", req->name, r->str);
		out.busy = lockdb_busy_error(r->str);
		out.status = out.busy != NULL ? LDB_UNAVAILABLE : LDB_INTERNAL;
	} else if (r != NULL && !lockdb_parse(req->op, r, &out)) {
		log_warnx("redis: lock %s: malformed script reply", req->name);
		out.status = LDB_INTERNAL;
	}
	req->cb(&out, req->arg);
	free((void *)out.holders);
	free(req);
}

/*
 * Keys as DESIGN.md §5 and docs/protocol.md §8: <prefix>{<name>} and
 * <prefix>{<name>}<suffix>, one letter per key: l the lock, f :fence,
 * w :waiters, h :holders, i :who, x :writer, d :done, g :fill,
 * r :revoked.
 */
static const char *
lockdb_suffix(char kind)
{
	static const char letters[] = "fwhixdgr";
	static const char *const suffixes[] = { ":fence", ":waiters",
		":holders", ":who", ":writer", ":done", ":fill", ":revoked" };
	const char *p = strchr(letters, kind);

	return kind != '\0' && p != NULL ? suffixes[p - letters] : "";
}

static struct lockdb_req *
lockdb_req_new(enum lockdb_op op, const char *name, lockdb_cb *cb, void *arg)
{
	size_t namelen = strlen(name);
	struct lockdb_req *req = xmalloc(sizeof *req + namelen + 1);

	req->op = op;
	req->cb = cb;
	req->arg = arg;
	memcpy(req->name, name, namelen + 1);
	return req;
}

/* keys: one letter per KEYS entry of the script, as lockdb_suffix takes. */
static void
lockdb_send(enum lockdb_op op, struct redisc_script *script, const char *name,
    const char *keys, int nargs, const char *const *args, lockdb_cb *cb,
    void *arg)
{
	struct lockdb_req *req = lockdb_req_new(op, name, cb, arg);
	int nkeys = (int)strlen(keys), n = 0;
	char key[8][PROTO_NAME_MAX + 160];
	const char *argv[20];
	size_t lens[20], base, slen;
	const char *suffix;

	/* "<prefix>{<name>}" once (redis.prefix is at most 64 bytes, a
	 * name 200), then each key is it and a suffix. */
	base =
	    (size_t)snprintf(key[0], sizeof key[0], "%s{%s}", ldb.prefix, name);
	for (int i = 0; i < nkeys; i++) {
		suffix = lockdb_suffix(keys[i]);
		slen = strlen(suffix);
		if (i > 0)
			memcpy(key[i], key[0], base);
		memcpy(key[i] + base, suffix, slen + 1);
		lens[n] = base + slen;
		argv[n++] = key[i];
	}
	for (int i = 0; i < nargs; i++) {
		lens[n] = strlen(args[i]);
		argv[n++] = args[i];
	}
	redisc_eval(script, nkeys, n, argv, lens, lockdb_reply_cb, req);
}

void
lockdb_acquire(
    const char *name, const struct lockdb_ask *a, lockdb_cb *cb, void *arg)
{
	char ttl[24], mark[24], n[16], watch[24], mode[24];
	const char *args[9] = { a->token, ttl, mark, a->info, mode, n,
		a->clear_writer ? "1" : "0", ldb.channel, name };

	snprintf(ttl, sizeof ttl, "%" PRIu64, a->ttl_ms);
	snprintf(mark, sizeof mark, "%" PRIu64, a->mark_ms);
	if (a->mode == LDB_EXCLUSIVE || a->mode == LDB_FILL) {
		snprintf(mode, sizeof mode, "%d", a->mode == LDB_FILL);
		snprintf(watch, sizeof watch, "%" PRIu64, a->watch);
		args[5] = watch;
		/* An exclusive ACQUIRE never reaches :done and :fill. */
		lockdb_send(LDB_ACQUIRE, &lockdb_acquire_lua, name,
		    a->mode == LDB_FILL ? "lfwhixdg" : "lfwhix", 9, args, cb,
		    arg);
		return;
	}
	if (a->mode == LDB_SHARED)
		snprintf(mode, sizeof mode, "SHARED");
	else
		snprintf(mode, sizeof mode, "LIMIT=%u", a->limit);
	snprintf(n, sizeof n, "%u",
	    a->mode == LDB_LIMIT && chaos_fault != CHAOS_NO_LIMIT ? a->limit
								  : 0);
	args[6] = ldb.channel;
	args[7] = name;
	lockdb_send(
	    LDB_ACQUIRE, &lockdb_share_lua, name, "lfwhix", 8, args, cb, arg);
}

void
lockdb_release(const char *name, const char *token, uint64_t fence,
    enum lockdb_done done, uint64_t done_ms, lockdb_cb *cb, void *arg)
{
	static const char *const marks[] = { "0", "1", "2" };
	char ms[24], f[24];
	const char *args[7] = { token, ldb.channel, name, marks[done], ms, f,
		ldb.broker };

	snprintf(ms, sizeof ms, "%" PRIu64, done_ms > 0 ? done_ms : 1);
	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(LDB_RELEASE,
	    chaos_fault == CHAOS_BLIND_RELEASE ? &lockdb_blind_release_lua
					       : &lockdb_release_lua,
	    name, "lwhifgd", 7, args, cb, arg);
}

void
lockdb_handover(const char *name, const char *token, uint64_t fence,
    const struct lockdb_ask *next, lockdb_cb *cb, void *arg)
{
	char ttl[24], f[24];
	const char *args[9] = { token, next->token, ttl, next->info,
		next->clear_writer ? "1" : "0", f, ldb.broker, ldb.channel,
		name };

	snprintf(ttl, sizeof ttl, "%" PRIu64, next->ttl_ms);
	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(
	    LDB_HANDOVER, &lockdb_handover_lua, name, "lfxw", 9, args, cb, arg);
}

void
lockdb_extend(const char *name, const char *token, uint64_t fence,
    uint64_t ttl_ms, lockdb_cb *cb, void *arg)
{
	char ttl[24], f[24];
	const char *args[6] = { token, ttl, f, ldb.broker, ldb.channel, name };

	snprintf(ttl, sizeof ttl, "%" PRIu64, ttl_ms);
	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(
	    LDB_EXTEND, &lockdb_extend_lua, name, "lhif", 6, args, cb, arg);
}

void
lockdb_status(const char *name, uint64_t fence, const char *token,
    lockdb_cb *cb, void *arg)
{
	char f[24];
	const char *args[2] = { f, token != NULL ? token : "" };

	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(
	    LDB_STATUS, &lockdb_status_lua, name, "lfhi", 2, args, cb, arg);
}

void
lockdb_who(const char *name, lockdb_cb *cb, void *arg)
{
	lockdb_send(LDB_WHO, &lockdb_who_lua, name, "lhif", 0, NULL, cb, arg);
}

void
lockdb_check(const char *name, const char *token, uint64_t fence, lockdb_cb *cb,
    void *arg)
{
	char f[24];
	const char *args[2] = { token, f };

	snprintf(f, sizeof f, "%" PRIu64, fence);
	lockdb_send(
	    LDB_CHECK, &lockdb_check_lua, name, "lhrfi", 2, args, cb, arg);
}

void
lockdb_revoke(const char *name, uint64_t keep_ms, lockdb_cb *cb, void *arg)
{
	char keep[24];
	const char *args[3] = { ldb.channel, name, keep };

	snprintf(keep, sizeof keep, "%" PRIu64, keep_ms > 0 ? keep_ms : 1);
	lockdb_send(
	    LDB_REVOKE, &lockdb_revoke_lua, name, "lhifxr", 3, args, cb, arg);
}

void
lockdb_wait(const char *name, int replicas, uint64_t timeout_ms, lockdb_cb *cb,
    void *arg)
{
	char n[16], t[24];
	const char *argv[3] = { "WAIT", n, t };
	size_t lens[3];

	snprintf(n, sizeof n, "%d", replicas);
	snprintf(t, sizeof t, "%" PRIu64, timeout_ms);
	for (int i = 0; i < 3; i++)
		lens[i] = strlen(argv[i]);
	redisc_command(3, argv, lens, lockdb_reply_cb,
	    lockdb_req_new(LDB_WAIT, name, cb, arg));
}

void
lockdb_init(const char *prefix, const char *broker)
{
	ldb.prefix = prefix;
	ldb.broker = broker;
	snprintf(ldb.channel, sizeof ldb.channel, "%sreleased", prefix);
	redisc_script_add(&lockdb_acquire_lua);
	redisc_script_add(&lockdb_share_lua);
	redisc_script_add(&lockdb_release_lua);
	redisc_script_add(&lockdb_handover_lua);
	if (chaos_fault == CHAOS_BLIND_RELEASE)
		redisc_script_add(&lockdb_blind_release_lua);
	redisc_script_add(&lockdb_extend_lua);
	redisc_script_add(&lockdb_status_lua);
	redisc_script_add(&lockdb_who_lua);
	redisc_script_add(&lockdb_revoke_lua);
	redisc_script_add(&lockdb_check_lua);
}

-- Redis's own clock in ms: shared holders' leases are on it, as their
-- expiry is one clock for every broker. now_ms(t) reads it from t, a TIME
-- this script read already (the gate's), or (t nil) asks Redis. ms()
-- writes a number as an integer (Lua's own %.14g would write 1e+14).
-- now_us(t) is TIME t in µs (fences, incarnation ids).
local function now_ms(t)
  t = t or redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(x) return string.format('%d', x) end
local function now_us(t) return tonumber(t[1]) * 1000000 + tonumber(t[2]) end

-- Tollgate money budgets: spend counters of calendar windows, all counters
-- of one request decided in one call.
--
-- KEYS[i]   counter i = 1..n, tg:{<tenant>}:$<d|m>:<window id>:<scope>;
--           its value is the window's spend in nano-dollars (an integer).
-- ARGV[1]   "take": refuse (take nothing) unless every counter has room
--           for its take (spend + take <= cap; with take 0, spend < cap),
--           else take it plus the lease granted;
--           "debit": add every take unconditionally (negative: a refund).
-- ARGV[4i-2] .. ARGV[4i+1]  cap (nano-dollars), the unix time in ms at
--           which the counter expires (its window's end plus a grace
--           period), take, and lease wanted.
-- reply     [denied, remaining_1, ..., remaining_n, granted_1, ..., granted_n]:
--           denied is 0 or the 1-based index of the first refusing counter;
--           remaining = cap - spend after the call; granted per counter is
--           min(wanted, floor((cap - spend - take) / 8)), 0 unless admitted.
-- Exact while spends stay below 2^53 nano-dollars (the policy caps budgets
-- at $9,000,000).
local n = #KEYS
local mode = ARGV[1]
local spent = {}
for i = 1, n do
  spent[i] = tonumber(redis.call('GET', KEYS[i]) or '0')
end
local denied = 0
if mode == 'take' then
  for i = 1, n do
    local cap = tonumber(ARGV[4 * i - 2])
    local take = tonumber(ARGV[4 * i])
    if spent[i] >= cap or spent[i] + take > cap then
      denied = i
      break
    end
  end
end
local out = {denied}
local granted = {}
for i = 1, n do
  local cap = tonumber(ARGV[4 * i - 2])
  local take = tonumber(ARGV[4 * i])
  local want = tonumber(ARGV[4 * i + 1])
  local g = 0
  if denied == 0 then
    if mode == 'take' and want > 0 then
      g = math.floor((cap - spent[i] - take) / 8)
      if g > want then g = want end
      if g < 0 then g = 0 end
    end
    spent[i] = redis.call('INCRBY', KEYS[i], take + g)
    redis.call('PEXPIREAT', KEYS[i], ARGV[4 * i - 1])
  end
  out[i + 1] = cap - spent[i]
  granted[i] = g
end
for i = 1, n do
  out[n + 1 + i] = granted[i]
end
return out

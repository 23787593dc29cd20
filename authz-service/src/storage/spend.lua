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
-- Rolling windows (mode "take+r" / "debit+r"): each counter has a 5th
-- argument, the number of older slots of its window; those slots' keys
-- follow the n counters' keys in KEYS, in counter order. A counter's spend
-- is then its current slot plus its older slots (only the current slot is
-- written), so n = (#ARGV - 1) / 5. A rolling counter never takes a lease:
-- its granted_i is instead the 1-based position, among the window's slots
-- oldest first, of the oldest slot holding spend (0 when none does), so the
-- caller knows when spend next frees up.
-- Exact while spends stay below 2^53 nano-dollars (the policy caps budgets
-- at $9,000,000).
local mode = ARGV[1]
local stride = 4
if string.sub(mode, -2) == '+r' then
  stride = 5
  mode = string.sub(mode, 1, -3)
end
local n = (#ARGV - 1) / stride
local spent = {}
local older = {}
local oldest = {}
local k = n
for i = 1, n do
  older[i] = 0
  oldest[i] = 0
  if stride == 5 then
    for j = 1, tonumber(ARGV[5 * i + 1]) do
      k = k + 1
      local v = tonumber(redis.call('GET', KEYS[k]) or '0')
      if v ~= 0 and oldest[i] == 0 then oldest[i] = j end
      older[i] = older[i] + v
    end
  end
  spent[i] = tonumber(redis.call('GET', KEYS[i]) or '0') + older[i]
end
local denied = 0
if mode == 'take' then
  for i = 1, n do
    local cap = tonumber(ARGV[stride * (i - 1) + 2])
    local take = tonumber(ARGV[stride * (i - 1) + 4])
    if spent[i] >= cap or spent[i] + take > cap then
      denied = i
      break
    end
  end
end
local out = {denied}
local granted = {}
for i = 1, n do
  local b = stride * (i - 1) + 1
  local cap = tonumber(ARGV[b + 1])
  local take = tonumber(ARGV[b + 3])
  local want = tonumber(ARGV[b + 4])
  local g = 0
  if denied == 0 then
    if mode == 'take' and want > 0 then
      g = math.floor((cap - spent[i] - take) / 8)
      if g > want then g = want end
      if g < 0 then g = 0 end
    end
    spent[i] = redis.call('INCRBY', KEYS[i], take + g) + older[i]
    redis.call('PEXPIREAT', KEYS[i], ARGV[b + 2])
  end
  out[i + 1] = cap - spent[i]
  granted[i] = g
  if stride == 5 and tonumber(ARGV[b + 5]) > 0 then
    granted[i] = oldest[i]
    if oldest[i] == 0 and spent[i] ~= 0 then
      granted[i] = tonumber(ARGV[b + 5]) + 1
    end
  end
end
for i = 1, n do
  out[n + 1 + i] = granted[i]
end
return out

-- Tollgate: check-and-take or debit a set of token buckets atomically.
--
-- One call covers every bucket of one request (key, tenant, per-model), so a
-- request is admitted or refused in a single round trip and a refused
-- request takes nothing. All KEYS of one call share the hash tag {<tenant>}
-- so they live in one Redis Cluster slot.
--
-- KEYS[i]      bucket key, i = 1..n, e.g. "tg:{demo}:rm:k:demo-key"
-- ARGV[1]      mode: "take" (admit or refuse, then take) or "debit"
--              (take unconditionally; levels may go negative)
-- ARGV[3i-1]   capacity of bucket i (integer > 0; burst = capacity)
-- ARGV[3i]     window of bucket i in ms (capacity refills per window)
-- ARGV[3i+1]   take of bucket i (integer >= 0): 1 for a request bucket,
--              0 for a token bucket at Check time, the usage on a debit
--
-- Admission (mode "take"): bucket i admits iff, after refill,
--   level > 0 and level >= take.
-- The request is admitted iff every bucket admits; only then is anything
-- taken. Buckets whose take is 0 are never written.
--
-- Stored value: "<level in thousandths> <ms timestamp>" (a string, the
-- smallest Redis encoding). An absent key is a full bucket. Every write
-- sets a TTL of the time until the bucket would be full again (at least
-- 1 s), after which absence means the same thing.
--
-- Clock: Redis's TIME, so every gateway instance shares one clock.
--
-- Returns an array of n+1 integers:
--   [1]    0 if admitted (or mode "debit"), else i of the first refusing bucket
--   [i+1]  level of bucket i after the decision, in thousandths (floored)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local take_mode = ARGV[1] == 'take'
local n = #KEYS
local caps, wins, takes, levels = {}, {}, {}, {}
local denied = 0

for i = 1, n do
  local cap = tonumber(ARGV[3 * i - 1])
  local win = tonumber(ARGV[3 * i])
  local take = tonumber(ARGV[3 * i + 1])
  caps[i], wins[i], takes[i] = cap, win, take
  local level = cap
  local v = redis.call('GET', KEYS[i])
  if v then
    local lm, ts = string.match(v, '^(%-?%d+) (%d+)$')
    lm, ts = tonumber(lm), tonumber(ts)
    if lm and ts then
      local elapsed = now - ts
      if elapsed < 0 then elapsed = 0 end
      level = lm / 1000 + elapsed * cap / win
      if level > cap then level = cap end
    end
  end
  levels[i] = level
  if take_mode and denied == 0 and not (level > 0 and level >= take) then
    denied = i
  end
end

local out = { denied }
for i = 1, n do
  local level = levels[i]
  if denied == 0 and takes[i] > 0 then
    level = level - takes[i]
    local ttl = math.ceil((caps[i] - level) * wins[i] / caps[i])
    if ttl < 1000 then ttl = 1000 end
    redis.call('SET', KEYS[i], string.format('%d %d', math.floor(level * 1000), now), 'PX', ttl)
  end
  out[i + 1] = math.floor(level * 1000)
end
return out

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
-- Stored value: one integer, the bucket's "full time" in microseconds on
-- Redis's clock: the instant at which the bucket will be full again
-- (GCRA's theoretical arrival time). The level at `now` is
--   capacity - max(0, full - now) * capacity / window,
-- the same continuous refill as level-plus-timestamp, in one integer that
-- Redis keeps int-encoded (no string allocation: smallest memory per
-- bucket). A level below zero is a full time more than one window ahead.
-- An absent key is a full bucket. Every write sets a TTL of the time until
-- the bucket is full (at least 1 s), after which absence means the same.
--
-- Clock: Redis's TIME, so every gateway instance shares one clock.
--
-- Returns an array of n+1 integers:
--   [1]    0 if admitted (or mode "debit"), else i of the first refusing bucket
--   [i+1]  level of bucket i after the decision, in thousandths (floored)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])  -- microseconds
local take_mode = ARGV[1] == 'take'
local n = #KEYS
local caps, wins, takes, levels = {}, {}, {}, {}
local denied = 0

for i = 1, n do
  local cap = tonumber(ARGV[3 * i - 1])
  local win = tonumber(ARGV[3 * i]) * 1000  -- microseconds
  local take = tonumber(ARGV[3 * i + 1])
  caps[i], wins[i], takes[i] = cap, win, take
  local level = cap
  local full = tonumber(redis.call('GET', KEYS[i]))
  if full and full > now then
    level = cap - (full - now) * cap / win
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
    local wait = math.ceil((caps[i] - level) * wins[i] / caps[i])  -- us until full
    local ttl = math.ceil(wait / 1000)
    if ttl < 1000 then ttl = 1000 end
    redis.call('SET', KEYS[i], string.format('%d', now + wait), 'PX', ttl)
  end
  out[i + 1] = math.floor(level * 1000)
end
return out

-- Tollgate: check-and-take or debit a set of token buckets atomically.
--
-- One call covers every bucket of one request (key, tenant, per-model), so a
-- request is admitted or refused in a single round trip and a refused
-- request takes nothing. All KEYS of one call share the hash tag {<tenant>}
-- so they live in one Redis Cluster slot.
--
-- KEYS[i]      bucket key, i = 1..n, e.g. "tg:{demo}:rm:k:demo-key"
-- ARGV[1]      mode: "take" (admit or refuse, then take) or "debit"
--              (take unconditionally; levels may go negative; a negative
--              take is a refund, capped at capacity)
-- ARGV[4i-2]   capacity of bucket i (integer > 0; burst = capacity)
-- ARGV[4i-1]   window of bucket i in ms (capacity refills per window)
-- ARGV[4i]     take of bucket i (integer): 1 for a request bucket, the
--              reservation for a token bucket at Check time, the usage (or
--              usage minus reservation) on a debit
-- ARGV[4i+1]   lease wanted for bucket i (integer >= 0, mode "take" only):
--              extra units the caller would like to hold beyond the take
--
-- Admission (mode "take"): bucket i admits iff, after refill,
--   level > 0 and level >= take.
-- The request is admitted iff every bucket admits; only then is anything
-- taken. Bucket i then also grants a lease of
--   min(wanted, floor((level - take) / 8))
-- units, taken with the take (an eighth of what is left: leases shrink to
-- nothing as the bucket nears empty). Buckets whose take and lease are 0
-- are never written.
--
-- Stored value: one integer, the bucket's "full time" in microseconds on
-- Redis's clock: the instant at which the bucket will be full again
-- (GCRA's "theoretical arrival time"). The level at `now` is
--   capacity - max(0, full - now) * capacity / window,
-- the same continuous refill as level-plus-timestamp, in one integer that
-- Redis keeps int-encoded (no string allocation: smallest memory per
-- bucket). A level below zero is a full time more than one window ahead.
-- An absent key is a full bucket. Every write sets a TTL of the time until
-- the bucket is full (at least 1 s), after which absence means the same.
--
-- Clock: Redis's TIME, so every gateway instance shares one clock.
--
-- The same rules are in src/bucket.rs; tests/fixtures/bucket_vectors.json
-- holds test vectors that both must pass (tests/bucket_vectors.rs).
--
-- Returns an array of 2n+1 integers:
--   [1]      0 if admitted (or mode "debit"), else i of the first refusing bucket
--   [i+1]    level of bucket i after the decision, in thousandths (floored)
--   [n+i+1]  lease granted for bucket i (0 unless admitted)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])  -- microseconds
local take_mode = ARGV[1] == 'take'
local n = #KEYS
local caps, wins, takes, levels, grants = {}, {}, {}, {}, {}
local denied = 0

for i = 1, n do
  local cap = tonumber(ARGV[4 * i - 2])
  local win = tonumber(ARGV[4 * i - 1]) * 1000  -- microseconds
  local take = tonumber(ARGV[4 * i])
  caps[i], wins[i], takes[i] = cap, win, take
  local level = cap
  local full = tonumber(redis.call('GET', KEYS[i]))
  if full and full > now then
    level = cap - (full - now) * cap / win
  end
  levels[i] = level
  grants[i] = 0
  if take_mode and denied == 0 and not (level > 0 and level >= take) then
    denied = i
  end
end

local out = { denied }
for i = 1, n do
  local level = levels[i]
  if denied == 0 then
    if take_mode then
      local left = level - takes[i]
      if left > 0 then
        grants[i] = math.min(tonumber(ARGV[4 * i + 1]), math.floor(left / 8))
      end
    end
    local total = takes[i] + grants[i]
    if total ~= 0 then
      level = level - total
      if level > caps[i] then level = caps[i] end
      local wait = math.ceil((caps[i] - level) * wins[i] / caps[i])  -- us until full
      local ttl = math.ceil(wait / 1000)
      if ttl < 1000 then ttl = 1000 end
      redis.call('SET', KEYS[i], string.format('%d', now + wait), 'PX', ttl)
    end
  end
  out[i + 1] = math.floor(level * 1000)
end
for i = 1, n do
  out[n + i + 1] = grants[i]
end
return out

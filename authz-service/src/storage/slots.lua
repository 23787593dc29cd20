-- Tollgate: the concurrency slots of one request (max_concurrent_requests),
-- for its key and its tenant together, in one atomic call.
--
-- A slot is a lease with a deadline: a member of a sorted set whose score
-- is the unix ms at which it expires. The gateway renews it while its
-- request runs and releases it when the request ends; a slot whose gateway
-- died expires by itself. All KEYS of one call share the hash tag
-- {<tenant>}, so they live in one Redis Cluster slot.
--
-- KEYS[i]     the slot set of scope i = 1..n: "tg:{<tenant>}:cc:k:<key id>"
--             (the key's) or "tg:{<tenant>}:cc:t" (the tenant's)
-- ARGV[1]     mode: "acquire", "release", "renew" or "count"
-- ARGV[2]     slot id (ASCII letters and digits)
-- ARGV[3]     ttl in ms (acquire, renew): the slot expires that long after
--             it was taken or last renewed
-- ARGV[3+i]   cap of scope i (acquire): most slots the set may hold
--
-- acquire: expired members are removed from every set; when every set
--   holds fewer members than its cap, the slot is added to each with score
--   now + ttl; otherwise nothing is written.
-- release: the slot is removed from every set.
-- renew:   expired members are removed; the slot's score becomes now + ttl
--   in each set that still holds it (an expired slot is not added back).
-- count:   expired members are removed; nothing else is written.
-- Every write makes the set live at least ttl + 1 s more (never less), so
-- a set outlives its newest slot and an idle one disappears.
--
-- Clock: Redis's TIME, shared by every instance.
--
-- Returns n + 1 integers:
--   [1]    acquire: 0 if taken, else i of the first full set; otherwise 0
--   [i+1]  acquire and count: members of set i after the call; release
--          and renew: 1 if set i held the slot, else 0

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode = ARGV[1]
local slot = ARGV[2]
local n = #KEYS
local out = { 0 }

if mode == 'release' then
  for i = 1, n do
    out[i + 1] = redis.call('ZREM', KEYS[i], slot)
  end
  return out
end

local ttl = tonumber(ARGV[3])
local counts = {}
for i = 1, n do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  counts[i] = redis.call('ZCARD', KEYS[i])
end

-- The set lives at least ttl + 1 s more (never shortened: instances may
-- run with different ttls).
local function keep(key)
  if redis.call('PTTL', key) < ttl + 1000 then
    redis.call('PEXPIRE', key, ttl + 1000)
  end
end

if mode == 'count' then
  for i = 1, n do
    out[i + 1] = counts[i]
  end
  return out
end

if mode == 'renew' then
  for i = 1, n do
    if redis.call('ZSCORE', KEYS[i], slot) then
      redis.call('ZADD', KEYS[i], 'XX', now + ttl, slot)
      keep(KEYS[i])
      out[i + 1] = 1
    else
      out[i + 1] = 0
    end
  end
  return out
end

for i = 1, n do
  if out[1] == 0 and counts[i] >= tonumber(ARGV[3 + i]) then
    out[1] = i
  end
end
for i = 1, n do
  if out[1] == 0 then
    redis.call('ZADD', KEYS[i], now + ttl, slot)
    keep(KEYS[i])
    counts[i] = counts[i] + 1
  end
  out[i + 1] = counts[i]
end
return out

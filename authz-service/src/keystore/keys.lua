-- Tollgate: the keys made through the admin API, shared by every authz
-- instance. Records hold hashes only, never a secret.
--
-- KEYS[1]  tg:{$keys}:records  hash: key id -> the key's JSON record
-- KEYS[2]  tg:{$keys}:version  integer: +1 on every write
-- KEYS[3]  tg:{$keys}:changes  sorted set: key id, scored by the version
--                              that last wrote its record
-- (`$` is in no tenant name, so no tenant's buckets share this hash tag.)
--
-- ARGV[1] "put": write one record if it is still the one the caller read
--   ARGV[2]  key id
--   ARGV[3]  the record the caller read ("" when it expects none)
--   ARGV[4]  the new record
--   reply    the new version, or 0 when the stored record is not ARGV[3]
--            (written by someone else meanwhile: nothing is written)
--
-- ARGV[1] "get": one record
--   ARGV[2]  key id
--   reply    its record, or nil
--
-- ARGV[1] "since": what changed after the version a reader has seen
--   ARGV[2]  the version seen (0: none yet)
--   reply    [version, full, record, ...]: full is 1 when every record
--            follows (first read, or the version went back: a new or
--            flushed Redis), else 0 and only the records written after
--            ARGV[2] follow; nothing follows when the version is ARGV[2]

local mode = ARGV[1]
if mode == 'put' then
  local current = redis.call('HGET', KEYS[1], ARGV[2])
  if current == false then current = '' end
  if current ~= ARGV[3] then
    return 0
  end
  local version = redis.call('INCR', KEYS[2])
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
  redis.call('ZADD', KEYS[3], version, ARGV[2])
  return version
end

if mode == 'get' then
  return redis.call('HGET', KEYS[1], ARGV[2])
end

if mode == 'since' then
  local seen = tonumber(ARGV[2])
  local version = tonumber(redis.call('GET', KEYS[2]) or '0')
  local out = { version, 0 }
  if version == seen then
    return out
  end
  if seen == 0 or version < seen then
    out[2] = 1
    for _, v in ipairs(redis.call('HVALS', KEYS[1])) do
      out[#out + 1] = v
    end
    return out
  end
  local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. seen, '+inf')
  for _, id in ipairs(ids) do
    local v = redis.call('HGET', KEYS[1], id)
    if v then out[#out + 1] = v end
  end
  return out
end

return redis.error_reply('keys.lua: unknown mode ' .. tostring(mode))

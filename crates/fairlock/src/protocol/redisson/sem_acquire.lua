-- Expirable semaphore (Redisson's RPermitExpirableSemaphore): take n permits.
-- KEYS[1] the count (the name), KEYS[2] the taken permits '{NAME}:timeout',
-- KEYS[3] the channel 'redisson_sc:{NAME}'
-- ARGV[1] n, ARGV[2] the permits' score (now + lease, or NOEXP), ARGV[3]
-- now (ms, this client's clock), ARGV[4] the total to initialise an absent
-- semaphore with, ARGV[5..] the n new permit ids (32 hex digits each)
-- Returns {1} taken; {2, score} busy, the soonest lease ends at score;
-- {3} busy, no lease ends (wait for a message); {4, total} n is above the
-- semaphore's total (nothing taken, ever).
local n, score, now = tonumber(ARGV[1]), ARGV[2], ARGV[3]
-- As Redisson: reclaim at most n expired permits first.
local available, bad = open_expirable(ARGV[4], now, n)
if bad then
  return bad
end
-- An earlier attempt with these ids took them and its reply was lost
-- (ids are random: nobody else has them): taken, not counted again.
if redis.call('zscore', KEYS[2], from_hex(ARGV[5])) then
  return {1}
end
local total = available + redis.call('zcard', KEYS[2])
if n > total then
  return {4, total}
end
if available >= n then
  redis.call('decrby', KEYS[1], n)
  for i = 5, #ARGV, CHUNK do
    local args = {}
    for k = i, math.min(i + CHUNK - 1, #ARGV) do
      args[#args + 1] = score
      args[#args + 1] = from_hex(ARGV[k])
    end
    redis.call('zadd', KEYS[2], unpack(args))
  end
  -- A count with a TTL (trySetPermits with a ttl) takes the set with it.
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return {1}
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] and first[2] ~= NOEXP then
  return {2, tonumber(first[2])}
end
return {3}

-- Expirable semaphore: its state, after the reclaim (Redisson's
-- availablePermits and getPermits reclaim too).
-- KEYS as sem_acquire.lua; ARGV[1] now (ms, this client's clock), ARGV[2]
-- the total to initialise an absent semaphore with ('' to leave it
-- absent), ARGV[3] 'all' for every taken permit, else none
-- Returns {available, taken count, {id hex, score, ...}, 1 when the count
-- exists (else 0: absent, and available reads 0)}.
local available, bad = open_expirable(ARGV[2], ARGV[1], nil)
if bad then
  return bad
end
local taken = {}
if ARGV[3] == 'all' then
  local flat = redis.call('zrange', KEYS[2], 0, -1, 'withscores')
  for i = 1, #flat, 2 do
    taken[#taken + 1] = to_hex(flat[i])
    taken[#taken + 1] = flat[i + 1]
  end
end
return {available, redis.call('zcard', KEYS[2]), taken, redis.call('exists', KEYS[1])}

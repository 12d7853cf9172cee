-- Native lock: extend (or claim: mark claimed) the lease of every lock in the batch still
-- held by its owner.
-- KEYS[i] lock hash; ARGV[1] lease ms, ARGV[i + 1] owner of KEYS[i]
-- Returns one integer per key: 1 renewed, 0 not held by that owner (lost).
local renewed = {}
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type means the lock is not ours.
  if redis.pcall('hget', key, 'owner') == ARGV[i + 1] then
    redis.call('hset', key, 'claimed', 1)
    redis.call('pexpire', key, ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

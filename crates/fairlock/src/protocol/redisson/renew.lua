-- Watchdog: extend the lease of every lock in the batch still held by its
-- owner, or only check it.
-- KEYS[i] lock hash; ARGV[1] lease ms, or '' to check without extending;
-- ARGV[2i] owner of KEYS[i], ARGV[2i + 1] unused (the native protocol's token)
-- Returns one integer per key: 1 held (renewed); lost: 0 the key is gone,
-- 2 another owner holds it (or the key holds another type).
local lease = ARGV[1]
local renewed = {}
for i, key in ipairs(KEYS) do
  -- Only a hash with this owner's own field is renewed (owner ids are
  -- random per client): data that is not its lock is "not ours" (2).
  local held = redis.pcall('hexists', key, ARGV[2 * i])
  if held == 1 then
    if lease ~= '' then
      -- GT: a renewal never shortens what a longer hold of the same owner
      -- (a re-entry with a longer explicit lease) was given.
      redis.call('pexpire', key, lease, 'gt')
    end
    renewed[i] = 1
  elseif redis.call('exists', key) == 0 then
    renewed[i] = 0
  else
    -- Another owner, or not a hash: the lock is not ours.
    renewed[i] = 2
  end
end
return renewed

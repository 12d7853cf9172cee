-- Native lock: for every lock in the batch still held by its owner under
-- its token, extend the lease (and mark a handed-over grant claimed), or
-- only check it.
-- KEYS[i] (i <= N) lock hash, KEYS[N + i] its client labels (optional: all
-- or none); ARGV[1] lease ms, or '' to check without extending; ARGV[2] this
-- client's label ('' for none); ARGV[2i + 1] owner and ARGV[2i + 2] token
-- ('' for any) of KEYS[i]; N = (#ARGV - 2) / 2
-- Returns one integer per lock: 1 held (renewed); lost: 0 the key is gone,
-- 2 another owner or token holds it (or the key holds another type).
local lease, label = ARGV[1], ARGV[2]
local renewed = {}
local n = (#ARGV - 2) / 2
for i = 1, n do
  local key = KEYS[i]
  local owner, token = ARGV[2 * i + 1], ARGV[2 * i + 2]
  -- A hold of the weighted engine (a read-write lock's or a semaphore's,
  -- weighted_prelude.lua): named by the holders set, kept in its own key,
  -- which the set and the meta hash (a semaphore's capacity and weights)
  -- must outlive.
  local holders
  if string.sub(key, -11) == ':rw:holders' or string.sub(key, -12) == ':sem:holders' then
    holders = key
    key = string.sub(key, 1, -8) .. 'hold:' .. owner
  end
  -- pcall: a key of another type means the lock is not ours.
  local fields = redis.pcall('hmget', key, 'owner', 'token')
  local ours = type(fields) == 'table' and fields[1] == owner and (token == '' or fields[2] == token)
  if ours and holders and type(redis.pcall('zscore', holders, owner)) ~= 'string' then
    -- The hold's key without its entry in the holders set (the set evicted
    -- or deleted): no script counts it any more and a writer may be in,
    -- so it is gone, as a lock whose key went.
    renewed[i] = 0
  elseif ours then
    if lease ~= '' then
      redis.call('hset', key, 'claimed', 1)
      -- GT: a renewal never shortens what a longer hold of the same owner
      -- (a re-entry with a longer explicit lease) was given.
      redis.call('pexpire', key, lease, 'gt')
      if holders then
        redis.call('pexpire', holders, lease, 'gt')
        redis.call('pexpire', string.sub(holders, 1, -8) .. 'meta', tonumber(lease) + 20000, 'gt')
      end
      write_label(KEYS[n + i], owner, label, lease)
    end
    renewed[i] = 1
  elseif type(fields) == 'table' and not fields[1] and redis.call('exists', key) == 0 then
    renewed[i] = 0
  else
    renewed[i] = 2
  end
end
return renewed

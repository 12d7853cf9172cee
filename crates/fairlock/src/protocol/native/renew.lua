-- Native lock: for every lock in the batch still held by its owner under
-- its token, extend the lease (and mark a handed-over grant claimed), or
-- only check it.
-- KEYS[i] lock hash; ARGV[1] lease ms, or '' to check without extending;
-- ARGV[2i] owner and ARGV[2i + 1] token ('' for any) of KEYS[i]
-- Returns one integer per key: 1 held (renewed); lost: 0 the key is gone,
-- 2 another owner or token holds it (or the key holds another type).
local lease = ARGV[1]
local renewed = {}
for i, key in ipairs(KEYS) do
  -- pcall: a key of another type means the lock is not ours.
  local fields = redis.pcall('hmget', key, 'owner', 'token')
  local token = ARGV[2 * i + 1]
  if type(fields) == 'table' and fields[1] == ARGV[2 * i] and (token == '' or fields[2] == token) then
    if lease ~= '' then
      redis.call('hset', key, 'claimed', 1)
      -- GT: a renewal never shortens what a longer hold of the same owner
      -- (a re-entry with a longer explicit lease) was given.
      redis.call('pexpire', key, lease, 'gt')
    end
    renewed[i] = 1
  elseif type(fields) == 'table' and not fields[1] and redis.call('exists', key) == 0 then
    renewed[i] = 0
  else
    renewed[i] = 2
  end
end
return renewed

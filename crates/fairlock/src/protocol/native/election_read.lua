-- Election (see election.rs): who holds the lock, and the election's log
-- (read-only). KEYS[1] the lock (lock_prelude.lua), KEYS[2] the log (see
-- election.lua); ARGV[1] LOG_LEN, ARGV[2] the longest entry the election
-- writes, in bytes: a longer one is another program's, refused before it
-- is sent (16 of them bound what a read costs the client).
-- Returns {TOKEN, OWNER, LABEL, PTTL, LOG, BOUND}: the holder's token, owner
-- and label (nil, nil, nil and PTTL -2 when the lock is free), the log's
-- entries, newest first, and the highest term a grant can have made:
-- max(the lock key's token, held or free, and the server clock in µs; see
-- next_token), above which an entry is not the election's.
local LOG_LEN = tonumber(ARGV[1])
local lock, bad = lock_of(redis.pcall('get', KEYS[1]))
if bad then
  return bad
end
local log = redis.pcall('lrange', KEYS[2], 0, LOG_LEN - 1)
if log.err then
  return redis.error_reply('WRONGTYPE key ' .. KEYS[2] .. ' is not a list')
end
local longest = tonumber(ARGV[2])
for _, entry in ipairs(log) do
  if #entry > longest then
    return not_a_lock(2, 'the election log holds an entry longer than the election writes')
  end
end
local _, now_us = server_now()
local bound = decimal(math.max(lock.token, now_us))
if not lock.owner then
  return {false, false, false, -2, log, bound}
end
return {lock.text, lock.owner, lock.label, redis.call('pttl', KEYS[1]), log, bound}

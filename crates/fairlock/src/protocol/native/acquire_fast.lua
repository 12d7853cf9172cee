-- Native lock: the uncontended acquire, run before the prelude's helpers
-- are even defined (defining them costs as much as a few Redis calls).
-- Arguments as in acquire.lua; replies with the new hold's token alone (an
-- integer, see below). Its reads (`fields`, `waiting`) are reused
-- there when this fast path does not apply.
--
-- Free and nobody queued: take it. Type checks without TYPE: the lock's
-- first touch is HGETALL, the queue's ZRANGE, meta's HGET, all reads that
-- fail on another type before anything is written. Nobody waits, so no
-- waiter's refresh made meta live longer than this grant needs: its TTL is
-- set rather than kept (it still outlives the grant by 20 s). Numbers go to
-- Redis as strings where they can (Lua formats numbers with sprintf).
--
-- Bad data, with no call of its own: the lock is read with HGETALL (one
-- call, as HMGET was), so "free" means the key is absent, not merely a hash
-- without an owner: a hash of anyone else's fields is never taken here (the
-- prelude's lock_of refuses it in acquire.lua). Meta's token, the only
-- other value read before the first write, is checked with a pattern on
-- the text HGET returned (see counter() in common.lua, not defined yet).
local fields = redis.call('hgetall', KEYS[1])
local waiting = redis.call('zrange', KEYS[2], '0', '0')[1] ~= nil
if fields[1] == nil and not waiting then
  local last = redis.call('hget', KEYS[4], 'token')
  if last and not (#last <= 16 and string.find(last, '^%d+$') and tonumber(last) < 9007199254740992) then
    return redis.error_reply('NOTALOCK 4 meta field token is not a decimal integer below 2^53')
  end
  local time = redis.call('time')
  local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local token = math.max(tonumber(last or '0') + 1, now_us)
  -- As decimal() in the prelude (not defined yet): '%d' where its text
  -- proves a 64-bit C long (longer than a 32-bit one's 11 characters).
  local text = string.format('%d', token)
  if #text <= 11 then
    text = string.format('%.0f', token)
  end
  redis.call('hset', KEYS[4], 'token', text)
  redis.call('hset', KEYS[1], 'owner', ARGV[1], 'count', '1', 'token', text, 'claimed', '1', 'nonce', ARGV[8])
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('pexpire', KEYS[4], tonumber(ARGV[2]) + 20000)
  -- The client's label (write_label in common.lua, not defined yet).
  -- Nobody else holds or waits: the labels need to last this hold only, so
  -- their TTL is set, not kept.
  local client = string.match(ARGV[1], '^(.*):[^:]*$')
  if KEYS[6] and ARGV[9] and ARGV[9] ~= '' and client then
    local added = redis.pcall('hset', KEYS[6], client, ARGV[9])
    if type(added) == 'number' then
      local count = added == 1 and redis.pcall('hlen', KEYS[6])
      if type(count) == 'number' and count > 256 then
        redis.call('del', KEYS[6])
        redis.call('hset', KEYS[6], client, ARGV[9])
      end
      redis.call('pexpire', KEYS[6], ARGV[2])
    end
  end
  -- The token alone, an integer reply, where acquire.lua answers {1,
  -- token}: the client reads an integer for less than an array (about
  -- 2,900 instructions per lock + unlock with redis-rs's parser).
  return token
end

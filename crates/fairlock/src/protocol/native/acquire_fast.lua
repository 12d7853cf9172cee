-- Native lock: the uncontended acquire, run before the prelude's helpers
-- are even defined (defining them costs about as much as two Redis calls).
-- Arguments as in acquire.lua; replies with the new hold's token alone (an
-- integer: cheaper for the client to read than an array). Its read (`raw`)
-- is reused there when this fast path does not apply.
--
-- Free and nobody waits: take it. "Nobody waits" needs no read of the line:
-- a free marker without the flag w proves the line empty (invariant W, see
-- lock_prelude.lua); only when the lock key is absent (never used, or gone
-- with a lease or a marker) is the line asked (EXISTS). A non-fair taker
-- not in line may also take a marker with k (the line's head was woken
-- and has not waited long): that is what non-fair allows. The token continues the
-- marker's (+1), with no TIME call; from an absent key it is the server
-- clock in µs, as next_token() in the prelude.
--
-- Bad data: GET fails on another type (pcall: acquire.lua tells a lock of
-- the older layout from other data) and a string that is not a lock of
-- this layout does not match the patterns here: both go to acquire.lua,
-- which refuses them before any write.
local raw = redis.pcall('get', KEYS[1])
local token, flags, request
if raw == false then
  if redis.call('exists', KEYS[2]) == 0 then
    local time = redis.call('time')
    token, flags, request = tonumber(time[1]) * 1000000 + tonumber(time[2]), '', ''
  end
elseif type(raw) == 'string' then
  local last, was, freed_by = string.match(raw, '^(%d+):0:(%l*)::(%w*):$')
  -- (110: 'n', a non-fair take; only by a caller not in line itself: a
  -- waiter taking it must leave the line, which acquire.lua does.)
  if last and #last <= 16 and tonumber(last) < 9007199254740991
      and (not string.find(was, 'w', 1, true)
        or (string.find(was, 'k', 1, true) and string.byte(ARGV[4]) == 110
          and not redis.call('zscore', KEYS[2], ARGV[1]))) then
    -- The line may have waiters when the marker had w: the new value
    -- keeps it.
    token, request = tonumber(last) + 1, freed_by
    flags = string.find(was, 'w', 1, true) and 'w' or ''
  end
end
if token then
  -- As decimal() in the prelude (not defined yet): '%d' where its text
  -- proves a 64-bit C long (longer than a 32-bit one's 11 characters).
  local text = string.format('%d', token)
  if #text <= 11 then
    text = string.format('%.0f', token)
  end
  redis.call('set', KEYS[1], text .. ':1:' .. flags .. ':' .. ARGV[6] .. ':' .. request .. ':' .. ARGV[1],
    'px', ARGV[2])
  -- The client's label (best effort, pcall: for `inspect` only), written
  -- only when it is missing or would end before this lease: then kept for
  -- two leases, so that a client taking the lock again and again writes it
  -- once per lease, not once per take.
  local client = string.match(ARGV[1], '^(.*):[^:]*$')
  if KEYS[4] and ARGV[7] and ARGV[7] ~= '' and client then
    local lease = tonumber(ARGV[2])
    local left = redis.call('pttl', KEYS[4])
    if left < lease or redis.pcall('hget', KEYS[4], client) ~= ARGV[7] then
      local added = redis.pcall('hset', KEYS[4], client, ARGV[7])
      if type(added) == 'number' then
        local count = added == 1 and redis.pcall('hlen', KEYS[4])
        if type(count) == 'number' and count > 256 then
          redis.call('del', KEYS[4])
          redis.call('hset', KEYS[4], client, ARGV[7])
          left = -2
        end
        if left < 2 * lease then
          local twice = 2 * lease
          redis.call('pexpire', KEYS[4], twice < 2147483648 and string.format('%d', twice)
            or string.format('%.0f', twice))
        end
      end
    end
  end
  return token
end

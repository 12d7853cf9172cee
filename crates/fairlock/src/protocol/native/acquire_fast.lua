-- Native lock: the uncontended acquire, run before the prelude's helpers
-- are defined. Arguments as in acquire.lua; replies with the new hold's
-- token alone (an integer: cheaper for the client to read than an array).
-- Its read (`raw`) is reused there when this fast path does not apply.
--
-- Free and nobody waits: take it, one SET. "Nobody waits" needs no read of
-- the line: a free marker without the flag w proves the line empty
-- (invariant W, see lock_prelude.lua); only when the lock key is absent
-- (never used, or gone with a lease or a marker) is the line asked
-- (EXISTS). A non-fair taker not in line may also take a marker with w and
-- k (the line's head was woken and has not waited long): that is what
-- non-fair allows; the new value keeps w and k (the woken waiter is still
-- on its way: this hold's release need not wake it again, see
-- release_fast.lua). The token is next_token() of the prelude: above the
-- marker's, not below the server clock in µs.
--
-- Bad data: GET fails on another type (pcall: acquire.lua tells a lock of
-- the older layout from other data), and a string that is not a lock of
-- this layout, or a token that is not a counter (more than 16 digits, or
-- 2^53 - 1 or more: no next token below 2^53), does not pass here: both go
-- to acquire.lua, which refuses them before any write.
local raw = redis.pcall('get', KEYS[1])
local last, flags, request
if raw == false then
  if redis.call('exists', KEYS[2]) == 0 then
    last, flags, request = 0, '', ''
  end
elseif type(raw) == 'string' then
  local text, was, freed_by = string.match(raw, '^(%d+):0:(%l*)::([^:]*):$')
  if text then
    local n = tonumber(text)
    -- (110: 'n', a non-fair take; a waiter taking it must leave the line,
    -- which acquire.lua does.)
    if #text <= 16 and n < 9007199254740991 and (was == '' or (was == 'wk' and string.byte(ARGV[4]) == 110
        and not redis.call('zscore', KEYS[2], ARGV[1]))) then
      last, flags, request = n, was, freed_by
    end
  end
end
local token
if last then
  -- Above the last token and not below the server clock in µs: the clock
  -- term keeps tokens increasing where the marker is older than the last
  -- grant (a failover to a replica that missed writes) or gone.
  local time = redis.call('time')
  token = math.max(last + 1, tonumber(time[1]) * 1000000 + tonumber(time[2]))
end
if token then
  -- As decimal() in the prelude (not defined yet): '%d' where its text
  -- proves a 64-bit C long (longer than a 32-bit one's 11 characters).
  local text = string.format('%d', token)
  if #text <= 11 then
    text = string.format('%.0f', token)
  end
  redis.call('set', KEYS[1],
    text .. ':1:' .. flags .. ':' .. ARGV[6] .. ':' .. request .. ':' .. ARGV[1] .. '\t' .. ARGV[7], 'px', ARGV[2])
  return token
end

-- Native lock: the uncontended release, run before the prelude's helpers
-- are defined. Arguments as in release.lua, which reuses this read (`raw`)
-- when this fast path does not apply.
--
-- The last hold of this very acquisition (token given and matching), no
-- flag set (never partly released, claimed, and nobody waits: invariant W),
-- or (non-fair) only w and k (a woken waiter is on its way, and nobody
-- else need be woken): the lock becomes the free marker
-- 'TOKEN:0:FLAGS::REQUEST:' (the same flags), one SET, kept as
-- long as a partial release's answer cache (ARGV[2]). Nothing else is
-- written: the marker is this request's answer (a release sent again under
-- its id finds it there, or carried into the next hold, see release.lua),
-- so no answer cache is written here and none needs deleting. Comparing the
-- text GET returned decides, with no number parsed: anything else (another
-- type, a value not of this layout) goes to release.lua, which checks.
local raw = redis.pcall('get', KEYS[1])
if type(raw) == 'string' and ARGV[3] ~= '' then
  local token, flags, nonce, owner = string.match(raw, '^(%d+):1:(%l*):([^:]*):[^:]*:([^\t]*)')
  -- (110: 'n', a non-fair release; wk: taken past a woken waiter that has
  -- not been back since, see acquire_fast.lua: it is still on its way, and
  -- the free marker says so again.)
  if token == ARGV[3] and owner == ARGV[1] and (ARGV[4] == '' or nonce == ARGV[4])
      and (flags == '' or (flags == 'wk' and string.byte(ARGV[5]) == 110)) then
    -- The request id: the cache key's end, after 'fairlock:{NAME}:release:'.
    redis.call('set', KEYS[1], token .. ':0:' .. flags .. '::' .. string.sub(KEYS[4], #KEYS[1] + 5) .. ':', 'px',
      ARGV[2])
    return 1
  end
end

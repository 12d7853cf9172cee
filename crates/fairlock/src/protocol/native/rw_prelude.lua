-- fairlock native read-write lock prelude, after the weighted engine's
-- (weighted_prelude.lua): what fits beside whom.
--
-- The keys are 'fairlock:{NAME}:rw:...' (see weighted_prelude.lua). A
-- holder id (and a waiter's) is the owner id for the read side and
-- 'OWNER:write' for the write side: an owner's read and write holds are
-- two holds, and a writer that also reads (a downgrade) is one party.
-- Every request weighs 1; the rule below is what a capacity of 2^50 with
-- writers weighing 2^50 would say, without the arithmetic.
--
-- Invariant 2 of the engine, for this object: nobody but the writer's own
-- read hold is held beside a write hold.

-- A write-side id ('OWNER:write')?
local function is_write(id)
  return string.sub(id, -6) == ':write'
end

local rw_check_types = weighted_check_types

-- How many hold, and the writer's id (nil when nobody writes). A writer
-- holds with at most its own read hold beside it (invariant 2), so only a
-- set of one or two can name one.
local function holders_state()
  local n = redis.call('zcard', KEYS[1])
  local writer
  if n > 0 and n <= 2 then
    for _, id in ipairs(redis.call('zrange', KEYS[1], '0', '-1')) do
      if is_write(id) then
        writer = id
      end
    end
  end
  return n, writer
end

-- Whether a request of `id` fits beside the holders: a writer only when
-- nobody holds; a reader when nobody writes, or the writer is its own
-- owner (a downgrade).
local function fits(id, n, writer)
  if is_write(id) then
    return n == 0
  end
  return writer == nil or writer == id .. ':write'
end

kind.fits = function(id)
  local n, writer = holders_state()
  return fits(id, n, writer)
end
kind.never_fits = function()
  return false
end
kind.added = function() end
kind.removed = function() end
kind.check = function()
  return false
end

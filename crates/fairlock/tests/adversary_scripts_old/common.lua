-- fairlock common prelude, prepended to every script.

-- Refuse, before any write, to touch a key that holds another Redis type.
local function wrong_type(key, expected)
  local actual = redis.call('type', key)['ok']
  if actual ~= 'none' and actual ~= expected then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. actual .. ', expected a ' .. expected)
  end
  return false
end

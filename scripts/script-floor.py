#!/usr/bin/env python3
# Driver of scripts/script-floor: what the cheapest fair, fenced lock pair
# could cost a Redis server, measured rather than estimated. It runs, on a
# redis-server under callgrind (or for its CPU), the rslock-equivalent pair
# (SET NX PX, then a compare-and-delete EVALSHA), then prototypes of a
# native lock reduced to its minimum: the lock one string key
# ('h:TOKEN:COUNT:CLAIMED:NONCE:OWNER' while held, 'f:TOKEN' for 20 s after
# a release, so the fencing token needs no meta key and no TIME while the
# name is in use), the queue only checked (EXISTS), two script calls per
# pair; with and without the release's answer cache, and as a Redis 7
# function (FCALL) instead of EVALSHA. Then a non-fair take that is no
# script at all (MULTI, INCR of a token counter, SET NX PX, EXEC, sent as
# one write) with a release script that deletes the key and wakes a
# waiter only when a line exists. Then single steps, to see where the
# instructions go. These prototypes are not the lock's scripts: they skip
# type checks, bad data and every contended path.
#   [PAIRS=N] script-floor.py PORT PID|cpu DIR
# PAIRS: the pairs (or single steps) measured per figure, as in
# script-cost-driver.py, whose helpers this runs (default 500).
import sys, time
src = open(__file__.replace('script-floor.py', 'script-cost-driver.py')).read()
src = src[:src.index("K=['fairlock")]
exec(src)

ACQUIRE = """
local v = redis.call('get', KEYS[1])
local last
if v then
  local t = string.match(v, '^f:(%d+)')
  if not t then return 'SLOW' end
  last = tonumber(t)
end
if redis.call('exists', KEYS[2]) == 1 then return 'SLOW' end
local token
if last then
  token = last + 1
else
  local t = redis.call('time')
  token = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local text = string.format('%.0f', token)
redis.call('set', KEYS[1], 'h:' .. text .. ':1:1:' .. ARGV[3] .. ':' .. ARGV[1], 'px', ARGV[2])
return {1, text}
"""
RELEASE_CACHED = """
local v = redis.call('get', KEYS[1])
if v ~= ARGV[1] then return 'SLOW' end
if redis.call('exists', KEYS[2]) == 1 then return 'SLOW' end
redis.call('set', KEYS[3], '1', 'px', ARGV[3])
redis.call('set', KEYS[1], 'f:' .. ARGV[2], 'px', 20000)
return 1
"""
RELEASE = RELEASE_CACHED.replace("redis.call('set', KEYS[3], '1', 'px', ARGV[3])\n", '')
FUNCTIONS = ('#!lua name=floor\n'
             'local function acquire(KEYS, ARGV)\n' + ACQUIRE + '\nend\n'
             'local function release(KEYS, ARGV)\n' + RELEASE_CACHED + '\nend\n'
             "redis.register_function('floor_acquire', acquire)\n"
             "redis.register_function('floor_release', release)\n")

unlock = cmd('SCRIPT', 'LOAD', "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end")
acquire = cmd('SCRIPT', 'LOAD', ACQUIRE)
release_cached = cmd('SCRIPT', 'LOAD', RELEASE_CACHED)
release = cmd('SCRIPT', 'LOAD', RELEASE)
cmd('FUNCTION', 'LOAD', 'REPLACE', FUNCTIONS)
OWNER = '0c7bd3bd-1111-2222-3333-444455556666:1'
LOCK, QUEUE = 'fairlock:{b}:lock', 'fairlock:{b}:queue'

def rs(i):
    assert cmd('SET', 'rs', f'v{i}', 'NX', 'PX', 30000) == 'OK'
    assert cmd('EVALSHA', unlock, 1, 'rs', f'v{i}') == 1

def pipeline(*commands):
    s.sendall(b''.join(frame(*a) for a in commands))
    return [rd() for _ in commands]

# The non-fair take's floor: the token from a counter (no clock: a failover
# to a replica that missed the last INCRs would hand out a token again),
# the holder in the key's value; its release deletes the key when it is
# still the holder's and wakes one waiter only when somebody waits.
PLAIN_RELEASE = cmd('SCRIPT', 'LOAD', """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('del', KEYS[1])
if redis.call('exists', KEYS[2]) == 1 then redis.call('publish', KEYS[3], 'free') end
return 1
""")

def plain(i):
    value = f'{OWNER}:{i}'
    lock = 'fairlock:{p}:lock'
    r = pipeline(('MULTI',), ('INCR', 'fairlock:{p}:token'), ('SET', lock, value, 'NX', 'PX', 30000), ('EXEC',))
    assert r[3][1] == 'OK', r
    assert cmd('EVALSHA', PLAIN_RELEASE, 3, lock, 'fairlock:{p}:line', 'fairlock:{p}:wake', value) == 1

def pair(cache, fcall=False):
    def run(i):
        nonce = f'{i:032x}'
        if fcall:
            r = cmd('FCALL', 'floor_acquire', 2, LOCK, QUEUE, OWNER, 30000, nonce)
        else:
            r = cmd('EVALSHA', acquire, 2, LOCK, QUEUE, OWNER, 30000, nonce)
        assert r[0] == 1, r
        held = f'h:{r[1]}:1:1:{nonce}:{OWNER}'
        request = f'fairlock:{{b}}:release:{i}{time.time()}'
        if fcall:
            r = cmd('FCALL', 'floor_release', 3, LOCK, QUEUE, request, held, r[1], 26000)
        elif cache:
            r = cmd('EVALSHA', release_cached, 3, LOCK, QUEUE, request, held, r[1], 26000)
        else:
            r = cmd('EVALSHA', release, 2, LOCK, QUEUE, held, r[1])
        assert r == 1, r
    return run

one = cmd('SCRIPT', 'LOAD', 'return 1')
get = cmd('SCRIPT', 'LOAD', "return redis.call('get', KEYS[1])")
setpx = cmd('SCRIPT', 'LOAD', "redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]); return 1")
strings = cmd('SCRIPT', 'LOAD', "local t = tonumber(ARGV[1]) + 1; local s = string.format('%.0f', t); "
              "local x = 'h:' .. s .. ':1:1:' .. ARGV[2] .. ':' .. ARGV[3]; local m = string.match(x, '^h:(%d+)'); return 1")
VALUE = 'h:1234567890123456:1:1:x:' + OWNER
# The native lock's preludes (common.lua, line.lua, lock_prelude.lua)
# defined per EVALSHA, and once in a function library: what every
# non-fast-path call of the lock pays for them (the read-write lock's and
# the semaphore's scripts define weighted_prelude.lua's and their own
# instead of lock_prelude.lua's).
NATIVE = 'crates/fairlock/src/protocol/'
PRELUDE = ''.join(open(NATIVE + f).read() for f in ['common.lua', 'native/line.lua', 'native/lock_prelude.lua'])
with_prelude = cmd('SCRIPT', 'LOAD', PRELUDE + '\nreturn 1')
cmd('FUNCTION', 'LOAD', 'REPLACE', '#!lua name=prelude\n' + PRELUDE +
    "\nredis.register_function('prelude_one', function(keys, args) return 1 end)\n")
K5 = ['fairlock:{b}:lock', 'fairlock:{b}:queue', 'fairlock:{b}:alive', 'fairlock:{b}:meta', 'fairlock:{b}:leases']
A9 = [OWNER, 30000, 90000, 'fairlock:{b}:wake', 'fair', 'queue', 0, 'n' * 32, 'label']

base = measure('rslock-equivalent pair', rs)
for label, run in [('floor pair, answer cache', pair(True)),
                   ('floor pair, no answer cache', pair(False)),
                   ('floor pair as functions (FCALL)', pair(True, fcall=True))]:
    x = measure(label, run)
    print(f'   = {x / base:.2f} x rslock-equivalent', flush=True)
x = measure('non-fair plain take + release script', plain)
print(f'   = {x / base:.2f} x rslock-equivalent', flush=True)
for label, run in [('PING', lambda i: cmd('PING')),
                   ('EVALSHA return 1', lambda i: cmd('EVALSHA', one, 0)),
                   ('  with 3 keys, 3 arguments', lambda i: cmd('EVALSHA', one, 3, 'a', 'b', 'c', OWNER, 30000, 'n' * 32)),
                   ('  GET inside', lambda i: cmd('EVALSHA', get, 1, LOCK)),
                   ('  SET PX inside', lambda i: cmd('EVALSHA', setpx, 1, LOCK, VALUE, 30000)),
                   ('  string work of the floor acquire', lambda i: cmd('EVALSHA', strings, 0, '1234567890123456', 'n' * 32, OWNER)),
                   ('SET PX (plain command)', lambda i: cmd('SET', LOCK, VALUE, 'PX', 30000)),
                   ('EVALSHA return 1, 5 keys 9 arguments', lambda i: cmd('EVALSHA', one, 5, *K5, *A9)),
                   ('  the native prelude defined first', lambda i: cmd('EVALSHA', with_prelude, 5, *K5, *A9)),
                   ('FCALL return 1, prelude in the library', lambda i: cmd('FCALL', 'prelude_one', 5, *K5, *A9))]:
    measure(label, run)

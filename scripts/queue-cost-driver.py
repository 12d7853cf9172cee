#!/usr/bin/env python3
# Driver of scripts/queue-cost: the server's instructions per acquisition
# with N waiters in line, for the native lock (fair), the read-write lock
# (writers only, and a writer then three readers) and the semaphore (4
# permits, requests for one), from the scripts found in DIR/scripts.
#
# Each line is made first (the first holders take everything, N waiters
# queue), then the measured cycles: the oldest holder queues a request like
# its own at the back and releases (its release admits the line's head, or
# a group of readers), so the line keeps its length: the two script calls
# per acquisition that `fairlock bench queue` counts, without its clients
# (and without a client label: no labels key is written).
# Who holds is worked out here (the line is FIFO), not read from Redis.
#   queue-cost-driver.py PORT PID DIR CYCLES N...
import collections, glob, os, socket, subprocess, sys, time

P, PID, DIR, CYCLES = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
SIZES = [int(n) for n in sys.argv[5:]]
s = socket.create_connection(('127.0.0.1', P))
f = s.makefile('rb')


def encode(*a):
    out = b'*%d\r\n' % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b'$%d\r\n%s\r\n' % (len(x), x)
    return out


def rd():
    l = f.readline()
    t, r = l[:1], l[1:-2]
    if t == b'+':
        return r.decode()
    if t == b'-':
        raise Exception(r.decode())
    if t == b':':
        return int(r)
    if t == b'$':
        n = int(r)
        return None if n < 0 else f.read(n + 2)[:-2].decode()
    if t == b'*':
        n = int(r)
        return None if n < 0 else [rd() for _ in range(n)]


def cmd(*a):
    s.sendall(encode(*a))
    return rd()


def pipeline(calls):
    """Send every call, then read every reply (the line's setup)."""
    for i in range(0, len(calls), 1000):
        chunk = calls[i:i + 1000]
        s.sendall(b''.join(encode(*c) for c in chunk))
        for _ in chunk:
            rd()


def load(name):
    return cmd('SCRIPT', 'LOAD', open(DIR + '/scripts/' + name + '.lua').read())


LEASE, TTL, CACHE = 3600000, 3600000, 26000


class Lock:
    """The native lock (key layout version 2): one holder, the line's head
    next."""

    def __init__(self, tag):
        self.acq, self.rel = load('lock-acquire'), load('lock-release')
        b = '{%s}' % tag
        # The lock, the line, the records; `keys[1]` is the line.
        self.keys = [f'fairlock:{b}:lock', f'fairlock:{b}:line', f'fairlock:{b}:waiters']
        self.cache = f'fairlock:{b}:release'

    def acquire(self, who, write=True):
        # (A secret without ':', as the client's 32 hex digits.)
        return ('EVALSHA', self.acq, 3, *self.keys, who, LEASE, TTL, 'fq', 0,
                'n' + who.replace(':', '-'), 'label')

    def release(self, who, i):
        # Any token of the owner's hold (it holds once).
        return ('EVALSHA', self.rel, 4, *self.keys, f'{self.cache}:r{i}', who, CACHE, '', '', 'f')


class Weighted:
    """The read-write lock or the semaphore (weighted_prelude.lua)."""

    def __init__(self, tag, kind):
        self.kind = kind
        self.acq, self.rel = load(kind + '-acquire'), load(kind + '-release')
        b = '{%s}' % tag
        k = lambda x: f'fairlock:{b}:{kind}:{x}'
        self.keys = [k('holders'), k('line'), k('waiters'), k('meta')]
        self.channel, self.cache = k('wake'), k('release')

    def acquire(self, who, weight=1):
        # A nonce holds no ':' (a record's fields are ':'-separated; the
        # client sends 32 hex digits).
        args = [who, LEASE, TTL, self.channel, 'queue', 0, 'n' + who.replace(':', '-'), '']
        if self.kind == 'sem':
            args += [weight, 4]
        return ('EVALSHA', self.acq, 4, *self.keys, *args)

    def release(self, who, i):
        return ('EVALSHA', self.rel, 5, *self.keys, f'{self.cache}:r{i}', who, TTL,
                self.channel, CACHE, '', '')


def run(label, obj, n, line_of, first, capacity_of):
    """`line_of(i)`: the i-th waiter's request (an id factory and its
    weight); `first`: the first holders' requests, granted at once."""
    holders = collections.deque()
    line = collections.deque()
    seq = [0]

    def fresh(template):
        seq[0] += 1
        return template(seq[0])

    # The first holders take everything, then the line queues behind.
    for template, weight in first:
        who = fresh(template)
        reply = cmd(*obj.acquire(who, weight))
        # The lock's uncontended take (acquire_fast.lua) replies with the
        # token alone, an integer; the other kinds' takes with {1, token}.
        assert isinstance(reply, int) or reply[0] == 1, (label, reply)
        holders.append((who, weight, template))
    calls = []
    for i in range(n):
        template, weight = line_of(i)
        who = fresh(template)
        calls.append(obj.acquire(who, weight))
        line.append((who, weight, template))
    pipeline(calls)
    assert cmd('ZCARD', obj.keys[1]) == n

    def admit():
        # FIFO: the head while it fits (capacity_of says what fits beside
        # whom); nobody passes a head that does not.
        while line and capacity_of(holders, line[0]):
            holders.append(line.popleft())

    def cycle(i):
        who, weight, template = holders.popleft()
        new = fresh(template)
        reply = cmd(*obj.acquire(new, weight))
        assert reply[0] == 3, (label, reply)
        line.append((new, weight, template))
        assert cmd(*obj.release(who, i)) == 1, (label, who)
        admit()

    for i in range(50):
        cycle(i)
    # A mixed line is a group of readers short while they hold.
    assert cmd('ZCARD', obj.keys[1]) >= n - 3, label
    # Instrumented only while measured (the server starts without): a line
    # of 10,000 is made in seconds rather than many minutes.
    subprocess.run(['callgrind_control', '-i', 'on', PID], capture_output=True)
    subprocess.run(['callgrind_control', '-z', PID], capture_output=True)
    for i in range(CYCLES):
        cycle(50 + i)
    subprocess.run(['callgrind_control', '-d', PID], capture_output=True)
    subprocess.run(['callgrind_control', '-i', 'off', PID], capture_output=True)
    assert cmd('ZCARD', obj.keys[1]) >= n - 3, label
    time.sleep(0.5)
    newest = max(glob.glob(DIR + '/cg.*'), key=os.path.getmtime)
    total = int([l for l in open(newest) if l.startswith('summary:')][0].split()[1])
    os.rename(newest, f'{DIR}/out-{label}-{n}')
    print(f'{label:<34} {n:>6} waiters {total / CYCLES:>10.0f} instructions per acquisition',
          flush=True)
    for key in cmd('KEYS', '*'):
        cmd('DEL', key)


def one_at_a_time(holders, head):
    return not holders


def rw_fits(holders, head):
    who = head[0]
    if who.endswith(':write'):
        return not holders
    return all(not h[0].endswith(':write') for h in holders)


def sem_fits(holders, head):
    return sum(h[1] for h in holders) + head[1] <= 4


for n in SIZES:
    tag = f'q{n}'
    reader, writer = (lambda k: f'c:{k}'), (lambda k: f'c:{k}:write')
    run('lock (fair)', Lock(tag + 'l'), n, lambda i: (reader, 1), [(reader, 1)], one_at_a_time)
    run('read-write, writers', Weighted(tag + 'w', 'rw'), n, lambda i: (writer, 1),
        [(writer, 1)], rw_fits)
    run('read-write, W + 3 R groups', Weighted(tag + 'm', 'rw'), n,
        lambda i: (writer if i % 4 == 3 else reader, 1), [(writer, 1)], rw_fits)
    run('semaphore of 4, requests for 1', Weighted(tag + 's', 'sem'), n,
        lambda i: (reader, 1), [(reader, 1)] * 4, sem_fits)

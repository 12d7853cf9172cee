#!/usr/bin/env python3
# Driver of scripts/script-cost: runs uncontended lock + unlock pairs of the
# lock scripts found in DIR/scripts with EVALSHA over raw RESP, and reports
# the server's instructions per pair (callgrind dumps in DIR) or, with PID
# 'cpu', its CPU per pair and commands per pair (INFO).
#   [PAIRS=N] script-cost-driver.py PORT PID|cpu DIR LABEL...
# PAIRS: the pairs measured per label (default 500 under callgrind, 20,000
# for the CPU). Every reply is checked: a script whose arguments or replies
# changed fails here instead of measuring an error path.
import socket, subprocess, sys, time, glob, os
P=int(sys.argv[1]); PID=sys.argv[2]; DIR=sys.argv[3]
PAIRS=int(os.environ.get('PAIRS') or (20000 if PID=='cpu' else 500))
s=socket.create_connection(('127.0.0.1',P)); f=s.makefile('rb')
def frame(*a):
    out=b'*%d\r\n'%len(a)
    for x in a:
        x=x if isinstance(x,bytes) else str(x).encode()
        out+=b'$%d\r\n%s\r\n'%(len(x),x)
    return out
def cmd(*a):
    s.sendall(frame(*a)); return rd()
def rd():
    l=f.readline()
    t=l[:1]; r=l[1:-2]
    if t==b'+': return r.decode()
    if t==b'-': raise Exception(r.decode())
    if t==b':': return int(r)
    if t==b'$':
        n=int(r)
        if n<0: return None
        d=f.read(n+2)[:-2]; return d.decode()
    if t==b'*':
        n=int(r); return None if n<0 else [rd() for _ in range(n)]
def load(path): return cmd('SCRIPT','LOAD',open(path).read())
def info():
    t=cmd('INFO','cpu'); cpu=0.0
    for l in t.splitlines():
        if l.startswith('used_cpu_user:') or l.startswith('used_cpu_sys:'): cpu+=float(l.split(':')[1])
    return cpu
def calls():
    t=cmd('INFO','commandstats'); n=0
    for l in t.splitlines():
        if l.startswith('cmdstat_') and not l.startswith('cmdstat_info') and not l.startswith('cmdstat_config'):
            n+=int(l.split('calls=')[1].split(',')[0])
    return n
def measure(label, pair):
    n=PAIRS
    if PID=='cpu':
        for i in range(200): pair(i)
        cmd('CONFIG','RESETSTAT'); c0=info()
        for i in range(n): pair(i)
        c1=info(); k=calls()
        v=(c1-c0)*1e6/n
        print(f'{label:<28} {k/n:>6.2f} commands {v:>8.1f} server CPU us per pair', flush=True)
        return v
    for i in range(50): pair(i)
    subprocess.run(['callgrind_control','-z',PID],capture_output=True)
    for i in range(n): pair(i)
    subprocess.run(['callgrind_control','-d',PID],capture_output=True)
    time.sleep(0.5)
    newest=max(glob.glob(DIR+'/cg.*'),key=os.path.getmtime)
    tot=[l for l in open(newest) if l.startswith('summary:')][0].split()[1]
    print(f'{label:<28} {int(tot)/n:>10.0f} instructions per pair', flush=True)
    return int(tot)/n
K=['fairlock:{b}:lock','fairlock:{b}:queue','fairlock:{b}:alive','fairlock:{b}:meta','fairlock:{b}:leases']
def taken(r):
    # The uncontended take's token: an integer reply since acquire_fast.lua
    # (the fast path), {1, token} from the scripts of older revisions.
    if isinstance(r,int): return r
    assert isinstance(r,list) and r[0]==1,r
    return r[1]
K2=['fairlock:{b}:lock','fairlock:{b}:line','fairlock:{b}:waiters']
def native(acq, rel, kind, layout):
    # The arguments as the client sends them, with the client's label
    # (its labels key) from layout version 2 on.
    def pair(i):
        if layout==2:
            token=taken(cmd('EVALSHA',acq,3,*K2,'o:1',30000,30000,kind[0]+'q',0,f'n{i}','host:1234'))
            r=cmd('EVALSHA',rel,4,*K2,f'fairlock:{{b}}:release:r{i}{time.time()}','o:1',26000,str(token),'',kind[0])
        else:
            token=taken(cmd('EVALSHA',acq,5,*K,'o:1',30000,30000,'fairlock:{b}:wake',kind,'queue',0,f'n{i}'))
            r=cmd('EVALSHA',rel,6,*K,f'fairlock:{{b}}:release:r{i}{time.time()}','o:1',30000,'fairlock:{b}:wake',26000,str(token),'',kind)
        assert r==1,r
    return pair
RK=['q','redisson_lock_queue:{q}','redisson_lock_timeout:{q}']
def rfair(acq, rel):
    def pair(i):
        r=cmd('EVALSHA',acq,3,*RK,30000,'o:1',300000,int(time.time()*1000),'queue',0)
        assert r[0]==1,r
        r=cmd('EVALSHA',rel,5,*RK,'redisson_lock__channel:{q}',f'redisson_unlock_latch:{{q}}:{i}{time.time()}','o:1',30000,int(time.time()*1000),26000)
        assert r==1,r
    return pair
def rplain(acq, rel):
    def pair(i):
        r=cmd('EVALSHA',acq,1,'p',30000,'o:1',0)
        assert r[0]==1,r
        r=cmd('EVALSHA',rel,3,'p','redisson_lock__channel:{p}',f'redisson_unlock_latch:{{p}}:{i}{time.time()}','o:1',30000,26000)
        assert r==1,r
    return pair
unlock=cmd('SCRIPT','LOAD',"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end")
def rs(i):
    assert cmd('SET','rs',f'v{i}','NX','PX',30000)=='OK'
    assert cmd('EVALSHA',unlock,1,'rs',f'v{i}')==1
d=DIR+'/scripts/'
base=measure('rslock-equivalent', rs)
for label in sys.argv[4:]:
    v,what=label.split(':')
    if not open(d+v+'-nacq.lua').read().strip():
        print(f'{label:<28} (no native scripts at this revision)', flush=True)
        continue
    layout=int(open(d+v+'-layout').read())
    if what=='native-fair': p=native(load(d+v+'-nacq.lua'),load(d+v+'-nrel.lua'),'fair',layout)
    if what=='native-nonfair': p=native(load(d+v+'-nacq.lua'),load(d+v+'-nrel.lua'),'nonfair',layout)
    if what=='redisson-fair': p=rfair(load(d+v+'-rfacq.lua'),load(d+v+'-rfrel.lua'))
    if what=='redisson-nonfair': p=rplain(load(d+v+'-rnacq.lua'),load(d+v+'-rnrel.lua'))
    # A clean name for each: the layouts' lock keys have different types.
    cmd('DEL',*K,*K2,'fairlock:{b}:labels','q','p')
    x=measure(label,p); print(f'   = {x/base:.2f} x rslock-equivalent')

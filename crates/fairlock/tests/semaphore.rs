//! The semaphores under the redisson protocol: `LockClient::semaphore`
//! (Redisson's `RPermitExpirableSemaphore`) and `counting_semaphore`
//! (`RSemaphore`), byte for byte (the keys, values, scores and messages of
//! docs/redisson-protocol.md, "Semaphores"), shared with a stand-in of a
//! Java client (Redisson's steps as test-side scripts), never more than
//! the total out, wake-ups, leases (a dead holder's permits come back, the
//! watchdog keeps live ones), `lost()`, bad input and other data, the
//! blocking API, cancellation, a force-release and a Redis Cluster. The
//! native protocol's semaphore has its own tests (`semaphore_native.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use fairlock::{Error, LockClient, PermitLease, Protocol};
use fairlock_test_support as support;
use support::listener::Listener;
use support::{RedisServer, eventually};

const NOEXP: &str = "922337203685477";

async fn redisson(server: &RedisServer) -> LockClient {
    support::client(server, Protocol::Redisson).await
}

/// A client whose waiters try again only every 20 s (a third of a 60 s
/// waiter ttl) when no message wakes them: a waiter that gets permits
/// within a few seconds was woken by a message (or its `:T` hint).
async fn woken_by_messages_only(server: &RedisServer) -> LockClient {
    support::client_with(server, Protocol::Redisson, |c| {
        c.waiter_ttl(Duration::from_secs(60))
    })
    .await
}

/// A client whose watchdog lease is `lease` (renewed every third of it).
async fn with_lease(server: &RedisServer, lease: Duration) -> LockClient {
    support::client_with(server, Protocol::Redisson, |c| c.lease(lease)).await
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// The taken permits of `name` (no braces): (hex id, score) sorted by id.
fn taken(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    let flat: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(format!("{{{name}}}:timeout"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut server.conn())
        .unwrap();
    let mut pairs: Vec<(String, String)> = flat
        .chunks(2)
        .map(|pair| {
            assert_eq!(pair[0].len(), 16, "a permit id is 16 raw bytes");
            (hex(&pair[0]), String::from_utf8(pair[1].clone()).unwrap())
        })
        .collect();
    pairs.sort();
    pairs
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// Every key on the server but fairlock's own labels.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.retain(|k| !k.starts_with("fairlock:labels:"));
    keys.sort();
    keys
}

fn count(server: &RedisServer, name: &str) -> Option<String> {
    server.cmd(&["GET", name])
}

/// The steps a Java Redisson client runs (docs/redisson-protocol.md,
/// "Semaphores"), written for this test as a stand-in.
mod java {
    use super::*;

    /// tryAcquire(n[, lease]): KEYS name, taken, channel; ARGV n, expiry,
    /// now, NOEXP, publish command, ids (raw bytes). 'OK', ':T' or nil.
    const ACQUIRE: &str = r"
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local v = redis.call('incrby', KEYS[1], #expired)
  if v > 0 then
    redis.call(ARGV[5], KEYS[3], v)
  end
end
local v = redis.call('get', KEYS[1])
if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 6, #ARGV do
    redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and first[2] ~= ARGV[4] then
  return ':' .. first[2]
end
return nil";

    /// tryRelease(id): KEYS name, channel, taken; ARGV id, 1, now, publish.
    const RELEASE: &str = r"
local expire = redis.call('zscore', KEYS[3], ARGV[1])
local removed = redis.call('zrem', KEYS[3], ARGV[1])
if removed == 0 then
  return 0
end
local v = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], v)
if tonumber(expire) <= tonumber(ARGV[3]) then
  return 0
end
return 1";

    /// trySetPermits(n): KEYS name, channel; ARGV n, publish.
    const TRY_SET: &str = r"
local v = redis.call('get', KEYS[1])
if v == false then
  redis.call('set', KEYS[1], ARGV[1])
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0";

    /// availablePermits: KEYS name, taken, channel; ARGV now, publish.
    const AVAILABLE: &str = r"
local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1])
if #expired > 0 then
  redis.call('zrem', KEYS[2], unpack(expired))
  local v = redis.call('incrby', KEYS[1], #expired)
  if v > 0 then
    redis.call(ARGV[2], KEYS[3], v)
  end
  return v
end
local v = redis.call('get', KEYS[1])
if v == false then
  return 0
end
return tonumber(v)";

    /// RSemaphore tryAcquire(n): KEYS name; ARGV n. 1 or 0.
    const PLAIN_ACQUIRE: &str = r"
local v = redis.call('get', KEYS[1])
if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return 1
end
return 0";

    /// RSemaphore release(n): KEYS name, channel; ARGV n, publish.
    const PLAIN_RELEASE: &str = r"
local v = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], v)";

    fn eval<T: redis::FromRedisValue>(
        server: &RedisServer,
        script: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> T {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(keys.len()).arg(keys);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.query(&mut server.conn()).expect("stand-in script")
    }

    fn taken(name: &str) -> String {
        format!("{{{name}}}:timeout")
    }

    fn channel(name: &str) -> String {
        format!("redisson_sc:{{{name}}}")
    }

    /// A new random permit id (16 bytes).
    pub fn new_id() -> Vec<u8> {
        (0..16).map(|_| rand::random::<u8>()).collect()
    }

    /// tryAcquire with these ids until `expiry` (or NOEXP); the raw reply.
    pub fn acquire(
        server: &RedisServer,
        name: &str,
        ids: &[Vec<u8>],
        expiry: Option<i64>,
    ) -> Option<String> {
        acquire_at(server, name, ids, expiry, now_ms())
    }

    /// [`acquire`] on a Java client whose clock reads `now`.
    pub fn acquire_at(
        server: &RedisServer,
        name: &str,
        ids: &[Vec<u8>],
        expiry: Option<i64>,
        now: i64,
    ) -> Option<String> {
        let n = ids.len().to_string();
        let expiry = expiry.map_or(NOEXP.to_owned(), |e| e.to_string());
        let now = now.to_string();
        let mut args: Vec<&[u8]> = vec![
            n.as_bytes(),
            expiry.as_bytes(),
            now.as_bytes(),
            NOEXP.as_bytes(),
            b"PUBLISH",
        ];
        args.extend(ids.iter().map(Vec::as_slice));
        eval(
            server,
            ACQUIRE,
            &[name, &taken(name), &channel(name)],
            &args,
        )
    }

    /// tryRelease(id): 1 released within its lease, 0 otherwise.
    pub fn release(server: &RedisServer, name: &str, id: &[u8]) -> i64 {
        let now = now_ms().to_string();
        eval(
            server,
            RELEASE,
            &[name, &channel(name), &taken(name)],
            &[id, b"1", now.as_bytes(), b"PUBLISH"],
        )
    }

    pub fn try_set_permits(server: &RedisServer, name: &str, n: u32) -> i64 {
        let n = n.to_string();
        eval(
            server,
            TRY_SET,
            &[name, &channel(name)],
            &[n.as_bytes(), b"PUBLISH"],
        )
    }

    pub fn available(server: &RedisServer, name: &str) -> i64 {
        let now = now_ms().to_string();
        eval(
            server,
            AVAILABLE,
            &[name, &taken(name), &channel(name)],
            &[now.as_bytes(), b"PUBLISH"],
        )
    }

    pub fn plain_acquire(server: &RedisServer, name: &str, n: u32) -> i64 {
        let n = n.to_string();
        eval(server, PLAIN_ACQUIRE, &[name], &[n.as_bytes()])
    }

    pub fn plain_release(server: &RedisServer, name: &str, n: u32) {
        let n = n.to_string();
        let _: () = eval(
            server,
            PLAIN_RELEASE,
            &[name, &channel(name)],
            &[n.as_bytes(), b"PUBLISH"],
        );
    }
}

/// Redisson's test vectors for `RPermitExpirableSemaphore` `pes`
/// (docs/redisson-protocol.md): trySetPermits(2) writes `2` and publishes
/// it; a 10 s lease taken at now = 1700000000000 scores 1700000010000 with
/// a 16-byte member; a permit without a lease scores NOEXP; a further
/// attempt is told `:1700000010000` (the Java stand-in's reply); nothing
/// is published on acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_permits_are_written_as_redisson_writes_them() {
    let server = RedisServer::start();
    const NOW: i64 = 1_700_000_000_000;
    let offset = NOW - now_ms();
    // The client's clock reads NOW + the time since here (to the ms).
    let clock = Instant::now();
    let client =
        support::client_with(&server, Protocol::Redisson, |c| c.clock_offset_ms(offset)).await;
    let pes = client.semaphore("pes", 2).unwrap();
    let mut listener = Listener::new(&server, "redisson_sc:{pes}");

    // trySetPermits(2), by the first call.
    assert_eq!(pes.available().await.unwrap(), 2);
    assert_eq!(count(&server, "pes").as_deref(), Some("2"));
    assert_eq!(server.cmd::<String>(&["TYPE", "pes"]), "string");
    assert_eq!(server.cmd::<i64>(&["PTTL", "pes"]), -1);
    assert_eq!(listener.drain(&server), ["2"]);

    let started = Instant::now();
    let leased = pes
        .acquire_with(
            1,
            Some(Duration::ZERO),
            PermitLease::Fixed(Duration::from_secs(10)),
        )
        .await
        .unwrap()
        .expect("free");
    // Read on the client's clock (NOW + the time since `clock`) between
    // `started` and now, plus a ms for the truncations.
    let (earliest, latest) = (
        (started - clock).as_millis() as i64,
        clock.elapsed().as_millis() as i64 + 1,
    );
    assert_eq!(count(&server, "pes").as_deref(), Some("1"));
    assert_eq!(server.cmd::<String>(&["TYPE", "{pes}:timeout"]), "zset");
    let permits = taken(&server, "pes");
    assert_eq!(permits.len(), 1);
    let (id, score) = &permits[0];
    assert_eq!(
        leased.ids(),
        std::slice::from_ref(id),
        "the guard's id is the member"
    );
    assert_eq!(id.len(), 32);
    let score: i64 = score.parse().expect("an integer score, no fraction");
    assert!(
        (NOW + 10_000 + earliest..=NOW + 10_000 + latest).contains(&score),
        "{score}: the client clock now + 10 s"
    );

    let forever = pes
        .acquire_with(1, Some(Duration::ZERO), PermitLease::Unbounded)
        .await
        .unwrap()
        .expect("free");
    assert_eq!(count(&server, "pes").as_deref(), Some("0"));
    let scores: Vec<String> = taken(&server, "pes").into_iter().map(|(_, s)| s).collect();
    assert!(scores.contains(&NOEXP.to_owned()), "{scores:?}");

    // A further attempt: busy, the soonest lease named as Redisson names it.
    assert!(pes.try_acquire(1).await.unwrap().is_none());
    // (A Java client on the same clock: on a real clock the permit of 2023
    // would be long expired, and reclaimed.)
    let java_now = NOW + clock.elapsed().as_millis() as i64;
    let reply = java::acquire_at(&server, "pes", &[java::new_id()], None, java_now);
    assert_eq!(reply, Some(format!(":{score}")));
    assert_eq!(keys(&server), ["pes", "{pes}:timeout"]);
    assert!(
        listener.drain(&server).is_empty(),
        "nothing published on acquire"
    );

    // Releases: the count back, the number released published.
    leased.release().await.unwrap();
    forever.release().await.unwrap();
    assert_eq!(count(&server, "pes").as_deref(), Some("2"));
    assert!(taken(&server, "pes").is_empty());
    assert_eq!(listener.drain(&server), ["1", "1"]);
}

/// Redisson's test vectors for `RSemaphore` `sem`: trySetPermits(3) writes
/// `3` and publishes it; acquire(2) leaves `1`, no TTL, no other key,
/// nothing published; release(2) writes `3` and publishes `3`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_permits_are_written_as_redisson_writes_them() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.counting_semaphore("sem", 3).unwrap();
    let mut listener = Listener::new(&server, "redisson_sc:{sem}");
    assert_eq!(sem.available().await.unwrap(), 3);
    assert_eq!(listener.drain(&server), ["3"]);
    let two = sem.acquire(2).await.unwrap();
    assert_eq!(two.permits(), 2);
    assert_eq!(count(&server, "sem").as_deref(), Some("1"));
    assert_eq!(server.cmd::<i64>(&["PTTL", "sem"]), -1);
    assert_eq!(keys(&server), ["sem"]);
    assert!(listener.drain(&server).is_empty());
    two.release().await.unwrap();
    assert_eq!(count(&server, "sem").as_deref(), Some("3"));
    assert_eq!(listener.drain(&server), ["3"]);
    // An existing semaphore keeps its count (trySetPermits does nothing).
    let other = client.counting_semaphore("sem", 10).unwrap();
    assert_eq!(other.available().await.unwrap(), 3);
    assert!(listener.drain(&server).is_empty());
}

/// A Java client and this one on one expirable semaphore: each sees the
/// other's permits, each one's release wakes the other's waiter, and a
/// Java holder that dies gives its leased permit back when the lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_expirable_semaphore() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    assert_eq!(java::try_set_permits(&server, "mixed", 2), 1);
    let sem = client.semaphore("mixed", 5).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2, "Java's total is kept");

    // Java takes one (no lease), we take the other; both are out.
    let java_id = java::new_id();
    assert_eq!(
        java::acquire(&server, "mixed", std::slice::from_ref(&java_id), None).as_deref(),
        Some("OK")
    );
    let ours = sem.try_acquire(1).await.unwrap().expect("one left");
    assert_eq!(
        java::acquire(&server, "mixed", &[java::new_id()], None),
        Some(format!(
            ":{}",
            taken(&server, "mixed")
                .iter()
                .find(|(_, s)| s != NOEXP)
                .unwrap()
                .1
        ))
    );
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let info = sem.inspect().await.unwrap();
    assert_eq!((info.total, info.available), (2, 0));
    assert!(
        info.taken
            .iter()
            .any(|p| p.id == hex(&java_id) && p.remaining_lease.is_none())
    );

    // Our waiter is woken by the Java release's message (the new count).
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    assert_eq!(java::release(&server, "mixed", &java_id), 1);
    let woken = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the Java release")
        .unwrap()
        .unwrap();

    // Our release is a permit a Java client takes, announced on the channel.
    let mut listener = Listener::new(&server, "redisson_sc:{mixed}");
    ours.release().await.unwrap();
    assert_eq!(listener.drain(&server), ["1"]);
    let java_again = java::new_id();
    assert_eq!(
        java::acquire(
            &server,
            "mixed",
            std::slice::from_ref(&java_again),
            Some(now_ms() + 300)
        )
        .as_deref(),
        Some("OK")
    );
    // That Java holder dies: its permit comes back when its lease ends, at
    // the attempt of a waiter told when it ends (`:T`), with no message.
    let started = Instant::now();
    let after = sem
        .try_acquire_for(1, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the dead holder's permit came back");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(java::release(&server, "mixed", &java_again), 0, "reclaimed");
    woken.release().await.unwrap();
    after.release().await.unwrap();
    assert_eq!(java::available(&server, "mixed"), 2);
}

/// A Java client and this one on one plain semaphore: the counts add up
/// both ways and a Java release wakes our waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_plain_semaphore() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    let sem = client.counting_semaphore("plain", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    assert_eq!(java::plain_acquire(&server, "plain", 2), 1);
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(2).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished());
    java::plain_release(&server, "plain", 2);
    let two = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the Java release")
        .unwrap()
        .unwrap();
    assert_eq!(java::plain_acquire(&server, "plain", 1), 0);
    two.release().await.unwrap();
    assert_eq!(java::plain_acquire(&server, "plain", 2), 1);
}

/// Eight tasks on three permits (taking one or two at a time): never more
/// than three out at once, as the tasks count them and as Redis holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_the_total_is_out() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.semaphore("bounded", 3).unwrap();
    let out = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (sem, out, most) = (sem.clone(), Arc::clone(&out), Arc::clone(&most));
            tokio::spawn(async move {
                for round in 0..6 {
                    let n = 1 + (t + round) % 2;
                    let permits = sem.acquire(n).await.unwrap();
                    let now = out.fetch_add(i64::from(n), Ordering::SeqCst) + i64::from(n);
                    most.fetch_max(now, Ordering::SeqCst);
                    assert!(now <= 3, "{now} permits out");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    out.fetch_sub(i64::from(n), Ordering::SeqCst);
                    permits.release().await.unwrap();
                }
            })
        })
        .collect();
    let watcher = {
        let server_url = server.url();
        tokio::task::spawn_blocking(move || {
            let mut conn = redis::Client::open(server_url)
                .unwrap()
                .get_connection()
                .unwrap();
            let mut most_in_redis = 0;
            for _ in 0..200 {
                let out: i64 = redis::cmd("ZCARD")
                    .arg("{bounded}:timeout")
                    .query(&mut conn)
                    .unwrap();
                most_in_redis = most_in_redis.max(out);
                std::thread::sleep(Duration::from_millis(2));
            }
            most_in_redis
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    let most_in_redis = watcher.await.unwrap();
    assert!(most_in_redis <= 3, "{most_in_redis} permits in Redis");
    assert!(most.load(Ordering::SeqCst) >= 2, "the permits were shared");
    assert_eq!(sem.available().await.unwrap(), 3);
    assert!(taken(&server, "bounded").is_empty());
}

/// A waiter is woken by a release's message: with polls 20 s apart, it
/// gets the permits within a few seconds of the release and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    let sem = client.semaphore("wake", 2).unwrap();
    let held = sem.acquire(2).await.unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "no permit free");
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert_eq!(got.ids().len(), 1);
    got.release().await.unwrap();
}

/// A holder that dies (its process gone: a runtime shut down with the
/// guard leaked, the watchdog stopped with it) gives its permits back when
/// their lease ends, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permits_come_back_after_the_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(3);
    let url = server.url();
    // The dead process: its own runtime, shut down after the leak.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let config = fairlock::ClientConfig::from_url(&url)
                .unwrap()
                .protocol(Protocol::Redisson)
                .lease(lease);
            let client = LockClient::with_config(config).await.unwrap();
            let sem = client.semaphore("crash", 2).unwrap();
            std::mem::forget(sem.acquire(2).await.unwrap());
        });
        runtime.shutdown_background();
    })
    .join()
    .unwrap();
    let client = redisson(&server).await;
    let sem = client.semaphore("crash", 2).unwrap();
    assert!(sem.try_acquire(1).await.unwrap().is_none(), "still leased");
    let got = sem
        .try_acquire_for(2, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("back after the lease");
    got.release().await.unwrap();

    // A guard leaked in a live process with a fixed lease: the same.
    let leaked = sem
        .acquire_with(1, None, PermitLease::Fixed(Duration::from_millis(1500)))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(leaked);
    assert_eq!(sem.available().await.unwrap(), 1);
    eventually(Duration::from_secs(10), "the leaked permit is back", || {
        // An ordinary reader reclaims: Redis alone gives nothing back.
        java::available(&server, "crash") == 2
    })
    .await;
}

/// The watchdog keeps permits well past their first lease (renewing them
/// with updateLeaseTime's semantics), and keeps others out meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_permits_past_their_first_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let client = with_lease(&server, lease).await;
    let other = redisson(&server).await;
    let sem = client.semaphore("kept", 1).unwrap();
    let held = sem.acquire(1).await.unwrap();
    let first = taken(&server, "kept")[0].1.parse::<i64>().unwrap();
    tokio::time::sleep(lease * 4).await;
    assert!(held.is_held());
    let later = taken(&server, "kept")[0].1.parse::<i64>().unwrap();
    assert!(later > first + 900, "renewed: {first} -> {later}");
    let theirs = other.semaphore("kept", 1).unwrap();
    assert!(theirs.try_acquire(1).await.unwrap().is_none(), "still ours");
    held.release().await.unwrap();
    assert!(theirs.try_acquire(1).await.unwrap().is_some());
}

/// A permit removed under its guard (an operator's ZREM) is found by the
/// next renewal: `lost()` resolves, `is_held()` turns false, and the
/// release says the permits were lost, giving back the one left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_resolves_when_a_permit_is_taken_away() {
    let server = RedisServer::start();
    let client = with_lease(&server, Duration::from_millis(600)).await;
    let sem = client.semaphore("taken-away", 3).unwrap();
    let held = sem.acquire(2).await.unwrap();
    let lost = held.lost();
    let removed: i64 = redis::cmd("ZREM")
        .arg("{taken-away}:timeout")
        .arg(unhex(&held.ids()[0]))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(removed, 1);
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() resolves at the next renewal");
    assert!(!held.is_held());
    let err = held.release().await.expect_err("a permit was lost");
    assert!(err.is_lock_lost(), "{err:?}");
    // The other permit came back; the removed one is gone from the total.
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(taken(&server, "taken-away").is_empty());
}

/// Bad counts and other data: typed errors, nothing written or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_other_data_are_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.semaphore("small", 2).unwrap();
    for n in [0, 3, 10_001, u32::MAX] {
        let err = sem.try_acquire(n).await.expect_err("refused");
        assert!(matches!(err, Error::InvalidConfig(_)), "{n}: {err:?}");
    }
    // Above the total: refused, nothing taken.
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(taken(&server, "small").is_empty());
    let err = sem
        .acquire_with(1, None, PermitLease::Fixed(Duration::ZERO))
        .await
        .expect_err("a zero lease");
    assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}");
    let plain = client.counting_semaphore("small-plain", 2).unwrap();
    for n in [0, 3] {
        let err = plain.try_acquire(n).await.expect_err("refused");
        assert!(matches!(err, Error::InvalidConfig(_)), "{n}: {err:?}");
    }

    // Application data under the name: a hash, garbage in the count, a
    // string where the taken permits go.
    let _: () = server.cmd(&["HSET", "app-hash", "field", "1"]);
    let _: () = server.cmd(&["SET", "app-text", "not a number"]);
    let _: () = server.cmd(&["SET", "{app-set}:timeout", "mine"]);
    for name in ["app-hash", "app-text", "app-set"] {
        let before: Vec<String> = keys(&server);
        let sem = client.semaphore(name, 2).unwrap();
        let err = sem.try_acquire(1).await.expect_err("not a semaphore");
        assert!(
            matches!(err, Error::NotALock { .. } | Error::WrongType { .. }),
            "{name}: {err:?}"
        );
        for err in [
            sem.available().await.expect_err(name),
            sem.inspect().await.expect_err(name),
            sem.set_permits(5).await.expect_err(name),
        ] {
            assert!(
                matches!(err, Error::NotALock { .. } | Error::WrongType { .. }),
                "{name}: {err:?}"
            );
        }
        let plain = client.counting_semaphore(name, 2).unwrap();
        if name != "app-set" {
            let err = plain.try_acquire(1).await.expect_err("not a semaphore");
            assert!(
                matches!(err, Error::NotALock { .. } | Error::WrongType { .. }),
                "{name}: {err:?}"
            );
        }
        assert_eq!(keys(&server), before, "{name}: nothing written");
    }
    assert_eq!(server.cmd::<String>(&["GET", "app-text"]), "not a number");
    assert_eq!(server.cmd::<String>(&["HGET", "app-hash", "field"]), "1");
    assert_eq!(server.cmd::<String>(&["GET", "{app-set}:timeout"]), "mine");
    assert_eq!(
        server.cmd::<Option<String>>(&["GET", "app-set"]),
        None,
        "not initialised"
    );

    // Names that are other objects' keys.
    for name in ["redisson_sc:{x}", "{x}:timeout", "fairlock:x", ""] {
        let err = client.semaphore(name, 1).expect_err(name);
        assert!(matches!(err, Error::InvalidName { .. }), "{name}: {err:?}");
    }
}

/// `set_permits` moves the total as Redisson's setPermits does: the count
/// by the difference (below 0 while more are taken), `n` published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_moves_the_total() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.semaphore("resized", 3).unwrap();
    let mut listener = Listener::new(&server, "redisson_sc:{resized}");
    let two = sem.acquire(2).await.unwrap();
    sem.set_permits(1).await.unwrap();
    assert_eq!(count(&server, "resized").as_deref(), Some("-1"));
    let info = sem.inspect().await.unwrap();
    assert_eq!((info.total, info.available, info.taken.len()), (1, -1, 2));
    assert!(info.taken.iter().all(|p| p.remaining_lease.is_some()));
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    two.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1);
    sem.set_permits(4).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 4);
    assert_eq!(listener.drain(&server), ["3", "1", "2", "4"]);
}

/// Dropped acquisitions never leave permits taken: waits dropped while
/// waiting, and attempts cut at every point of their call (some answered,
/// some not), are undone; dropped guards give their permits back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_nothing_taken() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.semaphore("cancel", 2).unwrap();
    let plain = client.counting_semaphore("cancel-plain", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    assert_eq!(plain.available().await.unwrap(), 2);
    for i in 0..200_u64 {
        let cut = Duration::from_micros(i * 7 % 900);
        let _ = tokio::time::timeout(cut, sem.acquire(1 + (i % 2) as u32)).await;
        let _ = tokio::time::timeout(cut, plain.acquire(1 + (i % 2) as u32)).await;
    }
    // Every attempt's permits are back at once (not after their 30 s
    // lease): the undo gave exactly them back.
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(taken(&server, "cancel").is_empty());
    assert_eq!(plain.available().await.unwrap(), 2);

    // A wait dropped while waiting.
    let held = sem.try_acquire(2).await.unwrap().expect("all back");
    assert!(
        tokio::time::timeout(Duration::from_millis(200), sem.acquire(1))
            .await
            .is_err()
    );
    drop(held);
    let held = plain.acquire(2).await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), plain.acquire(1))
            .await
            .is_err()
    );
    drop(held);
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(taken(&server, "cancel").is_empty());
    assert_eq!(plain.available().await.unwrap(), 2);
}

/// The blocking API: the same semaphores without a runtime.
#[test]
fn the_blocking_api_takes_and_gives_back() {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Redisson);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let sem = client.semaphore("blocking", 2).unwrap();
    let one = sem.acquire(1).unwrap();
    assert!(one.is_held());
    assert!(!one.wait_lost(Duration::from_millis(10)).unwrap());
    let two = sem.try_acquire(1).unwrap().expect("one left");
    assert!(
        sem.try_acquire_for(1, Duration::from_millis(100))
            .unwrap()
            .is_none()
    );
    let other = sem.clone();
    let waiter = std::thread::spawn(move || other.acquire(2).map(|p| p.ids().len()));
    one.release().unwrap();
    drop(two); // gives back before it returns
    assert_eq!(waiter.join().unwrap().unwrap(), 2);
    assert_eq!(sem.available().unwrap(), 2);
    let taken = sem.acquire(2).unwrap();
    assert_eq!(sem.force_release().unwrap(), 2);
    assert_eq!(sem.available().unwrap(), 2);
    drop(taken);
    let plain = client.counting_semaphore("blocking-plain", 1).unwrap();
    let taken = plain.acquire(1).unwrap();
    assert!(plain.try_acquire(1).unwrap().is_none());
    drop(taken);
    assert_eq!(plain.available().unwrap(), 1);
}

/// Under the native protocol the semaphore is the native one (its tests:
/// `semaphore_native.rs`), and Redisson's plain semaphore is refused with
/// a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_has_its_own_semaphore_and_no_plain_one() {
    let server = RedisServer::start();
    let client = support::client(&server, Protocol::Native).await;
    let permits = client.semaphore("s", 1).unwrap().acquire(1).await.unwrap();
    assert!(permits.token().is_some(), "the native semaphore's");
    permits.release().await.unwrap();
    let err = client
        .counting_semaphore("s", 1)
        .expect_err("redisson's only");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("redisson protocol only"), "{err}");
}

/// A reclaim announces the permits it gives back (Redisson's waiters, in
/// other processes, wait for that message): the new count, once, and only
/// when it is above 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reclaim_announces_the_permits_it_gives_back() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let sem = client.semaphore("reclaimed", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let mut listener = Listener::new(&server, "redisson_sc:{reclaimed}");
    let ids = [java::new_id(), java::new_id()];
    let expiry = now_ms() + 100;
    assert_eq!(
        java::acquire(&server, "reclaimed", &ids, Some(expiry)).as_deref(),
        Some("OK")
    );
    eventually(Duration::from_secs(5), "the Java lease ended", || {
        now_ms() > expiry
    })
    .await;
    assert!(listener.drain(&server).is_empty());
    assert_eq!(sem.available().await.unwrap(), 2, "reclaimed");
    assert_eq!(listener.drain(&server), ["2"]);
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(
        listener.drain(&server).is_empty(),
        "nothing more to reclaim"
    );
}

/// On a Redis Cluster every key of a semaphore is in the slot of its name
/// (with or without a hash tag of its own), releases announce themselves
/// with sharded pub/sub (`SPUBLISH`, Redisson's choice on Redis 7: a waiter
/// that polls only every 20 s is woken at once), and the watchdog renews
/// permits on the slot's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_it_from_one_slot() {
    let cluster = support::Cluster::start();
    let lease = Duration::from_secs(2);
    let client = support::cluster_client_with(&cluster, Protocol::Redisson, |c| {
        c.waiter_ttl(Duration::from_secs(60)).lease(lease)
    })
    .await;
    for name in ["quota", "tenant-{7}-quota"] {
        let sem = client.semaphore(name, 2).unwrap();
        let node = cluster.node_for_key(name);
        let (taken_key, channel) = if name.contains('{') {
            (format!("{name}:timeout"), format!("redisson_sc:{name}"))
        } else {
            (
                format!("{{{name}}}:timeout"),
                format!("redisson_sc:{{{name}}}"),
            )
        };
        for key in [&taken_key, &channel] {
            assert_eq!(cluster.slot_of(key), cluster.slot_of(name), "{key}");
        }
        // Renewed past two leases (six renewals). A lease of 2 s: a renewal
        // may come 1.3 s late on a loaded machine (six nodes share its cores).
        let both = sem.acquire(2).await.unwrap();
        tokio::time::sleep(lease * 2).await;
        assert!(both.is_held(), "{name}");
        assert_eq!(node.cmd::<i64>(&["ZCARD", &taken_key]), 2, "{name}");
        assert_eq!(node.cmd::<String>(&["GET", name]), "0", "{name}");
        assert_eq!(
            sem.inspect().await.unwrap().node,
            Some(node.addr()),
            "{name}: the master of its slot"
        );
        both.release().await.unwrap();

        // Held without a lease, nothing tells a waiter when to try again
        // but the release's message (its polls are 20 s apart).
        let both = sem
            .acquire_with(2, None, PermitLease::Unbounded)
            .await
            .unwrap()
            .unwrap();
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.acquire(1).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "{name}: nothing free");
        both.release().await.unwrap();
        let one = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the release's SPUBLISH")
            .unwrap()
            .unwrap();
        one.release().await.unwrap();
        assert_eq!(sem.available().await.unwrap(), 2, "{name}");
    }
}

/// An acquisition whose reply is lost (the connection cut while the
/// script's answer is held) is sent again with the same ids, which the
/// script recognises as taken: the permits are counted once, and after the
/// guard's release (or the undo, when the retry fails too) all are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_reply_is_neither_counted_twice_nor_leaked() {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(Protocol::Redisson)
        .response_timeout(Duration::from_secs(20));
    let client = LockClient::with_config(config).await.unwrap();
    let sem = client.semaphore("lost", 4).unwrap();
    // The scripts are loaded now (a first call is answered NOSCRIPT).
    sem.acquire(1).await.unwrap().release().await.unwrap();

    proxy.hold_script_replies();
    let taking = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire(2).await }
    });
    eventually(Duration::from_secs(10), "the acquisition ran", || {
        server.cmd::<i64>(&["ZCARD", "{lost}:timeout"]) == 2
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    // Within the permits' 30 s lease: nothing waits for a leaked permit.
    let taken_in_time = tokio::time::timeout(Duration::from_secs(10), taking)
        .await
        .expect("taken at once, not after a lost attempt's lease");
    match taken_in_time.unwrap() {
        Ok(permits) => {
            assert_eq!(count(&server, "lost").as_deref(), Some("2"), "counted once");
            assert_eq!(taken(&server, "lost").len(), 2);
            permits.release().await.unwrap();
        }
        Err(err) => assert!(err.is_connection(), "{err:?}"),
    }
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 4, "every permit back");
    assert!(taken(&server, "lost").is_empty());
}

/// The handles and guards move freely between tasks and threads, and the
/// futures of the async methods may be spawned.
#[test]
fn handles_guards_and_futures_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send>(_: &T) {}
    send_sync::<fairlock::Semaphore>();
    send_sync::<fairlock::Permits>();
    send_sync::<fairlock::CountingSemaphore>();
    send_sync::<fairlock::CountedPermits>();
    send_sync::<fairlock::blocking::Semaphore>();
    send_sync::<fairlock::blocking::Permits>();
    let _ = |sem: fairlock::Semaphore,
             plain: fairlock::CountingSemaphore,
             permits: fairlock::Permits| {
        send(&sem.acquire(1));
        send(&sem.try_acquire_for(1, Duration::from_secs(1)));
        send(&sem.inspect());
        send(&plain.acquire(1));
        send(&permits.lost());
        send(&permits.release());
    };
}

/// `force_release` gives back every permit id, a Java holder's and ours:
/// the count back to the total, the set empty, and the number given back
/// published as Redisson's release of several ids publishes it (so Java
/// waiters wake). A permit id names no owner: our holder finds its permits
/// gone at its next renewal (a third of its 3 s lease). Expired permits
/// are reclaimed first (announced as a reclaim) and not counted. `inspect`
/// shows no owner for a permit, and leaves an absent semaphore absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_gives_back_every_permit_id() {
    let server = RedisServer::start();
    let client = with_lease(&server, Duration::from_secs(3)).await;
    let sem = client.semaphore("forced", 4).unwrap();
    let absent = sem.inspect().await.unwrap();
    assert!(!absent.exists, "{absent:?}");
    assert_eq!((absent.total, absent.available), (4, 4));
    assert_eq!(count(&server, "forced"), None, "looking wrote nothing");

    let ours = sem.acquire(2).await.unwrap();
    let java_id = java::new_id();
    assert_eq!(
        java::acquire(&server, "forced", std::slice::from_ref(&java_id), None).as_deref(),
        Some("OK")
    );
    let info = sem.inspect().await.unwrap();
    assert!(info.exists);
    assert_eq!((info.total, info.available), (4, 1));
    assert_eq!(info.taken.len(), 3);
    assert!(
        info.taken
            .iter()
            .all(|p| p.owner.is_none() && p.label.is_none() && p.token.is_none()),
        "{info:?}"
    );
    let lost = ours.lost();
    let mut listener = Listener::new(&server, "redisson_sc:{forced}");
    assert_eq!(sem.force_release().await.unwrap(), 3);
    assert_eq!(listener.drain(&server), ["3"], "the number given back");
    assert_eq!(count(&server, "forced").as_deref(), Some("4"));
    assert!(taken(&server, "forced").is_empty());
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("lost() resolves at the next renewal");
    assert!(ours.release().await.expect_err("given back").is_lock_lost());
    assert_eq!(java::release(&server, "forced", &java_id), 0, "gone");

    // Nothing taken: nothing given back, nothing published.
    assert_eq!(sem.force_release().await.unwrap(), 0);
    assert!(listener.drain(&server).is_empty());
    // An expired permit is reclaimed (announced with the new count), not
    // counted as given back.
    let expiry = now_ms() + 100;
    assert_eq!(
        java::acquire(&server, "forced", &[java::new_id()], Some(expiry)).as_deref(),
        Some("OK")
    );
    eventually(Duration::from_secs(5), "the Java lease ended", || {
        now_ms() > expiry
    })
    .await;
    assert_eq!(sem.force_release().await.unwrap(), 0);
    assert_eq!(listener.drain(&server), ["4"]);
    assert_eq!(count(&server, "forced").as_deref(), Some("4"));
}

/// Through Sentinel, across `SENTINEL FAILOVER`: both redisson semaphores
/// keep what was taken (the count and the taken permits replicated), the
/// holder's watchdog renews on the new master, and a release there wakes
/// the waiter by its message (its own retries are 20 s apart). No
/// `min_replicas`: the redisson semaphores do not apply it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_keeps_both_semaphores() {
    let deployment = support::Sentinel::start_with(2, 3);
    let config = fairlock::ClientConfig::from_url(&deployment.url())
        .unwrap()
        .protocol(Protocol::Redisson)
        .lease(Duration::from_secs(10))
        .waiter_ttl(Duration::from_secs(60))
        .retry_budget(Duration::from_secs(60));
    let client = LockClient::with_config(config).await.unwrap();
    let sem = client.semaphore("quota", 2).unwrap();
    let counting = client.counting_semaphore("slots", 2).unwrap();
    let both = sem.acquire(2).await.unwrap();
    let counted = counting.acquire(2).await.unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await })
    };
    let counting_waiter = {
        let counting = counting.clone();
        tokio::spawn(async move { counting.acquire(1).await })
    };
    let replica = &deployment.replicas()[0];
    eventually(Duration::from_secs(10), "replicated", || {
        replica.cmd::<Option<String>>(&["GET", "quota"]) == Some("0".to_owned())
            && replica.cmd::<Option<String>>(&["GET", "slots"]) == Some("0".to_owned())
    })
    .await;
    deployment.fail_over().await;
    // Past a lease since the failover began: the expirable permits were
    // renewed on the new master. (The lease outlasts the failover: for the
    // few seconds the old master is switched over, renewals cannot be
    // confirmed, and a shorter lease loses the permits, told by lost().)
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(both.is_held(), "kept across the failover");
    assert!(!waiter.is_finished() && !counting_waiter.is_finished());
    both.release().await.expect("released on the new master");
    counted.release().await.expect("released on the new master");
    let one = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the expirable semaphore's waiter is woken")
        .unwrap()
        .unwrap();
    let counted_one = tokio::time::timeout(Duration::from_secs(10), counting_waiter)
        .await
        .expect("the counting semaphore's waiter is woken")
        .unwrap()
        .unwrap();
    one.release().await.unwrap();
    counted_one.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    assert_eq!(counting.available().await.unwrap(), 2);
    client.shutdown().await;
}

/// Every connection of a client stalls (bytes held, sockets open): a
/// semaphore's wait ends within its budget and one response timeout, and
/// a zero wait is one attempt (within one response timeout), under both
/// protocols and for both redisson kinds. Before, the redisson semaphore
/// retried each attempt for the whole retry budget (10 s) whatever its
/// wait: `try_acquire_for(1, 1 s)` and `try_acquire(1)` both returned
/// after 9.65 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_connection_ends_the_wait_within_its_budget() {
    let response_timeout = Duration::from_millis(500);
    let wait = Duration::from_secs(1);
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let proxy = support::proxy::Proxy::start(server.port());
        let config = fairlock::ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(protocol)
            .response_timeout(response_timeout)
            .connect_timeout(response_timeout);
        let client = LockClient::with_config(config).await.unwrap();
        let sem = client.semaphore("stalled", 2).unwrap();
        let counting = (protocol == Protocol::Redisson)
            .then(|| client.counting_semaphore("stalled-plain", 2).unwrap());
        // Set up while the connections pass.
        assert_eq!(sem.available().await.unwrap(), 2);
        if let Some(counting) = &counting {
            assert_eq!(counting.available().await.unwrap(), 2);
        }
        proxy.stall();
        for (what, budget) in [("a zero wait", Duration::ZERO), ("a 1 s wait", wait)] {
            let starvation = support::StarvationMonitor::start();
            let started = Instant::now();
            let outcome = sem
                .acquire_with(1, Some(budget), PermitLease::Watchdog)
                .await;
            let took = started.elapsed();
            let counted = match &counting {
                Some(counting) => {
                    let started = Instant::now();
                    let outcome = counting.try_acquire_for(1, budget).await;
                    Some((started.elapsed(), outcome.map(|p| p.is_some())))
                }
                None => None,
            };
            let stalled = starvation.stop();
            // One response timeout for the call in flight, one backoff,
            // and room for a loaded machine.
            let bound = budget + response_timeout + Duration::from_millis(700) + stalled;
            assert!(
                took <= bound,
                "{protocol} semaphore, {what}: returned after {took:?}, bound {bound:?}"
            );
            match outcome {
                Ok(None) => {}
                Err(err) => assert!(err.is_connection(), "{protocol}, {what}: {err}"),
                Ok(Some(_)) => panic!("{protocol}, {what}: taken through a stalled connection"),
            }
            if let Some((took, outcome)) = counted {
                assert!(
                    took <= bound,
                    "counting semaphore, {what}: returned after {took:?}, bound {bound:?}"
                );
                match outcome {
                    Ok(false) => {}
                    Err(err) => assert!(err.is_connection(), "counting, {what}: {err}"),
                    Ok(true) => panic!("counting, {what}: taken through a stalled connection"),
                }
            }
        }
        proxy.pass();
        client.shutdown().await;
    }
}

/// `permits` only initialises a semaphore that does not exist: a Java
/// service set the plain `RSemaphore` up with `trySetPermits(5)`, and
/// `counting_semaphore(name, 3)` takes 4 of them as Java's `acquire(4)`
/// does (before: refused, "above its total of 3", though the expirable
/// kind read the total from Redis). On a semaphore nobody set up, a
/// request above `permits` is still refused, with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_only_initialise_a_semaphore_that_does_not_exist() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    // The plain kind (Redisson's RSemaphore).
    assert_eq!(java::try_set_permits(&server, "java-plain", 5), 1);
    let plain = client.counting_semaphore("java-plain", 3).unwrap();
    let four = plain
        .try_acquire(4)
        .await
        .expect("Java's total is 5, not 3")
        .expect("4 of 5 are free");
    assert_eq!(count(&server, "java-plain").as_deref(), Some("1"));
    assert_eq!(java::plain_acquire(&server, "java-plain", 2), 0);
    four.release().await.unwrap();
    assert_eq!(count(&server, "java-plain").as_deref(), Some("5"));
    // Java's own acquire(4) on it, for comparison.
    assert_eq!(java::plain_acquire(&server, "java-plain", 4), 1);
    java::plain_release(&server, "java-plain", 4);
    // The expirable kind, the same way.
    assert_eq!(java::try_set_permits(&server, "java-expirable", 5), 1);
    let expirable = client.semaphore("java-expirable", 3).unwrap();
    let four = expirable.try_acquire(4).await.unwrap().expect("4 of 5");
    four.release().await.unwrap();
    assert_eq!(count(&server, "java-expirable").as_deref(), Some("5"));

    // Nobody set it up: `permits` is the total it would get, and a request
    // above it is refused before anything is written.
    for n in [4, 10_000] {
        let err = client
            .counting_semaphore("fresh-plain", 3)
            .unwrap()
            .try_acquire(n)
            .await
            .expect_err("above the total it would be set up with");
        assert!(matches!(err, Error::InvalidConfig(_)), "{n}: {err:?}");
    }
    assert_eq!(count(&server, "fresh-plain"), None, "nothing written");
    let three = client
        .counting_semaphore("fresh-plain", 3)
        .unwrap()
        .try_acquire(3)
        .await
        .unwrap()
        .expect("all 3");
    assert_eq!(count(&server, "fresh-plain").as_deref(), Some("0"));
    three.release().await.unwrap();
}

/// Every release of a Redisson semaphore wakes every waiter (one channel
/// for all, as Redisson's), and anyone can PUBLISH on that channel: back to
/// back, the messages make a waiter try at most once per 25 ms, as the
/// lock's waiters do, not once per message. Both kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_wakeups_costs_a_waiter_a_bounded_number_of_calls() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    let server = RedisServer::start();
    let holder = redisson(&server).await;
    let waiter = woken_by_messages_only(&server).await;
    let mut worst = Vec::new();
    for counting in [false, true] {
        let name = if counting {
            "flood-counting"
        } else {
            "flood-expirable"
        };
        let waiting = if counting {
            let taken = holder
                .counting_semaphore(name, 1)
                .unwrap()
                .acquire(1)
                .await
                .unwrap();
            let sem = waiter.counting_semaphore(name, 1).unwrap();
            let task = tokio::spawn(async move { sem.acquire(1).await.map(drop) });
            (Some(taken), None, task)
        } else {
            let taken = holder.semaphore(name, 1).unwrap().acquire(1).await.unwrap();
            let sem = waiter.semaphore(name, 1).unwrap();
            let task = tokio::spawn(async move { sem.acquire(1).await.map(drop) });
            (None, Some(taken), task)
        };
        let channel = format!("redisson_sc:{{{name}}}");
        eventually(Duration::from_secs(5), "waiter subscribed", || {
            server.wait_channels().contains(&channel)
        })
        .await;
        // A message every 4 ms for a second: each read on its own (a
        // flood back to back is read in batches, one wake-up each), as the
        // releases of many holders would come.
        let before = server.evalsha_calls();
        let sent = tokio::task::block_in_place(|| {
            let mut publisher = server.conn();
            let start = Instant::now();
            let mut sent = 0u64;
            while start.elapsed() < Duration::from_secs(1) {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg("1")
                    .query(&mut publisher)
                    .unwrap();
                sent += 1;
                std::thread::sleep(Duration::from_millis(4));
            }
            sent
        });
        let calls = server.evalsha_calls() - before;
        println!(
            "counting={counting}: {sent} messages on {channel} in 1 s -> {calls} scripts run by ONE waiter"
        );
        worst.push((counting, sent, calls));
        let (counted, permits, task) = waiting;
        if let Some(counted) = counted {
            counted.release().await.unwrap();
        }
        if let Some(permits) = permits {
            permits.release().await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("the waiter gets in after the release")
            .unwrap()
            .unwrap();
    }
    // Spaced by 25 ms: at most 40 calls in the second, plus a few for the
    // subscription and the calls the messages still queued wake.
    assert!(
        worst
            .iter()
            .all(|&(_, sent, calls)| sent > 50 && calls <= 45),
        "scripts run by one waiter in 1 s of wake-ups (counting, sent, calls): {worst:?}"
    );
}

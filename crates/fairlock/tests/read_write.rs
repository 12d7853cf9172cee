//! The read-write lock (`LockClient::read_write_lock`) under the redisson
//! protocol: Redisson's `RReadWriteLock` byte for byte (the keys, fields,
//! timeout keys and messages of docs/redisson-protocol.md), its rules
//! (readers share, a writer is alone, re-entry, downgrade, no upgrade),
//! what a Java client sharing it sees (a stand-in that runs Redisson's
//! steps), bad data, the watchdog, force-unlock and inspect. The native
//! protocol's fair read-write lock: `read_write_native.rs`.

use std::time::Duration;

use fairlock::{AcquireOptions, Error, HoldMode, LockClient, LockKind, Protocol};
use fairlock_test_support as support;
use support::listener::Listener;
use support::{RedisServer, eventually};

async fn redisson(server: &RedisServer) -> LockClient {
    support::client(server, Protocol::Redisson).await
}

/// A client whose waiters try again only every 20 s (a third of a 60 s
/// waiter ttl) when no message wakes them: a waiter that gets the lock
/// within a few seconds was woken by a release's message.
async fn woken_by_messages_only(server: &RedisServer) -> LockClient {
    support::client_with(server, Protocol::Redisson, |c| {
        c.waiter_ttl(Duration::from_secs(60))
    })
    .await
}

/// The guard a spawned acquisition gets within 5 s (with
/// [`woken_by_messages_only`], only a release's message makes it in time).
async fn granted(
    task: tokio::task::JoinHandle<fairlock::Result<fairlock::LockGuard>>,
    what: &str,
) -> fairlock::LockGuard {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap_or_else(|_| panic!("not granted within 5 s: {what}"))
        .unwrap()
        .unwrap()
}

/// One more read hold of `owner` on `rw`, with an explicit `lease`.
async fn read_again(
    rw: &fairlock::ReadWriteLock,
    owner: &fairlock::Owner,
    lease: Duration,
) -> fairlock::LockGuard {
    rw.read()
        .acquire(AcquireOptions::new().owner(owner.clone()).lease(lease))
        .await
        .unwrap()
        .expect("a read hold")
}

/// Whether `key` exists.
fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd::<i64>(&["EXISTS", key]) == 1
}

/// The timeout key of read hold `n` of `owner` on lock `name` (no braces).
fn timeout_key(name: &str, owner: &str, n: u32) -> String {
    format!("{{{name}}}:{owner}:rwlock_timeout:{n}")
}

/// The lock hash as a sorted list of (field, value).
fn hash(server: &RedisServer, name: &str) -> Vec<(String, String)> {
    let flat: Vec<String> = server.cmd(&["HGETALL", name]);
    let mut pairs: Vec<(String, String)> = flat
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    pairs.sort();
    pairs
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = expected
        .iter()
        .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
        .collect();
    pairs.sort();
    pairs
}

/// Every key on the server but fairlock's own labels and the unlock
/// result caches (which live their TTL, as Redisson's until its DEL).
fn lock_keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.retain(|k| !k.starts_with("fairlock:labels:") && !k.starts_with("redisson_unlock_latch:"));
    keys.sort();
    keys
}

/// Redisson's test vectors (docs/redisson-protocol.md, "Read-write lock"):
/// two readers, their timeout keys, the releases and their one message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_holds_are_written_as_redisson_writes_them() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("rw").unwrap();
    let mut listener = Listener::new(&server, "redisson_rwlock:{rw}");
    let (one, two) = (client.new_owner(), client.new_owner());
    let (o1, o2) = (one.as_str(), two.as_str());

    let first = rw
        .read()
        .acquire(AcquireOptions::new().owner(one.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hash(&server, "rw"), pairs(&[("mode", "read"), (o1, "1")]));
    assert_eq!(
        server.cmd::<String>(&["GET", &timeout_key("rw", o1, 1)]),
        "1"
    );
    for key in ["rw".to_owned(), timeout_key("rw", o1, 1)] {
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!((20_000..=30_000).contains(&pttl), "{key}: {pttl}");
    }
    let second = rw
        .read()
        .acquire(AcquireOptions::new().owner(two.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        hash(&server, "rw"),
        pairs(&[("mode", "read"), (o1, "1"), (o2, "1")])
    );
    assert_eq!(lock_keys(&server), {
        let mut keys = vec![
            "rw".to_owned(),
            timeout_key("rw", o1, 1),
            timeout_key("rw", o2, 1),
        ];
        keys.sort();
        keys
    });

    first.unlock().await.unwrap();
    assert_eq!(hash(&server, "rw"), pairs(&[("mode", "read"), (o2, "1")]));
    assert_eq!(
        lock_keys(&server),
        vec!["rw".to_owned(), timeout_key("rw", o2, 1)]
    );
    assert!(
        listener.drain(&server).is_empty(),
        "nothing is published while a reader is left"
    );

    second.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    assert_eq!(listener.drain(&server), vec!["0".to_owned()]);
}

/// The writer's field is `OWNER:write`; its release publishes `1`; a writer
/// that also reads leaves the lock in read mode (a downgrade, nothing
/// published), as Redisson does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_holds_and_the_downgrade_are_written_as_redisson_writes_them() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("rw").unwrap();
    let mut listener = Listener::new(&server, "redisson_rwlock:{rw}");
    let owner = client.new_owner();
    let o = owner.as_str();
    let writer = format!("{o}:write");

    let write = rw
        .write()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        write.owner().as_str(),
        writer,
        "the write guard's owner is the field"
    );
    assert_eq!(
        hash(&server, "rw"),
        pairs(&[("mode", "write"), (&writer, "1")])
    );
    let pttl: i64 = server.cmd(&["PTTL", "rw"]);
    assert!((20_000..=30_000).contains(&pttl), "{pttl}");
    assert_eq!(lock_keys(&server), vec!["rw".to_owned()]);

    // The writer reads too: by its owner, or by the write guard's owner.
    let read = rw
        .read()
        .acquire(AcquireOptions::new().owner(write.owner().clone()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read.owner().as_str(), o);
    assert_eq!(
        hash(&server, "rw"),
        pairs(&[("mode", "write"), (&writer, "1"), (o, "1")])
    );
    write.unlock().await.unwrap();
    assert_eq!(hash(&server, "rw"), pairs(&[("mode", "read"), (o, "1")]));
    assert!(
        listener.drain(&server).is_empty(),
        "a downgrade publishes nothing"
    );

    read.unlock().await.unwrap();
    assert_eq!(listener.drain(&server), vec!["0".to_owned()]);

    let write = rw.write().lock().await.unwrap();
    write.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty());
    assert_eq!(listener.drain(&server), vec!["1".to_owned()]);
}

/// Readers share; a writer waits for every reader and is woken by the last
/// release; readers wait for the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_is_alone() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    let rw = client.read_write_lock("shared").unwrap();

    let first = rw.read().lock().await.unwrap();
    let second = rw.read().try_lock().await.unwrap().expect("readers share");
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "readers keep the writer out"
    );
    assert!(rw.read().is_locked().await.unwrap());
    assert!(!rw.write().is_locked().await.unwrap());

    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await })
    };
    first.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "one reader is still in");
    second.unlock().await.unwrap();
    // Woken by the release's message, long before its 20 s poll.
    let write = granted(writer, "the writer is woken by the last reader's release").await;
    assert!(rw.write().is_locked().await.unwrap());
    assert!(!rw.read().is_locked().await.unwrap());
    assert!(
        rw.read().try_lock().await.unwrap().is_none(),
        "the writer keeps readers out"
    );
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "and other writers"
    );

    let reader = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.read().lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    write.unlock().await.unwrap();
    let read = granted(reader, "the reader is woken by the writer's release").await;
    read.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty());
}

/// Each side re-enters per owner: a read hold per re-entry (with its own
/// timeout key, released last in first out), a write count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_side_reenters() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("again").unwrap();

    let read = rw.read().lock().await.unwrap();
    let o = read.owner().as_str().to_owned();
    let again = read.reenter().await.unwrap().unwrap();
    assert_eq!(rw.read().hold_count(read.owner()).await.unwrap(), 2);
    assert_eq!(
        hash(&server, "again"),
        pairs(&[("mode", "read"), (&o, "2")])
    );
    assert!(exists(&server, &timeout_key("again", &o, 2)));
    again.unlock().await.unwrap();
    assert!(!exists(&server, &timeout_key("again", &o, 2)));
    assert!(exists(&server, &timeout_key("again", &o, 1)));
    read.unlock().await.unwrap();

    let write = rw.write().lock().await.unwrap();
    let again = write.reenter().await.unwrap().unwrap();
    assert_eq!(rw.write().hold_count(write.owner()).await.unwrap(), 2);
    again.unlock().await.unwrap();
    assert!(rw.write().is_held_by(write.owner()).await.unwrap());
    write.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty());
}

/// An owner that reads and asks for the write side would wait for itself
/// forever: refused at once, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_is_refused_at_once() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("up").unwrap();
    let read = rw.read().lock().await.unwrap();
    let before = hash(&server, "up");

    let err = rw
        .write()
        .acquire(AcquireOptions::new().owner(read.owner().clone()))
        .await
        .expect_err("an upgrade deadlocks");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err:?}");
    assert!(
        err.to_string().contains("release the read lock first"),
        "{err}"
    );
    assert_eq!(hash(&server, "up"), before);
    assert!(read.is_held());
    read.unlock().await.unwrap();
}

/// The steps a Java Redisson client runs (docs/redisson-protocol.md,
/// "Read-write lock"), written for this test as a stand-in: read and write
/// acquire (nil = acquired, else the PTTL) and release.
mod java {
    use super::*;

    const READ_ACQUIRE: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':1', 1)
  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'read' or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  local key = KEYS[2] .. ':' .. n
  redis.call('set', key, 1)
  redis.call('pexpire', key, ARGV[1])
  local left = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(left, ARGV[1]))
  return nil
end
return redis.call('pttl', KEYS[1])";

    const WRITE_ACQUIRE: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

    const READ_RELEASE: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[2], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local c = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if c == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (c + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], field))
    if type(n) == 'number' then
      for i = n, 1, -1 do
        longest = math.max(longest, redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return 0
  end
  if mode == 'write' then
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1";

    const WRITE_RELEASE: &str = r"
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
if mode == 'write' then
  if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
  end
  local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
  if c > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
  end
  redis.call('hdel', KEYS[1], ARGV[3])
  if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
  else
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  return 1
end
return nil";

    /// The read-hold renewal of Redisson's watchdog (4.7), for one lock and
    /// one owner: KEYS name, KPREFIX; ARGV lease, 1, owner. Every timeout
    /// key of the owner and the hash get the lease (plain PEXPIRE: it may
    /// lower the hash's TTL below other readers' leases).
    const READ_RENEW: &str = r"
local renewed = 0
for i = 3, #ARGV do
  local c = redis.call('hget', KEYS[1], ARGV[i])
  if c ~= false then
    for n = tonumber(c), 1, -1 do
      redis.call('pexpire', KEYS[2] .. ':' .. ARGV[i] .. ':rwlock_timeout:' .. n, ARGV[1])
    end
    renewed = 1
  end
end
if renewed == 1 then
  redis.call('pexpire', KEYS[1], ARGV[1])
end
return renewed";

    /// A Java thread: owner `JAVA_CLIENT:thread`.
    pub struct Thread {
        pub owner: String,
    }

    impl Thread {
        pub fn new(thread: u32) -> Self {
            Self {
                owner: format!("6f1e7f9e-0000-4000-8000-00000000beef:{thread}"),
            }
        }

        fn eval(server: &RedisServer, script: &str, keys: &[&str], args: &[&str]) -> Option<i64> {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
            cmd.query(&mut server.conn()).expect("stand-in script")
        }

        /// `None`: acquired; else the lock's PTTL.
        pub fn read(&self, server: &RedisServer, name: &str) -> Option<i64> {
            let tprefix = format!("{{{name}}}:{}:rwlock_timeout", self.owner);
            let writer = format!("{}:write", self.owner);
            Self::eval(
                server,
                READ_ACQUIRE,
                &[name, &tprefix],
                &["30000", &self.owner, &writer],
            )
        }

        /// A read hold with a lease of `lease_ms` (a client whose
        /// `lockWatchdogTimeout` is that).
        pub fn read_with_lease(
            &self,
            server: &RedisServer,
            name: &str,
            lease_ms: u64,
        ) -> Option<i64> {
            let tprefix = format!("{{{name}}}:{}:rwlock_timeout", self.owner);
            let writer = format!("{}:write", self.owner);
            let lease = lease_ms.to_string();
            Self::eval(
                server,
                READ_ACQUIRE,
                &[name, &tprefix],
                &[&lease, &self.owner, &writer],
            )
        }

        /// Its watchdog's renewal of its read holds of `name` to `lease_ms`.
        pub fn renew_read(&self, server: &RedisServer, name: &str, lease_ms: u64) -> Option<i64> {
            let kprefix = format!("{{{name}}}");
            let lease = lease_ms.to_string();
            Self::eval(
                server,
                READ_RENEW,
                &[name, &kprefix],
                &[&lease, "1", &self.owner],
            )
        }

        pub fn write(&self, server: &RedisServer, name: &str) -> Option<i64> {
            let writer = format!("{}:write", self.owner);
            Self::eval(server, WRITE_ACQUIRE, &[name], &["30000", &writer])
        }

        pub fn read_release(&self, server: &RedisServer, name: &str) -> Option<i64> {
            let channel = format!("redisson_rwlock:{{{name}}}");
            let tprefix = format!("{{{name}}}:{}:rwlock_timeout", self.owner);
            let kprefix = format!("{{{name}}}");
            Self::eval(
                server,
                READ_RELEASE,
                &[name, &channel, &tprefix, &kprefix],
                &["0", &self.owner],
            )
        }

        pub fn write_release(&self, server: &RedisServer, name: &str) -> Option<i64> {
            let channel = format!("redisson_rwlock:{{{name}}}");
            let writer = format!("{}:write", self.owner);
            Self::eval(
                server,
                WRITE_RELEASE,
                &[name, &channel],
                &["1", "30000", &writer],
            )
        }
    }
}

/// A Java service and this client on one lock: each side's rules hold
/// across them, and each wakes the other's waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_lock() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    let rw = client.read_write_lock("mixed").unwrap();
    let (java, other) = (java::Thread::new(1), java::Thread::new(2));

    // A Java reader and a Rust reader share; a Java writer is kept out.
    assert_eq!(java.read(&server, "mixed"), None);
    let read = rw.read().try_lock().await.unwrap().expect("readers share");
    assert!(
        other.write(&server, "mixed").is_some(),
        "readers keep a Java writer out"
    );
    assert!(rw.write().try_lock().await.unwrap().is_none());

    // The Rust writer waits for both; the Java reader's release is not
    // the last; the Rust reader's is, and its message wakes the writer.
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await })
    };
    assert_eq!(java.read_release(&server, "mixed"), Some(0));
    read.unlock().await.unwrap();
    let write = granted(writer, "woken").await;
    // A Java reader and writer are kept out by the Rust writer.
    assert!(java.read(&server, "mixed").is_some());
    assert!(other.write(&server, "mixed").is_some());

    // The Java writer's release wakes a Rust reader: '1' on the channel.
    write.unlock().await.unwrap();
    assert_eq!(other.write(&server, "mixed"), None);
    let reader = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.read().lock().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reader.is_finished(), "the Java writer holds it");
    assert_eq!(other.write_release(&server, "mixed"), Some(1));
    let read = granted(reader, "woken by the Java writer's release").await;
    // The Rust reader's timeout key is what a Java release looks at: a Java
    // reader that leaves keeps the lock for it, with its lease.
    assert_eq!(java.read(&server, "mixed"), None);
    assert_eq!(java.read_release(&server, "mixed"), Some(0));
    assert!(read.is_held());
    assert!(rw.read().is_held_by(read.owner()).await.unwrap());
    read.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A reader that crashed leaves its field, and its timeout key expires: a
/// live reader's release then deletes the lock, and a writer gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_hold_ends_with_its_timeout_key() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("crash").unwrap();
    let crashed = java::Thread::new(7);
    assert_eq!(crashed.read(&server, "crash"), None);
    let _: i64 = server.cmd(&["DEL", &timeout_key("crash", &crashed.owner, 1)]);

    let read = rw.read().lock().await.unwrap();
    assert!(rw.write().try_lock().await.unwrap().is_none());
    read.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
    let write = rw
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("the dead reader counts no more");
    write.unlock().await.unwrap();
}

/// The watchdog renews a read hold's timeout keys with the hash, and finds
/// a hold whose timeout keys are gone lost (another reader's release may
/// delete the lock at any time then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_read_holds_and_their_timeout_keys() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let rw = client.read_write_lock("renewed").unwrap();
    let read = rw.read().lock().await.unwrap();
    let again = read.reenter().await.unwrap().unwrap();
    let o = read.owner().as_str().to_owned();
    let write = client
        .read_write_lock("renewed-w")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();

    tokio::time::sleep(lease * 3).await;
    assert!(read.is_held() && again.is_held() && write.is_held());
    for key in [
        timeout_key("renewed", &o, 1),
        timeout_key("renewed", &o, 2),
        "renewed".to_owned(),
        "renewed-w".to_owned(),
    ] {
        assert_eq!(server.cmd::<i64>(&["EXISTS", &key]), 1, "{key} was renewed");
    }

    // Its timeout keys expire (a pause longer than its lease, say): the
    // hold is lost, and the next renewal says so.
    for n in [1, 2] {
        let _: i64 = server.cmd(&["DEL", &timeout_key("renewed", &o, n)]);
    }
    tokio::time::timeout(Duration::from_secs(10), read.lost())
        .await
        .expect("a read hold without its timeout key is lost");
    assert!(write.is_held(), "the other lock is not");
    drop((again, read));
    write.unlock().await.unwrap();
}

/// Force-unlock of each side: only while the lock is in that mode; every
/// holder's client hears it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_takes_every_hold_of_its_side() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let operator = redisson(&server).await;
    let rw = client.read_write_lock("forced").unwrap();
    let ops = operator.read_write_lock("forced").unwrap();
    let first = rw.read().lock().await.unwrap();
    let second = rw.read().lock().await.unwrap();

    assert!(
        !ops.write().force_unlock().await.unwrap(),
        "not in write mode"
    );
    assert!(first.is_held());
    assert!(ops.read().force_unlock().await.unwrap());
    for guard in [&first, &second] {
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("a revoked reader hears it");
    }
    let write = rw.write().try_lock().await.unwrap().expect("free");
    assert!(
        !ops.read().force_unlock().await.unwrap(),
        "not in read mode"
    );
    assert!(ops.write().force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), write.lost())
        .await
        .expect("a revoked writer hears it");
}

/// Inspect shows the writer first, then the readers, with their modes,
/// counts and labels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_each_holder_with_its_mode() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Redisson, |c| c.label("host-a:42")).await;
    let rw = client.read_write_lock("seen").unwrap();
    let write = rw.write().lock().await.unwrap();
    let read = rw
        .read()
        .acquire(AcquireOptions::new().owner(write.owner().clone()))
        .await
        .unwrap()
        .unwrap();
    let info = rw.inspect().await.unwrap();
    let seen: Vec<_> = info
        .holders
        .iter()
        .map(|h| (h.owner.clone(), h.count, h.mode, h.label.clone()))
        .collect();
    let label = Some("host-a:42".to_owned());
    assert_eq!(
        seen,
        vec![
            (write.owner().to_string(), 1, HoldMode::Write, label.clone()),
            (read.owner().to_string(), 1, HoldMode::Read, label),
        ]
    );
    assert!(info.remaining_lease.is_some());
    assert!(info.queue.is_empty());
    assert_eq!(rw.write().kind(), LockKind::Write);
    assert_eq!(rw.read().kind(), LockKind::Read);
}

/// A plain lock and a read-write lock of one name are one hash under
/// Redisson: each refuses the other's data, as it refuses application
/// data, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_kinds_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = redisson(&server).await;

    let plain = client.lock("plain").unwrap().lock().await.unwrap();
    let rw = client.read_write_lock("plain").unwrap();
    for side in [rw.read(), rw.write()] {
        let err = side.try_lock().await.expect_err("a plain lock's hash");
        assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    }
    assert!(matches!(
        rw.read().force_unlock().await,
        Err(Error::NotALock { .. })
    ));
    assert!(plain.is_held());
    plain.unlock().await.unwrap();

    let write = client
        .read_write_lock("rw")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let err = client
        .lock("rw")
        .unwrap()
        .try_lock()
        .await
        .expect_err("a read-write lock's hash");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    let err = client
        .fair_lock("rw")
        .unwrap()
        .try_lock()
        .await
        .expect_err("a read-write lock's hash");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    write.unlock().await.unwrap();

    // Application data: a hash of other fields, a mode of another value,
    // a count that is no count, a lock without a TTL; a string.
    let cases: [&[&str]; 4] = [
        &["HSET", "app", "user", "42"],
        &["HSET", "app", "mode", "exclusive"],
        &["HSET", "app", "mode", "read", "x:1", "many"],
        &["HSET", "app", "mode", "read", "x:1", "1"],
    ];
    let rw = client.read_write_lock("app").unwrap();
    for case in cases {
        let _: i64 = server.cmd(&["DEL", "app"]);
        let _: i64 = server.cmd(case);
        let before = hash(&server, "app");
        for side in [rw.read(), rw.write()] {
            let err = side.try_lock().await.expect_err("not a lock");
            assert!(matches!(err, Error::NotALock { .. }), "{case:?}: {err:?}");
            assert!(
                matches!(side.force_unlock().await, Err(Error::NotALock { .. })),
                "{case:?}"
            );
        }
        assert!(
            matches!(rw.inspect().await, Err(Error::NotALock { .. })),
            "{case:?}"
        );
        assert_eq!(hash(&server, "app"), before, "{case:?}: left as it was");
        assert_eq!(server.cmd::<i64>(&["PTTL", "app"]), -1);
    }
    let _: () = server.cmd(&["SET", "text", "hello"]);
    let err = client
        .read_write_lock("text")
        .unwrap()
        .read()
        .try_lock()
        .await
        .expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(server.cmd::<String>(&["GET", "text"]), "hello");
}

/// The blocking API keys each hold on the calling thread, as Redisson does:
/// the thread that writes may read (a downgrade), and asks whether it holds
/// each side.
#[test]
fn the_blocking_api_keys_holds_on_the_thread() {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Redisson);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let rw = client.read_write_lock("blocking").unwrap();
    let write = rw.write().lock().unwrap();
    assert!(rw.write().is_held_by_current_thread().unwrap());
    assert!(!rw.read().is_held_by_current_thread().unwrap());
    let read = rw.read().lock().unwrap();
    assert!(rw.read().is_held_by_current_thread().unwrap());
    write.unlock().unwrap();
    assert!(!rw.write().is_held_by_current_thread().unwrap());
    assert!(rw.read().is_held_by_current_thread().unwrap());
    assert!(matches!(
        rw.write().try_lock(),
        Err(Error::WouldDeadlock { .. })
    ));
    read.unlock().unwrap();
    assert!(!rw.read().is_locked().unwrap());
    std::thread::spawn(move || {
        let guard = rw.write().try_lock().unwrap().expect("free");
        guard.unlock().unwrap();
    })
    .join()
    .unwrap();
}

/// A read acquisition whose reply is lost (the connection cut while the
/// script's answer is held) is tried again or undone, never counted twice:
/// the retry finds the hold its first attempt made (the lost-reply check
/// on the owner's count), so after the guard's release nothing is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_reply_is_neither_counted_twice_nor_leaked() {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(Protocol::Redisson)
        .response_timeout(Duration::from_secs(20));
    let client = LockClient::with_config(config).await.unwrap();
    let rw = client.read_write_lock("lost").unwrap();
    // The scripts are loaded now (a first call is answered NOSCRIPT).
    for side in [rw.read(), rw.write()] {
        side.lock().await.unwrap().unlock().await.unwrap();
    }
    let readers = || -> Vec<String> {
        let mut fields: Vec<String> = server.cmd(&["HKEYS", "lost"]);
        fields.retain(|f| f != "mode");
        fields
    };

    proxy.hold_script_replies();
    let reading = tokio::spawn({
        let rw = rw.clone();
        async move { rw.read().lock().await }
    });
    eventually(Duration::from_secs(10), "the read acquisition ran", || {
        readers().len() == 1
    })
    .await;
    let owner = readers().remove(0);
    proxy.cut_all();
    proxy.pass();
    match reading.await.unwrap() {
        Ok(guard) => {
            assert_eq!(
                server.cmd::<u32>(&["HGET", "lost", &owner]),
                1,
                "counted once"
            );
            guard.unlock().await.unwrap();
        }
        Err(err) => assert!(err.is_connection(), "{err:?}"),
    }
    client.flush().await;
    eventually(Duration::from_secs(10), "nothing held", || {
        server.cmd::<i64>(&["EXISTS", "lost"]) == 0
    })
    .await;
    let write = rw.write().try_lock().await.unwrap();
    assert!(write.is_some(), "free for a writer");
}

/// On a Redis Cluster every key of a read-write lock is in the slot of its
/// name (with or without a hash tag of its own), the releases' messages go
/// out as sharded pub/sub (`SPUBLISH`, Redisson's choice on Redis 7), and
/// the watchdog renews read holds' timeout keys on the slot's master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_it_from_one_slot() {
    let cluster = support::Cluster::start();
    let lease = Duration::from_secs(2);
    let client = support::cluster_client_with(&cluster, Protocol::Redisson, |c| {
        c.waiter_ttl(Duration::from_secs(60)).lease(lease)
    })
    .await;
    for name in ["catalog", "tenant-{7}-catalog"] {
        let rw = client.read_write_lock(name).unwrap();
        let read = rw.read().lock().await.unwrap();
        let again = read.reenter().await.unwrap().unwrap();
        let writer = {
            let rw = rw.clone();
            tokio::spawn(async move { rw.write().lock().await })
        };
        // Renewed past two leases (six renewals). A lease of 2 s: a renewal
        // may come 1.3 s late on a loaded machine (six nodes share its cores).
        tokio::time::sleep(lease * 2).await;
        assert!(read.is_held() && again.is_held(), "{name}");
        let node = cluster.node_for_key(name);
        let prefix = if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        };
        for n in [1, 2] {
            let key = format!("{prefix}:{}:rwlock_timeout:{n}", read.owner());
            assert_eq!(cluster.slot_of(&key), cluster.slot_of(name), "{key}");
            assert_eq!(node.cmd::<i64>(&["EXISTS", &key]), 1, "{key} renewed");
        }
        assert!(
            !writer.is_finished(),
            "{name}: the readers keep the writer out"
        );
        again.unlock().await.unwrap();
        read.unlock().await.unwrap();
        let write = granted(writer, "woken by the last reader's SPUBLISH").await;
        write.unlock().await.unwrap();
        assert_eq!(node.cmd::<i64>(&["EXISTS", name]), 0, "{name}");
    }
}

/// Through Sentinel the lock is the master's: readers share, a writer is
/// woken by the last release, and with `min_replicas` each acquisition is
/// acknowledged by the replica (its proof: the owner's field, `OWNER:write`
/// for the writer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_serves_it_with_replica_acknowledgement() {
    let deployment = support::Sentinel::start_with(1, 1);
    let config = fairlock::ClientConfig::from_url(&deployment.url())
        .unwrap()
        .protocol(Protocol::Redisson)
        .waiter_ttl(Duration::from_secs(60))
        .min_replicas(1, Duration::from_secs(5));
    let client = LockClient::with_config(config).await.unwrap();
    let rw = client.read_write_lock("sentinel-rw").unwrap();
    let read = rw.read().lock().await.unwrap();
    let other = rw.read().lock().await.unwrap();
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await })
    };
    let replica = &deployment.replicas()[0];
    eventually(Duration::from_secs(5), "the readers on the replica", || {
        hash(replica, "sentinel-rw").len() == 3
    })
    .await;
    read.unlock().await.unwrap();
    other.unlock().await.unwrap();
    let write = granted(writer, "the writer is woken by the last reader").await;
    let writer_field = write.owner().to_string();
    assert!(
        hash(deployment.master(), "sentinel-rw")
            .iter()
            .any(|(f, _)| *f == writer_field)
    );
    write.unlock().await.unwrap();
}

/// One owner's read holds with different leases, released in another order
/// than taken (guards are independent: any may go first): the release
/// deletes the timeout key of the last hold taken, so the holds left must
/// not be cut to the lease of the hold released. A long hold that is still
/// held keeps a writer out for its whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_short_read_hold_first_keeps_the_longer_ones_lease() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("order").unwrap();
    let owner = client.new_owner();
    let short = read_again(&rw, &owner, Duration::from_millis(1500)).await;
    let long = read_again(&rw, &owner, Duration::from_secs(60)).await;
    short.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(long.is_held(), "a 60 s hold");
    let writer = rw.write().try_lock().await.unwrap();
    assert!(
        writer.is_none(),
        "a writer got in beside a reader that still holds its 60 s lease: {:?}",
        hash(&server, "order")
    );
    long.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// The same with the watchdog: a read hold renewed by the watchdog and a
/// re-entry with a long explicit lease; the watchdog's hold goes first and
/// the explicit one must keep its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_the_watchdog_read_hold_first_keeps_an_explicit_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let rw = client.read_write_lock("order-w").unwrap();
    let renewed = rw.read().lock().await.unwrap();
    let explicit = read_again(&rw, renewed.owner(), Duration::from_secs(60)).await;
    renewed.unlock().await.unwrap();
    tokio::time::sleep(lease * 3).await;
    assert!(explicit.is_held(), "a 60 s hold");
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "a writer got in beside a reader that still holds its 60 s lease"
    );
    explicit.unlock().await.unwrap();
}

/// A re-entry of a read hold with a shorter explicit lease runs out (its
/// timeout key expires) while the owner's hold renewed by the watchdog is
/// still held: that hold is not lost (the owner's other timeout key keeps
/// the lock), and stays held after the short guard's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_reentry_running_out_does_not_lose_the_renewed_hold() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let rw = client.read_write_lock("short").unwrap();
    let renewed = rw.read().lock().await.unwrap();
    let short = read_again(&rw, renewed.owner(), Duration::from_millis(100)).await;
    tokio::time::sleep(lease * 2).await;
    assert!(
        renewed.is_held(),
        "the watchdog's hold was found lost when the short re-entry ran out"
    );
    short.unlock().await.unwrap();
    tokio::time::sleep(lease * 2).await;
    assert!(renewed.is_held());
    assert!(rw.write().try_lock().await.unwrap().is_none());
    renewed.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// The same with the short re-entry taken first: its timeout key is the
/// owner's first, below the renewed hold's. When it runs out, the renewed
/// hold lives on its own key; the short guard's release then deletes the
/// top key (the renewed hold's: holds go last-in first-out by key), whose
/// lease the key below must take over, although that key had expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_read_hold_taken_first_running_out_does_not_lose_the_renewed_hold() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let rw = client.read_write_lock("short-first").unwrap();
    let owner = client.new_owner();
    let short = read_again(&rw, &owner, Duration::from_millis(100)).await;
    let renewed = rw
        .read()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .expect("a read hold");
    let first = timeout_key("short-first", owner.as_str(), 1);
    eventually(
        Duration::from_secs(5),
        "the short hold's key to expire",
        || !exists(&server, &first),
    )
    .await;
    assert!(renewed.is_held());
    short.unlock().await.unwrap();
    tokio::time::sleep(lease * 2).await;
    assert!(
        renewed.is_held(),
        "the renewed hold was lost when the short one's release deleted the top key"
    );
    assert!(rw.write().try_lock().await.unwrap().is_none());
    renewed.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A hold count far beyond any real one (application data or a hostile
/// client's HSET on a read-write lock) is refused as not a lock: no script
/// loops over a timeout key per hold it claims (a release that did would
/// run for ages after its first write, which SCRIPT KILL cannot stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_hold_count_is_refused_not_looped_over() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let rw = client.read_write_lock("huge").unwrap();
    let read = rw.read().lock().await.unwrap();
    let _: i64 = server.cmd(&["HSET", "huge", "intruder:1", "9007199254740991"]);
    let released = tokio::time::timeout(Duration::from_secs(3), read.unlock()).await;
    assert!(
        matches!(released, Ok(Err(Error::NotALock { .. }))),
        "{released:?}"
    );
    assert_eq!(server.cmd::<String>(&["PING"]), "PONG");

    // As many read holds as a lock may count: a reader finds it busy (one
    // more would make the lock one that is refused), nothing is written.
    let _: i64 = server.cmd(&["DEL", "huge"]);
    let _: i64 = server.cmd(&["HSET", "huge", "mode", "read", "crowd:1", "100000"]);
    let _: i64 = server.cmd(&["PEXPIRE", "huge", "60000"]);
    assert!(rw.read().try_lock().await.unwrap().is_none(), "full");
    assert_eq!(
        hash(&server, "huge"),
        pairs(&[("mode", "read"), ("crowd:1", "100000")])
    );
}

/// Shutdown releases every read-write hold: a downgrade's write and read
/// holds and a re-entered read hold (watchdog and explicit leases), and
/// the waiting writer of another client gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_both_sides_of_a_downgrade() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server).await;
    let rw = client.read_write_lock("down").unwrap();
    let write = rw.write().lock().await.unwrap();
    let read = read_again(&rw, write.owner(), Duration::from_secs(60)).await;
    let again = read.reenter().await.unwrap().unwrap();
    let other = woken_by_messages_only(&server).await;
    let waiter = {
        let rw = other.read_write_lock("down").unwrap();
        tokio::spawn(async move { rw.write().lock().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    client.shutdown().await;
    let w = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release")
        .unwrap()
        .unwrap();
    assert_eq!(
        hash(&server, "down"),
        pairs(&[("mode", "write"), (w.owner().as_str(), "1")])
    );
    assert!(!write.is_held() && !read.is_held() && !again.is_held());
    w.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A write guard's owner (`OWNER:write`) names its owner to any lock of
/// the client: a plain lock (fair or not) taken with it stores the owner
/// itself, which its own scripts accept, so it re-enters and releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_guards_owner_takes_a_plain_lock_as_its_owner() {
    let server = RedisServer::start();
    let client = redisson(&server).await;
    let write = client
        .read_write_lock("rw")
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let plain = client.lock("plain").unwrap();
    let fair = client.fair_lock("fair").unwrap();
    for handle in [&*plain, &*fair] {
        let guard = handle
            .acquire(AcquireOptions::new().owner(write.owner().clone()))
            .await
            .unwrap()
            .unwrap();
        let again = guard.reenter().await.unwrap().expect("re-entered");
        assert_eq!(handle.hold_count(write.owner()).await.unwrap(), 2);
        again.unlock().await.unwrap();
        guard.unlock().await.unwrap();
        assert!(!handle.is_locked().await.unwrap());
    }
    write.unlock().await.unwrap();
    assert!(lock_keys(&server).is_empty(), "{:?}", lock_keys(&server));
}

/// A Java reader with a short `lockWatchdogTimeout` shares the lock with a
/// fairlock reader on a longer watchdog lease. Redisson keeps one TTL for
/// the hash, and its read renewal sets it to the renewing client's lease
/// (the stand-in runs Redisson's renewal): when the Java process dies, the
/// hash expires one Java lease after that client's last renewal, with the
/// fairlock reader's field in it. Before, fairlock renewed every third of
/// its own lease (here 3 s), so a Java writer got in (the hash gone) while
/// the fairlock reader still believed it read, until its next renewal.
/// Now fairlock renews a read hold at a third of the shortest TTL it finds
/// on the hash (never lowering it): the hash does not run out while the
/// fairlock reader holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_readers_short_lease_does_not_end_a_fairlock_readers_lock() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(9);
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let rw = client.read_write_lock("short-java").unwrap();
    let read = rw.read().lock().await.unwrap();
    let (java, writer) = (java::Thread::new(1), java::Thread::new(2));
    let java_lease: u64 = 1500;
    assert_eq!(
        java.read_with_lease(&server, "short-java", java_lease),
        None
    );
    // The Java client's watchdog renews every third of its lease (each
    // renewal sets the hash's TTL to 1.5 s). It runs until fairlock renewed
    // once in between (the hash's TTL above Java's lease again), then once
    // more, and the Java process dies.
    assert_eq!(java.renew_read(&server, "short-java", java_lease), Some(1));
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(java_lease / 3)).await;
        let pttl: i64 = server.cmd(&["PTTL", "short-java"]);
        assert_eq!(java.renew_read(&server, "short-java", java_lease), Some(1));
        if pttl > java_lease as i64 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "fairlock never renewed"
        );
    }
    let died = std::time::Instant::now();
    // The hash now lives 1.5 s on the Java lease; fairlock's next renewal
    // on its own schedule would come up to 3 s after its last.
    while died.elapsed() < Duration::from_secs(5) {
        assert!(
            read.is_held(),
            "the fairlock reader lost its hold {:?} after the Java reader died",
            died.elapsed()
        );
        if writer.write(&server, "short-java").is_none() {
            panic!(
                "a Java writer got in {:?} after the Java reader died, beside a fairlock \
                 reader that believes it reads",
                died.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pttl: i64 = server.cmd(&["PTTL", "short-java"]);
    assert!(
        pttl > 0,
        "the hash lives on the fairlock reader's lease: {pttl}"
    );
    read.unlock().await.unwrap();
    // The dead Java reader's hold no longer counts: the lock is free.
    assert_eq!(writer.write(&server, "short-java"), None);
    assert_eq!(writer.write_release(&server, "short-java"), Some(1));

    // The fairlock reader joins a lock the Java reader already holds: its
    // acquisition finds the hash's short TTL (before, its first renewal
    // came a third of its own lease later, after the hash expired).
    // (A client of its own: its watchdog's first round comes 3 s after it
    // started, whenever the other client's rounds come.)
    let client = support::client_with(&server, Protocol::Redisson, |c| c.lease(lease)).await;
    let java = java::Thread::new(3);
    assert_eq!(java.read_with_lease(&server, "joined", java_lease), None);
    let read = client
        .read_write_lock("joined")
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(java_lease / 3)).await;
    assert_eq!(java.renew_read(&server, "joined", java_lease), Some(1));
    let died = std::time::Instant::now();
    while died.elapsed() < Duration::from_secs(4) {
        assert!(
            read.is_held(),
            "lost {:?} after the Java reader died",
            died.elapsed()
        );
        if writer.write(&server, "joined").is_none() {
            panic!(
                "a Java writer got in {:?} after the Java reader died, beside a fairlock \
                 reader that joined it",
                died.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    read.unlock().await.unwrap();
}

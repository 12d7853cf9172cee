//! The native protocol's read-write lock: fair (first come, first served
//! across readers and writers), a fencing token per acquisition, direct
//! handoff to the next reader group or writer, downgrade without upgrade,
//! crashed holders and dead waiters passed over within their bounds, every
//! key expiring on its own, and bad data refused and left alone.
//!
//! Waiters here try again only every 20 s (a third of a 60 s waiter ttl)
//! unless a test says otherwise: a waiter that gets in within a few seconds
//! was admitted by a release, and told by its grant message.

use std::time::Duration;

use fairlock::{AcquireOptions, Error, HoldMode, LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, eventually};
use tokio::task::JoinHandle;

/// A client whose waiters retry only every 20 s without a message.
async fn client(server: &RedisServer) -> LockClient {
    support::client_with(server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60))
    })
    .await
}

type Waiting = JoinHandle<fairlock::Result<LockGuard>>;

/// A read (`write == false`) or write acquisition of `rw` in a task.
fn ask(rw: &fairlock::ReadWriteLock, write: bool) -> Waiting {
    let rw = rw.clone();
    tokio::spawn(async move {
        if write {
            rw.write().lock().await
        } else {
            rw.read().lock().await
        }
    })
}

/// `what` queued: the line has `len` waiters.
async fn queued(server: &RedisServer, name: &str, len: usize, what: &str) {
    support::objects::wait_for_line(server, name, "rw", len, what).await;
}

/// What `task` gets within 5 s.
async fn granted(task: Waiting, what: &str) -> LockGuard {
    support::objects::granted(task, what).await
}

/// Nothing held, nobody in line, every key left expiring on its own.
fn left_clean(server: &RedisServer, name: &str) {
    support::objects::assert_left_clean(server, name, "rw");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_is_alone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("shared").unwrap();
    let first = rw.read().lock().await.unwrap();
    let second = rw.read().try_lock().await.unwrap().expect("readers share");
    assert!(first.token().is_some() && second.token() > first.token());
    assert!(rw.write().try_lock().await.unwrap().is_none());
    assert!(rw.read().is_locked().await.unwrap());
    assert!(!rw.write().is_locked().await.unwrap());

    let writer = ask(&rw, true);
    queued(&server, "shared", 1, "the writer queued").await;
    first.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "one reader is still in");
    let second_token = second.token();
    second.unlock().await.unwrap();
    let write = granted(writer, "the last reader's release admits the writer").await;
    assert!(write.token() > second_token);
    assert!(rw.write().is_locked().await.unwrap());
    assert!(rw.read().try_lock().await.unwrap().is_none());
    assert!(rw.write().try_lock().await.unwrap().is_none());
    write.unlock().await.unwrap();
    left_clean(&server, "shared");
}

/// First come, first served across both sides: a reader that comes while
/// a writer waits queues behind it (no writer starves), and the readers
/// queued together behind a writer are admitted together when it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_queue_behind_a_waiting_writer_and_go_in_together() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("fifo").unwrap();
    let reading = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    queued(&server, "fifo", 1, "the writer queued").await;
    assert!(
        rw.read().try_lock().await.unwrap().is_none(),
        "a reader does not pass the waiting writer"
    );
    let late: Vec<Waiting> = (0..3).map(|_| ask(&rw, false)).collect();
    queued(&server, "fifo", 4, "three readers queued behind it").await;
    reading.unlock().await.unwrap();
    let write = granted(writer, "the writer, first in line").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        late.iter().all(|t| !t.is_finished()),
        "readers wait for the writer"
    );
    let write_token = write.token();
    write.unlock().await.unwrap();
    let mut readers = Vec::new();
    for task in late {
        readers.push(granted(task, "the readers behind the writer, together").await);
    }
    let info = rw.read().inspect().await.unwrap();
    assert_eq!(info.holders.len(), 3, "{info:?}");
    assert!(info.holders.iter().all(|h| h.mode == HoldMode::Read));
    assert!(readers.iter().all(|r| r.token() > write_token));
    for reader in readers {
        reader.unlock().await.unwrap();
    }
}

/// A writer waits only for those who came before it: a group of readers
/// admitted by one writer's release, the second writer after them, and a
/// reader that came after the second writer after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waits_only_for_those_before_it() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("order").unwrap();
    let first = rw.write().lock().await.unwrap();
    let r1 = ask(&rw, false);
    queued(&server, "order", 1, "r1").await;
    let r2 = ask(&rw, false);
    queued(&server, "order", 2, "r2").await;
    let w2 = ask(&rw, true);
    queued(&server, "order", 3, "w2").await;
    let r3 = ask(&rw, false);
    queued(&server, "order", 4, "r3").await;
    first.unlock().await.unwrap();
    let r1 = granted(r1, "r1").await;
    let r2 = granted(r2, "r2 with r1").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!w2.is_finished() && !r3.is_finished());
    r1.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let w2 = granted(w2, "w2 once the readers before it left").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!r3.is_finished(), "r3 came after w2");
    w2.unlock().await.unwrap();
    granted(r3, "r3 last").await.unlock().await.unwrap();
}

/// Re-entry on each side keeps the token; a downgrade (the writer reads,
/// then lets the write hold go) keeps the read hold and admits the readers
/// queued behind; an upgrade is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_downgrade_and_no_upgrade() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("modes").unwrap();

    let write = rw.write().lock().await.unwrap();
    let again = write.reenter().await.unwrap().unwrap();
    assert_eq!(again.token(), write.token());
    assert_eq!(rw.write().hold_count(write.owner()).await.unwrap(), 2);
    again.unlock().await.unwrap();
    let waiting = ask(&rw, false);
    queued(&server, "modes", 1, "a reader waits for the writer").await;
    // The downgrade: the writer's owner reads at once, past the waiter.
    let owner = fairlock::Owner::clone(write.owner());
    let read = rw
        .read()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .expect("the writer reads");
    assert!(read.token() > write.token());
    write.unlock().await.unwrap();
    let other = granted(waiting, "the reader behind the downgraded writer").await;
    assert!(read.is_held() && other.is_held());

    // The upgrade: refused, nothing changed.
    let err = rw
        .write()
        .acquire(AcquireOptions::new().owner(owner))
        .await
        .expect_err("an upgrade would wait for itself");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err:?}");
    assert_eq!(rw.read().inspect().await.unwrap().holders.len(), 2);
    read.unlock().await.unwrap();
    other.unlock().await.unwrap();
}

/// One owner in several tasks at once: its reads in four tasks are
/// re-entries of one hold (one token, the count rising to four and back),
/// a writer of another owner waits for all of them and no longer, a task
/// of the owner asking to write meanwhile is refused at once (an upgrade
/// would wait for its own reads), and once every task released the owner
/// holds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owner_reading_in_several_tasks_is_one_hold() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("shared").unwrap();
    let owner = client.new_owner();
    let first = rw
        .read()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .expect("free");
    let writer = ask(&rw, true);
    queued(&server, "shared", 1, "the writer waits for the reader").await;
    let (release, released) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let (rw, owner, mut released) = (rw.clone(), owner.clone(), released.clone());
            tokio::spawn(async move {
                let guard = rw
                    .read()
                    .acquire(AcquireOptions::new().owner(owner).wait(Duration::ZERO))
                    .await
                    .unwrap()
                    .expect("a re-entry waits for nobody, not even the writer in line");
                let token = guard.token();
                released.wait_for(|r| *r).await.unwrap();
                guard.unlock().await.unwrap();
                token
            })
        })
        .collect();
    eventually(Duration::from_secs(5), "four holds of one owner", || {
        server.cmd::<Option<String>>(&[
            "HGET",
            &format!("fairlock:{{shared}}:rw:hold:{owner}"),
            "count",
        ]) == Some("4".to_owned())
    })
    .await;
    let err = rw
        .write()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .expect_err("an upgrade would wait for its own reads");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err:?}");
    let token = first.token();
    first.unlock().await.unwrap();
    assert!(!writer.is_finished(), "three reads of the owner still hold");
    release.send(true).unwrap();
    for task in tasks {
        assert_eq!(task.await.unwrap(), token, "one hold, one token");
    }
    let write = granted(writer, "the last release admits the writer").await;
    assert!(write.token() > token);
    assert_eq!(rw.read().hold_count(&owner).await.unwrap(), 0);
    write.unlock().await.unwrap();
    left_clean(&server, "shared");
}

/// A reader that crashed (its guard never released, its lease short) stops
/// counting when its lease ends: the writer waiting behind it gets in then,
/// woken by its own retry (no release tells it), within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_lease_ends_and_the_writer_gets_in() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let rw = client.read_write_lock("crash").unwrap();
    let lease = Duration::from_millis(800);
    // Before the acquire: the server's lease starts when its script runs,
    // which may be up to a reply's time before the acquire returns.
    let started = std::time::Instant::now();
    let crashed = rw
        .read()
        .acquire(AcquireOptions::new().lease(lease))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(crashed);
    let writer = ask(&rw, true);
    let write = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer got in")
        .unwrap()
        .unwrap();
    // The lease (0.8 s), then at most a retry interval (1 s) late.
    assert!(started.elapsed() >= lease, "{:?}", started.elapsed());
    write.unlock().await.unwrap();
}

/// The watchdog renews read holds past their lease: a writer stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_readers_in() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let rw = client.read_write_lock("renewed").unwrap();
    let read = rw.read().lock().await.unwrap();
    tokio::time::sleep(lease * 4).await;
    assert!(read.is_held());
    assert!(rw.write().try_lock().await.unwrap().is_none());
    let writer = ask(&rw, true);
    tokio::time::sleep(lease * 3).await;
    assert!(
        !writer.is_finished(),
        "a renewed reader keeps the writer out"
    );
    read.unlock().await.unwrap();
    granted(writer, "after the reader's release")
        .await
        .unlock()
        .await
        .unwrap();
}

/// A waiting writer that gives up (cancelled) leaves the line, and the
/// readers queued behind it go in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_lets_the_readers_behind_it_in() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("leave").unwrap();
    let reading = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    queued(&server, "leave", 1, "the writer queued").await;
    let reader = ask(&rw, false);
    queued(&server, "leave", 2, "a reader behind it").await;
    writer.abort();
    let _ = writer.await;
    let read = granted(reader, "the reader, once the writer left").await;
    read.unlock().await.unwrap();
    reading.unlock().await.unwrap();
    client.flush().await;
    left_clean(&server, "leave");
}

/// Force-unlock of one side removes its holders (their guards hear it) and
/// admits the line's head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_a_side_revokes_it_and_admits_the_next() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("forced").unwrap();
    let a = rw.read().lock().await.unwrap();
    let b = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    queued(&server, "forced", 1, "the writer queued").await;
    assert!(!rw.write().force_unlock().await.unwrap(), "nobody writes");
    assert!(rw.read().force_unlock().await.unwrap());
    let write = granted(writer, "the writer after the readers were removed").await;
    for guard in [&a, &b] {
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("a revoked reader hears it");
    }
    assert!(rw.write().force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), write.lost())
        .await
        .expect("the revoked writer hears it");
}

/// Other data under the lock's keys is refused, typed, and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_data_under_its_keys_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("data").unwrap();
    server.cmd::<()>(&["SET", "fairlock:{data}:rw:holders", "app"]);
    let err = rw.read().try_lock().await.expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cmd::<String>(&["GET", "fairlock:{data}:rw:holders"]),
        "app"
    );
    server.cmd::<()>(&["DEL", "fairlock:{data}:rw:holders"]);

    // A hash at the key the next read hold of an owner would use.
    let owner = client.new_owner();
    let key = format!("fairlock:{{data}}:rw:hold:{}", owner.as_str());
    server.cmd::<()>(&["HSET", &key, "app", "1"]);
    let err = rw
        .read()
        .acquire(AcquireOptions::new().owner(owner))
        .await
        .expect_err("not a hold");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    assert_eq!(
        server.cmd::<Vec<String>>(&["HGETALL", &key]),
        vec!["app".to_owned(), "1".to_owned()]
    );
}

/// The lock and the read-write lock of one name are two objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_the_same_name_is_another_object() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.fair_lock("same").unwrap().lock().await.unwrap();
    let rw = client.read_write_lock("same").unwrap();
    let write = rw.write().try_lock().await.unwrap().expect("apart");
    write.unlock().await.unwrap();
    lock.unlock().await.unwrap();
}

/// The blocking API, keyed on the calling thread: a thread's read hold
/// and its re-entry.
#[test]
fn the_blocking_api_reads_and_writes() {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Native);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let rw = client.read_write_lock("blocking").unwrap();
    let read = rw.read().lock().unwrap();
    let again = rw.read().lock().unwrap();
    assert_eq!(rw.read().hold_count_current_thread().unwrap(), 2);
    // The thread reads: its write request is an upgrade.
    assert!(matches!(
        rw.write().try_lock(),
        Err(Error::WouldDeadlock { .. })
    ));
    drop(again);
    drop(read);
    let write = rw.write().try_lock().unwrap().expect("free");
    drop(write);
}

/// A writer that downgraded (it reads too) still re-enters its write hold:
/// it holds the write side, so asking for it again is a re-entry, not an
/// upgrade (which would wait for itself). A retry of a write acquisition
/// whose reply was lost, after the owner read in another task, is the same
/// call: refused, its hold would be left with no guard until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgraded_writer_reenters_its_write_hold() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("rewrite").unwrap();
    let write = rw.write().lock().await.unwrap();
    let owner = fairlock::Owner::clone(write.owner());
    let read = rw
        .read()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .expect("the writer reads");
    let again = write
        .reenter()
        .await
        .expect("a re-entry of a held write side is no upgrade")
        .expect("still held");
    assert_eq!(again.token(), write.token());
    let third = rw
        .write()
        .acquire(AcquireOptions::new().owner(owner.clone()))
        .await
        .expect("a re-entry by owner")
        .expect("still held");
    assert_eq!(rw.write().hold_count(&owner).await.unwrap(), 3);
    for guard in [third, again, write] {
        guard.unlock().await.unwrap();
    }
    // The write side is gone: now asking for it is an upgrade.
    let err = rw
        .write()
        .acquire(AcquireOptions::new().owner(owner))
        .await
        .expect_err("an upgrade");
    assert!(matches!(err, Error::WouldDeadlock { .. }), "{err:?}");
    read.unlock().await.unwrap();
    client.flush().await;
    left_clean(&server, "rewrite");
}

/// A hold whose entry left the holders set (the set evicted under
/// `maxmemory`, or deleted) no longer keeps a writer out: the writer that
/// then gets in is alone only if the reader's guard hears that it lost its
/// hold, at its next renewal, as a lock's holder hears that its lock key
/// went. The renewal must not take the hold's own key, still there, for
/// the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_missing_from_the_holders_set_is_lost() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let rw = client.read_write_lock("evicted").unwrap();
    let read = rw.read().lock().await.unwrap();
    // As an eviction would: the set goes, the hold's key stays.
    server.cmd::<()>(&["DEL", "fairlock:{evicted}:rw:holders"]);
    let write = rw
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("nobody is registered as holding");
    tokio::time::timeout(lease * 3, read.lost())
        .await
        .expect("the reader hears that its hold is gone");
    assert!(!read.is_held() && write.is_held());
    // Its orphaned key is not taken for a hold either: the owner's next
    // read waits for the writer.
    let owner = fairlock::Owner::clone(read.owner());
    assert!(
        rw.read()
            .acquire(AcquireOptions::new().owner(owner).wait(Duration::ZERO))
            .await
            .unwrap()
            .is_none(),
        "no read beside the writer"
    );
    write.unlock().await.unwrap();
}

/// A holders set's score behind its hold key's lease (as an older
/// fairlock's renewals, which moved the key's TTL and not the score, left
/// it: the score was only a lower bound) is rescored from the key, not
/// taken for a lease that ended: the writer stays out and the reader keeps
/// its hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_behind_its_key_is_rescored_not_reclaimed() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("lagging").unwrap();
    let read = rw.read().lock().await.unwrap();
    let holders = "fairlock:{lagging}:rw:holders";
    let owner = read.owner().to_string();
    server.cmd::<()>(&["ZADD", holders, "XX", "1", &owner]);
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "no writer beside the live reader"
    );
    assert!(read.is_held());
    let score: f64 = server.cmd(&["ZSCORE", holders, &owner]);
    let (secs, _): (u64, u64) = server.cmd(&["TIME"]);
    assert!(
        score > (secs * 1000) as f64,
        "rescored to its key's lease end: {score}"
    );
    read.unlock().await.unwrap();
    left_clean(&server, "lagging");
}

/// A hold key whose expiry another program moved to the end of Redis's time
/// (`PEXPIREAT` of the largest value it keeps), its score behind: rescored
/// to that end, a number above 2^63 written as such (not wrapped to a
/// negative score, which would have the reader reclaimed at once and the
/// writer's attempt told to retry in 0 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_key_expiring_at_the_end_of_time_is_rescored_as_such() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("forever").unwrap();
    let read = rw.read().lock().await.unwrap();
    let holders = "fairlock:{forever}:rw:holders";
    let owner = read.owner().to_string();
    let key = format!("fairlock:{{forever}}:rw:hold:{owner}");
    server.cmd::<()>(&["PEXPIREAT", &key, "9223372036854775807"]);
    server.cmd::<()>(&["ZADD", holders, "XX", "1", &owner]);
    assert!(
        rw.write().try_lock().await.unwrap().is_none(),
        "no writer beside the live reader"
    );
    let score: f64 = server.cmd(&["ZSCORE", holders, &owner]);
    assert!(score > 9.2e18, "rescored to the key's expiry: {score}");
    read.unlock().await.unwrap();
    left_clean(&server, "forever");
}

/// More crashed readers than one script reclaims (64 per call): the writer
/// behind them still gets in soon after their leases end, each call
/// dropping the next 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_gets_in_past_more_crashed_readers_than_one_call_reclaims() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let rw = client.read_write_lock("crowd").unwrap();
    let lease = Duration::from_millis(800);
    for _ in 0..150 {
        let crashed = rw
            .read()
            .acquire(AcquireOptions::new().lease(lease))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(crashed);
    }
    let started = std::time::Instant::now();
    let write = tokio::time::timeout(Duration::from_secs(5), rw.write().lock())
        .await
        .expect("the writer got in")
        .unwrap();
    assert!(started.elapsed() >= lease / 2, "{:?}", started.elapsed());
    let info = rw.write().inspect().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    write.unlock().await.unwrap();
    client.flush().await;
    left_clean(&server, "crowd");
}

/// On a Redis Cluster every key of the lock is in the slot of its name
/// (the hold keys the scripts build from the holders set's name too, with
/// or without a hash tag of the name's own), the watchdog renews the hold
/// keys on the slot's master, and a release admits the writer by its grant
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_it_from_one_slot() {
    let cluster = support::Cluster::start();
    let lease = Duration::from_secs(2);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60)).lease(lease)
    })
    .await;
    for name in ["catalog", "tenant-{7}-catalog"] {
        let rw = client.read_write_lock(name).unwrap();
        let read = rw.read().lock().await.unwrap();
        let other = rw.read().lock().await.unwrap();
        let writer = ask(&rw, true);
        let holders = format!("fairlock:{{{name}}}:rw:holders");
        let node = cluster.node_for_key(&holders);
        eventually(Duration::from_secs(5), "the writer queued", || {
            node.cmd::<usize>(&["ZCARD", &format!("fairlock:{{{name}}}:rw:line")]) == 1
        })
        .await;
        // Renewed past two leases (six renewals). A lease of 2 s: a renewal
        // may come 1.3 s late on a loaded machine (six nodes share its cores).
        tokio::time::sleep(lease * 2).await;
        assert!(read.is_held() && other.is_held(), "{name}");
        for guard in [&read, &other] {
            let key = format!("fairlock:{{{name}}}:rw:hold:{}", guard.owner());
            assert_eq!(cluster.slot_of(&key), cluster.slot_of(&holders), "{key}");
            assert_eq!(node.cmd::<i64>(&["EXISTS", &key]), 1, "{key} renewed");
        }
        assert!(
            !writer.is_finished(),
            "{name}: the readers keep the writer out"
        );
        let last = other.token();
        read.unlock().await.unwrap();
        other.unlock().await.unwrap();
        let write = granted(writer, "admitted by the last reader's release").await;
        assert!(write.token() > last);
        write.unlock().await.unwrap();
        assert_eq!(node.cmd::<i64>(&["EXISTS", &holders]), 0, "{name}");
    }
}

/// A slot migration half-way, whichever way round the keys move (a
/// reshard moves them in batches, in no order): the node that runs a call
/// may lack a reader's hold key (built by the scripts, not declared) while
/// its lease runs. The reader keeps its hold through the window (its
/// renewals are tried again, not taken for a loss), its re-entry sent
/// half-way is retried until the migration completed (not granted afresh
/// beside the key that is on its way), and a writer is not let in beside
/// it afterwards.
///
/// The window (1.5 s) is shorter than the lease (3 s) less a renewal
/// interval (1 s): a hold is believed at most a lease past its last
/// confirmed renewal, and so is it counted by the holders set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_half_way_keeps_the_readers_hold() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let lease = Duration::from_secs(3);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    for (name, hold_first) in [("moving-a", false), ("moving-b", true)] {
        let rw = client.read_write_lock(name).unwrap();
        let read = rw.read().lock().await.unwrap();
        // Held past its first lease: the score its grant wrote has passed,
        // so only renewals keep it from being reclaimed as gone.
        tokio::time::sleep(lease + lease / 2).await;
        let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:rw:holders"));
        let from = cluster.node_for_slot(slot).port();
        let to = cluster.other_master(slot);
        // A waiter that dies half-way (its liveness ends 1 s from now):
        // every declared key then exists (so Redis runs the re-entry's
        // script rather than answer TRYAGAIN itself), and nobody live waits
        // (so a re-entry taken for a fresh reader would be granted).
        let node = cluster.node(from);
        let at = |key: &str| format!("fairlock:{{{name}}}:rw:{key}");
        let (secs, micros): (String, String) = node.cmd(&["TIME"]);
        let dies =
            secs.parse::<u64>().unwrap() * 1000 + micros.parse::<u64>().unwrap() / 1000 + 1000;
        node.cmd::<()>(&["ZADD", &at("line"), "1", "ghost:1"]);
        let record = format!("{dies}:3000:3000:x:1:");
        node.cmd::<()>(&["HSET", &at("waiters"), "ghost:1", &record]);
        for key in ["line", "waiters"] {
            node.cmd::<()>(&["PEXPIRE", &at(key), "60000"]);
        }
        let migration = cluster.begin_migration(slot, to);
        let hold_key = format!("fairlock:{{{name}}}:rw:hold:{}", read.owner());
        migration.move_keys_where(|key| (key == hold_key) == hold_first);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let again = {
            let (rw, owner) = (rw.clone(), read.owner().clone());
            tokio::spawn(async move { rw.read().acquire(AcquireOptions::new().owner(owner)).await })
        };
        // Past a renewal (every lease / 3), which finds the key elsewhere.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(read.is_held(), "{name}: believed through the window");
        // A re-entry granted afresh would have written a hold key of its
        // own here: the key on its way could not land (BUSYKEY).
        migration.move_keys();
        migration.finish();
        let again = tokio::time::timeout(Duration::from_secs(15), again)
            .await
            .expect("the re-entry ends")
            .unwrap()
            .expect("the re-entry is retried, not refused")
            .expect("a re-entry waits for nobody");
        assert_eq!(again.token(), read.token(), "{name}: a re-entry");
        let writer = ask(&rw, true);
        tokio::time::sleep(lease).await;
        assert!(
            read.is_held() && again.is_held(),
            "{name}: kept past the window"
        );
        assert!(!writer.is_finished(), "{name}: no writer beside the reader");
        again.unlock().await.unwrap();
        let token = read.token();
        read.unlock().await.unwrap();
        let write = granted(writer, "admitted by the reader's release").await;
        assert!(write.token() > token, "{name}");
        write.unlock().await.unwrap();
    }
}

/// A force-unlock of the write side half-way through a slot migration, the
/// writer's hold key not moved yet (the call runs on the new master, which
/// reads it as absent while the holders set says its lease runs): the
/// writer is taken away, so it must be told (`lost()`) and the call must
/// say it unlocked something. Its lease is explicit (no renewal would find
/// the hold gone): it is told by the revocation message or never, while a
/// reader is let in beside the write hold it believes in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_half_way_through_a_slot_migration_tells_the_writer() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let holder = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let admin = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let name = "forced-moving";
    let rw = holder.read_write_lock(name).unwrap();
    let write = rw
        .write()
        .lock_with_lease(Duration::from_secs(30))
        .await
        .unwrap();
    let lost = write.lost();
    // A reader waiting behind the writer (so every key a script declares
    // exists: Redis runs the call rather than answer TRYAGAIN itself).
    let forced = admin.read_write_lock(name).unwrap();
    let reader = ask(&forced, false);
    let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:rw:holders"));
    let from = cluster.node_for_slot(slot).port();
    let to = cluster
        .masters()
        .iter()
        .map(|m| m.port())
        .find(|&p| p != from)
        .unwrap();
    let queue = format!("fairlock:{{{name}}}:rw:line");
    eventually(Duration::from_secs(5), "the reader queued", || {
        cluster.node(from).cmd::<i64>(&["ZCARD", &queue]) == 1
    })
    .await;
    let migration = cluster.begin_migration(slot, to);
    let hold_key = format!("fairlock:{{{name}}}:rw:hold:{}", write.owner());
    // Every key but the writer's hold: calls run on the new master (ASK).
    migration.move_keys_where(|key| key != hold_key);
    let unlocked = forced.write().force_unlock().await.expect("made half-way");
    migration.move_keys();
    migration.finish();
    let reading = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the waiting reader goes in")
        .unwrap()
        .unwrap();
    // Told by the revocation's check, or by a recheck (every half
    // response timeout, 1.5 s, while the migration leaves it unsure), each
    // a round trip that a loaded machine may stretch to the response
    // timeout: 10 s. Without the fix the holder is never told within its
    // 30 s lease.
    let told = tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .is_ok();
    assert!(
        told && !write.is_held(),
        "a reader went in beside a writer that, never told, still believes \
         it writes (force_unlock said {unlocked})"
    );
    assert!(unlocked, "the write hold taken away is reported");
    reading.unlock().await.unwrap();
}

/// A standalone server (no slot ever migrates) whose reader's hold key was
/// deleted (by hand, or evicted under `maxmemory`) while the holders set
/// still says its lease runs: the owner's next acquisition is an ordinary
/// call on a healthy server and must be answered as one (acquired, or
/// waited for within its own budget), not refused as a server that
/// "cannot serve requests now" once the retry budget (shorter than a
/// lease, as the defaults: 10 s of 30 s) has gone by.
///
/// Failed from 05266ed (`own_hold` answered `TRYAGAIN ... (a slot
/// migration?)` for an own hold whose key is absent while its score runs,
/// which in a Cluster means "on the other node half-way through a
/// migration" but elsewhere "deleted or evicted"): the acquire scripts now
/// learn from their caller whether they run on a Cluster (`slots_move`),
/// and answer TRYAGAIN there only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_hold_key_does_not_make_its_owners_next_acquisition_unavailable() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(3);
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(lease)
            .retry_budget(Duration::from_secs(1))
            .waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let rw = client.read_write_lock("deleted").unwrap();
    let read = rw.read().lock().await.unwrap();
    let hold_key = format!("fairlock:{{deleted}}:rw:hold:{}", read.owner());
    assert_eq!(server.cmd::<i64>(&["DEL", &hold_key]), 1);
    let again = tokio::time::timeout(
        lease * 3,
        rw.read().acquire(
            AcquireOptions::new()
                .owner(read.owner().clone())
                .wait(lease * 2),
        ),
    )
    .await
    .expect("within its bound");
    match again {
        Ok(Some(again)) => again.unlock().await.unwrap(),
        Ok(None) => {}
        Err(err) => panic!("a healthy standalone server answered: {err}"),
    }
}

/// A rolling upgrade meets a slot migration: a reader of a fairlock whose
/// renewals moved the hold key's TTL and not the holders set's score (every
/// version before 05266ed) leaves its score behind its key (planted here,
/// as `a_score_behind_its_key_is_rescored_not_reclaimed` does). Half-way
/// through a migration, with its key not moved yet, a call on the new
/// master finds the score passed, reads the key as absent and reclaims a
/// live hold: a writer goes in beside the reader, who is told only by its
/// next renewal.
///
/// OPEN (a limitation, not fixable in the scripts): on the new master an
/// absent key and a key not moved yet look the same, and an older
/// client's score may lag its key by any amount. Until every client runs a
/// version whose renewals move the score (and has renewed once since), the
/// old rule stands: migrate slots holding native read-write locks or
/// semaphores only while nobody holds them (docs/topologies.md).
#[ignore = "open: a score left behind by an older fairlock is reclaimed half-way through a slot migration"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_left_behind_by_an_older_fairlock_half_way_through_a_migration() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let name = "upgrading";
    let rw = client.read_write_lock(name).unwrap();
    let read = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:rw:holders"));
    let from = cluster.node_for_slot(slot).port();
    let to = cluster
        .masters()
        .iter()
        .map(|m| m.port())
        .find(|&p| p != from)
        .unwrap();
    let at = |key: &str| format!("fairlock:{{{name}}}:rw:{key}");
    eventually(Duration::from_secs(5), "the writer queued", || {
        cluster.node(from).cmd::<i64>(&["ZCARD", &at("line")]) == 1
    })
    .await;
    // The score an older fairlock's renewals leave: its grant's (passed).
    let owner = read.owner().to_string();
    cluster
        .node(from)
        .cmd::<()>(&["ZADD", &at("holders"), "XX", "1", &owner]);
    let migration = cluster.begin_migration(slot, to);
    let hold_key = at(&format!("hold:{owner}"));
    migration.move_keys_where(|key| key != hold_key);
    // The writer's next attempt (every waiter ttl / 3) runs there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reader_held = read.is_held();
    let (early, writer) = if writer.is_finished() {
        (Some(writer.await.unwrap()), None)
    } else {
        (None, Some(writer))
    };
    migration.move_keys();
    migration.finish();
    match early {
        Some(Ok(write)) => {
            assert!(!reader_held, "a writer went in beside a live reader");
            write.unlock().await.unwrap();
        }
        Some(Err(err)) => panic!("the writer: {err}"),
        None => {
            read.unlock().await.unwrap();
            let writer = writer.expect("still waiting");
            granted(writer, "the writer").await.unlock().await.unwrap();
        }
    }
}

/// `inspect` (and `is_locked`) half-way through a slot migration, a
/// writer's hold key not moved yet: the holders set on the new master
/// names the writer and its lease runs, so the lock is held (nobody else is
/// admitted), and `inspect` must not say it is free.
///
/// OPEN (diagnostics only): fails. `inspect_state` (weighted_prelude.lua)
/// lists only holders whose key it reads; one whose key is on the other
/// node (or was evicted while its lease runs) is left out, and
/// `is_locked()` answers false. A fix lists such an entry (its lease end
/// from the score; count, token and a semaphore's weight unknown here, or
/// the weight from meta), or answers TRYAGAIN in a Cluster only.
#[ignore = "open: inspect leaves out a holder whose key is on the other node half-way through a migration"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_half_way_through_a_slot_migration_shows_the_writer() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let name = "inspected-moving";
    let rw = client.read_write_lock(name).unwrap();
    let write = rw.write().lock().await.unwrap();
    let reader = ask(&rw, false);
    let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:rw:holders"));
    let from = cluster.node_for_slot(slot).port();
    let to = cluster
        .masters()
        .iter()
        .map(|m| m.port())
        .find(|&p| p != from)
        .unwrap();
    let queue = format!("fairlock:{{{name}}}:rw:line");
    eventually(Duration::from_secs(5), "the reader queued", || {
        cluster.node(from).cmd::<i64>(&["ZCARD", &queue]) == 1
    })
    .await;
    let migration = cluster.begin_migration(slot, to);
    let hold_key = format!("fairlock:{{{name}}}:rw:hold:{}", write.owner());
    migration.move_keys_where(|key| key != hold_key);
    let locked = rw.write().is_locked().await;
    migration.move_keys();
    migration.finish();
    assert!(write.is_held());
    assert!(
        matches!(locked, Ok(true)),
        "the write side half-way: {locked:?}"
    );
    write.unlock().await.unwrap();
    granted(reader, "the reader").await.unlock().await.unwrap();
}

/// Through Sentinel with `min_replicas`: each acquisition, a handed-over
/// grant included, is acknowledged by the replica before its guard is
/// returned (the proof: the hold key's token on the replica).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_serves_it_with_replica_acknowledgement() {
    let deployment = support::Sentinel::start_with(1, 1);
    let config = fairlock::ClientConfig::from_url(&deployment.url())
        .unwrap()
        .protocol(Protocol::Native)
        .waiter_ttl(Duration::from_secs(60))
        .min_replicas(1, Duration::from_secs(5));
    let client = LockClient::with_config(config).await.unwrap();
    let rw = client.read_write_lock("sentinel-rw").unwrap();
    let read = rw.read().lock().await.unwrap();
    let replica = &deployment.replicas()[0];
    let key = format!("fairlock:{{sentinel-rw}}:rw:hold:{}", read.owner());
    let token: String = replica.cmd(&["HGET", &key, "token"]);
    assert_eq!(token, read.token().unwrap().to_string(), "on the replica");
    let writer = ask(&rw, true);
    eventually(Duration::from_secs(5), "the writer queued", || {
        deployment
            .master()
            .cmd::<usize>(&["ZCARD", "fairlock:{sentinel-rw}:rw:line"])
            == 1
    })
    .await;
    read.unlock().await.unwrap();
    let write = granted(writer, "the writer is handed the lock").await;
    // Acknowledged before the guard was returned: the grant is on the
    // replica already (its claim comes later, a third into the grant).
    let key = format!("fairlock:{{sentinel-rw}}:rw:hold:{}", write.owner());
    let token: String = replica.cmd(&["HGET", &key, "token"]);
    assert_eq!(
        token,
        write.token().unwrap().to_string(),
        "the grant on the replica"
    );
    write.unlock().await.unwrap();

    // A replica that acknowledges nothing: the acquisition is refused and
    // undone, nothing is believed or left held.
    let quick = LockClient::with_config(
        fairlock::ClientConfig::from_url(&deployment.url())
            .unwrap()
            .protocol(Protocol::Native)
            .min_replicas(1, Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let frozen = replica.pause();
    let err = quick
        .read_write_lock("sentinel-rw")
        .unwrap()
        .read()
        .try_lock()
        .await
        .expect_err("no replica acknowledged");
    assert!(matches!(err, Error::ReplicasNotSynced { .. }), "{err:?}");
    drop(frozen);
    let holders: usize = deployment
        .master()
        .cmd(&["ZCARD", "fairlock:{sentinel-rw}:rw:holders"]);
    assert_eq!(holders, 0, "the refused hold was undone");
    quick.shutdown().await;
}

/// `SENTINEL FAILOVER` while two readers hold (acknowledged by the
/// replica: `min_replicas`) and a writer waits: the readers keep their
/// holds on the promoted replica (renewed there), the writer is not let in
/// beside them, and their releases on the new master admit it with a
/// token above theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_keeps_the_readers_and_the_writers_place() {
    let deployment = support::Sentinel::start_with(2, 3);
    let client = support::objects::failover_client(&deployment).await;
    let rw = client.read_write_lock("failing-over").unwrap();
    let first = rw.read().lock().await.unwrap();
    let second = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    let replica = &deployment.replicas()[0];
    eventually(
        Duration::from_secs(10),
        "the writer queued, replicated",
        || replica.cmd::<usize>(&["ZCARD", "fairlock:{failing-over}:rw:line"]) == 1,
    )
    .await;
    deployment.fail_over().await;
    // Past a lease on the new master: the readers were renewed there (a
    // renewal counts once a replica of the new master acknowledged it: the
    // other replica follows it within the failover, while the old master
    // rejoins only some 16 s later, so with one replica in all the holds
    // would be lost, told by lost(), when their lease ran out).
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(
        first.is_held() && second.is_held(),
        "kept across the failover"
    );
    assert!(!writer.is_finished(), "no writer beside the readers");
    let last = first.token().max(second.token());
    first.unlock().await.expect("released on the new master");
    second.unlock().await.expect("released on the new master");
    let write = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer is admitted")
        .unwrap()
        .expect("the wait survives the failover");
    assert!(write.token() > last, "{:?} after {last:?}", write.token());
    write.unlock().await.unwrap();
    client.shutdown().await;
}

/// `inspect` tells each waiter's side: one line holds both, and a writer's
/// entry (its id `OWNER:write`) reads as a write request, a reader's as a
/// read request, each asking for one hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_side_each_waiter_asks_for() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let rw = client.read_write_lock("sides").unwrap();
    let reading = rw.read().lock().await.unwrap();
    let writer = ask(&rw, true);
    queued(&server, "sides", 1, "the writer queued").await;
    let reader = ask(&rw, false);
    queued(&server, "sides", 2, "a reader queued behind it").await;
    let info = rw.read().inspect().await.unwrap();
    let line: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{sides}:rw:line", "0", "-1"]);
    let shown: Vec<_> = info
        .queue
        .iter()
        .map(|w| (w.owner.clone(), w.mode, w.permits))
        .collect();
    assert_eq!(
        shown,
        [
            (line[0].clone(), HoldMode::Write, 1),
            (line[1].clone(), HoldMode::Read, 1)
        ]
    );
    assert!(line[0].ends_with(":write") && !line[1].ends_with(":write"));
    reading.unlock().await.unwrap();
    granted(writer, "the writer").await.unlock().await.unwrap();
    granted(reader, "the reader").await.unlock().await.unwrap();
    left_clean(&server, "sides");
}

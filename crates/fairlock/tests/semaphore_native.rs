//! The native protocol's semaphore: never more permits out than its total,
//! first come first served (a large request at the head is not overtaken),
//! direct handoff to the waiters that fit, a fencing token per acquisition,
//! a dead holder's permits back after its lease and a live one's kept,
//! cancellation without ghosts, the total changed while in use, bad input
//! and bad data refused, and every key expiring on its own.
//!
//! Waiters here try again only every 20 s (a third of a 60 s waiter ttl)
//! unless a test says otherwise: a waiter that gets in within a few seconds
//! was admitted by a release (or a raise of the total), and told by its
//! grant message.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

mod common;

use common::semaphore::{Waiting, ask, client, granted, keys_of, left_clean, queued};
use fairlock::{Error, HoldMode, LockClient, PermitLease, Permits, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, eventually};

/// Many tasks taking 1 or 2 permits of 3, over and over: never more than 3
/// out at once, and every acquisition's token above the ones before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_its_total_out() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("many", 3).unwrap();
    let out = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tasks: Vec<_> = (0..12_u32)
        .map(|i| {
            let (sem, out, most) = (sem.clone(), Arc::clone(&out), Arc::clone(&most));
            tokio::spawn(async move {
                let n = 1 + i % 2;
                let mut last = None;
                for _ in 0..4 {
                    let permits = sem.acquire(n).await.unwrap();
                    assert!(permits.token() > last, "tokens increase");
                    last = permits.token();
                    let now = out.fetch_add(n, Ordering::SeqCst) + n;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    out.fetch_sub(n, Ordering::SeqCst);
                    permits.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("every task done")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} permits out at once");
    assert!(most >= 2, "the permits were shared ({most} at most)");
    assert_eq!(sem.available().await.unwrap(), 3);
    left_clean(&server, "many");
}

/// A request of 2 at the head of the line is not overtaken by a request of
/// 1 behind it although 1 permit is free; one release then admits both, in
/// line order (tokens in that order), and each is told by its grant message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_at_the_head_is_not_overtaken() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("fifo", 3).unwrap();
    let first = sem.acquire(2).await.unwrap();
    let big = ask(&sem, 2);
    queued(&server, "fifo", 1, "the request of 2 queued").await;
    assert_eq!(sem.available().await.unwrap(), 1);
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "a request of 1 does not pass the waiting request of 2"
    );
    let small = ask(&sem, 1);
    queued(&server, "fifo", 2, "the request of 1 queued behind it").await;
    // Another attempt runs the admission: it must not pass the head to
    // grant the request of 1 behind it.
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!small.is_finished(), "the request of 1 waits its turn");
    let info = sem.inspect().await.unwrap();
    assert_eq!((info.total, info.available), (3, 1), "{info:?}");
    assert_eq!(info.taken.len(), 1);
    assert_eq!(info.taken[0].permits, 2);
    assert_eq!(info.queue.len(), 2);

    let first_token = first.token();
    first.release().await.unwrap();
    let big = granted(big, "the request of 2, first in line").await;
    let small = granted(small, "the request of 1, by the same release").await;
    assert!(big.token() > first_token);
    assert!(small.token() > big.token(), "admitted in line order");
    assert_eq!(sem.available().await.unwrap(), 0);
    big.release().await.unwrap();
    small.release().await.unwrap();
    left_clean(&server, "fifo");
}

/// One release admits every waiter that now fits, together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_is_admitted_by_one_release() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("group", 4).unwrap();
    let all = sem.acquire(4).await.unwrap();
    let waiting: Vec<Waiting> = (0..3).map(|_| ask(&sem, 1)).collect();
    queued(&server, "group", 3, "three requests of 1 queued").await;
    all.release().await.unwrap();
    let mut held = Vec::new();
    for task in waiting {
        held.push(granted(task, "the waiters, by the one release").await);
    }
    assert_eq!(sem.available().await.unwrap(), 1);
    for permits in held {
        permits.release().await.unwrap();
    }
    left_clean(&server, "group");
}

/// Permits taken with a short lease by a holder that died (its guard
/// forgotten) come back when the lease ends: beside a live holder (its
/// hold keeps the holders set, the dead one is reclaimed from it), and
/// alone (the holders set expires with the dead hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_permits_come_back_after_its_lease() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("crash", 3).unwrap();
    let lease = Duration::from_millis(800);
    for beside in [true, false] {
        let live = if beside {
            Some(sem.acquire(1).await.unwrap())
        } else {
            None
        };
        // Before the acquisition: its lease starts when the server grants it.
        let started = std::time::Instant::now();
        let crashed = sem
            .acquire_with(2, None, PermitLease::Fixed(lease))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(crashed);
        let waiter = ask(&sem, 2);
        let permits = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the dead holder's permits came back")
            .unwrap()
            .unwrap();
        // The lease (0.8 s), then at most a retry interval (1 s) late.
        assert!(started.elapsed() >= lease, "{:?}", started.elapsed());
        permits.release().await.unwrap();
        if let Some(live) = live {
            assert!(live.is_held());
            live.release().await.unwrap();
        }
        assert_eq!(sem.available().await.unwrap(), 3);
    }
    left_clean(&server, "crash");
}

/// The watchdog renews a live holder's permits past their lease: they never
/// come back while it holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_live_holders_permits() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(600);
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("renewed", 2).unwrap();
    let held = sem.acquire(2).await.unwrap();
    tokio::time::sleep(lease * 4).await;
    assert!(held.is_held());
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let waiter = ask(&sem, 1);
    tokio::time::sleep(lease * 4).await;
    assert!(!waiter.is_finished(), "a renewed holder keeps its permits");
    assert!(held.is_held());
    held.release().await.unwrap();
    granted(waiter, "after the holder's release")
        .await
        .release()
        .await
        .unwrap();
}

/// A cancelled acquisition leaves no ghost in the line (the next waiter is
/// admitted by the next release), and permits granted to an acquisition
/// cancelled at the same time are passed on, never kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_leaves_no_ghost_and_a_racing_grant_is_passed_on() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("cancel", 1).unwrap();
    let held = sem.acquire(1).await.unwrap();
    let ghost = ask(&sem, 1);
    queued(&server, "cancel", 1, "the first waiter queued").await;
    let next = ask(&sem, 1);
    queued(&server, "cancel", 2, "the second waiter queued").await;
    ghost.abort();
    let _ = ghost.await;
    queued(&server, "cancel", 1, "the cancelled waiter left the line").await;
    held.release().await.unwrap();
    let next = granted(next, "the waiter behind the cancelled one").await;

    // A grant racing a cancellation: the release grants the permit to the
    // head, whose grant message is late (2 s, through a proxy), and which
    // is cancelled meanwhile: its give-up passes the grant it never
    // claimed on to the waiter behind it, at once.
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(Protocol::Native)
        .waiter_ttl(Duration::from_secs(60));
    let slow = LockClient::with_config(config).await.unwrap();
    proxy.delay_pubsub(Duration::from_secs(2));
    let racer = ask(&slow.semaphore("cancel", 1).unwrap(), 1);
    queued(&server, "cancel", 1, "the racer queued").await;
    let last = ask(&sem, 1);
    queued(&server, "cancel", 2, "the last waiter queued").await;
    next.release().await.unwrap();
    racer.abort();
    let _ = racer.await;
    let last = tokio::time::timeout(Duration::from_millis(1500), last)
        .await
        .expect("the grant is passed on before the racer hears of it")
        .unwrap()
        .unwrap();
    let info = sem.inspect().await.unwrap();
    assert_eq!(info.taken.len(), 1, "{info:?}");
    assert_eq!(info.taken[0].id, last.ids()[0]);
    last.release().await.unwrap();
    client.flush().await;
    slow.flush().await;
    assert_eq!(sem.available().await.unwrap(), 1);
    left_clean(&server, "cancel");
}

/// A raise of the total admits the waiters that now fit; a total beneath
/// what is held admits nobody until enough comes back; a waiter asking for
/// more than a lowered total leaves the line with `InvalidConfig`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_up_and_down() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("resize", 1).unwrap();
    let a = sem.acquire(1).await.unwrap();
    let waiter = ask(&sem, 1);
    queued(&server, "resize", 1, "a waiter queued").await;
    sem.set_permits(2).await.unwrap();
    let b = granted(waiter, "the raise admits it").await;
    assert_eq!(sem.available().await.unwrap(), 0);

    sem.set_permits(1).await.unwrap();
    assert_eq!(sem.available().await.unwrap(), -1);
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    a.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(sem.try_acquire(1).await.unwrap().is_none(), "1 of 1 held");
    b.release().await.unwrap();
    let c = sem.try_acquire(1).await.unwrap().expect("free again");
    let err = sem.acquire(2).await.expect_err("above the total");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");

    sem.set_permits(3).await.unwrap();
    let big = ask(&sem, 3);
    queued(&server, "resize", 1, "a request of 3 queued").await;
    sem.set_permits(2).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), big)
        .await
        .expect("the request of 3 is refused at once")
        .unwrap()
        .expect_err("3 permits of 2");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    queued(&server, "resize", 0, "it left the line").await;
    c.release().await.unwrap();
    assert_eq!(sem.inspect().await.unwrap().total, 2);
    left_clean(&server, "resize");
}

/// Bad input is `InvalidConfig`; other data under the semaphore's keys is
/// refused, typed, and left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_bad_data_are_refused() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("bad", 3).unwrap();
    for err in [
        sem.acquire(0).await.expect_err("0 permits"),
        sem.acquire(4).await.expect_err("above the total"),
        sem.acquire_with(1, None, PermitLease::Unbounded)
            .await
            .expect_err("no lease"),
    ] {
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    }
    let err = client.counting_semaphore("bad", 3).expect_err("redisson's");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");

    server.cmd::<()>(&["SET", "fairlock:{bad}:sem:holders", "app"]);
    let err = sem.try_acquire(1).await.expect_err("a string");
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cmd::<String>(&["GET", "fairlock:{bad}:sem:holders"]),
        "app"
    );
    server.cmd::<()>(&["DEL", "fairlock:{bad}:sem:holders"]);

    assert!(keys_of(&server, "bad").is_empty(), "nothing written");
    server.cmd::<()>(&["HSET", "fairlock:{bad}:sem:meta", "capacity", "many"]);
    let err = sem.try_acquire(1).await.expect_err("not a counter");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    let err = sem.set_permits(5).await.expect_err("not a counter");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    assert_eq!(
        server.cmd::<Vec<String>>(&["HGETALL", "fairlock:{bad}:sem:meta"]),
        vec!["capacity".to_owned(), "many".to_owned()]
    );
    server.cmd::<()>(&["DEL", "fairlock:{bad}:sem:meta"]);

    // A hold key without a weight, registered as a holder.
    server.cmd::<()>(&["ZADD", "fairlock:{bad}:sem:holders", "1", "x:1"]);
    server.cmd::<()>(&[
        "HSET",
        "fairlock:{bad}:sem:hold:x:1",
        "owner",
        "x:1",
        "count",
        "1",
        "token",
        "7",
    ]);
    let err = sem.try_acquire(1).await.expect_err("a hold without weight");
    assert!(matches!(err, Error::NotALock { .. }), "{err:?}");
    assert_eq!(keys_of(&server, "bad").len(), 2, "nothing written");
}

/// The semaphore and the lock of one name are two objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_of_the_same_name_is_another_object() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let lock = client.fair_lock("same").unwrap().lock().await.unwrap();
    let sem = client.semaphore("same", 1).unwrap();
    let permits = sem.try_acquire(1).await.unwrap().expect("apart");
    permits.release().await.unwrap();
    lock.unlock().await.unwrap();
}

/// The blocking API: acquire, try, tokens, release on drop.
#[test]
fn the_blocking_api_takes_and_gives_back() {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Native);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let sem = client.semaphore("blocking", 3).unwrap();
    let two = sem.acquire(2).unwrap();
    assert!(two.token().is_some());
    assert!(sem.try_acquire(2).unwrap().is_none());
    let one = sem.try_acquire(1).unwrap().expect("1 left");
    assert!(one.token() > two.token());
    assert_eq!(sem.available().unwrap(), 0);
    drop(one);
    two.release().unwrap();
    assert_eq!(sem.available().unwrap(), 3);
    let taken = sem.acquire(2).unwrap();
    assert_eq!(sem.force_release().unwrap(), 2);
    assert!(taken.wait_lost(Duration::from_secs(5)).unwrap(), "told");
    assert_eq!(sem.available().unwrap(), 3);
}

/// After use (holds, a line, a change of total) every key expires on its
/// own: none is left without a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_expires_on_its_own() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("keys", 2).unwrap();
    let a = sem.acquire(2).await.unwrap();
    let waiter = ask(&sem, 1);
    queued(&server, "keys", 1, "a waiter queued").await;
    for key in keys_of(&server, "keys") {
        let ttl: i64 = server.cmd(&["PTTL", &key]);
        assert!(ttl > 0, "{key} has no TTL while in use");
    }
    a.release().await.unwrap();
    let b = granted(waiter, "the waiter").await;
    sem.set_permits(4).await.unwrap();
    b.release().await.unwrap();
    left_clean(&server, "keys");
    let fresh = client.semaphore("idle", 2).unwrap();
    fresh.set_permits(3).await.unwrap();
    assert_eq!(fresh.available().await.unwrap(), 3);
    left_clean(&server, "idle");
}

/// A slot migration half-way, whichever way round the keys move (a
/// reshard moves them in batches, in no order): the hold keys are built by
/// the scripts, not declared, so the node that runs a call may lack one
/// whose lease has not ended. Its holder's renewals meanwhile are neither
/// renewed nor lost (tried again), no call takes its permit for a free one,
/// a raise of the total that cannot grant the waiting request there (its
/// hold key would be on the other node) still raises it and keeps the
/// request in line, the request is answered by no wrong error (it gets the
/// new permit), and the holder's release sent half-way is retried until it
/// can take the permit back.
///
/// The window (1.5 s) is shorter than the lease (3 s) less a renewal
/// interval (1 s): a hold is believed at most a lease past its last
/// confirmed renewal, and so is it counted by the holders set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_half_way_loses_no_permit() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let lease = Duration::from_secs(3);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    for (name, hold_first) in [("moving-a", false), ("moving-b", true)] {
        let sem = client.semaphore(name, 1).unwrap();
        let held = sem.acquire(1).await.unwrap();
        let taking = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.try_acquire_for(1, Duration::from_secs(15)).await })
        };
        // Held past its first lease: the score its grant wrote has passed,
        // so only renewals keep it from being reclaimed as gone.
        tokio::time::sleep(lease + lease / 2).await;
        assert!(!taking.is_finished(), "{name}: 1 of 1 held");
        let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:sem:holders"));
        let to = cluster.other_master(slot);
        let migration = cluster.begin_migration(slot, to);
        let hold_key = format!("fairlock:{{{name}}}:sem:hold:{}", held.ids()[0]);
        migration.move_keys_where(|key| (key == hold_key) == hold_first);
        sem.set_permits(2)
            .await
            .expect("a raise half-way is made, not refused");
        // Past a renewal (every lease / 3), which finds the key elsewhere.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(held.is_held(), "{name}: believed through the window");
        // Given back half-way: retried until the key is where the call runs
        // (a release answered 'not held' would leave the permit taken until
        // its lease ran out).
        let release = tokio::spawn(held.release());
        tokio::time::sleep(Duration::from_millis(300)).await;
        migration.move_keys();
        migration.finish();
        let other = tokio::time::timeout(Duration::from_secs(20), taking)
            .await
            .expect("the acquisition ends")
            .unwrap()
            .expect("no error for a migration half-way")
            .expect("the raised permit");
        release
            .await
            .unwrap()
            .expect("the release is retried, not refused");
        let node = cluster.node(to);
        assert_eq!(
            node.cmd::<i64>(&["EXISTS", &hold_key]),
            0,
            "{name}: released"
        );
        assert_eq!(sem.available().await.unwrap(), 1, "{name}: 1 of 2 taken");
        other.release().await.unwrap();
        assert_eq!(sem.available().await.unwrap(), 2, "{name}");
    }
}

/// A force-release half-way through a slot migration, the hold's key not
/// moved yet (the call runs on the new master, which reads it as absent
/// while the holders set says its lease runs): the permit is given back,
/// so its holder must be told, as after any force-release (`lost()`
/// resolves), and the permit counted. Here the holder's lease is explicit
/// (no renewal would find the hold gone): it is told by the revocation
/// message or never, while the permit it believes in is taken by another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_half_way_through_a_slot_migration_tells_the_holder() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let holder = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let admin = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let name = "forced-moving";
    let sem = holder.semaphore(name, 1).unwrap();
    let held = sem
        .acquire_with(1, None, PermitLease::Fixed(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("the only permit");
    let lost = held.lost();
    // A request waiting for the permit (so every key a script declares
    // exists: Redis runs the call rather than answer TRYAGAIN itself).
    let forced = admin.semaphore(name, 1).unwrap();
    let waiting = ask(&forced, 1);
    let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:sem:holders"));
    let from = cluster.node_for_slot(slot).port();
    let to = cluster
        .masters()
        .iter()
        .map(|m| m.port())
        .find(|&p| p != from)
        .unwrap();
    let queue = format!("fairlock:{{{name}}}:sem:line");
    eventually(Duration::from_secs(5), "the request queued", || {
        cluster.node(from).cmd::<i64>(&["ZCARD", &queue]) == 1
    })
    .await;
    let migration = cluster.begin_migration(slot, to);
    let hold_key = format!("fairlock:{{{name}}}:sem:hold:{}", held.ids()[0]);
    // Every key but the hold's: calls run on the new master (ASK).
    migration.move_keys_where(|key| key != hold_key);
    let released = forced.force_release().await.expect("made half-way");
    migration.move_keys();
    migration.finish();
    let taken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting request gets the permit given back")
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
        told && !held.is_held(),
        "the permit went to the waiting request while its holder, never told, \
         still believes in it (force_release said {released})"
    );
    assert_eq!(released, 1, "the permit given back is counted");
    taken.release().await.unwrap();
}

/// A slot migration stalled half-way past a lease, whichever way round the
/// keys are split: the holder's renewals are answered 'unsure' for as long
/// as its key is on the other node, and an 'unsure' never confirms. The
/// hold is believed no longer than its last confirmed renewal (`lost()`
/// resolves, `is_held()` turns false), and once the migration completed
/// its permit is free again (the key expired with the lease it was given).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_stalled_past_a_lease_ends_the_belief_in_a_hold() {
    let cluster = support::cluster::Cluster::start_with(3, 0);
    let lease = Duration::from_secs(2);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.lease(lease).waiter_ttl(Duration::from_secs(3))
    })
    .await;
    for (name, hold_first) in [("stalled-a", false), ("stalled-b", true)] {
        let failures_before = client.statistics().renewal_failures;
        let sem = client.semaphore(name, 1).unwrap();
        let held = sem.acquire(1).await.unwrap();
        let lost = held.lost();
        // Every key a script declares exists (a waiter in line), so Redis
        // runs the renewals rather than answer TRYAGAIN itself.
        let waiting = {
            let sem = sem.clone();
            tokio::spawn(async move { sem.try_acquire_for(1, Duration::from_secs(30)).await })
        };
        let slot = cluster.slot_of(&format!("fairlock:{{{name}}}:sem:holders"));
        let from = cluster.node_for_slot(slot).port();
        let to = cluster
            .masters()
            .iter()
            .map(|m| m.port())
            .find(|&p| p != from)
            .unwrap();
        let queue = format!("fairlock:{{{name}}}:sem:line");
        eventually(Duration::from_secs(5), "the request queued", || {
            cluster.node(from).cmd::<i64>(&["ZCARD", &queue]) == 1
        })
        .await;
        let migration = cluster.begin_migration(slot, to);
        let hold_key = format!("fairlock:{{{name}}}:sem:hold:{}", held.ids()[0]);
        migration.move_keys_where(|key| (key == hold_key) == hold_first);
        // Every renewal confirmed from here on was sent before: the hold is
        // believed at most a lease from now (renewals every lease / 3
        // meanwhile answered 'unsure', each of which, taken for a
        // confirmation, would stretch it).
        let split = tokio::time::Instant::now();
        tokio::time::sleep_until(split + lease + Duration::from_millis(50)).await;
        assert!(
            !held.is_held(),
            "{name}: believed past its last confirmed lease"
        );
        tokio::time::timeout(Duration::from_secs(1), lost)
            .await
            .unwrap_or_else(|_| panic!("{name}: lost() resolves with the lease"));
        // Each 'unsure' was recorded as a failed renewal (a metric and a
        // debug event), as a failed call is.
        assert!(
            client.statistics().renewal_failures > failures_before,
            "{name}: no renewal failure recorded for the unsure renewals"
        );
        migration.move_keys();
        migration.finish();
        let other = tokio::time::timeout(Duration::from_secs(20), waiting)
            .await
            .expect("the acquisition ends")
            .unwrap()
            .expect("no error")
            .expect("the permit of the hold that ended");
        other.release().await.unwrap();
        held.release().await.expect_err("lost");
    }
}

/// A lost acquisition reply (the script ran, its answer held, the
/// connections cut) is claimed by the retry or undone, never counted twice
/// nor leaked: after the guard's release (or the undo) all permits are
/// free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_acquire_reply_is_neither_counted_twice_nor_leaked() {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(Protocol::Native)
        .response_timeout(Duration::from_secs(20));
    let client = LockClient::with_config(config).await.unwrap();
    let sem = client.semaphore("lostreply", 3).unwrap();
    // The scripts are loaded now (a first call is answered NOSCRIPT).
    sem.acquire(1).await.unwrap().release().await.unwrap();
    let holders = || server.cmd::<usize>(&["ZCARD", "fairlock:{lostreply}:sem:holders"]);

    proxy.hold_script_replies();
    let taking = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(2).await })
    };
    eventually(Duration::from_secs(10), "the acquisition ran", || {
        holders() == 1
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    match taking.await.unwrap() {
        Ok(permits) => {
            let used: String = server.cmd(&["HGET", "fairlock:{lostreply}:sem:meta", "used"]);
            assert_eq!(used, "2", "counted once");
            assert_eq!(holders(), 1);
            permits.release().await.unwrap();
        }
        Err(err) => assert!(err.is_connection(), "{err:?}"),
    }
    client.flush().await;
    eventually(Duration::from_secs(10), "nothing held", || holders() == 0).await;
    let all = sem.try_acquire(3).await.unwrap().expect("all 3 free");
    all.release().await.unwrap();
}

/// On a Redis Cluster every key of the semaphore is in the slot of its
/// name (the hold keys the scripts build too, with or without a hash tag
/// of the name's own), the watchdog renews the holds on the slot's master,
/// and a release admits the waiter by its grant message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_it_from_one_slot() {
    let cluster = support::Cluster::start();
    let lease = Duration::from_secs(2);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60)).lease(lease)
    })
    .await;
    for name in ["quota", "tenant-{7}-quota"] {
        let sem = client.semaphore(name, 3).unwrap();
        let two = sem.acquire(2).await.unwrap();
        let one = sem.acquire(1).await.unwrap();
        let waiting = ask(&sem, 2);
        let holders = format!("fairlock:{{{name}}}:sem:holders");
        let node = cluster.node_for_key(&holders);
        eventually(Duration::from_secs(5), "the waiter queued", || {
            node.cmd::<usize>(&["ZCARD", &format!("fairlock:{{{name}}}:sem:line")]) == 1
        })
        .await;
        // Renewed past two leases (six renewals). A lease of 2 s: a renewal
        // may come 1.3 s late on a loaded machine (six nodes share its cores).
        tokio::time::sleep(lease * 2).await;
        assert!(two.is_held() && one.is_held(), "{name}");
        for permits in [&two, &one] {
            let id = &permits.ids()[0];
            let key = format!("fairlock:{{{name}}}:sem:hold:{id}");
            assert_eq!(cluster.slot_of(&key), cluster.slot_of(&holders), "{key}");
            assert_eq!(node.cmd::<i64>(&["EXISTS", &key]), 1, "{key} renewed");
        }
        assert!(!waiting.is_finished(), "{name}: 3 of 3 are out");
        assert_eq!(
            sem.inspect().await.unwrap().node,
            Some(node.addr()),
            "{name}: the master of its slot"
        );
        let last = one.token();
        two.release().await.unwrap();
        let next = granted(waiting, "admitted by the release").await;
        assert!(next.token() > last);
        one.release().await.unwrap();
        next.release().await.unwrap();
    }
}

/// Through Sentinel with `min_replicas`: each acquisition, a handed-over
/// grant included, is acknowledged by the replica before its guard is
/// returned (the hold key's token on the replica), and refused and undone
/// when the replica acknowledges nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_serves_it_with_replica_acknowledgement() {
    let deployment = support::Sentinel::start_with(1, 1);
    let config = fairlock::ClientConfig::from_url(&deployment.url())
        .unwrap()
        .protocol(Protocol::Native)
        .waiter_ttl(Duration::from_secs(60))
        .min_replicas(1, Duration::from_secs(5));
    let client = LockClient::with_config(config).await.unwrap();
    let sem = client.semaphore("sentinel-sem", 2).unwrap();
    let both = sem.acquire(2).await.unwrap();
    let replica = &deployment.replicas()[0];
    let on_replica = |permits: &Permits| {
        let key = format!("fairlock:{{sentinel-sem}}:sem:hold:{}", permits.ids()[0]);
        replica.cmd::<Option<String>>(&["HGET", &key, "token"])
    };
    assert_eq!(on_replica(&both), both.token().map(|t| t.to_string()));
    let waiting = ask(&sem, 1);
    queued(deployment.master(), "sentinel-sem", 1, "the waiter queued").await;
    both.release().await.unwrap();
    let one = granted(waiting, "handed a permit").await;
    assert_eq!(
        on_replica(&one),
        one.token().map(|t| t.to_string()),
        "the grant on the replica before the guard"
    );
    one.release().await.unwrap();

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
        .semaphore("sentinel-sem", 2)
        .unwrap()
        .try_acquire(1)
        .await
        .expect_err("no replica acknowledged");
    assert!(matches!(err, Error::ReplicasNotSynced { .. }), "{err:?}");
    drop(frozen);
    let holders: usize = deployment
        .master()
        .cmd(&["ZCARD", "fairlock:{sentinel-sem}:sem:holders"]);
    assert_eq!(holders, 0, "the refused permit was undone");
    quick.shutdown().await;
}

/// `SENTINEL FAILOVER` while both permits are out (acknowledged by the
/// replica: `min_replicas`) and a request waits: the holders keep their
/// permits on the promoted replica, the request gets none beside them, and
/// a release on the new master hands it one with a token above theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_keeps_the_permits_and_the_line() {
    let deployment = support::Sentinel::start_with(2, 3);
    let client = support::objects::failover_client(&deployment).await;
    let sem = client.semaphore("failing-over", 2).unwrap();
    let first = sem.acquire(1).await.unwrap();
    let second = sem.acquire(1).await.unwrap();
    let waiting = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(1).await })
    };
    let replica = &deployment.replicas()[0];
    eventually(
        Duration::from_secs(10),
        "the request queued, replicated",
        || replica.cmd::<usize>(&["ZCARD", "fairlock:{failing-over}:sem:line"]) == 1,
    )
    .await;
    deployment.fail_over().await;
    // Past a lease on the new master: the holders were renewed there (a
    // renewal counts once a replica of the new master acknowledged it: the
    // other replica follows it within the failover, while the old master
    // rejoins only some 16 s later, so with one replica in all the holds
    // would be lost, told by lost(), when their lease ran out).
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(
        first.is_held() && second.is_held(),
        "kept across the failover"
    );
    assert!(!waiting.is_finished(), "no third permit of two");
    let last = first.token().max(second.token());
    first.release().await.expect("released on the new master");
    let third = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the request is served")
        .unwrap()
        .expect("the wait survives the failover");
    assert!(third.token() > last, "{:?} after {last:?}", third.token());
    third.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    client.shutdown().await;
}

/// `force_release` gives back every hold, whoever holds it (here two
/// clients' holds of 2 and 1 permits): it counts the permits, each
/// holder's client is told at once (`lost()` resolves long before the
/// first renewal, 10 s away), the request of 3 waiting is admitted by the
/// force-release itself (its own retries are 20 s apart), and a second one
/// finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_gives_back_every_permit_and_tells_each_holder() {
    let server = RedisServer::start();
    let (first, second, admin) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let sem = first.semaphore("forced", 3).unwrap();
    let two = sem.acquire(2).await.unwrap();
    let one = second
        .semaphore("forced", 3)
        .unwrap()
        .acquire(1)
        .await
        .unwrap();
    let (two_lost, one_lost) = (two.lost(), one.lost());
    let all = ask(&sem, 3);
    queued(&server, "forced", 1, "the request of 3 queued").await;

    let forced = admin.semaphore("forced", 3).unwrap();
    assert_eq!(forced.force_release().await.unwrap(), 3, "2 + 1 permits");
    for (lost, what) in [(two_lost, "the holder of 2"), (one_lost, "the holder of 1")] {
        tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .unwrap_or_else(|_| panic!("{what} is told at once"));
    }
    assert!(!two.is_held() && !one.is_held());
    let all = granted(all, "the request of 3, admitted by the force-release").await;
    assert!(all.token() > two.token().max(one.token()));
    let err = two.release().await.expect_err("taken away");
    assert!(err.is_lock_lost(), "{err:?}");
    assert_eq!(admin.statistics().force_unlocks, 1);

    all.release().await.unwrap();
    assert_eq!(forced.force_release().await.unwrap(), 0, "nothing taken");
    one.release().await.expect_err("taken away");
    left_clean(&server, "forced");
}

/// `inspect` names each holder (owner id, its client's label, permits,
/// token) and what each waiter asks for, in line order; a waiter whose
/// record was lost asks for an unknown number (0). An absent semaphore
/// is shown with the handle's total, as not existing, and looking at it
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_names_each_holder_and_what_each_waiter_asks_for() {
    let server = RedisServer::start();
    let holder = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60)).label("holder:1")
    })
    .await;
    let waiters = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60)).label("waiter:2")
    })
    .await;
    let sem = holder.semaphore("seen", 3).unwrap();
    let absent = sem.inspect().await.unwrap();
    assert!(!absent.exists, "{absent:?}");
    assert_eq!((absent.total, absent.available), (3, 3));
    assert!(absent.taken.is_empty() && absent.queue.is_empty());
    assert!(keys_of(&server, "seen").is_empty(), "looking wrote nothing");

    let two = sem.acquire(2).await.unwrap();
    let theirs = waiters.semaphore("seen", 3).unwrap();
    let three = ask(&theirs, 3);
    queued(&server, "seen", 1, "the request of 3 queued").await;
    let one = ask(&theirs, 1);
    queued(&server, "seen", 2, "the request of 1 queued behind it").await;

    let info = sem.inspect().await.unwrap();
    assert!(info.exists);
    assert_eq!(info.protocol, Protocol::Native);
    assert_eq!((info.total, info.available), (3, 1), "{info:?}");
    let [taken] = &info.taken[..] else {
        panic!("one hold: {info:?}");
    };
    assert_eq!(taken.id, two.ids()[0]);
    assert_eq!(taken.owner.as_deref(), Some(two.ids()[0].as_str()));
    assert_eq!(taken.label.as_deref(), Some("holder:1"));
    assert_eq!((taken.permits, taken.token), (2, two.token()));
    assert!(
        taken
            .remaining_lease
            .is_some_and(|d| d > Duration::from_secs(20))
    );
    let line: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{seen}:sem:line", "0", "-1"]);
    let shown: Vec<_> = info
        .queue
        .iter()
        .map(|w| {
            (
                w.position,
                w.owner.clone(),
                w.mode,
                w.permits,
                w.label.clone(),
            )
        })
        .collect();
    let waiter = |i: usize, permits| {
        let label = Some("waiter:2".to_owned());
        (i + 1, line[i].clone(), HoldMode::Permits, permits, label)
    };
    assert_eq!(shown, [waiter(0, 3), waiter(1, 1)]);

    // The records lost (as to an eviction): what they asked is unknown.
    server.cmd::<()>(&["DEL", "fairlock:{seen}:sem:waiters"]);
    let info = sem.inspect().await.unwrap();
    assert!(info.queue.iter().all(|w| w.permits == 0), "{info:?}");

    three.abort();
    one.abort();
    two.release().await.unwrap();
    waiters.flush().await;
}

/// A dead waiter (its deadline passed: a crashed process) in the middle of
/// the line keeps its place and record, 2 entries, until it reaches the
/// head; no call drops it from the middle (the layout before version 2
/// purged up to 64 such waiters on every contended call). Once at the head,
/// the admission drops it (each once) and goes on to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_is_dropped_when_it_reaches_the_head() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("ghost", 1).unwrap();
    let line = "fairlock:{ghost}:sem:line";
    let records = "fairlock:{ghost}:sem:waiters";
    let held = sem.acquire(1).await.unwrap();
    let first = ask(&sem, 1);
    queued(&server, "ghost", 1, "the first request queued").await;
    // A crashed process's request behind it: its deadline passed.
    let (secs, _): (String, String) = server.cmd(&["TIME"]);
    let past = secs.parse::<u64>().unwrap() * 1000 - 60_000;
    let tail: Vec<String> = server.cmd(&["ZRANGE", line, "0", "0", "WITHSCORES"]);
    let after = (tail[1].parse::<u64>().unwrap() + 1).to_string();
    server.cmd::<()>(&["ZADD", line, &after, "dead:1"]);
    server.cmd::<()>(&["HSET", records, "dead:1", &format!("{past}:3000:3000:x:1:")]);
    let second = ask(&sem, 1);
    queued(&server, "ghost", 3, "the second request queued behind it").await;
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let ids: Vec<String> = server.cmd(&["ZRANGE", line, "0", "-1"]);
    assert_eq!(ids[1], "dead:1", "kept in the middle: {ids:?}");
    assert_eq!(server.cmd::<i64>(&["HEXISTS", records, "dead:1"]), 1);

    // The release admits the head; the admission goes on to the next head,
    // the dead one, and drops it (the one behind it does not fit).
    held.release().await.unwrap();
    let first = granted(first, "the head admitted").await;
    let ids: Vec<String> = server.cmd(&["ZRANGE", line, "0", "-1"]);
    assert_eq!(ids.len(), 1, "dropped once at the head: {ids:?}");
    assert_ne!(ids[0], "dead:1");
    assert_eq!(server.cmd::<i64>(&["HEXISTS", records, "dead:1"]), 0);
    first.release().await.unwrap();
    let second = granted(second, "the next admitted").await;
    assert_eq!(server.cmd::<i64>(&["ZCARD", line]), 0);
    second.release().await.unwrap();
    client.flush().await;
    left_clean(&server, "ghost");
}

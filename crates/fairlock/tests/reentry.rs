//! Re-entry: an owner that holds a lock acquires it again, with the same or
//! another kind of lease, from one task or from several at once. The hold
//! count on the server always equals the owner's live guards, and no lease
//! of one hold cuts another's; a re-entry retried after its reply was lost
//! counts once. Both protocols.

use std::sync::Arc;
use std::time::Duration;

use fairlock::{AcquireOptions, ClientConfig, LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{PROTOCOLS, RedisServer, client_with, eventually, lock_keys};

mod common;
use common::{behind_proxy, config, connect};

async fn client(server: &RedisServer, protocol: Protocol, lease: Duration) -> LockClient {
    client_with(server, protocol, |c| c.lease(lease)).await
}

fn pttl(server: &RedisServer, protocol: Protocol, name: &str) -> i64 {
    server.cmd(&["PTTL", &lock_keys(protocol, name).0])
}

/// Issue 21, finding 1: a hold under the watchdog (lease 1 s) re-entered
/// with an explicit 30 s lease. The watchdog's renewal set the key back to
/// 1 s; after the first hold was unlocked nothing renewed the key, it
/// expired, another client took the lock, and the re-entry's guard still
/// said it held it. A renewal (and a re-entry, and a partial release) now
/// never shortens what the server granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_longer_explicit_reentry_outlives_the_watchdog_hold() {
    for protocol in PROTOCOLS {
        for fair in [true, false] {
            let server = RedisServer::start();
            let lease = Duration::from_secs(1);
            let a = client(&server, protocol, lease).await;
            let b = client(&server, protocol, lease).await;
            let name = "reentry-longer";
            let lock = if fair {
                a.fair_lock(name).unwrap().into()
            } else {
                a.lock(name).unwrap().into()
            };
            let lock: fairlock::LockHandle = lock;
            let owner = a.new_owner();
            let first = lock
                .acquire(AcquireOptions::new().owner(owner.clone()))
                .await
                .unwrap()
                .unwrap();
            let second = lock
                .acquire(
                    AcquireOptions::new()
                        .owner(owner.clone())
                        .lease(Duration::from_secs(30)),
                )
                .await
                .unwrap()
                .unwrap();
            // Two renewals of the watchdog hold after the re-entry.
            let renewed = a.statistics().renewals;
            eventually(Duration::from_secs(10), "two renewals", || {
                a.statistics().renewals >= renewed + 2
            })
            .await;
            let left = pttl(&server, protocol, name);
            assert!(
                left > 25_000,
                "{protocol} fair={fair}: a renewal cut the re-entry's 30 s lease to {left} ms"
            );
            first.unlock().await.unwrap();
            // Past the watchdog lease, with nothing renewing any more: time
            // passing is the point.
            tokio::time::sleep(lease * 2).await;
            assert!(second.is_held(), "{protocol} fair={fair}");
            let left = pttl(&server, protocol, name);
            assert!(left > 20_000, "{protocol} fair={fair}: {left} ms left");
            let other = if fair {
                b.fair_lock(name).unwrap().try_lock().await.unwrap()
            } else {
                b.lock(name).unwrap().try_lock().await.unwrap()
            };
            assert!(
                other.is_none(),
                "{protocol} fair={fair}: a second holder while the re-entry's guard holds"
            );
            second.unlock().await.unwrap();
            assert!(
                !support::is_held(&server, protocol, name),
                "{protocol}: released"
            );
            a.shutdown().await;
            b.shutdown().await;
        }
    }
}

/// The reverse mix: a short explicit re-entry on a watchdog hold never cuts
/// the watchdog hold's lease, and both guards say what the server has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shorter_explicit_reentry_does_not_cut_the_watchdog_hold() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = client(&server, protocol, Duration::from_secs(30)).await;
        let b = client(&server, protocol, Duration::from_secs(30)).await;
        let name = "reentry-shorter";
        let lock = a.fair_lock(name).unwrap();
        let first = lock.lock().await.unwrap();
        let second = first
            .reenter()
            .await
            .unwrap()
            .expect("re-entered while held");
        let short = lock
            .acquire(
                AcquireOptions::new()
                    .owner(first.owner().clone())
                    .lease(Duration::from_millis(300)),
            )
            .await
            .unwrap()
            .unwrap();
        let left = pttl(&server, protocol, name);
        assert!(
            left > 25_000,
            "{protocol}: the short re-entry cut the lease to {left} ms"
        );
        short.unlock().await.unwrap();
        let left = pttl(&server, protocol, name);
        assert!(
            left > 25_000,
            "{protocol}: releasing the short re-entry cut the lease to {left} ms"
        );
        assert!(first.is_held() && second.is_held(), "{protocol}");
        assert!(!common::takes_at_once(&b, name).await, "{protocol}");
        second.unlock().await.unwrap();
        first.unlock().await.unwrap();
        a.shutdown().await;
        b.shutdown().await;
    }
}

/// Issue 21, finding 4: four tasks acquire at once with the owner of a held
/// lock and a zero wait. Each read the same hold count, and the script took
/// the first's re-entry for the others' lost replies: 5 guards against a
/// server count of 2-3, and unlocking them freed the lock while a guard
/// still held it. Acquisitions of one owner now take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_sharing_an_owner_hold_exactly_what_the_server_counts() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = client(&server, protocol, Duration::from_secs(30)).await;
        let b = client(&server, protocol, Duration::from_secs(30)).await;
        let name = "shared-owner";
        for round in 0..5 {
            let lock = a.fair_lock(name).unwrap();
            let owner = a.new_owner();
            let first = lock
                .acquire(AcquireOptions::new().owner(owner.clone()))
                .await
                .unwrap()
                .unwrap();
            let start = Arc::new(tokio::sync::Barrier::new(4));
            let tasks: Vec<_> = (0..4)
                .map(|_| {
                    let (lock, owner, start) = (lock.clone(), owner.clone(), Arc::clone(&start));
                    tokio::spawn(async move {
                        start.wait().await;
                        lock.acquire(AcquireOptions::new().owner(owner).wait(Duration::ZERO))
                            .await
                    })
                })
                .collect();
            let mut guards: Vec<LockGuard> = vec![first];
            for task in tasks {
                if let Some(guard) = task.await.unwrap().unwrap() {
                    guards.push(guard);
                }
            }
            let count = lock.hold_count(&owner).await.unwrap();
            assert_eq!(
                count as usize,
                guards.len(),
                "{protocol} round {round}: {} guards, server count {count}",
                guards.len()
            );
            assert_eq!(guards.len(), 5, "{protocol}: every task re-entered");
            let other = b.fair_lock(name).unwrap();
            while let Some(guard) = guards.pop() {
                guard.unlock().await.unwrap();
                if !guards.is_empty() {
                    assert!(
                        other.try_lock().await.unwrap().is_none(),
                        "{protocol} round {round}: free with {} guards left",
                        guards.len()
                    );
                    assert!(guards.iter().all(LockGuard::is_held));
                }
            }
            assert_eq!(lock.hold_count(&owner).await.unwrap(), 0);
        }
        a.shutdown().await;
        b.shutdown().await;
    }
}

/// Turns, holds and the watchdog belong to one client: an owner made by
/// another client is refused, with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_of_another_client_is_refused() {
    let server = RedisServer::start();
    let a = client(&server, Protocol::Native, Duration::from_secs(30)).await;
    let b = client(&server, Protocol::Native, Duration::from_secs(30)).await;
    let foreign = b.new_owner();
    let err = a
        .fair_lock("foreign-owner")
        .unwrap()
        .acquire(AcquireOptions::new().owner(foreign))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("another LockClient"), "{err}");
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

/// A re-entry whose reply is lost after the script ran, retried within the
/// retry budget, counts its hold once (acquisitions pass the owner's hold
/// count, so a retry sees whether the first send ran).
///
/// Found by the code review fixed in de6180f (before the safety review):
/// without the fix the count became 3 instead of 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_reentry_after_a_lost_reply_counts_once() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        support::init_tracing();
        let config = ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(protocol)
            .response_timeout(Duration::from_millis(300))
            .retry_budget(Duration::from_secs(5));
        let client = support::connect(config).await;
        let lock = client.fair_lock("twice").unwrap();
        let owner = client.new_owner();
        let first = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        // The re-entry runs on the server, but its reply never comes back.
        proxy.hold_script_replies();
        let again = {
            let lock = lock.clone();
            let owner = owner.clone();
            tokio::spawn(async move { lock.acquire(AcquireOptions::new().owner(owner)).await })
        };
        let count = |server: &RedisServer| server_count(server, protocol, "twice", owner.as_str());
        eventually(Duration::from_secs(5), "re-entry ran on the server", || {
            count(&server) == 2
        })
        .await;
        proxy.cut_all();
        proxy.pass();
        let second = tokio::time::timeout(Duration::from_secs(10), again)
            .await
            .expect("retried within the budget")
            .unwrap()
            .unwrap()
            .expect("re-entered");
        assert_eq!(
            count(&server),
            2,
            "{protocol}: the lost reply's hold is not counted twice"
        );
        second.unlock().await.unwrap();
        assert_eq!(count(&server), 1);
        first.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    }
}

/// FINDING A (promise 1, at most one holder). Two concurrent `reenter()`
/// calls on one guard (the guard is Sync: sharing it between tasks is
/// allowed) both read the hold count 1 as their base; the second acquire
/// then finds count == base + 1 and takes it for "already done" (the claim
/// branch of acquire.lua) instead of counting a hold. Three guards, two
/// holds on the server: dropping the two re-entries frees the lock while
/// the first guard still reports `is_held()`, and another client takes it.
/// The same under `redisson` (nonfair_acquire.lua / fair_acquire.lua have
/// the same "held == base + 1" shortcut).
///
/// Found by adversarial review 2 (finding A), fixed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reentries_of_one_guard_count_every_hold() {
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let a = connect(config(&server.url(), protocol)).await;
        let b = connect(config(&server.url(), protocol)).await;
        let name = "reenter-race";
        let lock = a.fair_lock(name).unwrap();
        let first = lock.lock().await.unwrap();
        let (r1, r2) = tokio::join!(first.reenter(), first.reenter());
        let (r1, r2) = (
            r1.unwrap().expect("re-entered"),
            r2.unwrap().expect("re-entered"),
        );
        let count = lock.hold_count(first.owner()).await.unwrap();
        println!("{protocol}: three guards of one owner; server hold count: {count}");
        r1.unlock().await.unwrap();
        r2.unlock().await.unwrap();
        // The first guard still holds one hold: nobody else may get the lock.
        let other = b.fair_lock(name).unwrap().try_lock().await.unwrap();
        println!(
            "{protocol}: first guard is_held: {}, other client got the lock: {}",
            first.is_held(),
            other.is_some()
        );
        assert!(
            !(first.is_held() && other.is_some()),
            "{protocol}: two holders: the first guard and another client (server count was {count})"
        );
        assert_eq!(count, 3, "{protocol}: one hold per guard");
    }
}

/// The owner's hold count as the server has it (both protocols' layouts).
fn server_count(server: &RedisServer, protocol: Protocol, name: &str, owner: &str) -> u32 {
    let key = lock_keys(protocol, name).0;
    let count: Option<u32> = match protocol {
        Protocol::Redisson => server.cmd(&["HGET", &key, owner]),
        _ => {
            if common::lock_field(server, name, "owner").as_deref() == Some(owner) {
                common::lock_field(server, name, "count").map(|c| c.parse().unwrap())
            } else {
                None
            }
        }
    };
    count.unwrap_or(0)
}

/// A re-entry whose script ran but whose reply was lost, while another
/// guard of the owner was released: the release lowered the count before
/// the undo looked. An undo that compared the count with the one read
/// before the attempt found nothing to undo, and the owner kept a hold
/// nobody had a guard for (the torture's shared-owner finding: once in
/// 10,240 rounds of a 20-minute native soak, with connections cut during
/// the round). Native records each acquisition's secret in the lock, and
/// the undo releases the hold that names it: nothing is left. Redisson's
/// hash has the count only: at most one hold too many, never one too few,
/// and it ends with the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reentry_undone_after_another_release_leaves_no_count_behind() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        // Replies are lost by cutting the connections, not by a timeout:
        // the release below must reach the server before the undo starts.
        let lease = Duration::from_secs(30);
        let client = connect(
            config(&proxy.url(), protocol)
                .lease(lease)
                .response_timeout(Duration::from_secs(20)),
        )
        .await;
        let other = connect(config(&server.url(), protocol)).await;
        let name = "lost-reentry-release";
        let lock = client.fair_lock(name).unwrap();
        let owner = client.new_owner();
        let as_owner = || AcquireOptions::new().owner(owner.clone());
        let first = lock.acquire(as_owner()).await.unwrap().unwrap();
        let second = lock.acquire(as_owner()).await.unwrap().unwrap();
        // The release script is loaded now (a script's first call is
        // answered NOSCRIPT, and that answer would be held below).
        let warm = lock.acquire(as_owner()).await.unwrap().unwrap();
        warm.unlock().await.unwrap();
        let count = || server_count(&server, protocol, name, owner.as_str());
        assert_eq!(count(), 2, "{protocol}: one hold per guard");

        proxy.hold_script_replies();
        let again = tokio::spawn({
            let (lock, options) = (lock.clone(), as_owner().wait(Duration::ZERO));
            async move { lock.acquire(options).await.map(|guard| guard.is_some()) }
        });
        eventually(Duration::from_secs(10), "the re-entry ran", || count() == 3).await;
        let release = tokio::spawn(second.unlock());
        eventually(Duration::from_secs(10), "the release ran", || count() == 2).await;
        proxy.cut_all();
        proxy.pass();
        let again = again.await.unwrap();
        assert!(again.is_err(), "{protocol}: the reply was lost: {again:?}");
        // Sent again on a new connection, the release answers what it did.
        release.await.unwrap().unwrap();
        client.flush().await;
        first.unlock().await.unwrap();

        let left = count();
        match protocol {
            Protocol::Redisson => {
                assert!(left <= 1, "{protocol}: {left} holds left");
                let pttl: i64 = server.cmd(&["PTTL", &lock_keys(protocol, name).0]);
                assert!(
                    pttl <= lease.as_millis() as i64,
                    "{protocol}: the hold left is renewed ({pttl} ms)"
                );
            }
            _ => {
                assert_eq!(left, 0, "{protocol}: the lost re-entry's count stayed");
                assert!(
                    common::takes_at_once(&other, name).await,
                    "{protocol}: held by nobody after the failed re-entry"
                );
            }
        }
        client.shutdown().await;
        other.shutdown().await;
    }
}

/// A re-entry whose script ran but whose reply was lost (a one-shot
/// attempt of an explicit owner, as the torture's shared-owner round makes
/// one): the call fails, and the owner's count on the server must not keep
/// the hold nobody has a guard for. After the first guard is released the
/// owner holds nothing and another client takes the lock.
///
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_with_a_lost_reply_leaves_no_count_behind() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let (proxy, client, other) = behind_proxy(&server, protocol).await;
        let name = "lost-reentry";
        let lock = client.fair_lock(name).unwrap();
        let owner = client.new_owner();
        let first = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        proxy.hold_script_replies();
        let again = lock
            .acquire(
                AcquireOptions::new()
                    .owner(owner.clone())
                    .wait(Duration::ZERO),
            )
            .await;
        assert!(again.is_err(), "{protocol}: the reply was lost: {again:?}");
        proxy.cut_all();
        proxy.pass();
        client.flush().await;
        first.unlock().await.unwrap();
        let count = lock.hold_count(&owner).await.unwrap();
        assert_eq!(count, 0, "{protocol}: the lost re-entry's count stayed");
        assert!(
            common::takes_at_once(&other, name).await,
            "{protocol}: held by nobody after the failed re-entry"
        );
        client.shutdown().await;
        other.shutdown().await;
    }
}

/// `name` handed over to `client` by `holder`'s release (not claimed yet:
/// its deferred claim comes later), with `rival` queued behind it.
async fn handed_over_before_a_rival(
    server: &RedisServer,
    holder: &LockClient,
    client: &LockClient,
    rival: &LockClient,
    name: &str,
) -> (
    LockGuard,
    tokio::task::JoinHandle<fairlock::Result<LockGuard>>,
) {
    let first = common::handed_over(server, holder, client, name).await;
    assert_eq!(
        common::lock_field(server, name, "claimed").as_deref(),
        Some("0"),
        "handed over, not claimed yet"
    );
    let rival_waits = {
        let lock = rival.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    common::until_queued(server, name, 1).await;
    (first, rival_waits)
}

/// Not two holders: the handed-over guard still saying it holds the lock
/// while the rival got it within `wait`.
async fn one_holder(
    server: &RedisServer,
    name: &str,
    first: &LockGuard,
    rival_waits: tokio::task::JoinHandle<fairlock::Result<LockGuard>>,
    wait: Duration,
) {
    let holder_now = common::native_holder(server, name);
    let rival_got = tokio::time::timeout(wait, rival_waits).await;
    assert!(
        !(first.is_held() && rival_got.is_ok()),
        "two holders: the handed-over guard (is_held {}) and the rival (server holder now {holder_now:?}, owner of first {})",
        first.is_held(),
        first.owner()
    );
}

/// A re-entry writes its secret into the lock hash (so that the undo of a
/// lost reply is exact); it must mark the hold claimed too. Found by an
/// adversarial review of that change, when it left `claimed` alone: a lock handed over to this owner (claimed 0,
/// its deferred claim not sent yet) and then re-entered from its guard
/// names the re-entry's secret while still "unclaimed". The re-entry's
/// reply is lost: its undo first runs give_up.lua with the re-entry's
/// secret, which matches (owner, claimed 0, nonce) and passes the whole lock
/// (both holds) on to the next waiter, while the handed-over guard still
/// says it holds it: two holders. Before the change give_up compared with
/// the handoff's secret, which the re-entry left in place. Fixed: the
/// re-entry sets `claimed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reentry_of_an_unclaimed_handoff_does_not_pass_the_lock_on() {
    let protocol = Protocol::Native;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // A long grant (min(lease, waiter ttl)): the deferred claim comes a
    // third of it later, after everything below.
    let client = connect(
        config(&proxy.url(), protocol)
            .response_timeout(Duration::from_millis(300))
            .waiter_ttl(Duration::from_secs(30))
            .lease(Duration::from_secs(30)),
    )
    .await;
    let holder = connect(config(&server.url(), protocol)).await;
    let rival = connect(config(&server.url(), protocol)).await;
    let name = "lost-reentry-handoff";
    let (first, rival_waits) =
        handed_over_before_a_rival(&server, &holder, &client, &rival, name).await;

    proxy.hold_script_replies();
    let again = first.reenter().await;
    assert!(again.is_err(), "the re-entry's reply was lost: {again:?}");
    proxy.cut_all();
    proxy.pass();
    client.flush().await;

    one_holder(&server, name, &first, rival_waits, Duration::from_secs(2)).await;
    client.shutdown().await;
    rival.shutdown().await;
    holder.shutdown().await;
}

/// The same hole (a re-entry that left the hold unclaimed) with no fault at all, only a slow
/// reply: a re-entry through [`AcquireOptions::owner`] with a wait budget,
/// of a lock just handed over to the owner (not claimed yet), whose reply
/// comes after the budget ran out. The wait is dropped and leaves the queue
/// from the background (give_up.lua with the re-entry's secret), which runs
/// after the re-entry did: the lock names that secret and is still
/// unclaimed, so give_up passes the whole lock on to the next waiter while
/// the handed-over guard says it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_reentry_of_an_unclaimed_handoff_does_not_pass_the_lock_on() {
    let protocol = Protocol::Native;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = connect(
        // Default lease and waiter ttl: the deferred claim comes 2 s
        // after the handoff, long after what follows.
        config(&proxy.url(), protocol),
    )
    .await;
    let holder = connect(config(&server.url(), protocol)).await;
    let rival = connect(config(&server.url(), protocol)).await;
    let name = "slow-reentry-handoff";
    let (first, rival_waits) =
        handed_over_before_a_rival(&server, &holder, &client, &rival, name).await;

    // The count read takes 300 ms, the attempt 300 ms more: the 450 ms
    // budget runs out while the re-entry's reply is on its way.
    proxy.delay_command_replies(Duration::from_millis(300));
    let lock = client.fair_lock(name).unwrap();
    let again = lock
        .acquire(
            AcquireOptions::new()
                .owner(first.owner().clone())
                .wait(Duration::from_millis(450)),
        )
        .await;
    assert!(
        matches!(again, Ok(None)),
        "the budget ran out: {:?}",
        again.as_ref().map(|g| g.is_some())
    );
    client.flush().await;

    one_holder(&server, name, &first, rival_waits, Duration::from_secs(3)).await;
    client.shutdown().await;
    rival.shutdown().await;
    holder.shutdown().await;
}

/// A fresh acquisition has no owner turn, so nothing
/// orders its attempts against a re-entry from the guard it produced. An
/// attempt of the fresh acquisition delivered late (the network may
/// "deliver late": sent before the response timeout gave up on it, it
/// reaches the server after the caller proceeded on the grant message and
/// re-entered) used to find its own secret in the lock and claim; the
/// re-entry now replaced that secret, and `count == base + 1` (2 vs 1)
/// does not hold either, so the late attempt counts a third hold nobody
/// has a guard for (found by the adversarial review of that change).
/// Fixed: an attempt whose base is 0 never counts a hold of its owner
/// again (the owner held nothing when it began). The late attempt is sent
/// here with the library's own script and the handed-over acquisition's
/// secret (read from the hash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_attempt_of_a_handed_over_acquisition_after_a_reentry_counts_nothing() {
    use common::scripts::{NEW_ACQUIRE, eval, three};
    let protocol = Protocol::Native;
    let server = RedisServer::start();
    let client = connect(
        config(&server.url(), protocol)
            .waiter_ttl(Duration::from_secs(30))
            .lease(Duration::from_secs(30)),
    )
    .await;
    let holder = connect(config(&server.url(), protocol)).await;
    let name = "late-attempt-after-reentry";
    let first = common::handed_over(&server, &holder, &client, name).await;
    let owner = first.owner().as_str().to_owned();
    let handoff_nonce = common::lock_field(&server, name, "nonce").expect("a handoff's secret");
    let second = first.reenter().await.unwrap().expect("re-entered");
    assert_eq!(server_count(&server, protocol, name, &owner), 2);

    // The handed-over acquisition's attempt, sent before the grant message
    // came, arrives now.
    let late = eval(
        &server,
        NEW_ACQUIRE,
        &three(name),
        &[&owner, "30000", "30000", "fq", "0", &handoff_nonce, ""],
    );
    println!("late attempt: {late:?}");
    let count = server_count(&server, protocol, name, &owner);
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();
    let left = server_count(&server, protocol, name, &owner);
    assert_eq!(
        (count, left),
        (2, 0),
        "(count after the late attempt, count after both guards were released)"
    );
    client.shutdown().await;
    holder.shutdown().await;
}

/// A re-entry whose reply was lost leaves its undo retrying
/// in the background, holding the owner's turn, for up to the retry
/// budget. A second `reenter()` right after it waits for that turn; it
/// must not answer `Ok(None)` ("someone else holds the lock now: this hold
/// was lost") while the owner still holds the lock: once the connection is
/// back it gets its re-entry, or an error if it cannot tell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_right_after_a_failed_one_does_not_report_the_hold_lost() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Arc::new(Proxy::start(server.port()));
        let client = connect(
            config(&proxy.url(), protocol)
                .response_timeout(Duration::from_millis(500))
                .retry_budget(Duration::from_secs(6)),
        )
        .await;
        let guard = client.fair_lock("again").unwrap().lock().await.unwrap();
        // The re-entry's script runs; its reply (and every later script
        // reply) is held: the call fails, and its undo retries.
        proxy.hold_script_replies();
        let first = guard.reenter().await;
        assert!(first.is_err(), "{protocol}: its reply held: {first:?}");
        // The connection comes back while the undo still retries.
        let back = {
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                proxy.pass();
            })
        };
        let second = guard.reenter().await;
        back.await.unwrap();
        assert!(
            !matches!(second, Ok(None)),
            "{protocol}: the owner still holds the lock, yet the re-entry said it was lost"
        );
        // The connection came back within the retry budget: the undo ended,
        // and the re-entry it waited for was granted.
        assert!(matches!(second, Ok(Some(_))), "{protocol}: {second:?}");
        assert!(guard.is_held(), "{protocol}");
        if let Ok(Some(again)) = second {
            again.unlock().await.unwrap();
        }
        guard.unlock().await.unwrap();
    }
}

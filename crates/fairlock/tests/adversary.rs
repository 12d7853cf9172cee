//! Adversarial review 2: reproductions of findings. Every test here failed
//! on the code it was written against (see the note on each); each names
//! the promise (the reviewer brief, ADVERSARY.md) it breaks.

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, StarvationMonitor};
#[allow(unused_imports)]
use support::{eventually, proxy::Proxy};
#[allow(unused_imports)]
use tokio::time::Instant;

fn config(url: &str) -> ClientConfig {
    support::init_tracing();
    ClientConfig::from_url(url)
        .unwrap()
        .protocol(Protocol::Native)
}

async fn connect(config: ClientConfig) -> LockClient {
    LockClient::with_config(config).await.expect("connect")
}

fn lock_field(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    server.cmd(&["HGET", &format!("fairlock:{{{name}}}:lock"), field])
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reentries_of_one_guard_count_every_hold() {
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let a = connect(config(&server.url()).protocol(protocol)).await;
        let b = connect(config(&server.url()).protocol(protocol)).await;
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

/// FINDING B (the doc's "connection errors leave no leaked hold"; promise
/// 5 in spirit: nothing held by nobody). A `try_lock()` whose script ran but
/// whose reply was lost returns `Err(Connection)` and nobody undoes the
/// grant: `run_once` (lock.rs) hands the error to the caller, and the
/// `Undo` path only runs when the caller went away. The lock stays held by
/// an owner nobody has until its lease (30 s by default) runs out; every
/// other client is locked out meanwhile. (The waiting path does not leak:
/// its retry finds count == base + 1 and claims the grant.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_with_a_lost_reply_leaks_no_hold() {
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let client = connect(
            config(&proxy.url())
                .protocol(protocol)
                .response_timeout(Duration::from_millis(300)),
        )
        .await;
        let other = connect(config(&server.url()).protocol(protocol)).await;
        let name = "lost-try";
        let lock = client.fair_lock(name).unwrap();
        // Load the script first (a first EVALSHA answers NOSCRIPT).
        let warm = client
            .fair_lock("warm-up")
            .unwrap()
            .try_lock()
            .await
            .unwrap();
        warm.unwrap().unlock().await.unwrap();
        proxy.hold_script_replies();
        let tried = lock.try_lock().await;
        println!(
            "{protocol}: try_lock answered {:?}",
            tried.as_ref().map(Option::is_some)
        );
        assert!(tried.is_err(), "the reply was lost");
        proxy.cut_all();
        proxy.pass();
        client.flush().await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pttl = other
            .fair_lock(name)
            .unwrap()
            .remaining_lease()
            .await
            .unwrap();
        println!(
            "{protocol}: after the error and flush(), lock held for another {pttl:?} by nobody"
        );
        assert!(
            other
                .fair_lock(name)
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_some(),
            "{protocol}: the failed try_lock left the lock held ({pttl:?} left)"
        );
    }
}

/// FINDING C (promise 5: a hold nobody has; the doc's "a grant handed to
/// a waiter is claimed by its next acquire"). An owner that held the lock
/// (count 1) asks for it again (blocking API: the same thread; async:
/// `AcquireOptions::owner`) and reads base = 1; its hold is force-unlocked
/// (or expires) before the acquire runs, so it queues with base 1. The
/// lock is later handed to it (count 1) and the grant message is lost or
/// read late: its next acquire finds count 1 != base + 1 and takes the
/// re-entry branch of acquire.lua (count 2, reply "re-entered") instead of
/// claiming the grant. The caller gets one guard for a server count of 2:
/// after it unlocks, the lock stays held by nobody for the whole lease.
/// The claim branch checks the count, not this acquisition's nonce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_to_an_owner_that_queued_with_a_stale_base_is_claimed_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let t_client = connect(config(&proxy.url())).await;
    let x_client = connect(config(&server.url())).await;
    let name = "stale-base";
    let t_lock = t_client.fair_lock(name).unwrap();
    let x_lock = x_client.fair_lock(name).unwrap();
    let owner = t_client.new_owner();
    let first = t_lock
        .acquire(fairlock::AcquireOptions::new().owner(owner.clone()))
        .await
        .unwrap()
        .unwrap();
    // T asks again as the same owner; its reads come back 400 ms late.
    proxy.delay_replies(Duration::from_millis(400));
    let again = {
        let lock = t_lock.clone();
        let owner = owner.clone();
        tokio::spawn(async move {
            lock.acquire(fairlock::AcquireOptions::new().owner(owner))
                .await
        })
    };
    // Meanwhile (after T read its count of 1) an operator force-unlocks and
    // X takes the lock.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(x_lock.force_unlock().await.unwrap());
    let x_guard = x_lock.lock().await.unwrap();
    let queue = format!("fairlock:{{{name}}}:queue");
    eventually(Duration::from_secs(5), "T queued", || {
        server.cmd::<Vec<String>>(&["ZRANGE", &queue, "0", "-1"]) == vec![owner.to_string()]
    })
    .await;
    // T's grant message is read late (past half the grant); its next poll
    // runs an acquire instead.
    proxy.delay_replies(Duration::ZERO);
    proxy.delay_pubsub(Duration::from_secs(5));
    x_guard.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), again)
        .await
        .expect("T granted")
        .unwrap()
        .unwrap()
        .expect("granted");
    let count = lock_field(&server, name, "count");
    println!(
        "first guard held: {}, second guard held: {}, server count: {count:?}",
        first.is_held(),
        second.is_held()
    );
    drop(first);
    second.unlock().await.unwrap();
    t_client.flush().await;
    let left = x_lock.remaining_lease().await.unwrap();
    println!(
        "after T unlocked its only live guard: holder {:?}, lease left {left:?}",
        lock_field(&server, name, "owner")
    );
    assert_eq!(
        left, None,
        "a hold nobody has is left behind (server count was {count:?})"
    );
}

/// FINDING D (promise 3's "dead ones cost at most their bound" and the
/// doc's "forged messages cost a wake-up": the cost is not bounded in
/// time). Every message on a waiter's channel, forged or not, makes the
/// waiter run one acquire script at once (lock.rs `wait`: any Woken::Message
/// loops straight into `send`). A hostile client with PUBLISH rights only
/// turns each waiter into a busy loop of one script per round trip (the
/// revocation channel, by contrast, is limited to one check per 50 ms).
/// Both the fair (per-owner channel) and the non-fair (`free`) waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_wakeups_cost_a_bounded_number_of_calls() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    let server = RedisServer::start();
    let holder = connect(config(&server.url())).await;
    let waiter = connect(config(&server.url())).await;
    let mut worst = Vec::new();
    for fair in [true, false] {
        let name = if fair { "flood-fair" } else { "flood-nonfair" };
        let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
        let waiting = if fair {
            let lock = waiter.fair_lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await.map(|g| g.forget()) })
        } else {
            let lock = waiter.lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await.map(|g| g.forget()) })
        };
        // This round's channel, found by its lock's name: the last round's
        // may still be subscribed (see below).
        let ours = || {
            server
                .wait_channels()
                .into_iter()
                .find(|channel| channel.contains(&format!("{{{name}}}")))
        };
        eventually(Duration::from_secs(5), "waiter subscribed", || {
            ours().is_some()
        })
        .await;
        let channel = ours().unwrap();
        let before = server.evalsha_calls();
        let sent = tokio::task::block_in_place(|| {
            support::flood::publish_for(&server, &channel, "free", Duration::from_secs(1))
        });
        let calls = server.evalsha_calls() - before;
        println!(
            "fair={fair}: {sent} forged messages on {channel} in 1 s -> {calls} scripts run by ONE waiter"
        );
        worst.push((fair, calls));
        held.unlock().await.unwrap();
        waiting.await.unwrap().unwrap();
        // The waiter's channel is not waited out: the client unsubscribes
        // once it has read the flood's backlog (its health PING waits
        // behind it, up to the response timeout, and commands wait for
        // the PING), and how long reading the backlog takes depends on how
        // much CPU the machine gives the client (seconds, on a loaded one).
    }
    // Unforged, the waiter polls every 2 s (waiter ttl / 3). Forged
    // wake-ups back to back are spaced by 25 ms (`MIN_ATTEMPT_GAP`): at most
    // 40 calls in the second, plus a few for the subscription and polls.
    assert!(
        worst.iter().all(|&(_, calls)| calls <= 45),
        "scripts run by one waiter in 1 s of forged wake-ups (fair, calls): {worst:?}"
    );
}

/// FINDING E (promise 3: live waiters are served in arrival order). A
/// waiter refreshed its place waiter_ttl / 3 after the *reply* to its last
/// refresh, so two refreshes reached the server one round trip + ttl / 3
/// apart. Fixed: the pause runs from when the call was sent, so refreshes
/// reach the server max(round trip, ttl / 3) apart. The test sits in the
/// window that tells the two apart: a 600 ms waiter ttl and replies
/// delayed 450 ms (once A is queued and subscribed), so refreshes arrive
/// 450 ms apart with the fix (150 ms to spare) and 650 ms apart without it
/// (50 ms too late, always: scheduling delays only add to it, and A's own
/// late refresh finds its entry expired and queues it behind B).
///
/// A client (or server) the machine does not let run for 150 ms is dead
/// by the same rule (a loaded 2-core machine does this: with 50 ms to
/// spare, a first version of this test failed once at load 11). A thread
/// measures how late its own 5 ms sleeps wake up; a run in which it was
/// starved for 100 ms or more proves nothing either way and is repeated
/// (at most 5 runs). A failure on a run without starvation fails the
/// test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_waiter_with_a_short_ttl_keeps_its_place() {
    let server = RedisServer::start();
    for run in 0..5 {
        let monitor = StarvationMonitor::start();
        let kept = slow_waiter_keeps_its_place(&server, &format!("short-ttl-{run}")).await;
        let starved = monitor.stop();
        println!("run {run}: kept its place {kept}, worst scheduling delay {starved:?}");
        if kept {
            return;
        }
        assert!(
            starved >= Duration::from_millis(100),
            "live waiter A was moved behind B, which arrived later, \
             while the machine let the client run (worst delay {starved:?})"
        );
    }
    panic!("the machine starved the client in every run: the test could not judge");
}

/// One run of finding E's scenario on lock `name`: whether A, queued
/// first with a 600 ms waiter ttl behind 450 ms replies, stayed ahead of B
/// for three seconds and was then granted before B.
async fn slow_waiter_keeps_its_place(server: &RedisServer, name: &str) -> bool {
    let proxy = Proxy::start(server.port());
    let holder = connect(config(&server.url())).await;
    let a_client = connect(
        config(&proxy.url())
            .waiter_ttl(Duration::from_millis(600))
            .response_timeout(Duration::from_secs(2)),
    )
    .await;
    let b_client = connect(config(&server.url())).await;
    let queue = format!("fairlock:{{{name}}}:queue");
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let mut a = {
        let lock = a_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "A queued", || {
        server
            .cmd::<Vec<String>>(&["ZRANGE", &queue, "0", "-1"])
            .len()
            == 1
    })
    .await;
    let a_owner = server
        .cmd::<Vec<String>>(&["ZRANGE", &queue, "0", "-1"])
        .remove(0);
    eventually(Duration::from_secs(5), "A subscribed", || {
        server.wait_channels().iter().any(|c| c.ends_with(&a_owner))
    })
    .await;
    proxy.delay_replies(Duration::from_millis(450));
    let mut b = {
        let lock = b_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    let mut order = Vec::new();
    for _ in 0..300 {
        let now: Vec<String> = server.cmd(&["ZRANGE", &queue, "0", "-1"]);
        if order.last() != Some(&now) {
            order.push(now);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let a_first = order
        .iter()
        .filter(|q| q.len() == 2)
        .all(|q| q[0] == a_owner);
    println!("A = {a_owner}; queue orders seen over 3 s: {}", order.len());
    for q in &order {
        println!("  {q:?}");
    }
    held.unlock().await.unwrap();
    // Whoever is first in line now is granted first; the other follows.
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::select! {
            a_guard = &mut a => (true, a_guard.unwrap()),
            b_guard = &mut b => (false, b_guard.unwrap()),
        }
    })
    .await
    .unwrap();
    let (a_granted_first, guard) = first;
    guard.unlock().await.unwrap();
    let second = if a_granted_first { b } else { a };
    let guard = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();
    a_first && a_granted_first
}

/// Adversary 2 (label only): the revocation listener keeps only the latest
/// payload (a `watch`), so a real force-unlock message followed by a forged
/// one naming another key before the listener reads it loses its key: the
/// loss is then counted as `expired`/`taken_over`, not `force_unlocked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: the revocation listener keeps only the latest payload (label only); see the session note"]
async fn adv2_force_unlock_during_forged_revocations_is_labelled_force_unlocked() {
    let server = RedisServer::start();
    let client = connect(config(&server.url())).await;
    let lock = client.fair_lock("adv2-label").unwrap();
    let guard = lock.lock().await.unwrap();
    let channel = format!("fairlock:revoked:{}", client.id());
    let flooder = {
        let conn_server = server.url();
        let channel = channel.clone();
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(conn_server)
                .unwrap()
                .get_connection()
                .unwrap();
            let until = std::time::Instant::now() + Duration::from_millis(1500);
            while std::time::Instant::now() < until {
                let mut pipe = redis::pipe();
                for _ in 0..50 {
                    pipe.cmd("PUBLISH")
                        .arg(&channel)
                        .arg("fairlock:{x}:lock")
                        .ignore();
                }
                pipe.query::<()>(&mut conn).unwrap();
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = connect(config(&server.url())).await;
    assert!(
        other
            .fair_lock("adv2-label")
            .unwrap()
            .force_unlock()
            .await
            .unwrap()
    );
    tokio::time::timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("lost");
    tokio::task::block_in_place(|| flooder.join().unwrap());
    let stats = client.statistics();
    assert_eq!(
        (
            stats.lost_force_unlocked,
            stats.lost_expired,
            stats.lost_taken_over
        ),
        (1, 0, 0),
        "{stats:?}"
    );
    client.shutdown().await;
}

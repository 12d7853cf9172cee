//! Handoffs: a release hands the lock to the first live waiter (a grant
//! message on the waiter's channel), and the waiter claims the grant,
//! extending it from the short grant (min(lease, waiter ttl)) to its lease.
//! A handed-over hold is believed no longer than the server keeps it, lasts
//! past its short grant once claimed (also while a claim meets slow replies
//! or a passing refusal), and a claim skipped or sent late never touches the
//! next holder. Native protocol.
//!
//! Elsewhere: lost and forged grant messages in `wakeups.rs`; the claim
//! under `min_replicas` in `replicas.rs`; the lost-lock signal of a failed
//! claim in `lease.rs`; a force-unlock right after a handoff in
//! `force_unlock.rs`.

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{RedisServer, client, eventually, queue_len};
use tokio::time::Instant;

mod common;
use common::{
    config, connect, handed_over, lock_field, native_holder, pttl, queued_owners, until_queued,
    until_subscribed, until_subscribed_n,
};

/// A grant must not outlive what the server wrote, whatever settings
/// each client uses. Before: the grant lasted the releaser's waiter ttl
/// (300 ms) while the waiter trusted it for its own (6 s): X took the lock
/// at +0.3 s and W returned at +1 s holding it too.
///
/// Found by the safety review (finding 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_lifetime_follows_the_waiter_not_the_releaser() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let short = |c: ClientConfig| c.waiter_ttl(Duration::from_millis(300));
    let releaser = connect(short(config(&server.url(), Protocol::Native))).await;
    let x_client = connect(short(config(&server.url(), Protocol::Native))).await;
    let w_client = connect(config(&proxy.url(), Protocol::Native)).await;
    let name = "settings";
    let held = releaser.fair_lock(name).unwrap().lock().await.unwrap();
    let w = {
        let lock = w_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "W queued", || {
        queued_owners(&server, name).len() == 1
    })
    .await;
    let x = {
        let lock = x_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "X queued", || {
        queued_owners(&server, name).len() == 2
    })
    .await;
    // W hears of its grant 1 s late.
    proxy.delay_pubsub(Duration::from_secs(1));
    held.unlock().await.unwrap();
    let w_guard = tokio::time::timeout(Duration::from_secs(10), w)
        .await
        .expect("W granted")
        .unwrap();
    // While W believes it holds the lock, the server says W holds it, and X
    // is still waiting.
    for _ in 0..20 {
        assert!(w_guard.is_held());
        assert_eq!(
            native_holder(&server, name).as_deref(),
            Some(w_guard.owner().as_str())
        );
        assert!(!x.is_finished(), "X must not hold the lock while W does");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w_guard.unlock().await.unwrap();
    let x_guard = tokio::time::timeout(Duration::from_secs(10), x)
        .await
        .expect("X granted after W")
        .unwrap();
    x_guard.unlock().await.unwrap();
}

/// Held: a handed-over hold (watchdog lease, and explicit lease) is claimed
/// a third into its short grant: past the grant's life it is still held, on
/// the server and by `is_held`, and nobody else gets the lock.
///
/// From adversarial review 3 (deferred claims of handed-over grants): an
/// attack that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_hold_outlives_its_short_grant() {
    let server = RedisServer::start();
    let holder = connect(config(&server.url(), Protocol::Native)).await;
    let other = connect(config(&server.url(), Protocol::Native)).await;
    for explicit in [false, true] {
        let name = format!("outlive-{explicit}");
        let waiter = connect(
            config(&server.url(), Protocol::Native)
                .lease(Duration::from_secs(8))
                .waiter_ttl(Duration::from_millis(1500)),
        )
        .await;
        let guard = if explicit {
            let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
            let waiting = {
                let lock = waiter.fair_lock(&name).unwrap();
                tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(8)).await })
            };
            until_queued(&server, &name, 1).await;
            until_subscribed(&server, &name).await;
            held.unlock().await.unwrap();
            waiting.await.unwrap().unwrap()
        } else {
            handed_over(&server, &holder, &waiter, &name).await
        };
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            guard.is_held(),
            "explicit={explicit}: lost its handed-over hold"
        );
        assert_eq!(
            lock_field(&server, &name, "owner").as_deref(),
            Some(guard.owner().as_str())
        );
        assert!(
            pttl(&server, &name) > 1500,
            "explicit={explicit}: not claimed"
        );
        assert_eq!(lock_field(&server, &name, "claimed").as_deref(), Some("1"));
        assert!(
            other
                .fair_lock(&name)
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none()
        );
        guard.unlock().await.unwrap();
        waiter.shutdown().await;
    }
    holder.shutdown().await;
    other.shutdown().await;
}

/// Held: a handed-over hold re-entered, then the handed-over guard unlocked
/// before its claim (which is then skipped): the re-entry keeps the lock
/// (the re-entry set the lease), past the short grant, with an explicit
/// lease (no watchdog to renew it).
///
/// From adversarial review 3 (deferred claims of handed-over grants): an
/// attack that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_of_a_handed_over_hold_survives_the_skipped_claim() {
    let server = RedisServer::start();
    let holder = connect(config(&server.url(), Protocol::Native)).await;
    let other = connect(config(&server.url(), Protocol::Native)).await;
    let waiter = connect(
        config(&server.url(), Protocol::Native)
            .lease(Duration::from_secs(8))
            .waiter_ttl(Duration::from_millis(1500)),
    )
    .await;
    let name = "reenter-claim";
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let waiting = {
        let lock = waiter.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock_with_lease(Duration::from_secs(8)).await })
    };
    until_queued(&server, name, 1).await;
    until_subscribed(&server, name).await;
    held.unlock().await.unwrap();
    let first = waiting.await.unwrap().unwrap();
    let second = first.reenter().await.unwrap().expect("re-entered");
    first.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(second.is_held());
    assert_eq!(
        lock_field(&server, name, "owner").as_deref(),
        Some(second.owner().as_str())
    );
    assert!(!common::takes_at_once(&other, name).await);
    second.unlock().await.unwrap();
    assert!(common::takes_at_once(&other, name).await);
    for c in [holder, other, waiter] {
        c.shutdown().await;
    }
}

/// Held: a handed-over hold released before its claim sends no claim; the
/// next waiter gets the lock and keeps it past the first grant's life (the
/// skipped claim never touches it: renewals match the token).
///
/// From adversarial review 3 (deferred claims of handed-over grants): an
/// attack that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_released_before_its_claim_leaves_the_next_holder_alone() {
    let server = RedisServer::start();
    let holder = connect(config(&server.url(), Protocol::Native)).await;
    let mk = || {
        connect(
            config(&server.url(), Protocol::Native)
                .lease(Duration::from_secs(8))
                .waiter_ttl(Duration::from_millis(1500)),
        )
    };
    let (w1, w2) = (mk().await, mk().await);
    let name = "released-early";
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let first = {
        let lock = w1.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    until_queued(&server, name, 1).await;
    let second = {
        let lock = w2.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    until_queued(&server, name, 2).await;
    until_subscribed_n(&server, name, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.unlock().await.unwrap();
    let g1 = first.await.unwrap().unwrap();
    g1.unlock().await.unwrap();
    let g2 = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(g2.is_held());
    assert_eq!(
        lock_field(&server, name, "owner").as_deref(),
        Some(g2.owner().as_str())
    );
    assert_eq!(w1.statistics().lost_grant_expired, 0);
    g2.unlock().await.unwrap();
    for c in [holder, w1, w2] {
        c.shutdown().await;
    }
}

/// Held (promise 1): while its replies come back slowly (700 ms late on
/// every connection, the deferred claim included), a handed-over holder's
/// `is_held()` is never true while the server names another owner or none.
///
/// From adversarial review 3 (deferred claims of handed-over grants): an
/// attack that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_claim_never_reports_a_hold_the_server_gave_away() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = connect(config(&server.url(), Protocol::Native)).await;
    let other = connect(config(&server.url(), Protocol::Native)).await;
    let waiter = connect(
        config(&proxy.url(), Protocol::Native)
            .lease(Duration::from_secs(4))
            .waiter_ttl(Duration::from_millis(1500))
            .response_timeout(Duration::from_millis(500))
            .retry_budget(Duration::from_secs(3)),
    )
    .await;
    let name = "slow-claim";
    let guard = handed_over(&server, &holder, &waiter, name).await;
    proxy.delay_replies(Duration::from_millis(700));
    let contender = {
        let lock = other.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(8)).await })
    };
    let until = Instant::now() + Duration::from_secs(6);
    let mut violations = 0;
    while Instant::now() < until {
        let owner = lock_field(&server, name, "owner");
        if guard.is_held() && owner.as_deref() != Some(guard.owner().as_str()) {
            violations += 1;
            println!("is_held() while the server names {owner:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.delay_replies(Duration::ZERO);
    println!(
        "waiter lost: grant_expired {} claim_failed {}",
        waiter.statistics().lost_grant_expired,
        waiter.statistics().lost_claim_failed
    );
    assert_eq!(violations, 0);
    drop(guard);
    if let Ok(Some(g)) = contender.await.unwrap() {
        g.unlock().await.unwrap();
    }
    for c in [holder, other, waiter] {
        c.shutdown().await;
    }
}

/// A claim of a handed-over grant that meets a passing error other than a
/// connection error (NOPERM while an ACL is being edited) keeps trying
/// until the grant ends, so the holder keeps its live grant; and a hold
/// known lost is never renewed by the watchdog. Found by the review of the
/// restructuring: the claim had marked the hold lost at once, while the
/// watchdog went on renewing its lock until the guard was dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_outlasts_a_passing_refusal() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["ACL", "SETUSER", "b", "on", ">pw", "~*", "&*", "+@all"]);
    let a = client(&server, Protocol::Native).await;
    let config = ClientConfig::from_url(&format!("redis://b:pw@{}", server.addr()))
        .unwrap()
        .protocol(Protocol::Native)
        .lease(Duration::from_secs(20))
        .renew_interval(Duration::from_secs(1))
        .waiter_ttl(Duration::from_secs(30));
    let b = LockClient::with_config(config).await.unwrap();
    let holder = a.fair_lock("c").unwrap().lock().await.unwrap();
    let scripts_before = server.evalsha_calls();
    let waiter = {
        let lock = b.fair_lock("c").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    // Queued, subscribed, and the attempt made right after the
    // subscription has run (refused, it would end the wait with NOPERM):
    // the waiter now waits for a message.
    eventually(Duration::from_secs(5), "queued and subscribed", || {
        queue_len(&server, Protocol::Native, "c") == 1
            && !server.wait_channels().is_empty()
            && server.evalsha_calls() >= scripts_before + 2
    })
    .await;
    // B may not run scripts while the lock is handed to it.
    let _: () = server.cmd(&["ACL", "SETUSER", "b", "-evalsha", "-eval"]);
    holder.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    let _: () = server.cmd(&["ACL", "SETUSER", "b", "+@all"]);
    // Claimed: the lease is B's own 20 s, renewed by the watchdog.
    eventually(Duration::from_secs(5), "the grant claimed", || {
        lock_field(&server, "c", "claimed").as_deref() == Some("1")
    })
    .await;
    assert!(guard.is_held());
    guard.unlock().await.expect("unlock");
    assert!(!support::is_held(&server, Protocol::Native, "c"));
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
///
/// Found by adversarial review 2 (finding C), fixed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_to_an_owner_that_queued_with_a_stale_base_is_claimed_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let t_client = connect(config(&proxy.url(), Protocol::Native)).await;
    let x_client = connect(config(&server.url(), Protocol::Native)).await;
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
    eventually(Duration::from_secs(5), "T queued", || {
        queued_owners(&server, name) == vec![owner.to_string()]
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

//! Leases, the watchdog and the lost-lock signal, under both protocols.

use std::time::{Duration, Instant};

use fairlock::{AcquireOptions, LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, client_with, lock_keys};

async fn client(server: &RedisServer, protocol: Protocol, lease: Option<Duration>) -> LockClient {
    client_with(server, protocol, |c| match lease {
        Some(lease) => c.lease(lease),
        None => c,
    })
    .await
}

async fn take(client: &LockClient, name: &str, fair: bool) -> LockGuard {
    if fair {
        client.fair_lock(name).unwrap().lock().await.unwrap()
    } else {
        client.lock(name).unwrap().lock().await.unwrap()
    }
}

fn pttl(server: &RedisServer, protocol: Protocol, name: &str) -> i64 {
    server.cmd(&["PTTL", &lock_keys(protocol, name).0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_lease_expires_and_is_not_renewed() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        // A short watchdog lease, so a wrongly renewed explicit lease would show.
        let a = client(&server, protocol, Some(Duration::from_millis(300))).await;
        let b = client(&server, protocol, None).await;
        let lock = a.fair_lock("explicit").unwrap();
        let started = Instant::now();
        let guard = lock
            .lock_with_lease(Duration::from_millis(800))
            .await
            .unwrap();
        assert!(guard.is_held());
        let left = pttl(&server, protocol, "explicit");
        assert!(left > 500 && left <= 800, "{protocol}: {left}");

        // lost() resolves when the lease runs out.
        tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("lost() fires when an explicit lease runs out");
        assert!(started.elapsed() >= Duration::from_millis(790));
        assert!(!guard.is_held());
        // The key expired on the server: another client takes the lock at once.
        let other = tokio::time::timeout(
            Duration::from_secs(2),
            b.fair_lock("explicit").unwrap().lock(),
        )
        .await
        .expect("free after the lease")
        .unwrap();
        let err = guard.unlock().await.unwrap_err();
        assert!(err.is_lock_lost(), "{err}");
        other.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_keeps_the_lock_past_three_leases() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let lease = Duration::from_millis(400);
        let a = client(&server, protocol, Some(lease)).await;
        let b = client(&server, protocol, None).await;
        for fair in [true, false] {
            let name = if fair { "dog-fair" } else { "dog-plain" };
            let guard = take(&a, name, fair).await;
            // Time passing is the point here: 4 leases.
            tokio::time::sleep(lease * 4).await;
            assert!(guard.is_held(), "{protocol}");
            assert!(pttl(&server, protocol, name) > 0, "renewed");
            let stolen = if fair {
                b.fair_lock(name).unwrap().try_lock().await.unwrap()
            } else {
                b.lock(name).unwrap().try_lock().await.unwrap()
            };
            assert!(stolen.is_none(), "still held after 4 leases");
            guard.unlock().await.unwrap();
            assert!(!support::is_held(&server, protocol, name));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_stops_renewing_after_release() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = client(&server, protocol, Some(Duration::from_millis(300))).await;
        let lock = a.fair_lock("stop").unwrap();
        let guard = lock.lock().await.unwrap();
        let owner = guard.owner().clone();
        // forget() stops renewal without releasing.
        guard.forget();
        assert_eq!(lock.hold_count(&owner).await.unwrap(), 1);
        // Not renewed any more: it expires within about one lease.
        support::eventually(Duration::from_secs(3), "forgotten hold expires", || {
            !support::is_held(&server, protocol, "stop")
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_another_client_force_unlocks() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = client(&server, protocol, Some(Duration::from_millis(600))).await;
        let b = client(&server, protocol, None).await;
        for fair in [true, false] {
            let name = if fair { "lost-fair" } else { "lost-plain" };
            let guard = take(&a, name, fair).await;
            let lost = guard.lost();
            let forced = if fair {
                b.fair_lock(name).unwrap().force_unlock().await.unwrap()
            } else {
                b.lock(name).unwrap().force_unlock().await.unwrap()
            };
            assert!(forced);
            let started = Instant::now();
            tokio::time::timeout(Duration::from_secs(3), lost)
                .await
                .expect("lost() fires at the next renewal");
            // Renewal runs every 200 ms.
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{:?}",
                started.elapsed()
            );
            assert!(!guard.is_held());
            assert!(guard.unlock().await.unwrap_err().is_lock_lost());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_taken_over_after_expiry() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = client(&server, protocol, Some(Duration::from_millis(600))).await;
        let b = client(&server, protocol, None).await;
        let guard = a.fair_lock("takeover").unwrap().lock().await.unwrap();
        // Simulate an expiry the watchdog could not prevent.
        let _: () = server.cmd(&["DEL", &lock_keys(protocol, "takeover").0]);
        let other = b.fair_lock("takeover").unwrap().lock().await.unwrap();
        tokio::time::timeout(Duration::from_secs(3), guard.lost())
            .await
            .expect("lost() fires when another owner holds the lock");
        let err = guard.unlock().await.unwrap_err();
        assert!(err.is_lock_lost(), "{err}");
        assert!(other.is_held());
        other.unlock().await.unwrap();
    }
}

/// The lock `waiter` is handed by `holder`'s release through the grant
/// message (native): the guard proceeds on the short grant (min(lease,
/// waiter ttl)) and claims it in the background, after a third of it.
/// `None` when the waiter took it with its own attempt instead (its refresh
/// came first): no claim then.
async fn handed_over(
    server: &RedisServer,
    holder: &LockClient,
    waiter: &LockClient,
    name: &str,
    options: AcquireOptions,
) -> Option<LockGuard> {
    let protocol = Protocol::Native;
    let held = take(holder, name, true).await;
    let handoffs = waiter.statistics().handoffs;
    let waiting = {
        let lock = waiter.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.acquire(options).await })
    };
    support::eventually(Duration::from_secs(5), "queued", || {
        support::queue_len(server, protocol, name) == 1
    })
    .await;
    // Subscribed, and past the attempt that follows subscribing.
    let pattern = format!("*{{{name}}}*");
    support::eventually(Duration::from_secs(5), "subscribed", || {
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", &pattern]);
        !channels.is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("granted")
        .unwrap()
        .unwrap()
        .expect("granted");
    if waiter.statistics().handoffs == handoffs {
        guard.unlock().await.unwrap();
        return None;
    }
    Some(guard)
}

/// Native: a hold handed over by a release is believed on the short grant
/// until its claim (in the background) extends it to the lease. A claim
/// that finds the lock given away (here deleted and taken by another
/// client before the claim ran) ends the hold at once: `lost()` fires; the
/// hold is not believed for its lease (30 s, explicit: no renewal would
/// notice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_when_a_handed_over_lock_is_gone_before_its_claim() {
    let protocol = Protocol::Native;
    let server = RedisServer::start();
    let holder = client(&server, protocol, None).await;
    let other = client(&server, protocol, None).await;
    // A 6 s grant, claimed after 2 s; the waiter refreshes every 2 s.
    let waiter = client_with(&server, protocol, |c| c.waiter_ttl(Duration::from_secs(6))).await;
    for trial in 0..3 {
        let name = format!("claim-finds-it-gone-{trial}");
        let options = AcquireOptions::new().lease(Duration::from_secs(30));
        let Some(guard) = handed_over(&server, &holder, &waiter, &name, options).await else {
            continue;
        };
        let _: () = server.cmd(&["DEL", &lock_keys(protocol, &name).0]);
        let taken = take(&other, &name, true).await;
        tokio::time::timeout(Duration::from_secs(5), guard.lost())
            .await
            .expect("the claim finds the lock taken: lost() fires");
        assert!(!guard.is_held());
        assert!(guard.unlock().await.unwrap_err().is_lock_lost());
        assert!(taken.is_held());
        taken.unlock().await.unwrap();
        return;
    }
    panic!("no trial handed the lock over through the grant message");
}

/// Native: a claim names the acquisition's token, not only its owner. A
/// handed-over grant whose lock vanished before its claim, taken again by
/// the same owner (a new acquisition: a new token, a 4 s lease), is not
/// claimed for the old acquisition: the lock keeps the new hold's lease,
/// not the old one's 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_spares_a_later_hold_of_its_owner() {
    let protocol = Protocol::Native;
    let server = RedisServer::start();
    let holder = client(&server, protocol, None).await;
    let waiter = client_with(&server, protocol, |c| c.waiter_ttl(Duration::from_secs(6))).await;
    for trial in 0..3 {
        let name = format!("claim-spares-{trial}");
        let owner = waiter.new_owner();
        let options = AcquireOptions::new()
            .owner(owner.clone())
            .lease(Duration::from_secs(30));
        let Some(old) = handed_over(&server, &holder, &waiter, &name, options).await else {
            continue;
        };
        let _: () = server.cmd(&["DEL", &lock_keys(protocol, &name).0]);
        let new = waiter
            .fair_lock(&name)
            .unwrap()
            .acquire(
                AcquireOptions::new()
                    .owner(owner)
                    .lease(Duration::from_secs(4)),
            )
            .await
            .unwrap()
            .expect("free");
        assert_ne!(old.token(), new.token());
        // Past the old grant's claim (2 s after the handoff).
        tokio::time::sleep(Duration::from_secs(3)).await;
        let left = pttl(&server, protocol, &name);
        assert!(
            (0..=4000).contains(&left),
            "the new hold's lease (4 s) is left, not the old one's 30 s: PTTL {left} ms"
        );
        assert!(new.is_held());
        new.unlock().await.unwrap();
        return;
    }
    panic!("no trial handed the lock over through the grant message");
}

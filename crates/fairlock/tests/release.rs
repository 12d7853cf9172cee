//! Releases: a guard releases only its own acquisition, never a later hold
//! of the same owner (after its own hold expired, was force-unlocked or was
//! lost), and a release retried under its request id (its reply lost)
//! answers what the first send did and changes nothing. Both protocols
//! where both apply. (How long the release cache lives: `expiry.rs`.)

use std::time::Duration;

use fairlock::{AcquireOptions, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{PROTOCOLS, RedisServer, client_with, eventually, lock_keys};

mod common;
use common::scripts::{NEW_ACQUIRE, NEW_RELEASE, eval, key, three};
use common::{config, connect};

/// A guard acts only on its own acquisition. Before: after the hold
/// expired and the same owner acquired again, the old guard's unlock()
/// returned Ok and released the new hold.
///
/// Found by the safety review (finding 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_guard_cannot_release_a_later_hold_of_its_owner() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(config(&server.url(), protocol)).await;
        let other = connect(config(&server.url(), protocol)).await;
        let lock = client.fair_lock("reuse").unwrap();
        let owner = client.new_owner();
        let lease = Duration::from_millis(300);
        let as_owner = || AcquireOptions::new().owner(owner.clone()).lease(lease);
        let old = lock.acquire(as_owner()).await.unwrap().unwrap();
        // The hold ends behind the guard's back (its lease ran out).
        eventually(Duration::from_secs(5), "lease expired", || {
            !support::is_held(&server, protocol, "reuse")
        })
        .await;
        let new = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        let err = old.unlock().await.unwrap_err();
        assert!(err.is_lock_lost(), "{protocol}: {err}");
        assert!(new.is_held(), "{protocol}");
        assert_eq!(lock.hold_count(&owner).await.unwrap(), 1, "{protocol}");
        assert!(
            other
                .fair_lock("reuse")
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none(),
            "{protocol}: the new hold is intact"
        );
        new.unlock().await.unwrap();
    }
}

/// A stale guard under the blocking API (the owner is the thread, so
/// reuse is the default).
///
/// Found by the safety review (finding 3).
#[test]
fn blocking_stale_guard_cannot_release_a_later_hold() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let url = server.url();
        let client = fairlock::blocking::LockClient::with_config(config(&url, protocol)).unwrap();
        let lock = client.fair_lock("thread").unwrap();
        let old = lock.lock().unwrap();
        assert!(lock.force_unlock().unwrap());
        let new = lock.lock().unwrap();
        let err = old.unlock().unwrap_err();
        assert!(err.is_lock_lost(), "{protocol}: {err}");
        assert!(new.is_held(), "{protocol}");
        assert_eq!(lock.hold_count_current_thread().unwrap(), 1, "{protocol}");
        new.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
    }
}

/// A hold lost behind its guard's back (its key deleted) stays lost:
/// re-entering it is not a new grant, and its guard's `unlock` leaves a
/// later hold of the same owner alone, which the watchdog goes on renewing.
///
/// Found by the code review fixed in de6180f (before the safety review):
/// a lost hold released the next hold of its owner, and re-entering it
/// made a new grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_hold_spares_the_next_hold_of_its_owner() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = client_with(&server, protocol, |c| c.lease(Duration::from_millis(600))).await;
        let lock = client.fair_lock("again").unwrap();
        let old = lock.lock().await.unwrap();
        let owner = old.owner().clone();
        let _: () = server.cmd(&["DEL", &lock_keys(protocol, "again").0]);
        tokio::time::timeout(Duration::from_secs(3), old.lost())
            .await
            .expect("loss noticed");
        // Re-entering a lost hold is not a new grant.
        assert!(old.reenter().await.unwrap().is_none(), "{protocol}");
        assert!(
            !lock.is_locked().await.unwrap(),
            "the stray grant was released"
        );
        // The same owner acquires again; the old guard must leave it alone.
        let new = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        let err = old.unlock().await.unwrap_err();
        assert!(err.is_lock_lost(), "{err}");
        assert_eq!(
            lock.hold_count(&owner).await.unwrap(),
            1,
            "{protocol}: the new hold is intact"
        );
        // And it is still renewed: alive after several leases.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(new.is_held(), "{protocol}");
        assert_eq!(lock.hold_count(&owner).await.unwrap(), 1);
        new.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    }
}

/// Redisson: a release of an expired lock whose reply was lost and that
/// is retried under its request id must say what the first call said.
/// Before: the cache held 1 ("released") while the call returned -2, so the
/// retry reported success.
///
/// Found by the safety review (finding 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_release_of_an_expired_lock_reports_it_lost() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let config = config(&proxy.url(), Protocol::Redisson)
        .response_timeout(Duration::from_millis(300))
        .retry_budget(Duration::from_secs(5));
    let client = connect(config).await;
    let lock = client.fair_lock("expired").unwrap();
    // Load the release script first: a held NOSCRIPT reply would never let
    // it run.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let guard = lock
        .lock_with_lease(Duration::from_millis(200))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "lease expired", || {
        !support::is_held(&server, Protocol::Redisson, "expired")
    })
    .await;
    proxy.hold_script_replies();
    let unlock = tokio::spawn(guard.unlock());
    eventually(Duration::from_secs(5), "release ran on the server", || {
        !server
            .cmd::<Vec<String>>(&["KEYS", "redisson_unlock_latch:*"])
            .is_empty()
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    let err = tokio::time::timeout(Duration::from_secs(10), unlock)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(err.is_lock_lost(), "{err}");
}

/// Promise 1/idempotence: retried releases (same request id) after partial
/// releases, a full release and a re-acquisition by the same owner answer
/// what the first send did and change nothing.
///
/// From the adversarial review of the `scripts` change (fast paths, a
/// skipped release cache GET, queued non-fair waiters): a check that held.
#[test]
fn retried_releases_after_reacquire_change_nothing() {
    let server = RedisServer::start();
    let name = "retry-release";
    let keys = three(name);
    let acquire = |nonce: &str, base: &str| {
        eval(
            &server,
            NEW_ACQUIRE,
            &keys,
            &["c:1", "30000", "6000", "fq", base, nonce, ""],
        )
        .unwrap()
    };
    let release = |req: &str, token: &str| {
        let mut keys = keys.clone();
        keys.push(key(name, &format!("release:{req}")));
        let v: i64 = redis::from_redis_value(
            eval(
                &server,
                NEW_RELEASE,
                &keys,
                &["c:1", "10000", token, "", "f"],
            )
            .unwrap(),
        )
        .unwrap();
        v
    };
    let field = |f: &str| common::lock_field(&server, name, f);
    acquire("n1", "0");
    acquire("n2", "1");
    acquire("n3", "2");
    let t1 = field("token").unwrap();
    assert_eq!(release("r1", &t1), 0);
    assert_eq!(release("r1", &t1), 0, "retry of a partial release");
    assert_eq!(release("r2", &t1), 0);
    assert_eq!(release("r2", &t1), 0);
    assert_eq!(field("count").as_deref(), Some("1"));
    assert_eq!(release("r3", &t1), 1);
    assert_eq!(
        release("r3", &t1),
        1,
        "retry of the full release, the lock free"
    );
    // Same owner takes it again (new token), then every old request is retried.
    acquire("n4", "0");
    let t2 = field("token").unwrap();
    assert!(t2.parse::<u64>().unwrap() > t1.parse::<u64>().unwrap());
    assert_eq!(release("r3", &t1), 1, "retry of the full release");
    assert_eq!(release("r1", &t1), 0);
    assert_eq!(release("r2", &t1), 0);
    // The new hold is untouched.
    assert_eq!(
        (field("owner").as_deref(), field("count").as_deref()),
        (Some("c:1"), Some("1"))
    );
    // Re-entered again and partly released, then a retry of the new full release.
    acquire("n5", "1");
    assert_eq!(release("r4", &t2), 0);
    assert_eq!(release("r5", &t2), 1);
    assert_eq!(release("r5", &t2), 1);
    assert_eq!(release("r4", &t2), 0);
    assert!(!support::is_held(&server, Protocol::Native, name));
}

/// Promise 1: a release that names no hold (`unlock_as`, Redisson's
/// `unlock()`), sent again under its request id after its first sending
/// freed the lock, another client took and released it, and the same owner
/// took it again, must answer what it did and leave that later hold alone.
/// Its only scope is the owner: its request id is the one thing that tells
/// it from a release of the later hold.
///
/// Found by the adversarial review of the key layout version 2: a full
/// release wrote its id into the free marker only, which the next release
/// replaced; the retry then found no trace of itself and released the
/// owner's later hold (a second holder could take the lock while that
/// hold's guard still believed it held).
#[test]
fn retried_release_without_a_token_spares_a_later_hold_of_its_owner() {
    let server = RedisServer::start();
    let name = "retry-any-hold";
    let keys = three(name);
    let acquire = |owner: &str, nonce: &str| {
        eval(
            &server,
            NEW_ACQUIRE,
            &keys,
            &[owner, "30000", "6000", "fq", "0", nonce, ""],
        )
        .unwrap()
    };
    let release = |owner: &str, req: &str, token: &str| -> i64 {
        let mut keys = keys.clone();
        keys.push(key(name, &format!("release:{req}")));
        redis::from_redis_value(
            eval(
                &server,
                NEW_RELEASE,
                &keys,
                &[owner, "10000", token, "", "f"],
            )
            .unwrap(),
        )
        .unwrap()
    };
    let field = |f: &str| common::lock_field(&server, name, f);
    acquire("c:1", "n1");
    assert_eq!(release("c:1", "r1", ""), 1, "unlock_as frees the lock");
    // Another client takes it and releases it; then the owner takes it again.
    acquire("x:1", "n2");
    let x = field("token").unwrap();
    assert_eq!(release("x:1", "r2", &x), 1);
    acquire("c:1", "n3");
    let later = field("token").unwrap();
    // The first release, sent again (its reply was lost).
    assert_eq!(release("c:1", "r1", ""), 1, "answers what it did");
    assert_eq!(
        (field("owner"), field("token"), field("count")),
        (Some("c:1".to_owned()), Some(later), Some("1".to_owned())),
        "the owner's later hold is intact"
    );
}

/// The same through the client: `unlock_as` whose reply is lost and sent
/// again after another client took and released the lock and the owner
/// took it again (here by the acquire script itself, as another task of
/// that owner would: the client's connection is the one holding the reply).
/// Before: the retry released the later hold, and another client took the
/// lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_as_sent_again_spares_a_later_hold_of_its_owner() {
    let server = RedisServer::start();
    let name = "unlock-as-again";
    let proxy = Proxy::start(server.port());
    let client = connect(
        config(&proxy.url(), Protocol::Native)
            .response_timeout(Duration::from_millis(300))
            .retry_budget(Duration::from_secs(5)),
    )
    .await;
    let other = connect(config(&server.url(), Protocol::Native)).await;
    let lock = client.fair_lock(name).unwrap();
    // Load the release script first: a held NOSCRIPT reply would never let
    // it run.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let owner = client.new_owner();
    let hold = || async {
        lock.acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap()
            .forget();
    };
    // Sent once, its reply read: its answer cache is deleted.
    hold().await;
    lock.unlock_as(&owner).await.unwrap();
    let caches = format!("fairlock:{{{name}}}:release:*");
    eventually(Duration::from_secs(5), "the answer cache deleted", || {
        server.cmd::<Vec<String>>(&["KEYS", &caches]).is_empty()
    })
    .await;
    hold().await;
    proxy.hold_script_replies();
    let unlock = tokio::spawn({
        let (lock, owner) = (lock.clone(), owner.clone());
        async move { lock.unlock_as(&owner).await }
    });
    eventually(Duration::from_secs(5), "release ran on the server", || {
        common::native_holder(&server, name).is_none()
    })
    .await;
    // Another client takes it and releases it, then the owner takes it again.
    other
        .fair_lock(name)
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    eval(
        &server,
        NEW_ACQUIRE,
        &three(name),
        &[owner.as_str(), "30000", "6000", "fq", "0", "later", ""],
    )
    .unwrap();
    proxy.cut_all();
    proxy.pass();
    tokio::time::timeout(Duration::from_secs(10), unlock)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        common::native_holder(&server, name).as_deref(),
        Some(owner.as_str()),
        "the owner's later hold is intact"
    );
    assert!(
        other
            .fair_lock(name)
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "nobody else can take it"
    );
}

/// A release whose lock was handed to a waiter, sent again (its reply lost)
/// after that waiter gave the grant up or the lock was force-unlocked,
/// answers what it did: released. The handed-over value carried its id;
/// the give-up and the force-unlock passed the lock on without it.
///
/// Found by the adversarial review of the key layout version 2: only one
/// acquisition came between (the grant nobody took), and the retry
/// answered "not held" (`Error::LockLost` to a caller that had released).
#[test]
fn retried_release_after_its_handoff_was_given_up_or_force_unlocked() {
    let server = RedisServer::start();
    let name = "retry-after-give-up";
    let keys = three(name);
    let prelude = concat!(
        include_str!("../src/protocol/common.lua"),
        include_str!("../src/protocol/native/lock_prelude.lua"),
    );
    let give_up = format!(
        "{prelude}{}",
        include_str!("../src/protocol/native/give_up.lua")
    );
    let force = format!(
        "{prelude}{}",
        include_str!("../src/protocol/native/force_release.lua")
    );
    let int = |v: redis::Value| -> i64 { redis::from_redis_value(v).unwrap() };
    let acquire = |owner: &str, nonce: &str| {
        eval(
            &server,
            NEW_ACQUIRE,
            &keys,
            &[owner, "30000", "6000", "fq", "0", nonce, ""],
        )
        .unwrap()
    };
    let release = |owner: &str, req: &str, token: &str| -> i64 {
        let mut keys = keys.clone();
        keys.push(key(name, &format!("release:{req}")));
        int(eval(
            &server,
            NEW_RELEASE,
            &keys,
            &[owner, "10000", token, "", "f"],
        )
        .unwrap())
    };
    let field = |f: &str| common::lock_field(&server, name, f);
    for (round, undo) in ["give up", "force-unlock"].into_iter().enumerate() {
        acquire("a:1", &format!("a{round}"));
        let a = field("token").unwrap();
        let waiter = format!("b:{round}");
        acquire(&waiter, "nb");
        let request = format!("r{round}");
        assert_eq!(release("a:1", &request, &a), 1);
        assert_eq!(field("owner"), Some(waiter.clone()), "handed to the waiter");
        let passed = match undo {
            "give up" => eval(&server, &give_up, &keys, &[&waiter, "nb", "f"]).unwrap(),
            _ => eval(&server, &force, &keys, &["fairlock:revoked:", "f"]).unwrap(),
        };
        assert!(int(passed) > 0, "{undo}");
        assert_eq!(field("owner"), None, "{undo}: free");
        assert_eq!(
            release("a:1", &request, &a),
            1,
            "{undo}: the retry answers released"
        );
    }
}

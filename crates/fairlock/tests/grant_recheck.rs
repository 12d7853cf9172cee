//! The re-check of a grant after a (possibly forged) revocation
//! (`confirm_unrevoked`) where it meets a slow network: a check that gets no
//! answer gives the hold up (a background release of its token) while the
//! wait goes on with the same acquisition secret, whose next attempt claims
//! that very token again. Native protocol (the secret is native's).

use std::time::Duration;

use fairlock::{LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{RedisServer, client, is_held};

/// A waiter's attempt takes the free lock; its reply is slow, and a
/// hostile PUBLISH on the client's revocation channel arrives meanwhile, so
/// the grant is re-checked; the check's reply is slower than the response
/// timeout. The hold is dropped (released from the background, token T)
/// and the wait loop attempts again at once, with the same secret: on the
/// server that attempt claims T (the nonce matches), and the background
/// release, sent just after it, deletes T. The waiter returns a guard for a
/// lock nobody holds on the server, and another client takes it: two
/// holders until the next renewal finds out.
///
/// The single worker makes the order deterministic: the attempt is spawned
/// after the release, into the worker's LIFO slot, so it goes out first.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_grant_recheck_without_an_answer_leaves_no_ghost_hold() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let waiter = LockClient::with_config(
        fairlock::ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(Protocol::Native)
            .response_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let other = client(&server, Protocol::Native).await;
    let name = "recheck-ghost";
    // Scripts loaded; the client's id (owners are CLIENT:N).
    let warm = waiter.fair_lock(name).unwrap().lock().await.unwrap();
    let owner = warm.owner().to_string();
    let client_id = owner.rsplit_once(':').unwrap().0.to_owned();
    warm.unlock().await.unwrap();

    proxy.delay_command_replies(Duration::from_millis(1_000));
    let started = std::time::Instant::now();
    let w = tokio::spawn({
        let lock = waiter.fair_lock(name).unwrap();
        async move { lock.lock().await }
    });
    // While the attempt's reply is on its way: a forged revocation.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: i64 = server.cmd(&[
        "PUBLISH",
        &format!("fairlock:revoked:{client_id}"),
        "forged",
    ]);
    // The check's reply (sent at ~1 s) comes after the response timeout.
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.delay_command_replies(Duration::from_millis(3_000));
    // Later replies (the next attempt's) come at once again.
    tokio::time::sleep(Duration::from_millis(1_400)).await;
    proxy.delay_command_replies(Duration::ZERO);

    let guard = tokio::time::timeout(Duration::from_secs(15), w)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .unwrap();
    eprintln!(
        "granted after {:?}; believed held: {}, lock key exists: {}",
        started.elapsed(),
        guard.is_held(),
        is_held(&server, Protocol::Native, name)
    );
    let taken = other.fair_lock(name).unwrap().try_lock().await.unwrap();
    assert!(
        !(guard.is_held() && taken.is_some()),
        "two holders: the waiter's guard says held (token {:?}) and another client took the lock",
        guard.token()
    );
    drop(taken);
    drop(guard);
    waiter.shutdown().await;
    other.shutdown().await;
}

/// The same re-check, cancelled while its call is in flight (the caller's
/// timeout fires): the hold it was checking is released from the
/// background, nothing is left held, and the next client takes the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_recheck_cancelled_midway_leaves_nothing_held() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let waiter = LockClient::with_config(
        fairlock::ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(Protocol::Native)
            .response_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let other = client(&server, Protocol::Native).await;
    let name = "recheck-cancelled";
    let warm = waiter.fair_lock(name).unwrap().lock().await.unwrap();
    let owner = warm.owner().to_string();
    let client_id = owner.rsplit_once(':').unwrap().0.to_owned();
    warm.unlock().await.unwrap();

    proxy.delay_command_replies(Duration::from_millis(600));
    let lock = waiter.fair_lock(name).unwrap();
    let attempt = tokio::time::timeout(Duration::from_millis(900), lock.lock());
    let forge = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _: i64 = server.cmd(&[
            "PUBLISH",
            &format!("fairlock:revoked:{client_id}"),
            "forged",
        ]);
    };
    let (outcome, ()) = tokio::join!(attempt, forge);
    // Cancelled during the check (its reply was due at ~1.2 s).
    assert!(
        outcome.is_err(),
        "the check answered before the timeout: {outcome:?}"
    );
    proxy.delay_command_replies(Duration::ZERO);
    waiter.flush().await;
    let taken = other
        .fair_lock(name)
        .unwrap()
        .try_lock_for(Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        taken.is_some(),
        "the cancelled acquisition left the lock held"
    );
    taken.unwrap().unlock().await.unwrap();
    assert!(!is_held(&server, Protocol::Native, name));
    waiter.shutdown().await;
    other.shutdown().await;
}

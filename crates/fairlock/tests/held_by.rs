//! `is_held_by(&Owner)` in the async API: answered by the server (the
//! native lock hash's `owner` field, Redisson's hash field named after the
//! owner), under both protocols, for fair and non-fair locks.

use fairlock::LockKind;
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

#[tokio::test]
async fn is_held_by_reads_the_owner_on_the_server() {
    for protocol in PROTOCOLS {
        for kind in [LockKind::Fair, LockKind::NonFair] {
            let server = RedisServer::start();
            let client = support::client(&server, protocol).await;
            let lock = client.handle("held-by", kind).unwrap();
            let stranger = client.new_owner();
            assert!(
                !lock.is_held_by(&stranger).await.unwrap(),
                "{protocol} {kind:?}: free"
            );

            let guard = lock.lock().await.unwrap();
            let owner = guard.owner().clone();
            assert!(
                lock.is_held_by(&owner).await.unwrap(),
                "{protocol} {kind:?}"
            );
            assert!(
                !lock.is_held_by(&stranger).await.unwrap(),
                "{protocol} {kind:?}"
            );

            // Another client sees the same answer: it comes from the server.
            let observer = support::client(&server, protocol).await;
            let seen = observer.handle("held-by", kind).unwrap();
            assert!(
                seen.is_held_by(&owner).await.unwrap(),
                "{protocol} {kind:?}"
            );

            // Re-entered, then released once: still held; released again: not.
            let again = guard.reenter().await.unwrap().expect("re-entry");
            again.unlock().await.unwrap();
            assert!(
                lock.is_held_by(&owner).await.unwrap(),
                "{protocol} {kind:?}"
            );
            guard.unlock().await.unwrap();
            assert!(
                !lock.is_held_by(&owner).await.unwrap(),
                "{protocol} {kind:?}"
            );

            // Force-unlocked: no longer held, though the guard still lives.
            let guard = lock.lock().await.unwrap();
            assert!(seen.force_unlock().await.unwrap());
            assert!(
                !lock.is_held_by(guard.owner()).await.unwrap(),
                "{protocol} {kind:?}"
            );
            drop(guard);
            client.shutdown().await;
        }
    }
}

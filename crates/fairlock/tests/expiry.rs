//! Key lifetimes: every key a lock writes expires on its own once nobody
//! uses the name (a crashed waiter's queue keys within its waiter ttl, meta
//! 20 s after the last grant's lease or waiter's refresh), and the release
//! cache lives long enough for every retry of its request. Native keys; the
//! release cache under both protocols.

use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, eventually, lock_keys};

mod common;
use common::{config, connect, queued_owners};

/// Every native key expires on its own once nobody uses the name:
/// a crashed waiter's queue keys within its waiter ttl, the meta key 20 s
/// after the last grant's lease or waiter's refresh. Before: queue, alive and leases had no TTL,
/// and meta lived 7 days.
///
/// Found by the safety review (findings 11 and 12).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_keys_expire_once_unused() {
    let server = RedisServer::start();
    let name = "ephemeral";
    let holder_client = connect(config(&server.url(), Protocol::Native)).await;
    let held = holder_client
        .fair_lock(name)
        .unwrap()
        .lock_with_lease(Duration::from_secs(2))
        .await
        .unwrap();
    // A waiter whose process dies: its runtime stops without any clean-up.
    let url = server.url();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let config = config(&url, Protocol::Native).waiter_ttl(Duration::from_millis(600));
            let client = connect(config).await;
            let lock = client.fair_lock(name).unwrap();
            let _ = tokio::time::timeout(Duration::from_millis(300), async {
                std::future::pending::<()>().await;
            })
            .await;
            let waiting = tokio::spawn(async move { lock.lock().await });
            tokio::time::sleep(Duration::from_millis(300)).await;
            std::mem::forget(waiting);
        });
        runtime.shutdown_background();
    })
    .join()
    .unwrap();
    let (_, queue, others) = lock_keys(Protocol::Native, name);
    assert_eq!(
        queued_owners(&server, name).len(),
        1,
        "the dead waiter is queued"
    );
    for key in [&queue, &others[0], &others[1]] {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!(pttl > 0 && pttl <= 600, "{key}: PTTL {pttl}");
    }
    let meta = format!("fairlock:{{{name}}}:meta");
    let pttl: i64 = server.cmd(&["PTTL", &meta]);
    assert!(pttl > 0 && pttl <= 22_000, "meta: PTTL {pttl}");
    eventually(Duration::from_secs(3), "queue keys expired", || {
        server.cmd::<i64>(&["EXISTS", &queue, &others[0], &others[1]]) == 0
    })
    .await;
    // Released with nobody waiting: only meta and the release cache (2 x
    // (retry budget + response timeout) = 26 s by default) are left. A
    // release with nobody queued does not touch meta: it lives 20 s past
    // the last grant's lease (2 s) or the last waiter's refresh (600 ms).
    held.unlock().await.unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "fairlock:*"]);
    for key in &keys {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        let limit = if key.contains(":release:") {
            26_000
        } else {
            22_000
        };
        assert!(pttl > 0 && pttl <= limit, "{key}: PTTL {pttl}");
    }
}

/// A release's cached result must outlive every retry of
/// the same request (retry budget, twice, plus response timeouts), or a
/// late retry releases a second hold.
///
/// Found by the review of the safety fixes (fixed in 6ee3194).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_cache_outlives_the_retries() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let config = config(&server.url(), protocol).retry_budget(Duration::from_secs(60));
        let client = connect(config).await;
        let lock = client.fair_lock("cache").unwrap();
        lock.lock().await.unwrap().unlock().await.unwrap();
        let pattern = match protocol {
            Protocol::Redisson => "redisson_unlock_latch:*",
            _ => "fairlock:{cache}:release:*",
        };
        let keys: Vec<String> = server.cmd(&["KEYS", pattern]);
        assert_eq!(keys.len(), 1, "{protocol}");
        let pttl: i64 = server.cmd(&["PTTL", &keys[0]]);
        assert!(pttl > 120_000, "{protocol}: PTTL {pttl}");
    }
}

//! Key lifetimes: every key a lock writes expires on its own once nobody
//! uses the name (a crashed waiter's line within its waiter ttl, the native
//! lock's free marker as long as a release's answer cache), and a release's
//! answer lives long enough for every retry of its request. Native keys;
//! the release answers under both protocols.

use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, eventually, lock_keys};

mod common;
use common::{config, connect, queued_owners};

/// Every native key expires on its own once nobody uses the name:
/// a crashed waiter's line and record within its waiter ttl, the lock's
/// free marker with the release's answer. Before: queue, alive and leases
/// had no TTL, and meta lived 7 days.
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
    let (lock, line, others) = lock_keys(Protocol::Native, name);
    assert_eq!(
        queued_owners(&server, name).len(),
        1,
        "the dead waiter is queued"
    );
    for key in [&line, &others[0]] {
        let pttl: i64 = server.cmd(&["PTTL", key]);
        assert!(pttl > 0 && pttl <= 600, "{key}: PTTL {pttl}");
    }
    eventually(Duration::from_secs(3), "the line's keys expired", || {
        server.cmd::<i64>(&["EXISTS", &line, &others[0]]) == 0
    })
    .await;
    // Released with nobody waiting: only the lock's free marker is left
    // (the last token, and the release's request id for a retry of it),
    // for as long as a release's answer cache would live: 2 x (retry
    // budget + response timeout), 26 s by default. No other key.
    held.unlock().await.unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "fairlock:*"]);
    assert_eq!(keys, vec![lock.clone()], "the keys left");
    let pttl: i64 = server.cmd(&["PTTL", &lock]);
    assert!(pttl > 20_000 && pttl <= 26_000, "{lock}: PTTL {pttl}");
    assert!(!support::is_held(&server, Protocol::Native, name));
}

/// The key that caches a release's answer (the pattern for `KEYS`).
fn release_cache_pattern(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Redisson => "redisson_unlock_latch:*",
        _ => "fairlock:*:release:*",
    }
}

/// A release's cached answer must outlive every retry of the same request
/// (retry budget, twice, plus response timeouts), or a late retry releases
/// a second hold: a release whose reply was lost, and that was sent again,
/// leaves its answer for that long.
///
/// Found by the review of the safety fixes (fixed in 6ee3194). Since the
/// answer of a release sent once is deleted as soon as it is read (see
/// `release_answers_are_deleted_once_read`), the release here is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_cache_outlives_the_retries() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = support::proxy::Proxy::start(server.port());
        let config = config(&proxy.url(), protocol)
            .response_timeout(Duration::from_millis(300))
            .retry_budget(Duration::from_secs(60));
        let client = connect(config).await;
        let lock = client.fair_lock("cache").unwrap();
        // Loads the scripts (a held NOSCRIPT reply would never let one run).
        lock.lock().await.unwrap().unlock().await.unwrap();
        let guard = lock.lock().await.unwrap();
        let pattern = release_cache_pattern(protocol);
        // That first release's answer is deleted in the background: gone
        // before the cut, which could lose its delete (it would then expire
        // on its own) and leave two answers below.
        eventually(Duration::from_secs(10), "the first answer deleted", || {
            server.cmd::<Vec<String>>(&["KEYS", pattern]).is_empty()
        })
        .await;
        proxy.hold_script_replies();
        let unlock = tokio::spawn(guard.unlock());
        // (The native lock's full release caches no answer: its request id
        // stays in the lock's free marker.)
        eventually(
            Duration::from_secs(5),
            "the release ran",
            || match protocol {
                Protocol::Native => !support::is_held(&server, protocol, "cache"),
                _ => !server.cmd::<Vec<String>>(&["KEYS", pattern]).is_empty(),
            },
        )
        .await;
        proxy.cut_all();
        proxy.pass();
        tokio::time::timeout(Duration::from_secs(30), unlock)
            .await
            .expect("the retry is answered")
            .unwrap()
            .expect("released once");
        client.flush().await;
        let keys: Vec<String> = match protocol {
            Protocol::Native => {
                assert!(server.cmd::<Vec<String>>(&["KEYS", pattern]).is_empty());
                vec![lock_keys(protocol, "cache").0]
            }
            _ => server.cmd(&["KEYS", pattern]),
        };
        assert_eq!(
            keys.len(),
            1,
            "{protocol}: the retried release's answer is kept"
        );
        let pttl: i64 = server.cmd(&["PTTL", &keys[0]]);
        assert!(pttl > 120_000, "{protocol}: PTTL {pttl}");
    }
}

/// Each release's answer is kept only as long as a retry of it needs: the
/// answer of a release sent once is deleted as soon as its reply is read
/// (as Redisson deletes its own after an unlock). Before, every release
/// left its answer for 2 x (retry budget + response timeout), 26 s by
/// default: 54 `redisson_unlock_latch:{NAME}:REQ` keys after a mix of ~80
/// holds. A mix of holds here (fair and non-fair locks, re-entries,
/// explicit leases, both sides of a read-write lock and a downgrade, a
/// native semaphore's permits), then no answer key is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_answers_are_deleted_once_read() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(config(&server.url(), protocol)).await;
        let mut released = 0;
        for round in 0..4 {
            let fair = client.fair_lock(&format!("fair-{round}")).unwrap();
            let first = fair.lock().await.unwrap();
            let again = first.reenter().await.unwrap().expect("re-entered");
            again.unlock().await.unwrap();
            first.unlock().await.unwrap();
            let plain = client.lock(&format!("plain-{round}")).unwrap();
            plain
                .lock_with_lease(Duration::from_secs(5))
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
            let rw = client.read_write_lock(&format!("rw-{round}")).unwrap();
            let readers = [
                rw.read().lock().await.unwrap(),
                rw.read().lock().await.unwrap(),
            ];
            for reader in readers {
                reader.unlock().await.unwrap();
            }
            let writer = rw.write().lock().await.unwrap();
            let downgrade = rw
                .read()
                .acquire(fairlock::AcquireOptions::new().owner(writer.owner().clone()))
                .await
                .unwrap()
                .expect("a writer reads too");
            writer.unlock().await.unwrap();
            downgrade.unlock().await.unwrap();
            // Dropped guards release in the background.
            drop(fair.lock().await.unwrap());
            released += 9;
            if protocol == Protocol::Native {
                let sem = client.semaphore(&format!("sem-{round}"), 3).unwrap();
                sem.acquire(2).await.unwrap().release().await.unwrap();
                drop(sem.acquire(1).await.unwrap());
                released += 2;
            }
        }
        client.flush().await;
        let left: Vec<String> = server.cmd(&["KEYS", release_cache_pattern(protocol)]);
        assert!(
            left.is_empty(),
            "{protocol}: {} answers left after {released} releases: {left:?}",
            left.len()
        );
        client.shutdown().await;
    }
}

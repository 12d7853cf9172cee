//! Fair and non-fair lock behaviour under both protocols (each test runs
//! once per protocol): FIFO order, mutual exclusion, reentrancy,
//! force-unlock, unlock by a non-owner; and, under redisson, the raw key
//! layout Redisson expects (docs/redisson-protocol.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairlock::{AcquireOptions, ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, assert_clean_for, client, eventually, queue_len};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_two_clients() {
    for protocol in PROTOCOLS {
        fifo_order(protocol).await;
    }
}

async fn fifo_order(protocol: Protocol) {
    let server = RedisServer::start();
    let clients = [
        client(&server, protocol).await,
        client(&server, protocol).await,
    ];
    let holder = clients[0].fair_lock("fifo").unwrap().lock().await.unwrap();

    const WAITERS: usize = 12;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % 2].fair_lock("fifo").unwrap();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("lock");
            order.lock().unwrap().push(i);
            guard.unlock().await.expect("unlock");
        }));
        // Enqueue in a known order: the next waiter starts once this one is queued.
        eventually(Duration::from_secs(5), "waiter queued", || {
            queue_len(&server, protocol, "fifo") == i + 1
        })
        .await;
    }
    holder.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "{protocol}"
    );
    assert_clean_for(&server, protocol, "fifo");
}

/// 8 tasks over 2 clients, each doing 1,000 non-atomic GET/SET increments
/// under the lock: the counter is exact only if no two ever overlap.
async fn mutual_exclusion(protocol: Protocol, fair: bool, rounds: usize) {
    let server = RedisServer::start();
    let clients = [
        client(&server, protocol).await,
        client(&server, protocol).await,
    ];
    const TASKS: usize = 8;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % 2].clone();
        let url = server.url();
        tasks.push(tokio::spawn(async move {
            let mut conn = support::patient_connection(&url).await;
            for _ in 0..rounds {
                let guard = if fair {
                    client
                        .fair_lock("counter-lock")
                        .unwrap()
                        .lock()
                        .await
                        .unwrap()
                } else {
                    client.lock("counter-lock").unwrap().lock().await.unwrap()
                };
                let value: Option<u64> = redis::cmd("GET")
                    .arg("counter")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                redis::cmd("SET")
                    .arg("counter")
                    .arg(value.unwrap_or(0) + 1)
                    .query_async::<()>(&mut conn)
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        server.cmd::<usize>(&["GET", "counter"]),
        TASKS * rounds,
        "{protocol}"
    );
    assert_clean_for(&server, protocol, "counter-lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_fair_native() {
    mutual_exclusion(Protocol::Native, true, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_fair_redisson() {
    mutual_exclusion(Protocol::Redisson, true, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_nonfair_native() {
    mutual_exclusion(Protocol::Native, false, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_nonfair_redisson() {
    mutual_exclusion(Protocol::Redisson, false, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_counts() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        let client = client(&server, protocol).await;
        for fair in [true, false] {
            let name = format!("re-{protocol}-{fair}");
            let (fair_lock, plain_lock) = (
                client.fair_lock(&name).unwrap(),
                client.lock(&name).unwrap(),
            );
            let first = if fair {
                fair_lock.lock().await
            } else {
                plain_lock.lock().await
            }
            .unwrap();
            assert_eq!(
                fair_lock.hold_count(&client.new_owner()).await.unwrap(),
                0,
                "another owner holds nothing"
            );
            let owner = first.owner().clone();
            let second = first.reenter().await.unwrap().expect("re-entry");
            let third = second.reenter().await.unwrap().expect("re-entry");
            assert_eq!(fair_lock.hold_count(&owner).await.unwrap(), 3, "{protocol}");
            // Re-entry keeps the acquisition's fencing token (native).
            assert_eq!(third.token(), first.token());
            assert_eq!(first.token().is_some(), protocol == Protocol::Native);
            // Another owner cannot take it meanwhile.
            let other = if fair {
                fair_lock.try_lock().await
            } else {
                plain_lock.try_lock().await
            };
            assert!(other.unwrap().is_none());
            third.unlock().await.unwrap();
            assert_eq!(fair_lock.hold_count(&owner).await.unwrap(), 2);
            second.unlock().await.unwrap();
            assert_eq!(fair_lock.hold_count(&owner).await.unwrap(), 1);
            first.unlock().await.unwrap();
            assert!(!fair_lock.is_locked().await.unwrap());
        }

        // An explicit owner through AcquireOptions re-enters too.
        let lock = client.fair_lock("re-owner").unwrap();
        let owner = client.new_owner();
        let a = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        let b = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(lock.hold_count(&owner).await.unwrap(), 2);
        b.unlock().await.unwrap();
        a.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_is_locked_remaining_lease() {
    for protocol in PROTOCOLS {
        force_unlock_status(protocol).await;
    }
}

async fn force_unlock_status(protocol: Protocol) {
    let server = RedisServer::start();
    let client = client(&server, protocol).await;
    let lock = client.fair_lock("status").unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(lock.remaining_lease().await.unwrap(), None);
    assert!(!lock.force_unlock().await.unwrap(), "nothing to release");

    let guard = lock.lock_with_lease(Duration::from_secs(20)).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(
        left > Duration::from_secs(15) && left <= Duration::from_secs(20),
        "{left:?}"
    );

    // A queued waiter is woken by the force unlock and acquires.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "waiter queued", || {
        queue_len(&server, protocol, "status") == 1
    })
    .await;
    assert!(lock.force_unlock().await.unwrap());
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by force unlock, not by the 20 s lease")
        .unwrap();
    // The first guard lost its lock: unlock says so.
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lock_lost(), "{err}");
    second.unlock().await.unwrap();

    // Non-fair lock too.
    let plain = client.lock("status-plain").unwrap();
    let g = plain.lock().await.unwrap();
    assert!(plain.is_locked().await.unwrap());
    assert!(plain.force_unlock().await.unwrap());
    assert!(!plain.is_locked().await.unwrap());
    assert!(g.unlock().await.unwrap_err().is_lock_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_by_non_owner_is_refused() {
    for protocol in PROTOCOLS {
        unlock_by_non_owner(protocol).await;
    }
}

async fn unlock_by_non_owner(protocol: Protocol) {
    let server = RedisServer::start();
    let client = client(&server, protocol).await;
    let lock = client.fair_lock("mine").unwrap();
    let guard = lock.lock().await.unwrap();
    let stranger = client.new_owner();
    let err = lock.unlock_as(&stranger).await.unwrap_err();
    assert!(matches!(err, fairlock::Error::NotOwner { .. }), "{err}");
    assert!(lock.is_locked().await.unwrap(), "still held by its owner");
    guard.unlock().await.unwrap();
    let err = lock.unlock_as(&stranger).await.unwrap_err();
    assert!(err.is_lock_lost(), "nobody holds it: {err}");
}

/// The keys written are exactly what Redisson writes (docs/redisson-protocol.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_layout_matches_redisson() {
    let server = RedisServer::start();
    let config = ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Redisson)
        .waiter_slot(Duration::from_secs(300));
    let a = LockClient::with_config(config.clone()).await.unwrap();
    let b = LockClient::with_config(config).await.unwrap();
    let lock_a = a.fair_lock("layout").unwrap();
    let guard = lock_a.lock().await.unwrap();
    let owner = guard.owner().to_string();
    assert!(owner.starts_with(a.id()) && owner[a.id().len()..].starts_with(':'));
    let (uuid, n) = owner.rsplit_once(':').unwrap();
    assert_eq!(uuid.len(), 36);
    assert!(n.parse::<u64>().is_ok());

    let fields: Vec<String> = server.cmd(&["HGETALL", "layout"]);
    assert_eq!(fields, vec![owner.clone(), "1".to_owned()]);
    assert_eq!(server.cmd::<String>(&["TYPE", "layout"]), "hash");
    let pttl: i64 = server.cmd(&["PTTL", "layout"]);
    assert!(
        pttl > 25_000 && pttl <= 30_000,
        "watchdog lease 30 s: {pttl}"
    );

    // Two waiters from the other client.
    let mut waiters = Vec::new();
    for i in 0..2 {
        let lock = b.fair_lock("layout").unwrap();
        waiters.push(tokio::spawn(async move { lock.lock().await.unwrap() }));
        eventually(Duration::from_secs(5), "queued", || {
            server.cmd::<usize>(&["LLEN", "redisson_lock_queue:{layout}"]) == i + 1
        })
        .await;
    }
    let queue: Vec<String> = server.cmd(&["LRANGE", "redisson_lock_queue:{layout}", "0", "-1"]);
    assert_eq!(queue.len(), 2);
    assert!(queue.iter().all(|o| o.starts_with(b.id())));
    let scores: Vec<(String, f64)> = server.cmd(&[
        "ZRANGE",
        "redisson_lock_timeout:{layout}",
        "0",
        "-1",
        "WITHSCORES",
    ]);
    assert_eq!(
        scores.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>(),
        queue
    );
    // Deadlines: first = now + lock ttl + slot; second = first + slot.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    let first = scores[0].1 - now;
    assert!(
        first > 320_000.0 && first < 330_500.0,
        "first deadline in {first} ms"
    );
    let gap = scores[1].1 - scores[0].1;
    assert!((gap - 300_000.0).abs() < 1.0, "one slot apart: {gap}");
    // Every waiter is subscribed to its own channel (a waiter subscribes
    // once its attempt has queued it: on a loaded machine the SUBSCRIBE
    // can come a while after the queue entry the loop above waited for).
    let subscribed = |channels: &[String]| {
        queue
            .iter()
            .all(|waiter| channels.contains(&format!("redisson_lock__channel:{{layout}}:{waiter}")))
    };
    eventually(Duration::from_secs(10), "each waiter subscribed", || {
        subscribed(&server.cmd::<Vec<String>>(&["PUBSUB", "CHANNELS", "redisson_lock__channel:*"]))
    })
    .await;
    // Release: the head acquires and the second's deadline drops by one slot.
    let mut events = support::KeyEvents::start(&server);
    guard.unlock().await.unwrap();
    let head = waiters.remove(0).await.unwrap();
    let fields: Vec<String> = server.cmd(&["HGETALL", "layout"]);
    assert_eq!(fields, vec![queue[0].clone(), "1".to_owned()]);
    let scores2: Vec<(String, f64)> = server.cmd(&[
        "ZRANGE",
        "redisson_lock_timeout:{layout}",
        "0",
        "-1",
        "WITHSCORES",
    ]);
    assert_eq!(scores2.len(), 1);
    assert_eq!(scores2[0].0, queue[1]);
    assert!((scores[1].1 - scores2[0].1 - 300_000.0).abs() < 1.0);
    // The unlock result cache was written with Redisson's name format, and
    // deleted once the answer was read (as Redisson deletes its own).
    a.flush().await;
    let latches: Vec<(String, String)> = events
        .drain(&server)
        .into_iter()
        .filter(|(event, key)| {
            key.starts_with("redisson_unlock_latch:") && (event == "set" || event == "del")
        })
        .collect();
    assert_eq!(latches.len(), 2, "{latches:?}");
    let ((set, latch), (del, deleted)) = (&latches[0], &latches[1]);
    assert_eq!((set.as_str(), del.as_str()), ("set", "del"), "{latches:?}");
    assert_eq!(latch, deleted);
    let request = latch
        .strip_prefix("redisson_unlock_latch:{layout}:")
        .expect("redisson_unlock_latch:{NAME}:REQUEST");
    assert_eq!(request.len(), 32);
    assert!(request.chars().all(|c| c.is_ascii_hexdigit()));

    head.unlock().await.unwrap();
    waiters.remove(0).await.unwrap().unlock().await.unwrap();
    // Empty again; every channel unsubscribed once its waiter left.
    assert_eq!(
        server.cmd::<i64>(&[
            "EXISTS",
            "layout",
            "redisson_lock_queue:{layout}",
            "redisson_lock_timeout:{layout}"
        ]),
        0
    );
    eventually(Duration::from_secs(5), "channels unsubscribed", || {
        server
            .cmd::<Vec<String>>(&["PUBSUB", "CHANNELS", "redisson_lock__channel:*"])
            .is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nonfair_layout_and_channel() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let lock = client.lock("plain").unwrap();
    let guard = lock.lock().await.unwrap();
    let fields: Vec<String> = server.cmd(&["HGETALL", "plain"]);
    assert_eq!(fields, vec![guard.owner().to_string(), "1".to_owned()]);
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        server.wait_channels() == vec!["redisson_lock__channel:{plain}".to_owned()]
    })
    .await;
    // No queue keys for a non-fair lock.
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "redisson_lock_queue:{plain}"]),
        0
    );
    guard.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the release message, not the 30 s lease")
        .unwrap();
    second.unlock().await.unwrap();
}

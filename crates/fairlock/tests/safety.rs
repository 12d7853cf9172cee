//! Regression tests for the safety review ("no second holder, every wait
//! bounded, nothing left behind"): one test per finding, each against real
//! `redis-server` processes, most through the fault proxy. Each failed on
//! the code before the fix (see the note on each).

use std::time::Duration;

use fairlock::{AcquireOptions, ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{PROTOCOLS, RedisServer, eventually, lock_keys};
use tokio::time::Instant;

fn config(url: &str, protocol: Protocol) -> ClientConfig {
    support::init_tracing();
    ClientConfig::from_url(url).unwrap().protocol(protocol)
}

async fn connect(config: ClientConfig) -> LockClient {
    LockClient::with_config(config).await.expect("connect")
}

/// The owner of the first queued waiter of a native lock.
fn queued_owners(server: &RedisServer, name: &str) -> Vec<String> {
    server.cmd(&["ZRANGE", &format!("fairlock:{{{name}}}:queue"), "0", "-1"])
}

fn native_holder(server: &RedisServer, name: &str) -> Option<String> {
    server.cmd(&["HGET", &format!("fairlock:{{{name}}}:lock"), "owner"])
}

/// 1. A grant must not outlive what the server wrote, whatever settings
/// each client uses. Before: the grant lasted the releaser's waiter ttl
/// (300 ms) while the waiter trusted it for its own (6 s): X took the lock
/// at +0.3 s and W returned at +1 s holding it too.
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

/// 2. A forged grant message (anyone may PUBLISH; owner ids are public)
/// must not make a holder. Before: the waiter returned holding a guard with
/// the forged token 9e18 while the real holder held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_grant_messages_make_no_holder() {
    let server = RedisServer::start();
    let holder_client = connect(config(&server.url(), Protocol::Native)).await;
    let waiter_client = connect(config(&server.url(), Protocol::Native)).await;
    let name = "forged";
    let held = holder_client.fair_lock(name).unwrap().lock().await.unwrap();
    let waiter = {
        let lock = waiter_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "waiter queued", || {
        queued_owners(&server, name).len() == 1
    })
    .await;
    let owner = queued_owners(&server, name).remove(0);
    let channel = format!("fairlock:{{{name}}}:wake:{owner}");
    eventually(Duration::from_secs(5), "waiter subscribed", || {
        server.wait_channels().contains(&channel)
    })
    .await;
    let (now_s, _): (String, String) = server.cmd(&["TIME"]);
    let now_ms = format!("{now_s}000");
    let forgeries = [
        format!("grant:9000000000000000000:{now_ms}"),
        format!("grant:9000000000000000000:{now_ms}:6000"),
        format!("grant:9000000000000000000:{now_ms}:6000:{}", "0".repeat(40)),
        // Malformed numbers must not panic the waiter either.
        "grant:1:-9223372036854775808".to_owned(),
        "grant:1:-9223372036854775808:18446744073709551615:x".to_owned(),
        "grant:18446744073709551616:1:1:y".to_owned(),
    ];
    for forged in &forgeries {
        let receivers: i64 = server.cmd(&["PUBLISH", &channel, forged]);
        assert_eq!(receivers, 1);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "a forged message made a holder");
    assert!(held.is_held());
    let real_token = held.token().unwrap();
    held.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted on the real release")
        .expect("the waiter did not panic");
    let token = granted.token().unwrap();
    assert!(token > real_token && token < 9_000_000_000_000_000_000);
    let stored: String = server.cmd(&["HGET", &format!("fairlock:{{{name}}}:lock"), "token"]);
    assert_eq!(stored, token.to_string(), "the token is the server's");
    granted.unlock().await.unwrap();
}

/// 3. A guard acts only on its own acquisition. Before: after the hold
/// expired and the same owner acquired again, the old guard's unlock()
/// returned Ok and released the new hold.
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

/// 3 (blocking API: the owner is the thread, so reuse is the default).
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

/// 5. Redisson: a release of an expired lock whose reply was lost and that
/// is retried under its request id must say what the first call said.
/// Before: the cache held 1 ("released") while the call returned -2, so the
/// retry reported success.
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

/// 6. A pub/sub connection that dies silently costs a waiter at most one
/// refresh interval (2 s by default), under every protocol and kind, and is
/// replaced. Before: three of the four waited until the holder's 20 s lease
/// ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silently_dead_pubsub_costs_at_most_one_refresh() {
    for protocol in PROTOCOLS {
        for fair in [true, false] {
            let server = RedisServer::start();
            let proxy = Proxy::start(server.port());
            let holder_client = connect(config(&server.url(), protocol)).await;
            let waiter_client = connect(config(&proxy.url(), protocol)).await;
            let name = "silent";
            let lease = Duration::from_secs(20);
            let held = if fair {
                holder_client
                    .fair_lock(name)
                    .unwrap()
                    .lock_with_lease(lease)
                    .await
            } else {
                holder_client
                    .lock(name)
                    .unwrap()
                    .lock_with_lease(lease)
                    .await
            }
            .unwrap();
            let waiter = {
                let client = waiter_client.clone();
                tokio::spawn(async move {
                    if fair {
                        client.fair_lock(name).unwrap().lock().await
                    } else {
                        client.lock(name).unwrap().lock().await
                    }
                })
            };
            // Ids of the server's pub/sub connections (ids never repeat).
            let pubsub_clients = || {
                let list: String = server.cmd(&["CLIENT", "LIST", "TYPE", "pubsub"]);
                list.lines()
                    .filter_map(|line| {
                        line.strip_prefix("id=")?
                            .split(' ')
                            .next()?
                            .parse::<u64>()
                            .ok()
                    })
                    .max()
                    .unwrap_or(0)
            };
            eventually(Duration::from_secs(5), "waiter subscribed", || {
                server.wait_channels().len() == 1
            })
            .await;
            let before = pubsub_clients();
            proxy.blackhole_pubsub();
            held.unlock().await.unwrap();
            let released = Instant::now();
            let guard = tokio::time::timeout(Duration::from_secs(6), waiter)
                .await
                .unwrap_or_else(|_| panic!("{protocol} fair={fair}: waiter still asleep"))
                .unwrap()
                .unwrap();
            let waited = released.elapsed();
            assert!(
                waited < Duration::from_millis(3500),
                "{protocol} fair={fair}: {waited:?}"
            );
            // The dead connection is replaced by a new one.
            eventually(Duration::from_secs(8), "a new pub/sub connection", || {
                pubsub_clients() > before
            })
            .await;
            guard.unlock().await.unwrap();
        }
    }
}

/// 7. `try_lock_for(w)` returns within w + one response timeout, whatever
/// the replies do. Before: with every reply 2 s late, a 500 ms wait
/// returned after 12-15 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_budget_holds_with_slow_replies() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let holder_client = connect(config(&server.url(), protocol)).await;
        let waiter_client = connect(config(&proxy.url(), protocol)).await;
        let held = holder_client
            .fair_lock("slow")
            .unwrap()
            .lock()
            .await
            .unwrap();
        proxy.delay_replies(Duration::from_millis(2000));
        let lock = waiter_client.fair_lock("slow").unwrap();
        let started = Instant::now();
        let got = lock.try_lock_for(Duration::from_millis(500)).await;
        let took = started.elapsed();
        assert!(matches!(got, Ok(None)), "{protocol}: {got:?}");
        // 500 ms + the 3 s response timeout, plus scheduling slack.
        assert!(took < Duration::from_millis(4000), "{protocol}: {took:?}");
        proxy.delay_replies(Duration::ZERO);
        // The waiter left the queue in the background.
        waiter_client.flush().await;
        eventually(Duration::from_secs(10), "queue empty", || {
            support::queue_len(&server, protocol, "slow") == 0
        })
        .await;
        held.unlock().await.unwrap();
    }
}

/// 8. BUSY (a slow script elsewhere) and OOM are retried within the retry
/// budget. Before: `unlock()` failed with BUSY and the hold stayed until
/// its lease ended; `lock()` ended in an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_oom_are_retried() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start_with(&["--busy-reply-threshold", "100"]);
        let client = connect(config(&server.url(), protocol)).await;
        let lock = client.fair_lock("busy").unwrap();
        let guard = lock.lock().await.unwrap();
        // A 1.5 s script from another connection: everyone else gets BUSY.
        let busy_script = || {
            let url = server.url();
            std::thread::spawn(move || {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                let script = "local t = redis.call('time'); local e = t[1] * 1000000 + t[2] + 1500000 \
                              while true do local n = redis.call('time'); \
                              if n[1] * 1000000 + n[2] > e then return 1 end end";
                let _: i64 = redis::cmd("EVAL")
                    .arg(script)
                    .arg(0)
                    .query(&mut conn)
                    .unwrap();
            })
        };
        let busy = busy_script();
        std::thread::sleep(Duration::from_millis(300));
        guard.unlock().await.expect("unlock retried through BUSY");
        busy.join().unwrap();
        assert!(!lock.is_locked().await.unwrap(), "{protocol}");
        // An acquisition during a BUSY script waits it out.
        let busy = busy_script();
        std::thread::sleep(Duration::from_millis(300));
        let guard = lock.lock().await.expect("lock retried through BUSY");
        busy.join().unwrap();
        guard.unlock().await.unwrap();
        // OOM under noeviction (a release's first write is denied, before
        // any effect): retried until memory is back.
        let guard = lock.lock().await.unwrap();
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
        let unlocking = tokio::spawn(guard.unlock());
        tokio::time::sleep(Duration::from_millis(500)).await;
        if unlocking.is_finished() {
            panic!(
                "{protocol}: not retrying through OOM: {:?}",
                unlocking.await
            );
        }
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
        unlocking
            .await
            .unwrap()
            .expect("unlock retried through OOM");
        assert!(!lock.is_locked().await.unwrap(), "{protocol}");
    }
}

/// 9. Thousands of dead waiters ahead cost the live one nothing. Before:
/// 3,000 dead waiters (waiter ttl 600 ms) delayed the live waiter 5.6 s
/// after the release (64 purged per call, dead heads granted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiters_ahead_do_not_delay_the_live_one() {
    let server = RedisServer::start();
    let holder_client = connect(config(&server.url(), Protocol::Native)).await;
    let waiter_client = connect(config(&server.url(), Protocol::Native)).await;
    let name = "crowd";
    let held = holder_client.fair_lock(name).unwrap().lock().await.unwrap();
    // 3,000 waiters of a crashed process: queued first, alive for 3 s (long
    // enough for the live waiter to queue behind them on a loaded machine:
    // with 600 ms its first attempt sometimes came after they had passed,
    // and purged them).
    let (queue, alive, leases) = (
        format!("fairlock:{{{name}}}:queue"),
        format!("fairlock:{{{name}}}:alive"),
        format!("fairlock:{{{name}}}:leases"),
    );
    let (now_s, now_us): (String, String) = server.cmd(&["TIME"]);
    let deadline =
        now_s.parse::<i64>().unwrap() * 1000 + now_us.parse::<i64>().unwrap() / 1000 + 3000;
    let dead_until = Instant::now() + Duration::from_millis(3000);
    let mut conn = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..3000 {
        let owner = format!("dead-process:{i}");
        pipe.cmd("ZADD").arg(&queue).arg(i + 1).arg(&owner).ignore();
        pipe.cmd("ZADD")
            .arg(&alive)
            .arg(deadline)
            .arg(&owner)
            .ignore();
        pipe.cmd("HSET")
            .arg(&leases)
            .arg(&owner)
            .arg("30000")
            .ignore();
    }
    pipe.query::<()>(&mut conn).unwrap();
    let waiter = {
        let lock = waiter_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(5), "live waiter queued", || {
        queued_owners(&server, name).len() == 3001
    })
    .await;
    // The dead ones' liveness passes.
    tokio::time::sleep_until(dead_until + Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let released = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let waited = released.elapsed();
    assert!(waited < Duration::from_millis(500), "{waited:?}");
    assert_eq!(
        queued_owners(&server, name).len(),
        0,
        "each dead waiter removed"
    );
    guard.unlock().await.unwrap();
}

/// 10. A force-unlock tells the holder at once. Before: the holder learned
/// at its next renewal (lease / 3: 10 s by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_reaches_the_holder_at_once() {
    for protocol in PROTOCOLS {
        for fair in [true, false] {
            let server = RedisServer::start();
            let client = connect(config(&server.url(), protocol)).await;
            let operator = connect(config(&server.url(), protocol)).await;
            let guard = if fair {
                client.fair_lock("forced").unwrap().lock().await.unwrap()
            } else {
                client.lock("forced").unwrap().lock().await.unwrap()
            };
            let lost = guard.lost();
            let forced = Instant::now();
            let released = if fair {
                operator.fair_lock("forced").unwrap().force_unlock().await
            } else {
                operator.lock("forced").unwrap().force_unlock().await
            };
            assert!(released.unwrap());
            tokio::time::timeout(Duration::from_secs(2), lost)
                .await
                .unwrap_or_else(|_| panic!("{protocol} fair={fair}: holder not told"));
            assert!(forced.elapsed() < Duration::from_secs(1));
            assert!(!guard.is_held());
            assert!(guard.unlock().await.unwrap_err().is_lock_lost());
        }
    }
}

/// 10 (explicit leases, which the watchdog never renews, are told too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_reaches_an_explicit_lease_holder() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(config(&server.url(), protocol)).await;
        let operator = connect(config(&server.url(), protocol)).await;
        let guard = client
            .fair_lock("explicit")
            .unwrap()
            .lock_with_lease(Duration::from_secs(60))
            .await
            .unwrap();
        let lost = guard.lost();
        operator
            .fair_lock("explicit")
            .unwrap()
            .force_unlock()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: holder not told"));
        // The explicit lease was not extended by the check.
        assert!(!support::is_held(&server, protocol, "explicit"));
    }
}

/// 11, 12. Every native key expires on its own once nobody uses the name:
/// a crashed waiter's queue keys within its waiter ttl, the meta key 20 s
/// after the last grant's lease or waiter's refresh. Before: queue, alive and leases had no TTL,
/// and meta lived 7 days.
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

/// 14. A `-inf` score in the liveness set (written by anyone) does not
/// panic `inspect()`. Before: an overflow panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_survives_malformed_scores() {
    let server = RedisServer::start();
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let name = "scores";
    let queue = format!("fairlock:{{{name}}}:queue");
    let alive = format!("fairlock:{{{name}}}:alive");
    let _: i64 = server.cmd(&["ZADD", &queue, "1", "a:1", "2", "b:1"]);
    let _: i64 = server.cmd(&["ZADD", &alive, "-inf", "a:1", "+inf", "b:1"]);
    let info = client.fair_lock(name).unwrap().inspect().await.unwrap();
    assert_eq!(info.queue.len(), 2);
    assert_eq!(info.queue[0].expires_in, Some(Duration::ZERO));
}

/// 16. `shutdown()` releases every hold, ends every wait and leaves every
/// queue; afterwards the client refuses work. Before: there was no such
/// call, and a guard dropped at the end of `main` stayed held for its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_and_leaves_everything() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(config(&server.url(), protocol)).await;
        let other = connect(config(&server.url(), protocol)).await;
        let held = client.fair_lock("a").unwrap().lock().await.unwrap();
        let reentered = held.reenter().await.unwrap().unwrap();
        let plain = client.lock("b").unwrap().lock().await.unwrap();
        let blocker = other.fair_lock("c").unwrap().lock().await.unwrap();
        let waiting = {
            let lock = client.fair_lock("c").unwrap();
            tokio::spawn(async move { lock.lock().await })
        };
        eventually(Duration::from_secs(5), "waiter queued", || {
            support::queue_len(&server, protocol, "c") == 1
        })
        .await;
        client.shutdown().await;
        assert!(!support::is_held(&server, protocol, "a"), "{protocol}");
        assert!(!support::is_held(&server, protocol, "b"), "{protocol}");
        assert_eq!(support::queue_len(&server, protocol, "c"), 0, "{protocol}");
        let err = waiting.await.unwrap().unwrap_err();
        assert!(matches!(err, fairlock::Error::Closed), "{protocol}: {err}");
        assert!(!held.is_held() && !plain.is_held());
        assert!(matches!(
            client.fair_lock("d").unwrap().lock().await.unwrap_err(),
            fairlock::Error::Closed
        ));
        drop((held, reentered, plain));
        blocker.unlock().await.unwrap();
    }
}

/// 16: the end of `main` — a runtime that stops right after the guard is
/// dropped leaves the lock held (documented), `shutdown()` first does not.
#[test]
fn guard_dropped_at_the_end_of_main() {
    let server = RedisServer::start();
    let run_main = |shutdown: bool, name: &'static str| {
        let url = server.url();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async {
                let client = connect(config(&url, Protocol::Native)).await;
                let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
                drop(guard);
                if shutdown {
                    client.shutdown().await;
                }
            });
            runtime.shutdown_background();
        })
        .join()
        .unwrap();
    };
    run_main(true, "with-shutdown");
    assert!(!support::is_held(
        &server,
        Protocol::Native,
        "with-shutdown"
    ));
    run_main(false, "without");
    // Without it the background release may or may not have run; with it,
    // it always has. (The lock then lasts its lease at most.)
    let pttl: i64 = server.cmd(&["PTTL", "fairlock:{without}:lock"]);
    assert!(pttl <= 30_000);
}

/// Review finding: revocation messages (anyone may publish them) must not
/// push the watchdog's renewals back. Before the fix each message restarted
/// the renewal interval, so a message every 100 ms let the lease run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_revocations_do_not_starve_renewals() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let config = config(&server.url(), protocol).lease(Duration::from_millis(900));
        let client = connect(config).await;
        let guard = client.fair_lock("flood").unwrap().lock().await.unwrap();
        let channel = format!("fairlock:revoked:{}", client.id());
        let flood_until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < flood_until {
            let _: i64 = server.cmd(&["PUBLISH", &channel, "forged"]);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            guard.is_held(),
            "{protocol}: renewals went on through the flood"
        );
        assert!(support::is_held(&server, protocol, "flood"), "{protocol}");
        guard.unlock().await.unwrap();
    }
}

/// Review finding: a release's cached result must outlive every retry of
/// the same request (retry budget, twice, plus response timeouts), or a
/// late retry releases a second hold.
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

/// Review finding: a live waiter with a short explicit lease whose grant
/// message is lost must claim its grant before it expires (it polls within
/// half its lease), not lose its place to the waiter behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_grant_message_costs_no_place_in_line() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder_client = connect(config(&server.url(), Protocol::Native)).await;
    let w_client = connect(config(&proxy.url(), Protocol::Native)).await;
    let x_client = connect(config(&server.url(), Protocol::Native)).await;
    let name = "short-lease";
    let held = holder_client.fair_lock(name).unwrap().lock().await.unwrap();
    let w = {
        let lock = w_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock_with_lease(Duration::from_millis(600)).await })
    };
    eventually(Duration::from_secs(5), "W queued and subscribed", || {
        queued_owners(&server, name).len() == 1 && server.wait_channels().len() == 1
    })
    .await;
    let x = {
        let lock = x_client.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), "X queued", || {
        queued_owners(&server, name).len() == 2
    })
    .await;
    // W's wake-up connection dies silently: its grant message is lost.
    proxy.blackhole_pubsub();
    held.unlock().await.unwrap();
    let w_guard = tokio::time::timeout(Duration::from_secs(5), w)
        .await
        .expect("W claims its grant by polling")
        .unwrap()
        .unwrap();
    assert!(!x.is_finished(), "X must not overtake W");
    assert_eq!(
        native_holder(&server, name).as_deref(),
        Some(w_guard.owner().as_str())
    );
    w_guard.unlock().await.unwrap();
    let x_guard = tokio::time::timeout(Duration::from_secs(5), x)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    x_guard.unlock().await.unwrap();
}

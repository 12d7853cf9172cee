//! Bad input, unreachable or restarted servers, wrong credentials, keys of
//! the wrong type, flushed scripts, dropped connections, a busy or
//! out-of-memory server (retried within the retry budget).

use std::time::{Duration, Instant};

use fairlock::{ClientConfig, Error, LockClient, MAX_NAME_LEN, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, assert_clean_for, client, client_with, eventually};

mod common;
use common::{config, connect};

#[tokio::test]
async fn bad_names_are_refused() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    for bad in ["", long.as_str(), "a}b", "a{b", "{}x", "tab\there"] {
        let err = client.fair_lock(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
        assert!(err.is_invalid_input());
        let err = client.lock(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
    }
    // A proper hash tag is Redisson's rule: keys are prefix:NAME, one slot.
    let lock = client.fair_lock("job{42}").unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "job{42}"]), 1);
    guard.unlock().await.unwrap();
    let exact = "m".repeat(MAX_NAME_LEN);
    let guard = client.lock(&exact).unwrap().lock().await.unwrap();
    guard.unlock().await.unwrap();
    // Nothing but the client labels of the two accepted locks (expiring
    // with them): each unlock's result cache is deleted once its answer
    // was read (in the background: `flush` waits for that).
    client.flush().await;
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with("fairlock:labels:")),
        "{keys:?}"
    );
    let labels: Vec<&String> = keys.iter().collect();
    assert!(
        labels.contains(&&"fairlock:labels:job{42}".to_owned()),
        "{keys:?}"
    );
}

#[tokio::test]
async fn bad_durations_are_refused() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let lock = client.fair_lock("d").unwrap();
    let cases = [
        lock.lock_with_lease(Duration::ZERO).await.map(|_| ()),
        lock.lock_with_lease(Duration::from_micros(10))
            .await
            .map(|_| ()),
        lock.lock_with_lease(Duration::MAX).await.map(|_| ()),
        lock.try_lock_for(Duration::from_secs(400 * 24 * 3600))
            .await
            .map(|_| ()),
        lock.try_lock_for_with_lease(Duration::from_secs(1), Duration::ZERO)
            .await
            .map(|_| ()),
    ];
    for result in cases {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::InvalidDuration { .. }), "{err}");
    }
    assert!(!lock.is_locked().await.unwrap(), "nothing was taken");
    for config in [
        ClientConfig::from_url(&server.url())
            .unwrap()
            .lease(Duration::ZERO),
        ClientConfig::from_url(&server.url())
            .unwrap()
            .waiter_slot(Duration::MAX),
        ClientConfig::from_url(&server.url())
            .unwrap()
            .lease(Duration::from_secs(1))
            .renew_interval(Duration::from_secs(2)),
    ] {
        let err = LockClient::with_config(config).await.unwrap_err();
        assert!(err.is_invalid_input(), "{err}");
    }
}

#[tokio::test]
async fn server_down_names_the_address() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    server.stop();
    let started = Instant::now();
    let err = LockClient::connect(&server.url()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains(&addr), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let err = LockClient::connect("redis://").await;
    assert!(err.is_err());
    let err = LockClient::connect("http://example").await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
}

#[tokio::test]
async fn credentials_password_acl_user_and_db() {
    let server = RedisServer::start_with(&[
        "--requirepass",
        "s3cret",
        "--user",
        "alice",
        "on",
        ">wonder",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = server.port();
    for url in [
        format!("redis://:hunter2-bad@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
        format!("redis://alice:hunter2-bad@127.0.0.1:{port}"),
    ] {
        let err = LockClient::connect(&url).await.unwrap_err();
        assert!(err.is_auth(), "{url}: {err}");
        assert!(!err.to_string().contains("hunter2"), "no secret in {err}");
        assert!(
            !format!("{err:?}").contains("hunter2"),
            "no secret in {err:?}"
        );
    }
    let by_password = LockClient::connect(&format!("redis://:s3cret@127.0.0.1:{port}/3"))
        .await
        .unwrap();
    let guard = by_password.fair_lock("db3").unwrap().lock().await.unwrap();
    // The lock lives in db 3.
    let mut conn = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{port}/3"))
        .unwrap()
        .get_connection()
        .unwrap();
    let exists: i64 = redis::cmd("EXISTS")
        .arg(support::lock_keys(fairlock::Protocol::Native, "db3").0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(exists, 1);
    guard.unlock().await.unwrap();
    let by_user = LockClient::connect(&format!("redis://alice:wonder@127.0.0.1:{port}"))
        .await
        .unwrap();
    by_user
        .lock("acl")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn wrong_type_is_reported_and_nothing_changes() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let _: () = server.cmd(&["SET", "taken", "a string"]);
    for fair in [true, false] {
        let result = if fair {
            client.fair_lock("taken").unwrap().lock().await
        } else {
            client.lock("taken").unwrap().lock().await
        };
        let err = result.unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{err}");
        assert!(err.to_string().contains("taken"), "{err}");
    }
    assert_eq!(server.cmd::<String>(&["GET", "taken"]), "a string");
    let err = client
        .fair_lock("taken")
        .unwrap()
        .force_unlock()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(server.cmd::<String>(&["GET", "taken"]), "a string");

    // The queue key of a fair lock holding another type.
    let _: () = server.cmd(&["SET", "redisson_lock_queue:{q}", "x"]);
    let err = client.fair_lock("q").unwrap().lock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "q", "redisson_lock_timeout:{q}"]),
        0
    );
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    assert_eq!(keys.len(), 2, "{keys:?}");
}

/// Redisson's scripts check types with their reads (and, on the free lock
/// with nobody queued, with the ZREM that is that path's first write): a
/// deadlines key of another type is reported and nothing is written.
#[tokio::test]
async fn redisson_wrong_type_deadlines_nothing_written() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let _: () = server.cmd(&["SET", "redisson_lock_timeout:{d}", "x"]);
    let err = client.fair_lock("d").unwrap().lock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err}");
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "d", "redisson_lock_queue:{d}"]),
        0
    );
    assert_eq!(
        server.cmd::<String>(&["GET", "redisson_lock_timeout:{d}"]),
        "x"
    );
    // The non-fair lock never touches the deadlines.
    let guard = client.lock("d").unwrap().lock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn script_flush_between_calls() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    let lock = client.fair_lock("flush").unwrap();
    for _ in 0..3 {
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        let guard = lock.lock().await.unwrap();
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        let again = guard.reenter().await.unwrap().unwrap();
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        assert!(lock.inspect().await.unwrap().is_locked());
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        again.unlock().await.unwrap();
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]);
        guard.unlock().await.unwrap();
    }
    assert_clean_for(&server, Protocol::Redisson, "flush");
}

/// Redis restarts (no persistence) while a waiter waits: the waiter recovers
/// within its budget and acquires; the holder's guard reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_waiting() {
    for protocol in support::PROTOCOLS {
        redis_restart(protocol).await;
    }
}

async fn redis_restart(protocol: fairlock::Protocol) {
    let mut server = RedisServer::start();
    let adjust = |c: ClientConfig| {
        c.lease(Duration::from_millis(900))
            .retry_budget(Duration::from_secs(8))
    };
    let a = client_with(&server, protocol, adjust).await;
    let b = client_with(&server, protocol, adjust).await;
    let holder = a.fair_lock("restart").unwrap().lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("restart").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), "queued", || {
        support::queue_len(&server, protocol, "restart") == 1
    })
    .await;
    let lost = holder.lost();
    server.restart();
    let restarted = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter recovers within its budget")
        .unwrap()
        .expect("acquired after the restart");
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("the holder learns it lost the lock");
    assert!(!holder.is_held());
    assert!(restarted.elapsed() < Duration::from_secs(15));
    assert!(holder.unlock().await.unwrap_err().is_lock_lost());
    guard.unlock().await.unwrap();
}

/// Redis goes away for good while a waiter waits: an error within the retry
/// budget, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gone_while_waiting_is_an_error_not_a_hang() {
    for protocol in support::PROTOCOLS {
        redis_gone(protocol).await;
    }
}

async fn redis_gone(protocol: fairlock::Protocol) {
    let mut server = RedisServer::start();
    let adjust = |c: ClientConfig| c.retry_budget(Duration::from_secs(1));
    let a = client_with(&server, protocol, adjust).await;
    let b = client_with(&server, protocol, adjust).await;
    let holder = a.fair_lock("gone").unwrap().lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("gone").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), "queued", || {
        support::queue_len(&server, protocol, "gone") == 1
    })
    .await;
    server.stop();
    let stopped = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains(&server.addr()), "{err}");
    assert!(
        stopped.elapsed() < Duration::from_secs(8),
        "{:?}",
        stopped.elapsed()
    );
    drop(holder);
}

/// Every client connection is killed while a waiter waits: it reconnects and
/// is granted the lock when the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_mid_wait_recover() {
    for protocol in support::PROTOCOLS {
        dropped_connections(protocol).await;
    }
}

async fn dropped_connections(protocol: fairlock::Protocol) {
    let server = RedisServer::start();
    let a = support::client(&server, protocol).await;
    let b = support::client(&server, protocol).await;
    let holder = a.fair_lock("killed").unwrap().lock().await.unwrap();
    let waiter = {
        let lock = b.fair_lock("killed").unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), "queued", || {
        support::queue_len(&server, protocol, "killed") == 1
    })
    .await;
    let killed: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "normal"]);
    let _: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    assert!(killed >= 2);
    // The waiter's channel is subscribed again on a new connection.
    eventually(Duration::from_secs(5), "resubscribed", || {
        server.wait_channels().len() == 1
    })
    .await;
    // The holder's next call reconnects transparently.
    holder.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter recovers")
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();
    support::assert_clean_for(&server, protocol, "killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca() {
    // The Valkey builds of scripts/test's Valkey runs have no TLS.
    let Some(server) = RedisServer::start_tls_if_supported() else {
        return;
    };
    let tls = server.tls().unwrap();
    let url = format!("rediss://127.0.0.1:{}", tls.port);
    // Without trusting the private CA the handshake fails, as it should.
    let err = LockClient::connect(&url).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    let config = ClientConfig::from_url(&url)
        .unwrap()
        .tls_root_certificate(tls.ca_pem());
    assert!(!format!("{config:?}").contains("BEGIN CERTIFICATE"));
    let client = LockClient::with_config(config).await.unwrap();
    let guard = client.fair_lock("over-tls").unwrap().lock().await.unwrap();
    assert!(support::is_held(
        &server,
        fairlock::Protocol::Native,
        "over-tls"
    ));
    guard.unlock().await.unwrap();
    support::assert_clean_for(&server, fairlock::Protocol::Native, "over-tls");
}

/// BUSY (a slow script elsewhere) and OOM are retried within the retry
/// budget. Before: `unlock()` failed with BUSY and the hold stayed until
/// its lease ended; `lock()` ended in an error.
///
/// Found by the safety review (finding 8).
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

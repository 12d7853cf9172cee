//! Data that is not a lock's: names whose keys are other locks' keys,
//! malformed counters, application data under a lock's name. Nothing is
//! written or deleted, and the error is typed.

use std::time::Duration;

use fairlock::{Error, LockClient, LockKind, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, client};

const BOTH: [Protocol; 2] = [Protocol::Native, Protocol::Redisson];

/// The lock key of `name` under `protocol`.
fn lock_key(protocol: Protocol, name: &str) -> String {
    match protocol {
        Protocol::Native => format!("fairlock:{{{name}}}:lock"),
        _ => name.to_owned(),
    }
}

/// A key's whole state: type, contents (a hash's fields sorted) and TTL.
fn snapshot(server: &RedisServer, key: &str) -> (String, Vec<String>, i64) {
    let kind: String = server.cmd(&["TYPE", key]);
    let mut fields: Vec<String> = if kind == "hash" {
        server.cmd(&["HGETALL", key])
    } else {
        Vec::new()
    };
    let mut pairs: Vec<String> = fields
        .chunks(2)
        .map(|pair| pair.join("="))
        .collect::<Vec<_>>();
    pairs.sort();
    fields.clear();
    (kind, pairs, server.cmd(&["TTL", key]))
}

/// `err` is NotALock naming `key`.
fn assert_not_a_lock(err: &Error, key: &str) {
    match err {
        Error::NotALock { key: found, .. } => assert_eq!(found, key, "{err}"),
        other => panic!("expected NotALock on {key:?}, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("holds data that is not a fairlock/Redisson lock"),
        "{err}"
    );
}

/// Every way a client touches `name`'s lock key is refused with NotALock,
/// and the key is left exactly as it was.
async fn assert_refused_everywhere(
    server: &RedisServer,
    client: &LockClient,
    protocol: Protocol,
    name: &str,
) {
    let key = lock_key(protocol, name);
    let before = snapshot(server, &key);
    for kind in [LockKind::Fair, LockKind::NonFair] {
        let handle = client.handle(name, kind).unwrap();
        let err = handle.try_lock().await.map(|_| ()).unwrap_err();
        assert_not_a_lock(&err, &key);
        let err = handle
            .try_lock_for(Duration::from_millis(300))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_not_a_lock(&err, &key);
        assert_not_a_lock(&handle.force_unlock().await.unwrap_err(), &key);
        assert_not_a_lock(&handle.inspect().await.unwrap_err(), &key);
        assert_eq!(snapshot(server, &key), before, "{name:?} {kind:?}");
    }
}

// Finding 5 (issue 21): a redisson name that is another lock's key.
#[tokio::test]
async fn redisson_names_that_are_other_locks_keys_are_refused() {
    let server = RedisServer::start();
    let redisson = client(&server, Protocol::Redisson).await;
    let native = client(&server, Protocol::Native).await;
    let names = [
        "fairlock:{x}:lock",
        "fairlock:{x}:meta",
        "fairlock:anything",
        "redisson_lock_queue:{x}",
        "redisson_lock_timeout:{x}",
        "redisson_lock__channel:{x}:u:1",
        "redisson_unlock_latch:{x}:ab",
        "redisson_rwlock:{x}",
        "redisson_sc:{x}",
        "{x}:c:1:rwlock_timeout:1",
        "{x}:timeout",
    ];
    for name in names {
        for err in [
            redisson.fair_lock(name).map(|_| ()).unwrap_err(),
            redisson.lock(name).map(|_| ()).unwrap_err(),
        ] {
            assert!(matches!(err, Error::InvalidName { .. }), "{name:?}: {err}");
            assert!(err.is_invalid_input());
        }
        // Native keys are `fairlock:{NAME}:...`: no name is another's key.
        native.fair_lock(name).unwrap();
    }
    // The collision itself: a native take and release of `x` never meets a
    // redisson lock on `x`'s native lock key, since that name is refused.
    let guard = native.fair_lock("x").unwrap().lock().await.unwrap();
    guard.unlock().await.unwrap();
    assert_eq!(server.cmd::<i64>(&["EXISTS", "fairlock:{x}:lock"]), 0);
}

// Finding 6 (issue 21): a malformed meta counter left a hold with no holder.
#[tokio::test]
async fn malformed_native_counters_are_refused_before_any_write() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Native).await;
    let other = support::client(&server, Protocol::Native).await;
    let meta = "fairlock:{c}:meta";
    for bad in [
        "1e19",
        "inf",
        "nan",
        "18446744073709551615",
        "-1",
        "",
        "12x",
    ] {
        for field in ["token", "seq"] {
            server.cmd::<i64>(&["HSET", meta, field, bad]);
            let lock = client.fair_lock("c").unwrap();
            // The uncontended path reads the token; the queueing path both.
            if field == "token" {
                let err = lock.try_lock().await.map(|_| ()).unwrap_err();
                assert_not_a_lock(&err, meta);
                assert_eq!(server.cmd::<i64>(&["EXISTS", "fairlock:{c}:lock"]), 0);
            }
            server.cmd::<i64>(&["DEL", meta]);
            let held = lock.lock().await.unwrap();
            server.cmd::<i64>(&["HSET", meta, field, bad]);
            let err = other
                .fair_lock("c")
                .unwrap()
                .try_lock_for(Duration::from_millis(300))
                .await
                .map(|_| ())
                .unwrap_err();
            assert_not_a_lock(&err, meta);
            // Nobody was queued, the value was not touched.
            assert_eq!(server.cmd::<i64>(&["EXISTS", "fairlock:{c}:queue"]), 0);
            let value: String = server.cmd(&["HGET", meta, field]);
            assert_eq!(value, bad);
            server.cmd::<i64>(&["HSET", meta, field, "1"]);
            held.unlock().await.unwrap();
            server.cmd::<i64>(&["DEL", meta, "fairlock:{c}:lock"]);
        }
    }
    // A lock hash whose counters are malformed is not a lock either.
    let key = "fairlock:{d}:lock";
    for (count, token) in [("1e19", "5"), ("1", "inf"), ("0", "5"), ("1", "nan")] {
        server.cmd::<i64>(&["HSET", key, "owner", "x:1", "count", count, "token", token]);
        server.cmd::<i64>(&["PEXPIRE", key, "60000"]);
        assert_refused_everywhere(&server, &client, Protocol::Native, "d").await;
        server.cmd::<i64>(&["DEL", key]);
    }
}

// Finding 6 (issue 21): a malformed Redisson hold count or deadline.
#[tokio::test]
async fn malformed_redisson_numbers_are_refused() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    for count in ["1e19", "inf", "0", "-1", "x"] {
        server.cmd::<i64>(&["HSET", "r", "a:1", count]);
        server.cmd::<i64>(&["PEXPIRE", "r", "60000"]);
        assert_refused_everywhere(&server, &client, Protocol::Redisson, "r").await;
        server.cmd::<i64>(&["DEL", "r"]);
    }
    // A waiter's deadline that is not a number of epoch ms.
    server.cmd::<i64>(&["RPUSH", "redisson_lock_queue:{q}", "w:1"]);
    server.cmd::<i64>(&["ZADD", "redisson_lock_timeout:{q}", "inf", "w:1"]);
    let err = client
        .fair_lock("q")
        .unwrap()
        .try_lock()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_not_a_lock(&err, "redisson_lock_timeout:{q}");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "q"]), 0);
}

// Finding 7 (issue 21): application data under a lock's name, both protocols.
#[tokio::test]
async fn application_data_under_a_lock_name_is_never_touched() {
    let server = RedisServer::start();
    for protocol in BOTH {
        let client = client(&server, protocol).await;
        let key = lock_key(protocol, "user:1");
        // An application hash, without a TTL and with one.
        server.cmd::<i64>(&["HSET", &key, "name", "bob"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["PEXPIRE", &key, "600000"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["DEL", &key]);
        // Shaped like the other protocol's lock, or a lock's fields plus one.
        server.cmd::<i64>(&["HSET", &key, "a:1", "1", "owner", "a:1"]);
        server.cmd::<i64>(&["PEXPIRE", &key, "600000"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["DEL", &key]);
    }
    // Redisson: one field OWNER:THREAD with a count, but no TTL: a lock
    // always has one, so this is somebody's data.
    let client = client(&server, Protocol::Redisson).await;
    server.cmd::<i64>(&["HSET", "user:2", "a:1", "2"]);
    assert_refused_everywhere(&server, &client, Protocol::Redisson, "user:2").await;
    // Native: a hash with an owner field and nothing else.
    let client = support::client(&server, Protocol::Native).await;
    server.cmd::<i64>(&["HSET", "fairlock:{user:3}:lock", "owner", "bob"]);
    assert_refused_everywhere(&server, &client, Protocol::Native, "user:3").await;
}

//! A rolling upgrade: clients of the native lock's key layout version 1 (the
//! scripts of the previous version, kept in `fixtures/scripts_v1/`, sent as
//! that version's client sends them) and of this one (layout version 2) on
//! the same lock name. They never both hold: each refuses a lock held in the
//! other's layout (this one with `Error::OlderLayout`, naming the older
//! layout; the older one with a WRONGTYPE error, since the lock key is a
//! string now), nothing is written by the refusal, and tokens keep
//! increasing from the older layout's to this one's (docs/native-protocol.md,
//! "Upgrading from layout version 1").

use std::time::Duration;

use fairlock::{Error, Protocol};
use fairlock_test_support as support;
use support::RedisServer;

mod common;
use common::scripts::{eval, five, key, snapshot};
use common::{config, connect};

/// The acquire script of layout version 1, as its client sends it (fast
/// path first, then the preludes).
const V1_ACQUIRE: &str = concat!(
    include_str!("fixtures/scripts_v1/native_acquire_fast.lua"),
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/scripts_v1/native_lock_prelude.lua"),
    include_str!("fixtures/scripts_v1/native_acquire.lua"),
);
/// The release script of layout version 1.
const V1_RELEASE: &str = concat!(
    include_str!("fixtures/scripts_v1/native_release_fast.lua"),
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/scripts_v1/native_lock_prelude.lua"),
    include_str!("fixtures/scripts_v1/native_release.lua"),
);

/// A layout version 1 client's attempt for `owner` (fair or not, queueing).
fn v1_acquire(
    server: &RedisServer,
    name: &str,
    owner: &str,
    fair: bool,
) -> redis::RedisResult<redis::Value> {
    let channel = key(name, "wake");
    let kind = if fair { "fair" } else { "nonfair" };
    eval(
        server,
        V1_ACQUIRE,
        &five(name),
        &[
            owner, "30000", "6000", &channel, kind, "queue", "0", "v1nonce",
        ],
    )
}

/// A layout version 1 client's release of `owner`'s hold under `token`, as
/// request `request`.
fn v1_release(
    server: &RedisServer,
    name: &str,
    owner: &str,
    token: &str,
    request: &str,
) -> redis::Value {
    let mut keys = five(name);
    keys.push(key(name, &format!("release:{request}")));
    let channel = key(name, "wake");
    eval(
        server,
        V1_RELEASE,
        &keys,
        &[owner, "6000", &channel, "10000", token, "", "fair"],
    )
    .unwrap()
}

/// A lock held by a client of layout version 1: every call of a client of
/// this version on it (fair and non-fair, once and waiting, force-unlock,
/// inspect) is refused with `Error::OlderLayout`, and nothing is written;
/// once the older client released it, this version takes it, with a token
/// above the older one's last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_in_the_older_layout_is_refused_then_taken_after_it() {
    let server = RedisServer::start();
    let name = "upgrade-older-holds";
    let reply = v1_acquire(&server, name, "old:1", true).unwrap();
    let v1_token: u64 = match reply {
        redis::Value::Int(token) => token as u64,
        other => panic!("the older client took the lock: {other:?}"),
    };
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let before = snapshot(&server, name);
    let older = |err: Error| match err {
        Error::OlderLayout {
            version, ref key, ..
        } => {
            assert_eq!(version, 1, "{err}");
            assert_eq!(key, &format!("fairlock:{{{name}}}:lock"));
            assert!(err.to_string().contains("upgrade every client"), "{err}");
        }
        other => panic!("expected OlderLayout, got {other:?}"),
    };
    for fair in [true, false] {
        let lock: fairlock::LockHandle = if fair {
            client.fair_lock(name).unwrap().into()
        } else {
            client.lock(name).unwrap().into()
        };
        older(lock.try_lock().await.map(|_| ()).unwrap_err());
        older(
            lock.try_lock_for(Duration::from_millis(300))
                .await
                .map(|_| ())
                .unwrap_err(),
        );
        older(lock.force_unlock().await.map(|_| ()).unwrap_err());
        older(lock.inspect().await.map(|_| ()).unwrap_err());
    }
    assert_eq!(snapshot(&server, name), before, "a refusal wrote nothing");
    // The older client releases; its layout leaves its meta behind.
    assert_eq!(
        v1_release(&server, name, "old:1", &v1_token.to_string(), "r1"),
        redis::Value::Int(1)
    );
    let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
    let token = guard.token().unwrap();
    assert!(
        token > v1_token,
        "{token} after the older layout's {v1_token}"
    );
    guard.unlock().await.unwrap();
}

/// A lock held by a client of this version: a client of layout version 1
/// fails (WRONGTYPE: its scripts read the lock key as a hash) and writes
/// nothing, fair or not; this version's holder keeps its hold, and its
/// release is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_client_cannot_take_a_lock_held_in_this_layout() {
    let server = RedisServer::start();
    let name = "upgrade-newer-holds";
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
    let before = snapshot(&server, name);
    for fair in [true, false] {
        let err = v1_acquire(&server, name, "old:1", fair).unwrap_err();
        assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    }
    assert_eq!(
        snapshot(&server, name),
        before,
        "the older client wrote nothing"
    );
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
    // Free (this version's marker, a string): the older client still
    // cannot use the name while the marker lasts, and never holds beside a
    // newer client.
    let err = v1_acquire(&server, name, "old:1", true).unwrap_err();
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

/// Mixed clients in a loop: an older and a newer client race for the same
/// name over and over; whatever each answers, never both hold (the newer
/// one's guard and the older one's hash at once), and the newer one's
/// tokens only increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_layouts_never_both_hold() {
    let server = RedisServer::start();
    let name = "upgrade-mixed";
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let lock = client.fair_lock(name).unwrap();
    let lock_key = key(name, "lock");
    let (mut newer, mut older, mut last) = (0, 0, 0);
    for round in 0..40 {
        if round % 2 == 0 {
            if let Ok(redis::Value::Int(token)) = v1_acquire(&server, name, "old:1", true) {
                older += 1;
                // The newer client is refused while the older one holds.
                let err = lock.try_lock().await.map(|_| ()).unwrap_err();
                assert!(matches!(err, Error::OlderLayout { .. }), "{err:?}");
                v1_release(
                    &server,
                    name,
                    "old:1",
                    &token.to_string(),
                    &format!("r{round}"),
                );
            }
        } else {
            match lock.try_lock().await {
                Ok(Some(guard)) => {
                    newer += 1;
                    let token = guard.token().unwrap();
                    assert!(token > last, "{token} after {last}");
                    last = token;
                    assert!(v1_acquire(&server, name, "old:1", true).is_err());
                    guard.unlock().await.unwrap();
                }
                other => panic!("round {round}: {other:?}"),
            }
        }
        // The older client can use the name again once the marker is gone.
        let _: () = server.cmd(&["DEL", &lock_key]);
    }
    assert!(newer > 0 && older > 0, "both took turns: {newer} / {older}");
}

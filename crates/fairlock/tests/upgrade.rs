//! A rolling upgrade: clients of the previous version (its scripts, from
//! before the fast paths, c6166e1, are kept in
//! `fixtures/scripts_before_fast_paths/`) and of this one on the same native
//! lock. An older non-fair waiter is not woken by a newer release, a
//! documented trade-off (docs/native-protocol.md, "A rolling upgrade").

use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use support::RedisServer;
use tokio::time::Instant;

mod common;
use common::scripts::{NEW_ACQUIRE, NEW_RELEASE, eval, five, key};
use common::{config, connect};

/// The scripts of the previous version (c6166e1), as an old client sends them.
const OLD_ACQUIRE: &str = concat!(
    include_str!("fixtures/scripts_before_fast_paths/common.lua"),
    include_str!("fixtures/scripts_before_fast_paths/native_prelude.lua"),
    include_str!("fixtures/scripts_before_fast_paths/native_acquire.lua"),
);
const OLD_RELEASE: &str = concat!(
    include_str!("fixtures/scripts_before_fast_paths/common.lua"),
    include_str!("fixtures/scripts_before_fast_paths/native_prelude.lua"),
    include_str!("fixtures/scripts_before_fast_paths/native_release.lua"),
);

/// HELD (checked): an old-version holder's release hands a native non-fair
/// lock to a new-version queued waiter (the old release_fully hands off to
/// the queue head): the new waiter gets the lock promptly.
///
/// From the adversarial review of the `scripts` change (fast paths, a
/// skipped release cache GET, queued non-fair waiters): a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_nonfair_release_serves_new_waiter() {
    let server = RedisServer::start();
    let name = "mixed-nonfair-2";
    let keys5 = five(name);
    let channel = key(name, "wake");
    let reply = eval(
        &server,
        OLD_ACQUIRE,
        &keys5,
        &[
            "old:1", "30000", "6000", &channel, "nonfair", "queue", "0", "on",
        ],
    )
    .unwrap();
    println!("old acquire: {reply:?}");
    let b = connect(config(&server.url(), Protocol::Native)).await;
    let lock = b.lock(name).unwrap();
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let g = lock.lock().await.unwrap();
        (start.elapsed(), g.token())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut keys = keys5.clone();
    keys.push(key(name, "release:r1"));
    let released = Instant::now();
    let reply = eval(
        &server,
        OLD_RELEASE,
        &keys,
        &["old:1", "6000", &channel, "10000", "", ""],
    )
    .unwrap();
    println!("old release: {reply:?}");
    let (_, token) = waiter.await.unwrap();
    let after = released.elapsed();
    println!("new waiter got it {after:?} after the old release, token {token:?}");
    assert!(
        after < Duration::from_millis(1000),
        "new waiter slept {after:?}"
    );
}

/// FINDING 2 (promise 3/2 in a rolling upgrade: a free lock with a live
/// waiter stays unclaimed). A waiter of the previous version (c6166e1) on a
/// native NON-FAIR lock does not queue: it listens on the shared channel
/// `fairlock:{NAME}:wake`, on which the old release published 'free'. The new
/// release (queue empty: `release_fully` only DELs) publishes nothing there,
/// so every release by a new-version holder leaves the old waiter asleep
/// until its retry timer (min(lease left, waiter_ttl / 3): 2 s by default).
/// DOCUMENTED trade-off (docs/native-protocol.md, "A rolling upgrade"): a
/// fix (one more PUBLISH on the shared channel per non-fair release) breaks
/// native.rs `nonfair_release_wakes_one` (one PUBLISH per release).
///
/// Found by the adversarial review of the `scripts` change (finding 2):
/// a documented trade-off, hence ignored.
#[test]
#[ignore = "documented rolling-upgrade trade-off; run with --ignored to see it"]
fn new_nonfair_release_wakes_old_version_waiter() {
    let server = RedisServer::start();
    let name = "mixed-nonfair";
    let keys5 = five(name);
    let channel = key(name, "wake");
    // A new-version holder.
    let reply = eval(
        &server,
        NEW_ACQUIRE,
        &keys5,
        &[
            "new:1", "30000", "6000", &channel, "nonfair", "queue", "0", "nn",
        ],
    )
    .unwrap();
    println!("new acquire: {reply:?}");
    // An old-version waiter: queued? (old non-fair: position 0, not queued).
    let reply = eval(
        &server,
        OLD_ACQUIRE,
        &keys5,
        &[
            "old:1", "30000", "6000", &channel, "nonfair", "queue", "0", "on",
        ],
    )
    .unwrap();
    println!("old waiter: {reply:?}");
    // The old client listens on the shared channel.
    let mut sub = server.conn();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(&channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // The new holder releases.
    let token: String = server.cmd(&["HGET", &keys5[0], "token"]);
    let mut keys = keys5.clone();
    keys.push(key(name, "release:r1"));
    let reply = eval(
        &server,
        NEW_RELEASE,
        &keys,
        &["new:1", "6000", &channel, "10000", &token, "", "nonfair"],
    )
    .unwrap();
    println!("new release: {reply:?}");
    let woken = pubsub
        .get_message()
        .ok()
        .map(|m| m.get_payload::<String>().unwrap());
    println!("old waiter's channel got: {woken:?}");
    // For comparison: an old holder's release does wake it.
    drop(pubsub);
    assert!(
        woken.is_some(),
        "an old-version non-fair waiter is never woken by a new-version release"
    );
}

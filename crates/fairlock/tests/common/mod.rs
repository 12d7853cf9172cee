//! Helpers shared by several test binaries (each `tests/*.rs` file is a
//! binary of its own and includes this module with `mod common;`): clients
//! from a URL (a server's or a fault proxy's), the raw state of a native
//! lock, and waiting for a waiter to queue and subscribe. `scripts` calls
//! the native scripts directly. A binary uses only part of it, hence the
//! `dead_code` allowance.

#![allow(dead_code)]

pub mod scripts;
pub mod semaphore;

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, eventually};

/// The settings for `url` (a server's or a proxy's) under `protocol`,
/// defaults otherwise.
pub fn config(url: &str, protocol: Protocol) -> ClientConfig {
    support::init_tracing();
    ClientConfig::from_url(url).unwrap().protocol(protocol)
}

/// A client with `config` (a connection error is tried again: see
/// [`support::connect`]).
pub async fn connect(config: ClientConfig) -> LockClient {
    support::connect(config).await
}

/// A fault proxy of `server`, a client whose calls go through it with a
/// 300 ms response timeout (a reply the proxy holds is lost quickly), and a
/// client straight to the server, both under `protocol`.
pub async fn behind_proxy(
    server: &RedisServer,
    protocol: Protocol,
) -> (support::proxy::Proxy, LockClient, LockClient) {
    let proxy = support::proxy::Proxy::start(server.port());
    let client =
        connect(config(&proxy.url(), protocol).response_timeout(Duration::from_millis(300))).await;
    let direct = connect(config(&server.url(), protocol)).await;
    (proxy, client, direct)
}

fn lock_key(name: &str) -> String {
    format!("fairlock:{{{name}}}:lock")
}

/// A field of native lock `name`'s hash (`owner`, `count`, `token`,
/// `claimed`...).
pub fn lock_field(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    server.cmd(&["HGET", &lock_key(name), field])
}

/// Whether `client` takes the fair lock `name` at once (the guard is
/// dropped again): nobody holds it.
pub async fn takes_at_once(client: &LockClient, name: &str) -> bool {
    client
        .fair_lock(name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_some()
}

/// The remaining life of native lock `name`'s key, in ms.
pub fn pttl(server: &RedisServer, name: &str) -> i64 {
    server.cmd(&["PTTL", &lock_key(name)])
}

/// The owner of native lock `name`, if held.
pub fn native_holder(server: &RedisServer, name: &str) -> Option<String> {
    lock_field(server, name, "owner")
}

/// The owners queued for native lock `name`, first in line first.
pub fn queued_owners(server: &RedisServer, name: &str) -> Vec<String> {
    server.cmd(&["ZRANGE", &format!("fairlock:{{{name}}}:queue"), "0", "-1"])
}

/// Wait until at least `n` waiters of native lock `name` are queued.
pub async fn until_queued(server: &RedisServer, name: &str, n: usize) {
    eventually(Duration::from_secs(10), "the waiter queued", || {
        support::queue_len(server, Protocol::Native, name) >= n
    })
    .await;
}

/// Wait until `n` waiters of `name` are subscribed to their wake channels.
pub async fn until_subscribed_n(server: &RedisServer, name: &str, n: usize) {
    let pattern = format!("*{{{name}}}*");
    eventually(Duration::from_secs(10), "the waiter subscribed", || {
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", &pattern]);
        channels.len() >= n
    })
    .await;
}

/// Wait until a waiter of `name` is subscribed and past the attempt that
/// follows subscribing.
pub async fn until_subscribed(server: &RedisServer, name: &str) {
    until_subscribed_n(server, name, 1).await;
    // The re-check attempt that follows subscribing: no event tells when
    // it is answered, and a release before it makes a plain grant.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// The holder releases while `waiter` waits: returns the waiter's guard,
/// handed over directly (the release publishes a grant message) unless the
/// message was late. `waiter.statistics().handoffs` tells which.
pub async fn handed_over(
    server: &RedisServer,
    holder: &LockClient,
    waiter: &LockClient,
    name: &str,
) -> LockGuard {
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let waiting = {
        let lock = waiter.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    until_queued(server, name, 1).await;
    // Subscribed too (the subscription follows the first queued reply).
    until_subscribed(server, name).await;
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("granted")
        .unwrap()
        .unwrap()
}

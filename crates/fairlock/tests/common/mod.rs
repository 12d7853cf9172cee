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

/// A field of native lock `name`'s value (layout version 2:
/// `TOKEN:COUNT:FLAGS:NONCE:REQUEST:OWNER<TAB>LABEL`): `owner`, `count`,
/// `token`, `nonce`, `flags`, `request`, `label`, and `claimed` (`1`
/// unless the flags say unclaimed); `None` when the key is absent or the
/// lock free.
pub fn lock_field(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    let value: String = server.cmd::<Option<String>>(&["GET", &lock_key(name)])?;
    let fields: Vec<&str> = value.splitn(6, ':').collect();
    if fields.len() < 6 || fields[1] == "0" {
        return None;
    }
    let found = match field {
        "token" => fields[0],
        "count" => fields[1],
        "flags" => fields[2],
        "nonce" => fields[3],
        "request" => fields[4],
        "owner" => fields[5].split('\t').next().unwrap_or_default(),
        "label" => fields[5].split_once('\t').map_or("", |(_, label)| label),
        "claimed" => return Some(if fields[2].contains('u') { "0" } else { "1" }.to_owned()),
        other => panic!("no field {other} in a native lock's value"),
    };
    Some(found.to_owned())
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
    server.cmd(&["ZRANGE", &format!("fairlock:{{{name}}}:line"), "0", "-1"])
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

/// Put a waiter into native lock `name`'s line as the acquire script
/// would (layout version 2), for an owner nobody serves: its place (arrival
/// number `arrival`) and its record (liveness deadline `deadline_ms` on the
/// server's clock, lease, own waiter ttl, secret).
#[allow(clippy::too_many_arguments, dead_code)]
pub fn put_waiter(
    server: &RedisServer,
    name: &str,
    owner: &str,
    arrival: u64,
    deadline_ms: u64,
    lease_ms: u64,
    ttl_ms: u64,
    nonce: &str,
) {
    let line = format!("fairlock:{{{name}}}:line");
    let waiters = format!("fairlock:{{{name}}}:waiters");
    let _: () = server.cmd(&["ZADD", &line, &arrival.to_string(), owner]);
    let record = format!("{deadline_ms}:{lease_ms}:{ttl_ms}:{nonce}:");
    let _: () = server.cmd(&["HSET", &waiters, owner, &record]);
    // As a waiter joining does: the lock's value says somebody waits.
    let lock = format!("fairlock:{{{name}}}:lock");
    if let Some(value) = server.cmd::<Option<String>>(&["GET", &lock]) {
        let mut fields: Vec<String> = value.splitn(6, ':').map(str::to_owned).collect();
        if fields.len() == 6 && !fields[2].contains('w') {
            let mut flags: Vec<char> = fields[2].chars().chain(['w']).collect();
            flags.sort_by_key(|f| "upwk".find(*f));
            fields[2] = flags.into_iter().collect();
            let _: () = server.cmd(&["SET", &lock, &fields.join(":"), "KEEPTTL"]);
        }
    }
}

/// The server's clock: (ms, µs).
#[allow(dead_code)]
pub fn server_time(server: &RedisServer) -> (u64, u64) {
    let t: Vec<String> = server.cmd(&["TIME"]);
    let (s, us) = (t[0].parse::<u64>().unwrap(), t[1].parse::<u64>().unwrap());
    (s * 1000 + us / 1000, s * 1_000_000 + us)
}

//! The test harness of the fairlock workspace: real `redis-server` processes
//! on free loopback ports, in temp dirs, without persistence. Killed on
//! drop; the server log is printed when the test that owned the server
//! panicked. Never touches port 6379, nor any Redis that was already running.
//!
//! A dev-dependency of `fairlock` (its integration tests, its benches and
//! its model tests) and of `fairlock-cli` (its tests); not published.
//!
//! # Topologies
//!
//! Each [`Topology`] has a module of its own, with a type that starts the
//! processes, waits until they serve, and kills them on drop:
//!
//! | topology | module | type |
//! | --- | --- | --- |
//! | one server | [`standalone`] | [`RedisServer`] |
//! | a master with replicas, watched by `redis-server --sentinel` processes | [`sentinel`] | [`Sentinel`] |
//! | masters made with `--cluster-enabled yes` and `redis-cli --cluster create` | [`cluster`] | [`Cluster`] |
//!
//! Every process of every topology is a [`RedisServer`], so each is killed
//! on drop and prints its log when the owning test panicked; the topology
//! types hand them out to stop or restart one. The topologies know nothing
//! of fairlock: the library's own unit tests use [`standalone`] too. The
//! lock helpers below take a [`RedisServer`]; Cluster needs `redis-cli` on
//! `PATH` besides `redis-server`.
//!
//! # Which server
//!
//! Every process runs `redis-server` from `PATH`, or the binary named by
//! `FAIRLOCK_TEST_SERVER` (a `valkey-server`, say: it serves as master,
//! replica, cluster node, and with `--sentinel` as a sentinel); clusters are
//! made with `redis-cli` from `PATH` or `FAIRLOCK_TEST_CLI` (a `valkey-cli`).
//! See [`server_binary`], [`cli_binary`], and [`RedisServer::kind`] for what
//! a test can learn of the server it got. `scripts/test` runs the
//! server-facing tests once more against Valkey 8.1 and 9.1 this way.
//!
//! # Faults
//!
//! [`proxy::Proxy`] sits between a client and a server and stalls, cuts,
//! refuses, delays or silently drops traffic on command.
//!
//! # Starved runs
//!
//! [`StarvationMonitor`] measures how long the machine kept the test's
//! process from running, for tests whose claims hold only while it runs.
//!
//! # Locks
//!
//! Clients and raw lock state, always under a protocol the caller names
//! (nothing here picks one by default): [`client`], [`client_with`],
//! [`lock_keys`], [`queue_len`], [`is_held`], [`assert_clean_for`], and
//! [`PROTOCOLS`] for tests that must hold under each.
//!
//! [`KeyEvents`] lists the keys a server wrote (its keyspace events), for
//! keys too short-lived to be seen with `KEYS`.
//!
//! # Replica acknowledgements
//!
//! [`lock_acknowledged`] and [`hold_acknowledged`] retry, a bounded number
//! of times, an acquisition (or an acquisition and its release) that a
//! `min_replicas` test needs acknowledged while its replica runs: on a
//! loaded machine a healthy replica can miss a short `WAIT` window (see
//! [`acknowledged`]).

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

pub mod acknowledged;
pub mod cluster;
pub mod flood;
pub mod key_events;
pub mod listener;
pub mod objects;
pub mod proxy;
mod readiness;
pub mod sentinel;
pub mod standalone;
pub mod starvation;

use std::time::{Duration, Instant};

pub use acknowledged::{hold_acknowledged, lock_acknowledged};
pub use cluster::Cluster;
pub use key_events::KeyEvents;
pub use sentinel::Sentinel;
pub use standalone::{RedisServer, ServerKind, TlsMaterial};
pub use starvation::StarvationMonitor;

/// The server binary every process runs: `$FAIRLOCK_TEST_SERVER`, or
/// `redis-server` (from `PATH`) when that is unset or empty.
pub fn server_binary() -> String {
    binary_from("FAIRLOCK_TEST_SERVER", "redis-server")
}

/// The command-line client that makes clusters: `$FAIRLOCK_TEST_CLI`, or
/// `redis-cli` (from `PATH`) when that is unset or empty.
pub fn cli_binary() -> String {
    binary_from("FAIRLOCK_TEST_CLI", "redis-cli")
}

fn binary_from(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// The shapes of Redis deployment the harness starts, each in a module of
/// its own (see the [crate docs](crate#topologies)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topology {
    /// One `redis-server`: [`RedisServer`].
    Standalone,
    /// A master with replicas behind sentinels: [`Sentinel`].
    Sentinel,
    /// Masters sharing the slots: [`Cluster`].
    Cluster,
}

/// Wait until `condition` holds, polling every 10 ms, for at most `limit`.
/// For observing state in another process (Redis), where no event exists.
pub async fn eventually<F: FnMut() -> bool>(limit: Duration, what: &str, mut condition: F) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A plain async connection to `url` for a test's own commands (a counter
/// the holders increment, say), with 30 s timeouts: redis-rs's defaults
/// (a response within 500 ms) fail such a command, not the lock under
/// test, on a machine loaded by many servers and clients at once.
pub async fn patient_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(30)))
        .set_response_timeout(Some(Duration::from_secs(30)));
    redis::Client::open(url)
        .expect("a redis URL")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection to the test's server")
}

/// Install a tracing subscriber once (RUST_LOG filters; off by default).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Both protocols, for tests that must hold under each.
pub const PROTOCOLS: [fairlock::Protocol; 2] =
    [fairlock::Protocol::Native, fairlock::Protocol::Redisson];

/// A client for `server` speaking `protocol`, default settings.
pub async fn client(server: &RedisServer, protocol: fairlock::Protocol) -> fairlock::LockClient {
    client_with(server, protocol, |c| c).await
}

/// A client for `server` speaking `protocol`, its config adjusted by
/// `adjust`, which must leave the protocol as it is.
pub async fn client_with(
    server: &RedisServer,
    protocol: fairlock::Protocol,
    adjust: impl FnOnce(fairlock::ClientConfig) -> fairlock::ClientConfig,
) -> fairlock::LockClient {
    init_tracing();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .expect("url")
        .protocol(protocol);
    let config = adjust(config);
    assert_eq!(
        config.get_protocol(),
        protocol,
        "client_with: pass the protocol as its argument, not through `adjust`"
    );
    connect(config).await
}

/// A client with `config`. Connecting sends a few commands, each within the
/// response timeout; a test that sets a short one (300 ms, to lose a held
/// reply quickly) can see one pass on a loaded machine. The connection is
/// not what such a test checks: a `Connection` error is tried again, up to
/// 10 times; any other error panics at once.
pub async fn connect(config: fairlock::ClientConfig) -> fairlock::LockClient {
    let mut tries = 0;
    loop {
        match fairlock::LockClient::with_config(config.clone()).await {
            Ok(client) => return client,
            Err(err @ fairlock::Error::Connection { .. }) if tries < 10 => {
                tries += 1;
                eprintln!("connect, try {tries}: {err}");
            }
            Err(err) => panic!("connect: {err}"),
        }
    }
}

/// The keys a lock uses under `protocol`: (lock, queue, other queue keys).
pub fn lock_keys(protocol: fairlock::Protocol, name: &str) -> (String, String, Vec<String>) {
    match protocol {
        fairlock::Protocol::Redisson => {
            // Redisson braces a name unless it carries its own hash tag.
            let tagged = if name.contains('{') {
                name.to_owned()
            } else {
                format!("{{{name}}}")
            };
            (
                name.to_owned(),
                format!("redisson_lock_queue:{tagged}"),
                vec![format!("redisson_lock_timeout:{tagged}")],
            )
        }
        fairlock::Protocol::Native => (
            format!("fairlock:{{{name}}}:lock"),
            format!("fairlock:{{{name}}}:line"),
            vec![format!("fairlock:{{{name}}}:waiters")],
        ),
        other => panic!("the harness knows no key layout for {other}"),
    }
}

/// A client for the cluster `cluster` (every node a seed) speaking
/// `protocol`, its config adjusted by `adjust`, which must leave the
/// protocol as it is.
pub async fn cluster_client_with(
    cluster: &Cluster,
    protocol: fairlock::Protocol,
    adjust: impl FnOnce(fairlock::ClientConfig) -> fairlock::ClientConfig,
) -> fairlock::LockClient {
    init_tracing();
    let config = fairlock::ClientConfig::from_url(&cluster.url())
        .expect("url")
        .protocol(protocol);
    let config = adjust(config);
    assert_eq!(
        config.get_protocol(),
        protocol,
        "cluster_client_with: keep the protocol"
    );
    fairlock::LockClient::with_config(config)
        .await
        .expect("connect to the cluster")
}

/// The node of `cluster` serving lock `name` under `protocol` now (every
/// key of a lock shares its slot).
pub fn node_of<'a>(
    cluster: &'a Cluster,
    protocol: fairlock::Protocol,
    name: &str,
) -> &'a RedisServer {
    cluster.node_for_key(&lock_keys(protocol, name).1)
}

/// Number of waiters queued for a fair lock.
pub fn queue_len(server: &RedisServer, protocol: fairlock::Protocol, name: &str) -> usize {
    let (_, queue, _) = lock_keys(protocol, name);
    match protocol {
        fairlock::Protocol::Redisson => server.cmd(&["LLEN", &queue]),
        fairlock::Protocol::Native => server.cmd(&["ZCARD", &queue]),
        other => panic!("the harness knows no queue of {other}"),
    }
}

/// Whether somebody holds the lock: its key exists (native: and is not the
/// free marker a release leaves, `TOKEN:0:...`).
pub fn is_held(server: &RedisServer, protocol: fairlock::Protocol, name: &str) -> bool {
    let lock = lock_keys(protocol, name).0;
    if protocol == fairlock::Protocol::Native {
        return native_lock_value(server, name).is_some_and(|value| !native_is_free(&value));
    }
    server.cmd::<i64>(&["EXISTS", &lock]) == 1
}

/// The value of native lock `name`'s key (a string), if any.
pub fn native_lock_value(server: &RedisServer, name: &str) -> Option<String> {
    server.cmd(&["GET", &format!("fairlock:{{{name}}}:lock")])
}

/// Whether a native lock's value is the free marker (`TOKEN:0:...`).
pub fn native_is_free(value: &str) -> bool {
    value.split(':').nth(1) == Some("0")
}

/// The lock is free and nobody is queued: no lock key (native: or only the
/// free marker a release leaves for a while), no queue entry, no deadline
/// left behind.
pub fn assert_clean_for(server: &RedisServer, protocol: fairlock::Protocol, name: &str) {
    let (lock, queue, others) = lock_keys(protocol, name);
    let mut keys = vec![queue.as_str()];
    if protocol == fairlock::Protocol::Native {
        if let Some(value) = native_lock_value(server, name) {
            assert!(
                native_is_free(&value),
                "native lock {name}: held ({value}) where it should be free"
            );
        }
    } else {
        keys.push(lock.as_str());
    }
    keys.extend(others.iter().map(String::as_str));
    let mut args = vec!["EXISTS"];
    args.extend(&keys);
    let present: i64 = server.cmd(&args);
    assert_eq!(
        present,
        0,
        "{protocol} lock {name}: keys left among {keys:?}: {:?}",
        server.cmd::<Vec<String>>(&["KEYS", "*"])
    );
}

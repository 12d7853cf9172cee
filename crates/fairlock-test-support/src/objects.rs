//! The native protocol's objects besides the lock, as their tests look at
//! them: a read-write lock (`fairlock:{NAME}:rw:...`) or a semaphore
//! (`fairlock:{NAME}:sem:...`), named by `kind` (`"rw"` or `"sem"`).

use std::fmt::Debug;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::{RedisServer, eventually};

/// Wait (at most 5 s) until the line of object `name` of `kind` has `len`
/// waiters.
pub async fn wait_for_line(server: &RedisServer, name: &str, kind: &str, len: usize, what: &str) {
    let key = format!("fairlock:{{{name}}}:{kind}:line");
    eventually(Duration::from_secs(5), what, || {
        server.cmd::<usize>(&["ZCARD", &key]) == len
    })
    .await;
}

/// Every key of the name `name` (`fairlock:{NAME}:*`: every object's, and
/// the labels), sorted.
pub fn keys(server: &RedisServer, name: &str) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", &format!("fairlock:{{{name}}}:*")]);
    keys.sort();
    keys
}

/// Nothing of object `name` of `kind` held, nobody in its line, and every
/// key left (the counters, the release results kept for retries, the
/// labels) expiring on its own.
pub fn assert_left_clean(server: &RedisServer, name: &str, kind: &str) {
    let keys = keys(server, name);
    for key in &keys {
        assert!(
            key.ends_with(&format!(":{kind}:meta"))
                || key.contains(&format!(":{kind}:release:"))
                || key.ends_with(":labels"),
            "{key} is left: {keys:?}"
        );
        // -2: gone since the listing (a release's answer is deleted in
        // the background once read); -1 would be a key kept for good.
        let ttl: i64 = server.cmd(&["PTTL", key]);
        assert!(ttl > 0 || ttl == -2, "{key} has no TTL");
    }
}

/// What `task` (an acquisition) gets within 5 s; panics otherwise, or on
/// an error.
pub async fn granted<T, E: Debug>(task: JoinHandle<Result<T, E>>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap_or_else(|_| panic!("not granted within 5 s: {what}"))
        .expect("the acquisition's task")
        .unwrap_or_else(|e| panic!("{what}: {e:?}"))
}

/// A native client of `deployment` for a failover under `min_replicas(1,
/// 5 s)`: a lease of 10 s (longer than a failover takes to give the new
/// master a replica), a waiter ttl of 60 s and a retry budget of 60 s.
pub async fn failover_client(deployment: &crate::Sentinel) -> fairlock::LockClient {
    let config = fairlock::ClientConfig::from_url(&deployment.url())
        .unwrap()
        .protocol(fairlock::Protocol::Native)
        .lease(Duration::from_secs(10))
        .waiter_ttl(Duration::from_secs(60))
        .retry_budget(Duration::from_secs(60))
        .min_replicas(1, Duration::from_secs(5));
    fairlock::LockClient::with_config(config).await.unwrap()
}

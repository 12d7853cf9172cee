//! The native semaphore's tests' helpers (`semaphore_native.rs`,
//! `semaphore_native_records.rs`).

use std::time::Duration;

use fairlock::{LockClient, Permits, Protocol, Semaphore};
use fairlock_test_support as support;
use support::RedisServer;
use tokio::task::JoinHandle;

/// A client whose waiters retry only every 20 s without a message.
pub async fn client(server: &RedisServer) -> LockClient {
    support::client_with(server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(60))
    })
    .await
}

pub type Waiting = JoinHandle<fairlock::Result<Permits>>;

/// An acquisition of `n` permits in a task.
pub fn ask(sem: &Semaphore, n: u32) -> Waiting {
    let sem = sem.clone();
    tokio::spawn(async move { sem.acquire(n).await })
}

/// `what` queued: the line has `len` waiters.
pub async fn queued(server: &RedisServer, name: &str, len: usize, what: &str) {
    support::objects::wait_for_line(server, name, "sem", len, what).await;
}

/// What `task` gets within 5 s.
pub async fn granted(task: Waiting, what: &str) -> Permits {
    support::objects::granted(task, what).await
}

/// Every key of the name `name`.
pub fn keys_of(server: &RedisServer, name: &str) -> Vec<String> {
    support::objects::keys(server, name)
}

/// Nothing held, nobody in line, every key left expiring on its own.
pub fn left_clean(server: &RedisServer, name: &str) {
    support::objects::assert_left_clean(server, name, "sem");
}

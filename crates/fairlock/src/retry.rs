//! The one retry policy: exponential backoff, and retrying a call that
//! failed on the connection (or was refused by a busy or failing-over
//! server) while a budget or a deadline lasts.
//!
//! Every place that waits before trying again uses these: the acquire loop,
//! releases and queue exits, the claim of a handed-over grant, the pub/sub
//! reconnect loop and the watchdog's retries after a failed renewal.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::events::{self, Event};

/// Exponential backoff: `first`, doubling up to `max`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    first: Duration,
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// For commands (attempts, releases, claims): 20 ms doubling to 500 ms.
    pub(crate) const fn commands() -> Self {
        Self::new(Duration::from_millis(20), Duration::from_millis(500))
    }

    /// For re-establishing a connection: 50 ms doubling to 1 s.
    pub(crate) const fn reconnect() -> Self {
        Self::new(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// For polling a lock that is free but not ours to take (the head of the
    /// queue is about to take it, or is dead and will be skipped): 10 ms
    /// doubling to 500 ms.
    pub(crate) const fn idle_poll() -> Self {
        Self::new(Duration::from_millis(10), Duration::from_millis(500))
    }

    const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            next: first,
            max,
        }
    }

    /// The delay before the next try, without using it up.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The delay before the next try; the one after is twice as long.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// Start over from the first delay (after a success).
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// When the watchdog tries again after a failed renewal: a quarter of the
/// renewal interval (at least 20 ms), so that several tries fit in what is
/// left of the lease.
pub(crate) fn renewal_retry_delay(interval: Duration) -> Duration {
    (interval / 4).max(Duration::from_millis(20))
}

/// How long calls that failed on the connection are retried: the client's
/// retry budget ([`ClientConfig::retry_budget`](crate::ClientConfig::retry_budget)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    budget: Duration,
}

impl RetryPolicy {
    pub(crate) fn new(budget: Duration) -> Self {
        Self { budget }
    }

    /// `true` when failures that began at `since` may be retried once more
    /// after `backoff`'s next delay.
    pub(crate) fn may_retry(&self, since: Instant, backoff: &Backoff) -> bool {
        since.elapsed() + backoff.peek() < self.budget
    }

    /// Run `call`, again after connection errors and refusals of a busy or
    /// failing-over server ([`Error::is_connection`]), with backoff, while
    /// the budget lasts. Only for calls that are safe to repeat.
    pub(crate) async fn run<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.run_until(Instant::now() + self.budget, call).await
    }

    /// As [`run`](Self::run), retrying only while the next try would begin
    /// before `deadline`.
    pub(crate) async fn run_until<T, F, Fut>(&self, deadline: Instant, call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        retry_until(deadline, Error::is_connection, call).await
    }
}

/// Run `call` again after every error `retryable` accepts, with backoff,
/// while the next try would begin before `deadline`. For calls whose every
/// failure may be passing (an ACL being edited, a moved slot) and that are
/// worth any number of tries until a deadline of their own: the claim of a
/// handed-over grant.
pub(crate) async fn retry_until<T, F, Fut>(
    deadline: Instant,
    retryable: fn(&Error) -> bool,
    mut call: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    {
        let mut backoff = Backoff::commands();
        loop {
            match call().await {
                Err(err) if retryable(&err) && Instant::now() + backoff.peek() < deadline => {
                    events::record(Event::CallRetried { error: &err });
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap_and_resets() {
        let mut backoff = Backoff::commands();
        let delays: Vec<u64> = (0..7)
            .map(|_| backoff.next_delay().as_millis() as u64)
            .collect();
        assert_eq!(delays, [20, 40, 80, 160, 320, 500, 500]);
        backoff.reset();
        assert_eq!(backoff.peek(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_connection_errors_within_the_budget_only() {
        let policy = RetryPolicy::new(Duration::from_secs(1));
        let mut calls = 0;
        let started = Instant::now();
        let result: Result<()> = policy
            .run(|| {
                calls += 1;
                async { Err(Error::Closed) }
            })
            .await;
        // Not a connection error: no retry.
        assert!(matches!(result, Err(Error::Closed)));
        assert_eq!(calls, 1);
        let mut calls = 0;
        let result: Result<()> = policy
            .run(|| {
                calls += 1;
                async {
                    Err(Error::Connection {
                        addr: "test".into(),
                        source: crate::error::RedisError::timeout_for_tests(),
                    })
                }
            })
            .await;
        assert!(result.is_err());
        // 20 + 40 + 80 + 160 + 320 = 620 ms, the next 500 ms would pass 1 s.
        assert_eq!(calls, 6);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

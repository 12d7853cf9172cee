//! The locks compared by `fairlock bench`, behind one small interface:
//! fairlock's four (both protocols, fair and non-fair) and rslock.

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, LockGuard, LockHandle, LockKind, LockLabel, Protocol};

use crate::{Failure, exit, failure};

/// rslock's key TTL, the same as fairlock's default lease (which the
/// watchdog renews; rslock's key is never renewed, and the runs are shorter).
const RSLOCK_TTL: Duration = ClientConfig::DEFAULT_LEASE;

/// rslock retries a failed `SET NX` after a random delay below this (its
/// default is 200 ms, which leaves a waiter asleep long after a release).
pub(crate) const RSLOCK_RETRY_DELAY: Duration = Duration::from_millis(10);

/// How long an rslock acquisition may take before the run fails.
const RSLOCK_PATIENCE: Duration = Duration::from_secs(60);

/// One implementation under test. fairlock's clients write no metrics
/// (as the library without its `metrics` feature), except the `*Metrics`
/// ones of `--metrics-cost`: a Prometheus recorder, lock names as labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Subject {
    NativeFair,
    NativeNonFair,
    RedissonFair,
    RedissonNonFair,
    Rslock,
    NativeFairMetrics,
    NativeNonFairMetrics,
    RedissonFairMetrics,
    RedissonNonFairMetrics,
}

impl Subject {
    /// Every implementation, in the order of each round.
    pub(crate) const ALL: [Subject; 5] = [
        Subject::NativeFair,
        Subject::NativeNonFair,
        Subject::RedissonFair,
        Subject::RedissonNonFair,
        Subject::Rslock,
    ];

    /// The implementations of `--metrics-cost`, in their order: each of
    /// fairlock's locks without metrics, then with.
    pub(crate) const WITH_METRICS: [Subject; 9] = [
        Subject::NativeFair,
        Subject::NativeFairMetrics,
        Subject::NativeNonFair,
        Subject::NativeNonFairMetrics,
        Subject::RedissonFair,
        Subject::RedissonFairMetrics,
        Subject::RedissonNonFair,
        Subject::RedissonNonFairMetrics,
        Subject::Rslock,
    ];

    /// The name in the JSON output.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Subject::NativeFair => "native-fair",
            Subject::NativeNonFair => "native-non-fair",
            Subject::RedissonFair => "redisson-fair",
            Subject::RedissonNonFair => "redisson-non-fair",
            Subject::Rslock => "rslock",
            Subject::NativeFairMetrics => "native-fair+metrics",
            Subject::NativeNonFairMetrics => "native-non-fair+metrics",
            Subject::RedissonFairMetrics => "redisson-fair+metrics",
            Subject::RedissonNonFairMetrics => "redisson-non-fair+metrics",
        }
    }

    /// The name in the table and the chart.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Subject::NativeFair => "fairlock native fair",
            Subject::NativeNonFair => "fairlock native non-fair",
            Subject::RedissonFair => "fairlock redisson fair",
            Subject::RedissonNonFair => "fairlock redisson non-fair",
            Subject::Rslock => "rslock 0.10",
            Subject::NativeFairMetrics => "  same, with metrics",
            Subject::NativeNonFairMetrics => "  same, with metrics",
            Subject::RedissonFairMetrics => "  same, with metrics",
            Subject::RedissonNonFairMetrics => "  same, with metrics",
        }
    }

    /// For a lock with metrics, the same lock without.
    pub(crate) fn without_metrics(self) -> Option<Subject> {
        match self {
            Subject::NativeFairMetrics => Some(Subject::NativeFair),
            Subject::NativeNonFairMetrics => Some(Subject::NativeNonFair),
            Subject::RedissonFairMetrics => Some(Subject::RedissonFair),
            Subject::RedissonNonFairMetrics => Some(Subject::RedissonNonFair),
            _ => None,
        }
    }

    /// Whether waiters queue (the `queue` scenario applies).
    pub(crate) fn queues(self) -> bool {
        matches!(self, Subject::NativeFair | Subject::RedissonFair)
    }

    fn fairlock(self) -> Option<(Protocol, LockKind)> {
        match self.without_metrics().unwrap_or(self) {
            Subject::NativeFair => Some((Protocol::Native, LockKind::Fair)),
            Subject::NativeNonFair => Some((Protocol::Native, LockKind::NonFair)),
            Subject::RedissonFair => Some((Protocol::Redisson, LockKind::Fair)),
            Subject::RedissonNonFair => Some((Protocol::Redisson, LockKind::NonFair)),
            _ => None,
        }
    }
}

/// How a fairlock client is set up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setup {
    /// The defaults (a 30 s lease renewed by the watchdog).
    Default,
    /// Long leases and waiter slots: queued waiters never refresh their
    /// place during a run, so the Redis time measured is the handoffs';
    /// long response timeouts.
    LongQueue,
}

/// One connection's handle on the lock under test.
pub(crate) enum Locker {
    Fairlock {
        client: LockClient,
        handle: LockHandle,
    },
    Rslock {
        manager: rslock::LockManager,
        resource: String,
    },
}

/// A held lock of a [`Locker`].
pub(crate) enum Held {
    Fairlock(LockGuard),
    Rslock(rslock::LockGuard),
}

impl Locker {
    /// A new client of `subject` (its own connection) on lock `name`.
    pub(crate) async fn connect(
        subject: Subject,
        url: &str,
        name: &str,
        setup: Setup,
    ) -> Result<Self, Failure> {
        let Some((protocol, kind)) = subject.fairlock() else {
            let client = crate::redis_client(url).map_err(|e| {
                Failure::new(exit::USAGE, format!("rslock cannot use {url:?}: {e}"))
            })?;
            let mut manager = rslock::LockManager::from_clients(vec![client]);
            manager.set_retry(u32::MAX, RSLOCK_RETRY_DELAY);
            return Ok(Locker::Rslock {
                manager,
                resource: name.to_owned(),
            });
        };
        let metrics = subject.without_metrics().is_some();
        let mut config = ClientConfig::from_url(url)?
            .protocol(protocol)
            .metrics(metrics)
            .metrics_lock_label(if metrics {
                LockLabel::Name
            } else {
                LockLabel::Off
            });
        if setup == Setup::LongQueue {
            let long = Duration::from_secs(3600);
            // Thousands of waiters share one connection: a reply waits
            // behind thousands of enqueue scripts (seconds, on a loaded
            // machine), which is no broken connection.
            let patient = Duration::from_secs(60);
            config = config
                .lease(long)
                .waiter_slot(long)
                .waiter_ttl(long)
                .response_timeout(patient)
                .retry_budget(patient);
        }
        let client = LockClient::with_config(config)
            .await
            .map_err(failure::connect_failure)?;
        let handle = client.handle(name, kind)?;
        Ok(Locker::Fairlock { client, handle })
    }

    /// Wait for the lock.
    pub(crate) async fn lock(&self) -> Result<Held, Failure> {
        match self {
            Locker::Fairlock { handle, .. } => Ok(Held::Fairlock(handle.lock().await?)),
            // rslock retries every error but a bad TTL forever (a Redis
            // that went away included): give up after a minute.
            Locker::Rslock { manager, resource } => {
                match tokio::time::timeout(
                    RSLOCK_PATIENCE,
                    manager.acquire(resource.as_bytes(), RSLOCK_TTL),
                )
                .await
                {
                    Ok(Ok(guard)) => Ok(Held::Rslock(guard)),
                    Ok(Err(e)) => Err(Failure::new(exit::SOFTWARE, format!("rslock: {e}"))),
                    Err(_) => Err(Failure::new(
                        exit::UNAVAILABLE,
                        format!(
                            "rslock did not acquire its lock within {} (is Redis reachable?)",
                            crate::duration::format(RSLOCK_PATIENCE)
                        ),
                    )),
                }
            }
        }
    }

    /// The fairlock client, if this is one.
    pub(crate) fn client(&self) -> Option<&LockClient> {
        match self {
            Locker::Fairlock { client, .. } => Some(client),
            Locker::Rslock { .. } => None,
        }
    }

    /// Close the client (fairlock: its background tasks end).
    pub(crate) async fn close(self) {
        if let Locker::Fairlock { client, .. } = self {
            client.shutdown().await;
        }
    }
}

impl Held {
    /// Release the lock.
    pub(crate) async fn unlock(self) -> Result<(), Failure> {
        match self {
            Held::Fairlock(guard) => Ok(guard.unlock().await?),
            Held::Rslock(guard) => {
                guard.release().await;
                Ok(())
            }
        }
    }

    /// Keep the lock held in Redis and stop caring (the queue scenario's
    /// last holder, so that the waiters behind it are not woken one by one
    /// at the end).
    pub(crate) fn forget(self) {
        match self {
            Held::Fairlock(guard) => guard.forget(),
            Held::Rslock(guard) => drop(guard),
        }
    }
}

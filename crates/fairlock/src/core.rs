//! What every lock of one client shares: settings, the command connection,
//! the wake-up router, the holds registry and its watchdog, the client id,
//! and the tracking of background work and of acquisitions in progress.
//!
//! [`LockClient`](crate::LockClient) is the public face of a [`ClientCore`];
//! handles, guards and the acquire engine reach the client through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::ClientConfig;
use crate::error::{Error, Result};
use crate::events::Recorder;
use crate::owner::{Owner, OwnerTurn, OwnerTurns};
use crate::protocol::{Dialect, REVOKED_PREFIX};
use crate::retry::RetryPolicy;
use crate::stats::Status;
use crate::transport::Connection;
use crate::wakeup::{Subscription, WakeupRouter, Woken};
use crate::watchdog::{Revocations, Watchdog};

pub(crate) struct ClientCore {
    config: ClientConfig,
    conn: Connection,
    dialect: Dialect,
    retry: RetryPolicy,
    id: String,
    next_owner: AtomicU64,
    /// Acquisitions naming the same owner go one at a time (see [`OwnerTurns`]).
    owner_turns: Arc<OwnerTurns>,
    wakeups: WakeupRouter,
    watchdog: Watchdog,
    /// Where this client's events are counted and recorded.
    events: Arc<Recorder>,
    runtime: tokio::runtime::Handle,
    /// Clean-up work in flight: releases of dropped guards, queue exits of
    /// cancelled waiters, undoing of grants that raced a cancellation.
    background: tokio_util::task::TaskTracker,
    /// Cancelled by `shutdown`: waits end with `Error::Closed`, new
    /// acquisitions are refused.
    closing: CancellationToken,
    /// Acquisitions in progress (shutdown waits for them to undo themselves).
    acquisitions: Arc<InProgress>,
    /// The task that listens for revocations of this client's holds.
    revocations: tokio::task::AbortHandle,
}

impl Drop for ClientCore {
    fn drop(&mut self) {
        self.revocations.abort();
    }
}

/// The number of acquisitions in progress, and a wake-up when it reaches 0.
/// (A counter and a `Notify` rather than a `watch` channel: every
/// acquisition changes it twice, and a `watch` send wakes its eight
/// internal `Notify`s, about 1,000 instructions per lock + unlock.)
#[derive(Default)]
struct InProgress {
    count: AtomicUsize,
    none: tokio::sync::Notify,
}

impl InProgress {
    /// Wait until no acquisition is in progress.
    async fn settled(&self) {
        loop {
            let none = self.none.notified();
            tokio::pin!(none);
            // Registered before the check: a last acquisition that ends
            // between the check and the wait still wakes this one.
            none.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            none.await;
        }
    }
}

/// Counts one acquisition in progress while it lives.
pub(crate) struct Acquisition {
    in_progress: Arc<InProgress>,
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if self.in_progress.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.in_progress.none.notify_waiters();
        }
    }
}

impl ClientCore {
    /// Connect with `config` (validated here) on the current Tokio runtime.
    pub(crate) async fn connect(config: ClientConfig) -> Result<Arc<Self>> {
        config.validate()?;
        let runtime = tokio::runtime::Handle::current();
        let dialect = Dialect::new(config.protocol_settings());
        let events = Recorder::new(
            dialect.protocol().as_str(),
            config.lock_label.clone(),
            config.metrics,
            &config.label,
        );
        let (conn, pubsub) =
            Connection::connect(&config.endpoint, config.timeouts(), Arc::clone(&events)).await?;
        let wakeups = WakeupRouter::start(pubsub, Arc::clone(&events), &runtime);
        let watchdog = Watchdog::start(
            Arc::clone(&events),
            dialect.clone(),
            conn.clone(),
            &config,
            &runtime,
        );
        let id = uuid::Uuid::new_v4().to_string();
        // A force-unlock of one of our holds is published on this channel:
        // every hold is then checked at once, so `lost()` resolves within a
        // round trip instead of at the next renewal.
        let revoked = wakeups
            .subscribe(&format!("{REVOKED_PREFIX}{id}"), config.response_timeout)
            .await;
        let revocations = runtime.spawn(listen_for_revocations(revoked, watchdog.revocations()));
        Ok(Arc::new(Self {
            retry: config.retry_policy(),
            config,
            conn,
            dialect,
            id,
            next_owner: AtomicU64::new(1),
            owner_turns: Arc::default(),
            wakeups,
            watchdog,
            events,
            runtime,
            background: tokio_util::task::TaskTracker::new(),
            closing: CancellationToken::new(),
            acquisitions: Arc::default(),
            revocations: revocations.abort_handle(),
        }))
    }

    pub(crate) fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    pub(crate) fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    pub(crate) fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn wakeups(&self) -> &WakeupRouter {
        &self.wakeups
    }

    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.watchdog
    }

    /// Where this client's events are recorded.
    pub(crate) fn events(&self) -> &Arc<Recorder> {
        &self.events
    }

    /// A picture of what this client holds and does now (not atomic).
    pub(crate) fn status(&self) -> Status {
        Status {
            held: self.watchdog.snapshot(),
            waiting: self.acquisitions.count.load(Ordering::SeqCst),
            subscribed_channels: self.wakeups.channel_count(),
            background_tasks: self.background.len(),
            closed: self.is_closed(),
        }
    }

    /// A new owner id, unique within this client (`CLIENT_UUID:N`).
    pub(crate) fn new_owner(&self) -> Owner {
        Owner::new(&self.id, self.next_owner.fetch_add(1, Ordering::Relaxed))
    }

    /// Wait for `owner`'s turn to acquire the lock `lock_key` (see
    /// [`OwnerTurns`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `owner` was made by another client:
    /// turns, holds and the watchdog are per client, so an owner acquires
    /// only through the client that made it.
    ///
    /// # Cancel safety
    /// Dropping the future gives up the place in line; nothing else changes.
    pub(crate) async fn owner_turn(&self, lock_key: &str, owner: &Owner) -> Result<OwnerTurn> {
        let ours = owner
            .as_str()
            .strip_prefix(self.id.as_str())
            .is_some_and(|rest| rest.starts_with(':'));
        if !ours {
            return Err(Error::InvalidConfig(format!(
                "owner {owner} was made by another LockClient: an owner acquires only                  through the client that made it (LockClient::new_owner)"
            )));
        }
        Ok(self.owner_turns.take(lock_key, owner).await)
    }

    /// Run clean-up work in the background, tracked so that `flush` can
    /// wait for it.
    pub(crate) fn spawn_cleanup<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn_on(work, &self.runtime)
    }

    /// Spawn background work that clean-ups (`flush`, shutdown) do not wait
    /// for: it must end by itself when the client closes.
    pub(crate) fn spawn_detached<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        drop(self.runtime.spawn(work));
    }

    /// Wait until the background clean-up work has finished.
    pub(crate) async fn flush(&self) {
        self.background.close();
        self.background.wait().await;
        self.background.reopen();
    }

    /// `true` once the client shut down.
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Resolves when the client shuts down.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    /// Count an acquisition in progress; refused once the client shut down.
    pub(crate) fn enter_acquisition(&self) -> Result<Acquisition> {
        // Counted first, then the check: a `close()` that cancels between
        // the two sees this acquisition in the count and waits for it, and
        // one that cancels before is seen here. (Checked first, an
        // acquisition could slip past a close that read the count in
        // between.) The fences here and in `close` order each side's write
        // before its read, whatever orderings the token uses inside.
        self.acquisitions.count.fetch_add(1, Ordering::SeqCst);
        let acquisition = Acquisition {
            in_progress: Arc::clone(&self.acquisitions),
        };
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.is_closed() {
            // Dropped: the count goes down again (and wakes the close).
            return Err(Error::Closed);
        }
        Ok(acquisition)
    }

    /// Refuse new acquisitions and end the waits in progress; `true` when
    /// they all finished within `limit`.
    pub(crate) async fn close(&self, limit: Duration) -> bool {
        self.closing.cancel();
        // See `enter_acquisition`.
        std::sync::atomic::fence(Ordering::SeqCst);
        tokio::time::timeout(limit, self.acquisitions.settled())
            .await
            .is_ok()
    }

    /// Stop the background tasks (and close the wake-up connection): nothing
    /// is held or waited for any more.
    pub(crate) fn stop_tasks(&self) {
        self.revocations.abort();
        self.wakeups.stop();
        self.watchdog.stop();
    }
}

/// Checks every hold when a revocation message (or a reconnect, after which
/// one may have been missed) arrives. Messages that arrive during a check
/// are served by the next one, so a flood of forged messages costs at most
/// one check at a time.
async fn listen_for_revocations(mut revoked: Subscription, watchdog: Revocations) {
    loop {
        revoked.mark_seen();
        let key = match revoked.wait(Duration::from_secs(3600)).await {
            Woken::Timeout => continue,
            Woken::Message(key) => Some(key),
            Woken::Reconnected => None,
        };
        if !watchdog.revoked(key.as_deref()) {
            return;
        }
    }
}

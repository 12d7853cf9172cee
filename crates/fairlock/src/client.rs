//! `LockClient`: connections, the client id, the wake-up router and the watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::lock::{Fair, LockHandle, NonFair};
use crate::name;
use crate::owner::Owner;
use crate::protocol::{REVOKED_PREFIX, Release};
use crate::wakeup::WakeupRouter;
use crate::watchdog::Watchdog;

/// A connection to Redis for taking distributed locks.
///
/// Owns one command connection (multiplexed, reconnecting), one pub/sub
/// connection shared by all waiters, and one watchdog task that renews every
/// lock this client holds. Cheap to clone: clones share all of it. Build one
/// per process and hand out clones.
///
/// ```no_run
/// # async fn demo() -> fairlock::Result<()> {
/// let client = fairlock::LockClient::connect("redis://127.0.0.1:6379").await?;
/// let orders = client.fair_lock("orders")?;
/// let guard = orders.lock().await?;
/// // ... critical section ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) config: ClientConfig,
    pub(crate) conn: Connection,
    pub(crate) id: String,
    next_owner: AtomicU64,
    pub(crate) wakeups: WakeupRouter,
    pub(crate) watchdog: Watchdog,
    runtime: tokio::runtime::Handle,
    /// Clean-up work in flight: releases of dropped guards, queue exits of
    /// cancelled waiters, undoing of grants that raced a cancellation.
    background: tokio_util::task::TaskTracker,
    /// Cancelled by `shutdown`: waits end with `Error::Closed`, new
    /// acquisitions are refused.
    closing: CancellationToken,
    /// Acquisitions in progress (shutdown waits for them to undo themselves).
    acquisitions: tokio::sync::watch::Sender<usize>,
    /// The task that listens for revocations of this client's holds.
    revocations: tokio::task::AbortHandle,
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.revocations.abort();
    }
}

/// Counts one acquisition in progress while it lives.
pub(crate) struct Acquisition {
    count: tokio::sync::watch::Sender<usize>,
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        self.count.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl ClientInner {
    /// Run clean-up work in the background, tracked so that
    /// [`LockClient::flush`] can wait for it.
    pub(crate) fn spawn_cleanup<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn_on(work, &self.runtime)
    }

    /// `true` once [`LockClient::shutdown`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Resolves when the client shuts down.
    pub(crate) fn closing(&self) -> CancellationToken {
        self.closing.clone()
    }

    /// Count an acquisition in progress; refused once the client shut down.
    pub(crate) fn enter_acquisition(&self) -> Result<Acquisition> {
        if self.is_closed() {
            return Err(Error::Closed);
        }
        self.acquisitions.send_modify(|n| *n += 1);
        Ok(Acquisition {
            count: self.acquisitions.clone(),
        })
    }
}

impl LockClient {
    /// Connect with default settings to the server at `url`
    /// (`redis://`, `rediss://`, with optional user, password and db).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a bad URL,
    /// [`Error::Connection`](crate::Error::Connection) (naming the address)
    /// when the server cannot be reached, [`Error::Auth`](crate::Error::Auth)
    /// when it refuses the credentials.
    ///
    /// # Cancel safety
    /// Cancelling drops the half-made connections; nothing is left behind.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::with_config(ClientConfig::from_url(url)?).await
    }

    /// Connect with `config`. Must be called inside a Tokio runtime; the
    /// client's background tasks run on it.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), plus [`Error::InvalidDuration`](crate::Error::InvalidDuration)
    /// or [`Error::InvalidConfig`](crate::Error::InvalidConfig) for bad settings.
    ///
    /// # Cancel safety
    /// Cancelling drops the half-made connections; nothing is left behind.
    pub async fn with_config(config: ClientConfig) -> Result<Self> {
        config.validate()?;
        let runtime = tokio::runtime::Handle::current();
        let (conn, redis_client) = Connection::connect(&config).await?;
        let wakeups = WakeupRouter::start(
            redis_client,
            config.connect_timeout,
            config.response_timeout,
            &runtime,
        );
        let watchdog = Watchdog::start(
            config.protocol,
            conn.clone(),
            config.lease,
            config.renew_interval(),
            &runtime,
        );
        let id = uuid::Uuid::new_v4().to_string();
        // A force-unlock of one of our holds is published on this channel:
        // every hold is then checked at once, so `lost()` resolves within a
        // round trip instead of at the next renewal.
        let revoked = wakeups
            .subscribe(&format!("{REVOKED_PREFIX}{id}"), config.response_timeout)
            .await;
        let revocations = runtime.spawn(listen_for_revocations(
            revoked,
            std::sync::Arc::downgrade(&watchdog.check_handle()),
        ));
        Ok(Self {
            inner: Arc::new(ClientInner {
                config,
                conn,
                id,
                next_owner: AtomicU64::new(1),
                wakeups,
                watchdog,
                runtime,
                background: tokio_util::task::TaskTracker::new(),
                closing: CancellationToken::new(),
                acquisitions: tokio::sync::watch::Sender::new(0),
                revocations: revocations.abort_handle(),
            }),
        })
    }

    /// A handle on the fair (FIFO) lock `name`; Redisson's `getFairLock(name)`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// and the brace rule in the crate docs).
    pub fn fair_lock(&self, name: &str) -> Result<LockHandle<Fair>> {
        name::validate(name)?;
        Ok(LockHandle::new(self.clone(), name))
    }

    /// A handle on the non-fair reentrant lock `name`; Redisson's `getLock(name)`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for [`fair_lock`](Self::fair_lock).
    pub fn lock(&self, name: &str) -> Result<LockHandle<NonFair>> {
        name::validate(name)?;
        Ok(LockHandle::new(self.clone(), name))
    }

    /// A new owner id, unique within this client (`CLIENT_UUID:N`).
    pub fn new_owner(&self) -> Owner {
        Owner::new(
            &self.inner.id,
            self.inner.next_owner.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// Wait until the clean-up work this client does in the background has
    /// finished: releases of dropped guards, queue exits of cancelled
    /// waiters, release of grants that raced a cancellation. Call it before
    /// the process exits (or the runtime shuts down, which would cut that
    /// work short). The client stays usable.
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the work goes on.
    pub async fn flush(&self) {
        let background = &self.inner.background;
        background.close();
        background.wait().await;
        background.reopen();
    }

    /// Release every hold this client still has, take every waiter of this
    /// client out of its queue, and wait for all background work (the
    /// releases of dropped guards included) to finish. Call it before the
    /// process exits: a guard dropped at the end of `main` is released by a
    /// background task that the exiting runtime would cut short, leaving
    /// the lock held until its lease runs out.
    ///
    /// Afterwards the client is closed: waits in progress end with
    /// [`Error::Closed`], new acquisitions are refused with it, and the
    /// guards still alive report [`is_held`](crate::LockGuard::is_held)
    /// `false` (their `unlock` answers [`Error::LockLost`]). Locks held
    /// through [`LockGuard::forget`](crate::LockGuard::forget) or
    /// [`LockHandle::unlock_as`] owners that have no live guard are not
    /// known to the client and are left to their lease.
    ///
    /// Bounded: waits get one response timeout to leave their queue, each
    /// release retries within the retry budget.
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the releases already started go on
    /// in the background, and the client stays closed.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.closing.cancel();
        // Waits notice the closing at once and leave their queue from the
        // background; give them a moment to get there.
        let mut acquisitions = inner.acquisitions.subscribe();
        let settled = acquisitions.wait_for(|n| *n == 0);
        if tokio::time::timeout(inner.config.response_timeout, settled)
            .await
            .is_err()
        {
            warn!("shutdown: some acquisitions did not finish within the response timeout");
        }
        let holds = inner.watchdog.drain();
        let releases = holds.into_iter().filter_map(|hold| {
            let shared = hold.shared?;
            Some(async move {
                let owner = Owner::from_raw(&hold.owner);
                let lease = shared.client.config().lease;
                // One release per hold this client made, and no more: the
                // server's count can include holds of a forgotten guard.
                for _ in 0..hold.holds.max(1) {
                    match shared.release(&owner, lease, hold.token).await {
                        Ok(Release::StillHeld) => continue,
                        Ok(reply) => {
                            debug!(lock = %shared.name, %owner, ?reply, "released at shutdown");
                            break;
                        }
                        Err(err) => {
                            warn!(lock = %shared.name, %owner, error = %err, "shutdown: release failed; the lock expires with its lease");
                            break;
                        }
                    }
                }
            })
        });
        futures_util::future::join_all(releases).await;
        self.flush().await;
        // Nothing is held or waited for any more: stop the background tasks
        // (and close the wake-up connection) now rather than at drop.
        inner.revocations.abort();
        inner.wakeups.stop();
        inner.watchdog.stop();
        info!(client = %inner.id, "lock client shut down");
    }

    /// This client's UUID: the first part of every owner id it makes.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The settings this client was built with.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The server's `maxmemory-policy` as read when this client connected
    /// (`CONFIG GET`), e.g. `"noeviction"` or `"allkeys-lru"`. Any policy
    /// other than `noeviction` lets Redis evict lock keys, and an evicted
    /// lock can be taken by a second holder; connecting logs a warning then
    /// (see `docs/deployment.md`). `None` when the server would not say: the
    /// user lacks `+config|get`, or the service renamed or disabled `CONFIG`.
    pub fn maxmemory_policy(&self) -> Option<&str> {
        self.inner.conn.maxmemory_policy()
    }
}

/// Checks every hold when a revocation message (or a reconnect, after which
/// one may have been missed) arrives. Messages that arrive during a check
/// are served by the next one, so a flood of forged messages costs at most
/// one check at a time.
async fn listen_for_revocations(
    mut revoked: crate::wakeup::Subscription,
    watchdog: std::sync::Weak<tokio::sync::Notify>,
) {
    loop {
        revoked.mark_seen();
        if revoked.wait(Duration::from_secs(3600)).await == crate::wakeup::Woken::Timeout {
            continue;
        }
        let Some(check) = watchdog.upgrade() else {
            return;
        };
        check.notify_one();
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("config", &self.inner.config)
            .finish()
    }
}

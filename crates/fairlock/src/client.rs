//! `LockClient`: connections, the client id, the wake-up router and the watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::ClientConfig;
use crate::connection::Connection;
use crate::error::Result;
use crate::lock::{Fair, LockHandle, NonFair};
use crate::name;
use crate::owner::Owner;
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
        let wakeups = WakeupRouter::start(redis_client, config.connect_timeout, &runtime);
        let watchdog = Watchdog::start(
            config.protocol,
            conn.clone(),
            config.lease,
            config.renew_interval(),
            &runtime,
        );
        Ok(Self {
            inner: Arc::new(ClientInner {
                config,
                conn,
                id: uuid::Uuid::new_v4().to_string(),
                next_owner: AtomicU64::new(1),
                wakeups,
                watchdog,
                runtime,
                background: tokio_util::task::TaskTracker::new(),
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

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("config", &self.inner.config)
            .finish()
    }
}

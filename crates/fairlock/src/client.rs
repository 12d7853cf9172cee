//! `LockClient`: connections, the client id, the wake-up router and the watchdog.

use std::sync::Arc;

use crate::config::ClientConfig;
use crate::core::ClientCore;
use crate::election::Election;
use crate::error::Result;
use crate::events::{self, Event};
use crate::handle::{FairLock, Lock, LockHandle};
use crate::hold::LockShared;
use crate::kind::LockKind;
use crate::name;
use crate::owner::Owner;
use crate::protocol::Release;
use crate::read_write::ReadWriteLock;
use crate::semaphore::{CountingSemaphore, Semaphore};
use crate::stats::{Statistics, Status};

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
    core: Arc<ClientCore>,
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
        Ok(Self {
            core: ClientCore::connect(config).await?,
        })
    }

    /// A handle on the fair (FIFO) lock `name`; Redisson's `getFairLock(name)`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) (see [`MAX_NAME_LEN`](crate::MAX_NAME_LEN)
    /// and the brace rule in the crate docs).
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        Ok(FairLock::new(self.handle(name, LockKind::Fair)?))
    }

    /// A handle on the non-fair reentrant lock `name`; Redisson's `getLock(name)`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for [`fair_lock`](Self::fair_lock).
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock::new(self.handle(name, LockKind::NonFair)?))
    }

    /// A handle on the lock `name` of a kind chosen at run time (a command
    /// line flag, say). Both kinds share every method of [`LockHandle`];
    /// [`fair_lock`](Self::fair_lock) and [`lock`](Self::lock) give the
    /// typed handles, with the methods only their kind has.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for [`fair_lock`](Self::fair_lock).
    pub fn handle(&self, name: &str, kind: LockKind) -> Result<LockHandle> {
        name::validate(name)?;
        if self.core.dialect().protocol() == crate::Protocol::Redisson {
            name::validate_redisson(name)?;
        }
        Ok(LockHandle::new(&self.core, name, kind))
    }

    /// The leader election `name`, on the fair lock of the same name:
    /// candidates wait in its line (they lead in arrival order), the
    /// leader is its holder and a term is that hold's fencing token. The
    /// election and the fair lock `name` are **one object**: a plain holder
    /// of the lock keeps every candidate waiting, and leads with no value
    /// ([`Election::leader`] reports nobody). See [`Election`] and
    /// `docs/election.md`.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for
    /// [`fair_lock`](Self::fair_lock); [`Error::InvalidConfig`](crate::Error::InvalidConfig)
    /// under the `redisson` protocol (elections are native only).
    pub fn election(&self, name: &str) -> Result<Election> {
        if self.core.dialect().protocol() != crate::Protocol::Native {
            return Err(crate::Error::InvalidConfig(format!(
                "election {name:?}: elections exist under the native protocol only"
            )));
        }
        Ok(Election::new(&self.core, self.fair_lock(name)?))
    }

    /// The read-write lock `name`: many readers at once, or one writer.
    /// Under the `native` protocol it is fair (first come, first served
    /// across readers and writers); under `redisson` it is Redisson's
    /// `RReadWriteLock` (`redisson.getReadWriteLock(name)`), byte for byte,
    /// so Java services share it. See [`ReadWriteLock`] for its rules.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for
    /// [`fair_lock`](Self::fair_lock).
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock::new(
            self.handle(name, LockKind::Read)?,
            self.handle(name, LockKind::Write)?,
        ))
    }

    /// The semaphore `name` with `permits` permits in all. Each permit has
    /// a lease, so a holder that dies gives its permits back when the lease
    /// ends; see [`Semaphore`] for its rules. Under the `native` protocol it
    /// is fair (first come, first served, a fencing token per acquisition,
    /// keys `fairlock:{NAME}:sem:...`); under `redisson` it is Redisson's
    /// `RPermitExpirableSemaphore` (`redisson.getPermitExpirableSemaphore(name)`),
    /// byte for byte, so Java services share it.
    ///
    /// `permits` initialises the semaphore when it does not exist yet (at the
    /// first call that reaches Redis; Redisson's `trySetPermits`): an
    /// existing one keeps its total ([`Semaphore::set_permits`] changes it).
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for
    /// [`fair_lock`](Self::fair_lock).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        name::validate(name)?;
        if self.core.dialect().protocol() == crate::Protocol::Redisson {
            name::validate_redisson(name)?;
        }
        Ok(Semaphore::new(Arc::clone(&self.core), name, permits))
    }

    /// The plain semaphore `name`: Redisson's `RSemaphore`
    /// (`redisson.getSemaphore(name)`), byte for byte. Nothing records who
    /// holds its permits, so **a holder that dies never gives them back**:
    /// prefer [`semaphore`](Self::semaphore) unless Java services already
    /// use an `RSemaphore` of that name. `permits` initialises it when it
    /// does not exist yet, as for [`semaphore`](Self::semaphore); an
    /// existing one keeps what it has (whatever total a Java service set
    /// it up with), and requests are not checked against `permits` then.
    ///
    /// # Errors
    /// As [`semaphore`](Self::semaphore), and
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) under the
    /// `native` protocol: a semaphore without owners cannot give a dead
    /// holder's permits back, so only Redisson's exists (use
    /// [`semaphore`](Self::semaphore)).
    pub fn counting_semaphore(&self, name: &str, permits: u32) -> Result<CountingSemaphore> {
        self.semaphore_name(name, "counting semaphore")?;
        Ok(CountingSemaphore::new(
            Arc::clone(&self.core),
            name,
            permits,
        ))
    }

    /// Check a semaphore's name, and that the protocol has semaphores.
    fn semaphore_name(&self, name: &str, kind: &str) -> Result<()> {
        name::validate(name)?;
        if self.core.dialect().protocol() != crate::Protocol::Redisson {
            return Err(crate::Error::InvalidConfig(format!(
                "{kind} {name:?}: Redisson's plain semaphore (RSemaphore) exists under the \
                 redisson protocol only; under native use LockClient::semaphore (fair, its \
                 permits leased)"
            )));
        }
        name::validate_redisson(name)
    }

    /// The count-down latch `name`: set to a count, counted down by any
    /// client, waited for until it reaches 0. Under the `native` protocol
    /// its keys are `fairlock:{NAME}:latch...`; under `redisson` it is
    /// Redisson's `RCountDownLatch` (`redisson.getCountDownLatch(name)`),
    /// byte for byte. See [`CountDownLatch`](crate::CountDownLatch).
    ///
    /// ```no_run
    /// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
    /// let latch = client.count_down_latch("ready")?;
    /// latch.try_set_count(2).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName), as for
    /// [`fair_lock`](Self::fair_lock), and under `redisson` on a cluster
    /// for a name with braces (Redisson's channel for it would be in
    /// another slot).
    pub fn count_down_latch(&self, name: &str) -> Result<crate::CountDownLatch> {
        crate::CountDownLatch::new(Arc::clone(&self.core), name)
    }

    /// A new owner id, unique within this client (`CLIENT_UUID:N`).
    pub fn new_owner(&self) -> Owner {
        self.core.new_owner()
    }

    /// Wait until the clean-up work this client does in the background has
    /// finished: releases of dropped guards, queue exits of cancelled
    /// waiters, release of grants that raced a cancellation. Call it before
    /// the process exits (or the runtime shuts down, which would cut that
    /// work short). The client stays usable.
    ///
    /// # Errors
    /// None: it returns nothing. Work that fails (Redis unreachable for
    /// the retry budget) is reported where it failed, as a tracing event
    /// and in [`statistics`](Self::statistics).
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the work goes on.
    pub async fn flush(&self) {
        self.core.flush().await;
    }

    /// Release every hold this client still has, take every waiter of this
    /// client out of its queue, and wait for all background work (the
    /// releases of dropped guards included) to finish. Call it before the
    /// process exits: a guard dropped at the end of `main` is released by a
    /// background task that the exiting runtime would cut short, leaving
    /// the lock held until its lease runs out.
    ///
    /// Afterwards the client is closed: waits in progress end with
    /// [`Error::Closed`](crate::Error::Closed), new acquisitions are refused with it, and the
    /// guards still alive report [`is_held`](crate::LockGuard::is_held)
    /// `false` (their `unlock` answers [`Error::LockLost`](crate::Error::LockLost)). Locks held
    /// through [`LockGuard::forget`](crate::LockGuard::forget) or
    /// [`LockHandle::unlock_as`] owners that have no live guard are not
    /// known to the client and are left to their lease.
    ///
    /// Bounded: waits get one response timeout to leave their queue, each
    /// release retries within the retry budget.
    ///
    /// # Errors
    /// None: it returns nothing. A release that fails (Redis unreachable
    /// for the retry budget) is logged as a tracing event; that lock then
    /// frees itself when its lease runs out.
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting; the releases already started go on
    /// in the background, and the client stays closed.
    pub async fn shutdown(&self) {
        let core = &self.core;
        // Waits notice the closing at once and leave their queue from the
        // background; give them a moment to get there.
        let settled = core.close(core.config().response_timeout).await;
        let holds = core.watchdog().drain();
        let releases = holds.into_iter().map(|hold| async move {
            let shared = LockShared::new(Arc::clone(core), hold.lock);
            let owner = hold.owner;
            let lease = core.config().lease;
            // One release per hold this client made, and no more: the
            // server's count can include holds of a forgotten guard.
            for _ in 0..hold.holds.max(1) {
                match shared.release(&owner, lease, hold.token).await {
                    Ok(Release::StillHeld) => continue,
                    Ok(reply) => {
                        let _ = shared.check_release(&owner, "shutdown", reply);
                        break;
                    }
                    Err(err) => {
                        events::record(Event::CleanupFailed {
                            lock: shared.name(),
                            owner: &owner,
                            what: "release at shutdown",
                            error: &err,
                        });
                        break;
                    }
                }
            }
        });
        futures_util::future::join_all(releases).await;
        core.flush().await;
        core.stop_tasks();
        events::record(Event::ShutDown {
            client: core.id(),
            unfinished: !settled,
        });
    }

    /// What this client has done since it connected: acquisitions by
    /// outcome, handoffs, releases, renewals, locks lost by cause, pub/sub
    /// reconnects, total wait and hold time. The same counts the `metrics`
    /// feature exports, as a plain value (no exporter needed, feature or
    /// not). Each field is read on its own; see [`Statistics`].
    ///
    /// ```no_run
    /// # async fn demo(client: fairlock::LockClient) {
    /// let stats = client.statistics();
    /// println!(
    ///     "{} acquisitions, {} after waiting, {} locks lost",
    ///     stats.acquisitions(),
    ///     stats.acquired_after_wait,
    ///     stats.locks_lost()
    /// );
    /// # }
    /// ```
    pub fn statistics(&self) -> Statistics {
        self.core.events().statistics()
    }

    /// What this client holds and does right now: its holds (name, owner,
    /// hold count, held for, token), acquisitions in progress, subscribed
    /// wake-up channels and background clean-up tasks.
    ///
    /// Not atomic: each part is read on its own, so a lock granted while
    /// the status is taken can appear both held and waited for, or neither.
    /// Costs a pass over the holds registry under its lock (no Redis call).
    pub fn status(&self) -> Status {
        self.core.status()
    }

    /// This client's UUID: the first part of every owner id it makes.
    pub fn id(&self) -> &str {
        self.core.id()
    }

    /// The settings this client was built with.
    pub fn config(&self) -> &ClientConfig {
        self.core.config()
    }

    /// The server's `maxmemory-policy` as read when this client connected
    /// (`CONFIG GET`), e.g. `"noeviction"` or `"allkeys-lru"`. Any policy
    /// other than `noeviction` lets Redis evict lock keys, and an evicted
    /// lock can be taken by a second holder; connecting logs a warning then
    /// (see `docs/deployment.md`). `None` when the server would not say: the
    /// user lacks `+config|get`, or the service renamed or disabled `CONFIG`.
    pub fn maxmemory_policy(&self) -> Option<&str> {
        self.core.conn().maxmemory_policy()
    }
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.id())
            .field("config", self.config())
            .finish()
    }
}

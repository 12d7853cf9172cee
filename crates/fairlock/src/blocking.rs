//! The blocking API: the same locks for code that does not run on an async
//! runtime.
//!
//! A [`blocking::LockClient`](LockClient) owns a small Tokio runtime (one
//! worker thread) on which the connections, wake-ups and watchdog run; every
//! call blocks the calling thread until it is done.
//!
//! Reentrancy keys on the calling thread, as in Redisson: a thread that holds
//! a lock can lock it again, and [`LockHandle::unlock`] releases one hold
//! of the calling thread.
//!
//! ```no_run
//! # fn main() -> fairlock::Result<()> {
//! let client = fairlock::blocking::LockClient::connect("redis://127.0.0.1:6379")?;
//! let lock = client.fair_lock("nightly-report")?;
//! let guard = lock.lock()?;
//! let again = lock.lock()?; // same thread: re-enters, hold count 2
//! again.unlock()?;
//! guard.unlock()?;
//! # Ok(()) }
//! ```
//!
//! Every method of the async API is here under the same name, with the same
//! arguments, blocking instead of returning a future; what differs is only
//! what a thread makes possible:
//!
//! - the owner defaults to the calling thread (the async API takes a fresh
//!   one per acquisition), and the `_current_thread` methods
//!   ([`LockHandle::is_held_by_current_thread`],
//!   [`LockHandle::hold_count_current_thread`], [`LockHandle::unlock`]) ask
//!   about it, as Redisson's `isHeldByCurrentThread()`, `getHoldCount()` and
//!   `unlock()` do;
//! - the guard's lost-lock signal is a blocking wait
//!   ([`LockGuard::wait_lost`]), a check ([`LockGuard::is_lost`]), or a
//!   [`Lost`] handle another thread can wait on;
//! - dropping a guard releases before it returns, instead of in the
//!   background.
//!
//! Calling it from inside an async runtime is refused with
//! [`Error::InvalidConfig`]: use the async API there.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

mod latch;

pub use latch::CountDownLatch;

use crate::error::{Error, Result};

mod election;
use crate::{AcquireOptions, ClientConfig, LockInfo, LockKind, Owner};
pub use election::{Election, LeaderChanges, Leadership};

/// A blocking lock client. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LockClient {
    client: crate::LockClient,
    runtime: Arc<OwnedRuntime>,
}

/// The runtime behind a blocking client; shut down without blocking when the
/// last user is dropped inside an async context (where a blocking shutdown
/// would panic).
#[derive(Debug)]
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            if in_async_context() {
                runtime.shutdown_background();
            }
        }
    }
}

fn in_async_context() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_async_context() -> Result<()> {
    if in_async_context() {
        return Err(Error::InvalidConfig(
            "the blocking API cannot be used inside an async runtime; use the async API".into(),
        ));
    }
    Ok(())
}

fn block_on<F: Future>(runtime: &OwnedRuntime, future: F) -> Result<F::Output> {
    refuse_async_context()?;
    match &runtime.0 {
        Some(runtime) => Ok(runtime.block_on(future)),
        None => Err(Error::Closed),
    }
}

impl LockClient {
    /// Connect with default settings (see [`crate::LockClient::connect`]).
    ///
    /// # Errors
    /// As [`crate::LockClient::connect`].
    pub fn connect(url: &str) -> Result<Self> {
        Self::with_config(ClientConfig::from_url(url)?)
    }

    /// Connect with `config`.
    ///
    /// # Errors
    /// As [`crate::LockClient::with_config`]; [`Error::InvalidConfig`] when
    /// called inside an async runtime or when no runtime thread can be started.
    pub fn with_config(config: ClientConfig) -> Result<Self> {
        refuse_async_context()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fairlock-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::InvalidConfig(format!("cannot start a runtime: {e}")))?;
        let runtime = OwnedRuntime(Some(runtime));
        let client = block_on(&runtime, crate::LockClient::with_config(config))??;
        Ok(Self {
            client,
            runtime: Arc::new(runtime),
        })
    }

    /// A handle on the fair lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        Ok(FairLock {
            handle: self.handle(name, LockKind::Fair)?,
        })
    }

    /// A handle on the non-fair lock `name`.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            handle: self.handle(name, LockKind::NonFair)?,
        })
    }

    /// A handle on the lock `name` of a kind chosen at run time.
    ///
    /// # Errors
    /// [`Error::InvalidName`].
    pub fn handle(&self, name: &str, kind: LockKind) -> Result<LockHandle> {
        Ok(LockHandle {
            handle: self.client.handle(name, kind)?,
            client: self.clone(),
        })
    }

    /// The read-write lock `name`; see [`crate::ReadWriteLock`] for its
    /// rules. As everywhere in this API, the owner of each hold is the
    /// calling thread (its write hold's owner `THREAD_OWNER:write`), as in
    /// Redisson.
    ///
    /// # Errors
    /// As [`crate::LockClient::read_write_lock`].
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        Ok(ReadWriteLock {
            read: self.handle(name, LockKind::Read)?,
            write: self.handle(name, LockKind::Write)?,
        })
    }

    /// The semaphore `name` with `permits` permits in all; see
    /// [`crate::Semaphore`] for its rules.
    ///
    /// # Errors
    /// As [`crate::LockClient::semaphore`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Ok(Semaphore {
            semaphore: self.client.semaphore(name, permits)?,
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// The plain semaphore `name` with `permits` permits in all; see
    /// [`crate::CountingSemaphore`] (a holder that dies never gives its
    /// permits back).
    ///
    /// # Errors
    /// As [`crate::LockClient::counting_semaphore`].
    pub fn counting_semaphore(&self, name: &str, permits: u32) -> Result<CountingSemaphore> {
        Ok(CountingSemaphore {
            semaphore: self.client.counting_semaphore(name, permits)?,
            runtime: Arc::clone(&self.runtime),
        })
    }

    /// What this client has done since it connected; see
    /// [`LockClient::statistics`](crate::LockClient::statistics).
    pub fn statistics(&self) -> crate::Statistics {
        self.client.statistics()
    }

    /// What this client holds and waits for now (not atomic); see
    /// [`LockClient::status`](crate::LockClient::status).
    pub fn status(&self) -> crate::Status {
        self.client.status()
    }

    /// A new owner id, unique within this client; see
    /// [`LockClient::new_owner`](crate::LockClient::new_owner). Pass it in
    /// [`AcquireOptions::owner`] to hold a lock as something else than the
    /// calling thread.
    pub fn new_owner(&self) -> Owner {
        self.client.new_owner()
    }

    /// Block until the clean-up work of the background has finished; see
    /// [`LockClient::flush`](crate::LockClient::flush).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn flush(&self) -> Result<()> {
        block_on(&self.runtime, self.client.flush())
    }

    /// Release every hold this client still has, take its waiters out of
    /// their queues, wait for the background work, and close the client;
    /// see [`LockClient::shutdown`](crate::LockClient::shutdown). Guards
    /// still alive afterwards report [`is_held`](LockGuard::is_held)
    /// `false`; their `unlock` answers [`Error::LockLost`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime (nothing is done).
    pub fn shutdown(&self) -> Result<()> {
        block_on(&self.runtime, self.client.shutdown())
    }

    /// This client's id, the first part of its owners' ids.
    pub fn id(&self) -> &str {
        self.client.id()
    }

    /// The settings this client was made with.
    pub fn config(&self) -> &ClientConfig {
        self.client.config()
    }

    /// The server's `maxmemory-policy` as read when connecting; see
    /// [`LockClient::maxmemory_policy`](crate::LockClient::maxmemory_policy).
    pub fn maxmemory_policy(&self) -> Option<&str> {
        self.client.maxmemory_policy()
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &crate::LockClient {
        &self.client
    }

    /// The owner id of the calling thread (the same for every call on this
    /// thread, different on every other thread).
    pub fn thread_owner(&self) -> Owner {
        thread_local! {
            static OWNERS: RefCell<HashMap<String, Owner>> = RefCell::new(HashMap::new());
        }
        OWNERS.with(|owners| {
            owners
                .borrow_mut()
                .entry(self.client.id().to_owned())
                .or_insert_with(|| self.client.new_owner())
                .clone()
        })
    }
}

/// A blocking handle on one lock, fair or not: every method both kinds
/// have. [`FairLock`] and [`Lock`] dereference to it.
#[derive(Clone, Debug)]
pub struct LockHandle {
    handle: crate::LockHandle,
    client: LockClient,
}

/// A blocking read-write lock (see [`crate::ReadWriteLock`]): a read side
/// and a write side, each a [`LockHandle`].
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    read: LockHandle,
    write: LockHandle,
}

impl ReadWriteLock {
    /// The lock name.
    pub fn name(&self) -> &str {
        self.read.name()
    }

    /// The read side: shared with other readers.
    pub fn read(&self) -> &LockHandle {
        &self.read
    }

    /// The write side: nobody else holds the lock while it is held.
    pub fn write(&self) -> &LockHandle {
        &self.write
    }

    /// Both sides at one instant.
    ///
    /// # Errors
    /// As [`crate::ReadWriteLock::inspect`].
    pub fn inspect(&self) -> Result<LockInfo> {
        self.read.inspect()
    }
}

/// A blocking fair (FIFO) lock; its methods are on [`LockHandle`].
#[derive(Clone, Debug)]
pub struct FairLock {
    handle: LockHandle,
}

/// A blocking non-fair lock; its methods are on [`LockHandle`].
#[derive(Clone, Debug)]
pub struct Lock {
    handle: LockHandle,
}

crate::handle::kinds_deref_to!(LockHandle: FairLock, Lock);

impl LockHandle {
    fn run<F: Future>(&self, future: F) -> Result<F::Output> {
        block_on(&self.client.runtime, future)
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard {
            guard: Some(guard),
            runtime: Arc::clone(&self.client.runtime),
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.handle.name()
    }

    /// Fair or not.
    pub fn kind(&self) -> LockKind {
        self.handle.kind()
    }

    /// Acquire with `options`: `None` when the wait budget ran out. The
    /// owner is the calling thread unless `options` names one
    /// ([`AcquireOptions::owner`]).
    ///
    /// # Errors
    /// As [`crate::LockHandle::acquire`].
    pub fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let options = if options.has_owner() {
            options
        } else {
            options.owner(self.client.thread_owner())
        };
        let guard = self.run(self.handle.acquire(options))??;
        Ok(guard.map(|guard| self.guard(guard)))
    }

    /// Block until granted; watchdog lease. Re-enters when this thread holds it.
    ///
    /// # Errors
    /// As [`crate::LockHandle::lock`].
    pub fn lock(&self) -> Result<LockGuard> {
        self.acquire(AcquireOptions::new())?
            .ok_or_else(|| Error::Protocol("an unbounded wait ended without a grant".into()))
    }

    /// Block until granted; hold for `lease`, not renewed.
    ///
    /// # Errors
    /// As [`crate::LockHandle::lock_with_lease`].
    pub fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(AcquireOptions::new().lease(lease))?
            .ok_or_else(|| Error::Protocol("an unbounded wait ended without a grant".into()))
    }

    /// One attempt, never queues.
    ///
    /// # Errors
    /// As [`crate::LockHandle::try_lock`].
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(Duration::ZERO))
    }

    /// Wait at most `wait`.
    ///
    /// # Errors
    /// As [`crate::LockHandle::try_lock_for`].
    pub fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait))
    }

    /// Wait at most `wait`; hold for `lease`, not renewed.
    ///
    /// # Errors
    /// As [`crate::LockHandle::try_lock_for_with_lease`].
    pub fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait).lease(lease))
    }

    /// Release one hold of the calling thread (Redisson's `unlock()`), for
    /// holds whose guard was [forgotten](LockGuard::forget).
    ///
    /// # Errors
    /// [`Error::NotOwner`] when another owner holds the lock,
    /// [`Error::LockLost`] when nobody does.
    pub fn unlock(&self) -> Result<()> {
        self.unlock_as(&self.client.thread_owner())
    }

    /// Release one hold of `owner` without a guard.
    ///
    /// # Errors
    /// As [`crate::LockHandle::unlock_as`].
    pub fn unlock_as(&self, owner: &Owner) -> Result<()> {
        self.run(self.handle.unlock_as(owner))?
    }

    /// Release whoever holds the lock.
    ///
    /// # Errors
    /// As [`crate::LockHandle::force_unlock`].
    pub fn force_unlock(&self) -> Result<bool> {
        self.run(self.handle.force_unlock())?
    }

    /// `true` when somebody holds the lock.
    ///
    /// # Errors
    /// As [`crate::LockHandle::is_locked`].
    pub fn is_locked(&self) -> Result<bool> {
        self.run(self.handle.is_locked())?
    }

    /// Time until the holder's lease runs out.
    ///
    /// # Errors
    /// As [`crate::LockHandle::remaining_lease`].
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.run(self.handle.remaining_lease())?
    }

    /// How many times `owner` holds the lock (0 when it does not).
    ///
    /// # Errors
    /// As [`crate::LockHandle::hold_count`].
    pub fn hold_count(&self, owner: &Owner) -> Result<u32> {
        self.run(self.handle.hold_count(owner))?
    }

    /// How many times the calling thread holds the lock; Redisson's
    /// `getHoldCount()`.
    ///
    /// # Errors
    /// As [`crate::LockHandle::hold_count`].
    pub fn hold_count_current_thread(&self) -> Result<u32> {
        self.hold_count(&self.client.thread_owner())
    }

    /// `true` when `owner` holds the lock now, as the server says;
    /// Redisson's `isHeldByThread`.
    ///
    /// # Errors
    /// As [`crate::LockHandle::is_held_by`].
    pub fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        self.run(self.handle.is_held_by(owner))?
    }

    /// `true` when the calling thread holds the lock now, as the server
    /// says; Redisson's `isHeldByCurrentThread()`.
    ///
    /// # Errors
    /// As [`crate::LockHandle::is_held_by`].
    pub fn is_held_by_current_thread(&self) -> Result<bool> {
        self.is_held_by(&self.client.thread_owner())
    }

    /// The lock's whole state.
    ///
    /// # Errors
    /// As [`crate::LockHandle::inspect`].
    pub fn inspect(&self) -> Result<LockInfo> {
        self.run(self.handle.inspect())?
    }

    /// `owner`'s place in this lock's line: `Some((position, waiting))`
    /// while it waits in line, `None` when it does not (or the lock has no
    /// line).
    ///
    /// # Errors
    /// As [`crate::LockHandle::queue_position`].
    pub fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        self.run(self.handle.queue_position(owner))?
    }
}

impl FairLock {
    /// `owner`'s place in this lock's queue: `Some((position, waiting))`
    /// while it is queued, `None` when it is not.
    ///
    /// # Errors
    /// As [`crate::FairLock::queue_position`].
    pub fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        let handle = &self.handle;
        let typed = crate::FairLock::new(handle.handle.clone());
        handle.run(async move { typed.queue_position(owner).await })?
    }
}

/// A blocking hold of a lock.
///
/// Dropping it releases the hold before returning (blocking the thread until
/// Redis answered, within the client's retry budget), so that a hold never
/// outlives its guard, even when the program exits right after.
#[must_use = "dropping a guard releases the lock right away"]
#[derive(Debug)]
pub struct LockGuard {
    guard: Option<crate::LockGuard>,
    runtime: Arc<OwnedRuntime>,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            // Inside an async context the async guard's drop releases in the
            // background instead.
            if !in_async_context() {
                let (lock, owner) = (guard.name().to_owned(), guard.owner().clone());
                if let Ok(Err(err)) = block_on(&self.runtime, guard.unlock()) {
                    crate::events::record(crate::events::Event::CleanupFailed {
                        lock: &lock,
                        owner: &owner,
                        what: "release on drop",
                        error: &err,
                    });
                }
            }
        }
    }
}

impl LockGuard {
    /// Release this hold.
    ///
    /// # Errors
    /// As [`crate::LockGuard::unlock`].
    pub fn unlock(mut self) -> Result<()> {
        match self.guard.take() {
            Some(guard) => block_on(&self.runtime, guard.unlock())?,
            None => Ok(()),
        }
    }

    /// Keep the hold without a guard: it is released by
    /// [`LockHandle::unlock`] on the same thread, by `force_unlock`, or when
    /// its lease runs out (the watchdog stops renewing it now).
    pub fn forget(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.forget();
        }
    }

    /// Acquire the lock once more as the same owner; see
    /// [`crate::LockGuard::reenter`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::reenter`].
    pub fn reenter(&self) -> Result<Option<LockGuard>> {
        let guard = block_on(&self.runtime, self.held().reenter())??;
        Ok(guard.map(|guard| LockGuard {
            guard: Some(guard),
            runtime: Arc::clone(&self.runtime),
        }))
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.held().name()
    }

    /// The fencing token, where the protocol gives one.
    pub fn token(&self) -> Option<u64> {
        self.held().token()
    }

    /// `false` once the hold is known lost; see
    /// [`crate::LockGuard::is_held`]. Never blocks.
    pub fn is_held(&self) -> bool {
        self.held().is_held()
    }

    /// `true` once the hold is known lost (or its lease may have run out);
    /// the opposite of [`is_held`](Self::is_held). Never blocks.
    pub fn is_lost(&self) -> bool {
        !self.is_held()
    }

    /// Block until the hold is lost, for at most `timeout`: `true` when it
    /// was (or already is) lost, `false` when `timeout` passed with the
    /// hold kept. The same signal as [`crate::LockGuard::lost`].
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.lost().wait_timeout(timeout)
    }

    /// A handle on this hold's lost-lock signal that outlives a borrow of
    /// the guard: move it to a watcher thread, which blocks on
    /// [`Lost::wait`] and stops the work when the lock is lost.
    pub fn lost(&self) -> Lost {
        Lost {
            lost: std::sync::Mutex::new(Box::pin(self.held().lost())),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// The owner of this hold (the thread that took it, unless the
    /// acquisition named another).
    pub fn owner(&self) -> &Owner {
        self.held().owner()
    }

    fn held(&self) -> &crate::LockGuard {
        // Only `unlock`, `forget` and `drop` take the inner guard, and each
        // consumes `self`: no method can see it empty.
        match &self.guard {
            Some(guard) => guard,
            None => unreachable!("a blocking guard is emptied only as it goes"),
        }
    }
}

/// A blocking guard's lost-lock signal ([`LockGuard::lost`]): fires when the
/// hold is lost or may be (a renewal found another owner or none, the lease
/// ran out without a renewal), and once the hold is released.
///
/// `Send + Sync + 'static`: it does not keep the hold alive, and any thread
/// may wait on it.
pub struct Lost {
    lost: std::sync::Mutex<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
    runtime: Arc<OwnedRuntime>,
}

impl Lost {
    /// Block until the hold is lost.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn wait(&self) -> Result<()> {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        block_on(&self.runtime, lost.as_mut())
    }

    /// Block until the hold is lost, for at most `timeout`: `true` when it
    /// was lost, `false` when `timeout` passed first.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        // The timer is made inside the runtime, which drives it.
        let waited = block_on(&self.runtime, async {
            tokio::time::timeout(timeout, lost.as_mut()).await
        })?;
        Ok(waited.is_ok())
    }

    /// `true` when the hold is lost now; does not wait.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn is_lost(&self) -> Result<bool> {
        self.wait_timeout(Duration::ZERO)
    }
}

impl std::fmt::Debug for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lost").finish_non_exhaustive()
    }
}

/// A blocking semaphore with leased permits (see [`crate::Semaphore`]).
///
/// ```no_run
/// # fn main() -> fairlock::Result<()> {
/// let client = fairlock::blocking::LockClient::connect("redis://127.0.0.1:6379")?;
/// let quota = client.semaphore("api-quota", 8)?;
/// let permits = quota.acquire(2)?;
/// // ... at most 8 permits out across all clients ...
/// permits.release()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    semaphore: crate::Semaphore,
    runtime: Arc<OwnedRuntime>,
}

impl Semaphore {
    fn permits(&self, permits: crate::Permits) -> Permits {
        Permits {
            permits: Some(permits),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Take `n` permits, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire`].
    pub fn acquire(&self, n: u32) -> Result<Permits> {
        let permits = block_on(&self.runtime, self.semaphore.acquire(n))??;
        Ok(self.permits(permits))
    }

    /// Take `n` permits if they are free now.
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire`].
    pub fn try_acquire(&self, n: u32) -> Result<Option<Permits>> {
        let permits = block_on(&self.runtime, self.semaphore.try_acquire(n))??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// Take `n` permits, waiting at most `wait`.
    ///
    /// # Errors
    /// As [`crate::Semaphore::try_acquire_for`].
    pub fn try_acquire_for(&self, n: u32, wait: Duration) -> Result<Option<Permits>> {
        let permits = block_on(&self.runtime, self.semaphore.try_acquire_for(n, wait))??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// Take `n` permits with `lease`, waiting at most `wait` (`None`: as
    /// long as it takes).
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire_with`].
    pub fn acquire_with(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: crate::PermitLease,
    ) -> Result<Option<Permits>> {
        let permits = block_on(&self.runtime, self.semaphore.acquire_with(n, wait, lease))??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// Take `n` permits as `owner` (see [`crate::Semaphore::acquire_as`]).
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire_as`].
    pub fn acquire_as(
        &self,
        owner: &Owner,
        n: u32,
        wait: Option<Duration>,
        lease: crate::PermitLease,
    ) -> Result<Option<Permits>> {
        let acquire = self.semaphore.acquire_as(owner, n, wait, lease);
        let permits = block_on(&self.runtime, acquire)??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// `owner`'s place in the semaphore's line (native; `None` under
    /// redisson).
    ///
    /// # Errors
    /// As [`crate::Semaphore::queue_position`].
    pub fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        block_on(&self.runtime, self.semaphore.queue_position(owner))?
    }

    /// The permits free to take now.
    ///
    /// # Errors
    /// As [`crate::Semaphore::available`].
    pub fn available(&self) -> Result<i64> {
        block_on(&self.runtime, self.semaphore.available())?
    }

    /// Every permit at one instant.
    ///
    /// # Errors
    /// As [`crate::Semaphore::inspect`].
    pub fn inspect(&self) -> Result<crate::SemaphoreInfo> {
        block_on(&self.runtime, self.semaphore.inspect())?
    }

    /// Give back every taken permit, whoever holds it: how many were given
    /// back.
    ///
    /// # Errors
    /// As [`crate::Semaphore::force_release`].
    pub fn force_release(&self) -> Result<u64> {
        block_on(&self.runtime, self.semaphore.force_release())?
    }

    /// Make the total `permits`.
    ///
    /// # Errors
    /// As [`crate::Semaphore::set_permits`].
    pub fn set_permits(&self, permits: u32) -> Result<()> {
        block_on(&self.runtime, self.semaphore.set_permits(permits))?
    }

    /// The async semaphore behind this one.
    pub fn as_async(&self) -> &crate::Semaphore {
        &self.semaphore
    }
}

/// Blocking permits of a [`Semaphore`]: dropping the guard gives them back
/// before it returns (in the background inside an async context).
#[must_use = "dropping the guard gives the permits back right away"]
#[derive(Debug)]
pub struct Permits {
    permits: Option<crate::Permits>,
    runtime: Arc<OwnedRuntime>,
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some(permits) = self.permits.take() {
            if !in_async_context() {
                let name = permits.name().to_owned();
                if let Ok(Err(err)) = block_on(&self.runtime, permits.release()) {
                    crate::events::record(crate::events::Event::CleanupFailed {
                        lock: &name,
                        owner: &Owner::from_raw("permits"),
                        what: "release on drop",
                        error: &err,
                    });
                }
            }
        }
    }
}

impl Permits {
    fn held(&self) -> &crate::Permits {
        match &self.permits {
            Some(permits) => permits,
            None => unreachable!("a blocking guard is emptied only as it goes"),
        }
    }

    /// Give the permits back.
    ///
    /// # Errors
    /// As [`crate::Permits::release`].
    pub fn release(mut self) -> Result<()> {
        match self.permits.take() {
            Some(permits) => block_on(&self.runtime, permits.release())?,
            None => Ok(()),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.held().name()
    }

    /// The permit ids (see [`crate::Permits::ids`]).
    pub fn ids(&self) -> &[String] {
        self.held().ids()
    }

    /// The acquisition's fencing token (`native`; `None` under `redisson`).
    pub fn token(&self) -> Option<u64> {
        self.held().token()
    }

    /// `false` once a permit is known lost; never blocks.
    pub fn is_held(&self) -> bool {
        self.held().is_held()
    }

    /// Block until a permit is lost, for at most `timeout`: `true` when one
    /// was (or already is).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] inside an async runtime.
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        let lost = self.held().lost();
        let waited = block_on(&self.runtime, async {
            tokio::time::timeout(timeout, lost).await
        })?;
        Ok(waited.is_ok())
    }
}

/// A blocking plain semaphore (see [`crate::CountingSemaphore`]).
#[derive(Clone, Debug)]
pub struct CountingSemaphore {
    semaphore: crate::CountingSemaphore,
    runtime: Arc<OwnedRuntime>,
}

impl CountingSemaphore {
    fn permits(&self, permits: crate::CountedPermits) -> CountedPermits {
        CountedPermits {
            permits: Some(permits),
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// Take `n` permits, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`crate::CountingSemaphore::acquire`].
    pub fn acquire(&self, n: u32) -> Result<CountedPermits> {
        let permits = block_on(&self.runtime, self.semaphore.acquire(n))??;
        Ok(self.permits(permits))
    }

    /// Take `n` permits if they are free now.
    ///
    /// # Errors
    /// As [`crate::CountingSemaphore::acquire`].
    pub fn try_acquire(&self, n: u32) -> Result<Option<CountedPermits>> {
        let permits = block_on(&self.runtime, self.semaphore.try_acquire(n))??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// Take `n` permits, waiting at most `wait`.
    ///
    /// # Errors
    /// As [`crate::CountingSemaphore::try_acquire_for`].
    pub fn try_acquire_for(&self, n: u32, wait: Duration) -> Result<Option<CountedPermits>> {
        let permits = block_on(&self.runtime, self.semaphore.try_acquire_for(n, wait))??;
        Ok(permits.map(|p| self.permits(p)))
    }

    /// The permits free to take now.
    ///
    /// # Errors
    /// As [`crate::CountingSemaphore::available`].
    pub fn available(&self) -> Result<i64> {
        block_on(&self.runtime, self.semaphore.available())?
    }
}

/// Blocking permits of a [`CountingSemaphore`]: dropping the guard gives
/// them back before it returns.
#[must_use = "dropping the guard gives the permits back right away"]
#[derive(Debug)]
pub struct CountedPermits {
    permits: Option<crate::CountedPermits>,
    runtime: Arc<OwnedRuntime>,
}

impl Drop for CountedPermits {
    fn drop(&mut self) {
        if let Some(permits) = self.permits.take() {
            if !in_async_context() {
                let name = permits.name().to_owned();
                if let Ok(Err(err)) = block_on(&self.runtime, permits.release()) {
                    crate::events::record(crate::events::Event::CleanupFailed {
                        lock: &name,
                        owner: &Owner::from_raw("permits"),
                        what: "release on drop",
                        error: &err,
                    });
                }
            }
        }
    }
}

impl CountedPermits {
    /// Give the permits back.
    ///
    /// # Errors
    /// As [`crate::CountedPermits::release`].
    pub fn release(mut self) -> Result<()> {
        match self.permits.take() {
            Some(permits) => block_on(&self.runtime, permits.release())?,
            None => Ok(()),
        }
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.permits
            .as_ref()
            .map_or(0, crate::CountedPermits::permits)
    }
}

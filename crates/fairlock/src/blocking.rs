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
//! Calling it from inside an async runtime is refused with
//! [`Error::InvalidConfig`]: use the async API there.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::{AcquireOptions, ClientConfig, LockInfo, LockKind, Owner};

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

    fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let options = options.owner(self.client.thread_owner());
        let guard = self.run(self.handle.acquire(options))??;
        Ok(guard.map(|guard| LockGuard {
            guard: Some(guard),
            runtime: Arc::clone(&self.client.runtime),
        }))
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.handle.name()
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
        self.run(self.handle.unlock_as(&self.client.thread_owner()))?
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

    /// How many times the calling thread holds the lock.
    ///
    /// # Errors
    /// As [`crate::LockHandle::hold_count`].
    pub fn hold_count(&self) -> Result<u32> {
        self.run(self.handle.hold_count(&self.client.thread_owner()))?
    }

    /// The lock's whole state.
    ///
    /// # Errors
    /// As [`crate::LockHandle::inspect`].
    pub fn inspect(&self) -> Result<LockInfo> {
        self.run(self.handle.inspect())?
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
    fn inner(&self) -> Option<&crate::LockGuard> {
        self.guard.as_ref()
    }

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

    /// The fencing token, where the protocol gives one.
    pub fn token(&self) -> Option<u64> {
        self.inner().and_then(crate::LockGuard::token)
    }

    /// `false` once the hold is known lost.
    pub fn is_held(&self) -> bool {
        self.inner().is_some_and(crate::LockGuard::is_held)
    }

    /// The owner of this hold (the thread that took it).
    pub fn owner(&self) -> Option<&Owner> {
        self.inner().map(crate::LockGuard::owner)
    }
}

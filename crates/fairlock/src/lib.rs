//! Distributed fair (FIFO) and reentrant locks on Redis: fairlock's own
//! `native` protocol (server time, direct handoff, fencing tokens), or
//! Redisson's `RFairLock` / `RLock` protocol, byte for byte, to share locks
//! with Java services.
//!
//! ```no_run
//! # async fn demo() -> fairlock::Result<()> {
//! use std::time::Duration;
//!
//! let client = fairlock::LockClient::connect("redis://127.0.0.1:6379").await?;
//! let lock = client.fair_lock("invoices")?;
//!
//! // Wait in line; the watchdog keeps the lease alive while the guard lives.
//! let guard = lock.lock().await?;
//! tokio::select! {
//!     () = do_the_work() => guard.unlock().await?,
//!     () = guard.lost() => eprintln!("lost the lock; stopping"),
//! }
//!
//! // Or give up after five seconds.
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(5)).await? {
//!     guard.unlock().await?;
//! }
//! # Ok(()) }
//! # async fn do_the_work() {}
//! ```
//!
//! # Fairness
//!
//! A [`FairLock`] grants the lock to waiters in the order in which their
//! first attempt reached Redis, across clients, processes and machines. A
//! [`Lock`] is not fair: a released lock goes to whichever waiter retries
//! first.
//!
//! Under the [`native`](Protocol::Native) protocol (the default) a live
//! waiter keeps its place however long it waits; it refreshes its place
//! every third of [`ClientConfig::waiter_ttl`] (6 s by default), and a waiter
//! whose process died is skipped once that ran out. A release hands the lock
//! directly to the next waiter, which proceeds without another round trip.
//!
//! Under the [`redisson`](Protocol::Redisson) protocol a queued waiter keeps
//! its place for its *waiter slot* ([`ClientConfig::waiter_slot`], 300 s by
//! default, or the wait of `try_lock_for`) beyond the waiter ahead of it:
//! Redisson's rule, with its known weaknesses (deadlines come from client
//! clocks, live waiters are dropped once their slot ran out).
//!
//! The two protocols never exclude each other, even on the same name: all
//! clients of one lock must use the same protocol.
//!
//! # Read-write locks and semaphores
//!
//! Under the `redisson` protocol, [`LockClient::read_write_lock`] is
//! Redisson's `RReadWriteLock` ([`ReadWriteLock`]), [`LockClient::semaphore`]
//! its `RPermitExpirableSemaphore` ([`Semaphore`]: permits with leases, given
//! back when a holder dies) and [`LockClient::counting_semaphore`] its
//! `RSemaphore` ([`CountingSemaphore`]: a bare counter), each byte for byte.
//! None of them is fair (Redisson's have no queue). Under `native` the
//! read-write lock and the semaphore are fair (one line, first come first
//! served, a fencing token per acquisition); the counting semaphore is
//! Redisson's only. [`Semaphore::inspect`] shows who holds how many permits
//! and who waits for how many; [`Semaphore::force_release`] gives every
//! permit back.
//!
//! # Leader election
//!
//! Under `native`, [`LockClient::election`] elects one leader at a time on
//! the fair lock of the same name: candidates lead in arrival order, a
//! term ([`Leadership::term`]) is the leader's fencing token, the value it
//! publishes is fenced by it, and [`Election::observe`] returns every change
//! of leader in order (`docs/election.md`).
//!
//! # Count-down latches
//!
//! [`LockClient::count_down_latch`] gives a [`CountDownLatch`]: set to a
//! count, counted down by any client, waited for until the count reaches
//! 0; one message wakes every waiter. Under `redisson` it is Redisson's
//! `RCountDownLatch`, byte for byte; under `native` it expires when
//! abandoned and a party counts down once however often it retries.
//!
//! # Fencing tokens
//!
//! Under `native`, every acquisition (not re-entry) carries a 64-bit token,
//! [`LockGuard::token`], strictly greater than every earlier token of that
//! lock, also after its keys expired or Redis lost its data. Pass it with
//! every write to the resource the lock protects, and have the resource
//! refuse a token lower than the highest it has seen: a holder that was
//! paused past its lease can then no longer overwrite its successor's work.
//!
//! # Reentrancy
//!
//! A lock is held by an [`Owner`] (`CLIENT_UUID:N`, Redisson's field
//! format). An owner that holds a lock may acquire it again; each hold is
//! released separately. Async tasks move between threads, so every
//! [`lock`](LockHandle::lock) call uses a fresh owner; re-enter through
//! [`LockGuard::reenter`] or by passing the owner in [`AcquireOptions`]. The
//! [`blocking`] API keys reentrancy on the calling thread, as Redisson does.
//!
//! # Leases and the watchdog
//!
//! Every hold has a lease: if its client dies, the lock frees itself when the
//! lease runs out. Locks taken without an explicit lease get the client's
//! lease (30 s by default) and are renewed by the client's watchdog every
//! third of it, in batches, while the guard lives. Locks taken with an
//! explicit lease ([`lock_with_lease`](LockHandle::lock_with_lease)) are never
//! renewed. When a renewal finds the lock gone or held by someone else, or
//! renewals fail until the lease has run out, the guard's
//! [`lost`](LockGuard::lost) future resolves and
//! [`is_held`](LockGuard::is_held) turns `false`: stop touching what the lock
//! protects.
//!
//! # Settings from the URL and the environment
//!
//! Every setting of [`ClientConfig`] but the TLS material and the metrics
//! label can come from text: a Redis URL's query parameters
//! ([`ClientConfig::from_url`], so [`LockClient::connect`] too), or the
//! environment ([`ClientConfig::from_env`]: the URL from `FAIRLOCK_URL`,
//! else `REDIS_URL`, and one `FAIRLOCK_*` variable per setting, which
//! replaces the URL's parameter). Durations are humantime's (`500ms`,
//! `30s`, `5m`, `1h30m`); each value is checked as the builder's are, and a
//! bad one is refused with [`Error::InvalidConfig`] or
//! [`Error::InvalidDuration`] naming the parameter or variable. There is no
//! client label setting yet, so no `FAIRLOCK_LABEL`.
//!
//! ```no_run
//! # async fn demo() -> fairlock::Result<()> {
//! // The same settings, from the URL...
//! let client = fairlock::LockClient::connect(
//!     "redis://locks.internal:6379/0?protocol=redisson&lease=30s&waiter_slot=60s&response_timeout=3s",
//! )
//! .await?;
//! // ...or from FAIRLOCK_URL (or REDIS_URL), FAIRLOCK_PROTOCOL, FAIRLOCK_LEASE, ...
//! let client = fairlock::LockClient::with_config(fairlock::ClientConfig::from_env()?).await?;
//! # Ok(()) }
//! ```
//!
//! # Coming from Redisson
//!
//! Redisson's `RLock` / `RFairLock` methods and their counterparts. The
//! async API takes an explicit [`Owner`] where Redisson takes a thread (tasks
//! move between threads); the [`blocking`] API keys on the calling thread,
//! as Redisson does.
//!
//! | Redisson | async ([`LockHandle`], [`LockGuard`]) | [`blocking`] |
//! | --- | --- | --- |
//! | `getFairLock(name)` / `getLock(name)` | [`LockClient::fair_lock`] / [`LockClient::lock`] | the same |
//! | `lock()` | [`lock`](LockHandle::lock)`.await` | [`lock`](blocking::LockHandle::lock) |
//! | `lock(leaseTime, unit)` | [`lock_with_lease`](LockHandle::lock_with_lease) | [`lock_with_lease`](blocking::LockHandle::lock_with_lease) |
//! | `tryLock()` | [`try_lock`](LockHandle::try_lock) | [`try_lock`](blocking::LockHandle::try_lock) |
//! | `tryLock(waitTime, unit)` | [`try_lock_for`](LockHandle::try_lock_for) | [`try_lock_for`](blocking::LockHandle::try_lock_for) |
//! | `tryLock(waitTime, leaseTime, unit)` | [`try_lock_for_with_lease`](LockHandle::try_lock_for_with_lease) | [`try_lock_for_with_lease`](blocking::LockHandle::try_lock_for_with_lease) |
//! | `lockInterruptibly()` | drop the `lock()` future: the waiter leaves the queue | none (a blocking wait is not interrupted) |
//! | `unlock()` | [`LockGuard::unlock`]; [`unlock_as`](LockHandle::unlock_as)`(&owner)` without a guard | [`LockGuard::unlock`](blocking::LockGuard::unlock); [`unlock`](blocking::LockHandle::unlock) (the calling thread's hold) |
//! | `forceUnlock()` | [`force_unlock`](LockHandle::force_unlock) | [`force_unlock`](blocking::LockHandle::force_unlock) |
//! | `isLocked()` | [`is_locked`](LockHandle::is_locked) | [`is_locked`](blocking::LockHandle::is_locked) |
//! | `isHeldByThread(threadId)` | [`is_held_by`](LockHandle::is_held_by)`(&owner)` | [`is_held_by`](blocking::LockHandle::is_held_by)`(&owner)` |
//! | `isHeldByCurrentThread()` | [`is_held_by`](LockHandle::is_held_by)`(guard.owner())` | [`is_held_by_current_thread`](blocking::LockHandle::is_held_by_current_thread) |
//! | `getHoldCount()` | [`hold_count`](LockHandle::hold_count)`(&owner)` | [`hold_count_current_thread`](blocking::LockHandle::hold_count_current_thread), [`hold_count`](blocking::LockHandle::hold_count)`(&owner)` |
//! | `remainTimeToLive()` | [`remaining_lease`](LockHandle::remaining_lease) (`None` when free, where Redisson answers -2) | [`remaining_lease`](blocking::LockHandle::remaining_lease) |
//! | `getName()` | [`name`](LockHandle::name) | [`name`](blocking::LockHandle::name) |
//! | `lockAsync()`, `tryLockAsync(..)`, `unlockAsync()`, ... | the async API itself | |
//! | the watchdog's `lockWatchdogTimeout` | [`ClientConfig::lease`] (renewed every third) | the same |
//! | `fairLockWaitTimeout` | [`ClientConfig::waiter_slot`] | the same |
//! | `checkLockSyncedSlaves`, `slavesSyncTimeout` | [`ClientConfig::min_replicas`] | the same |
//! | `redisson.shutdown()` | [`LockClient::shutdown`] | [`shutdown`](blocking::LockClient::shutdown) |
//! | `newCondition()` | none | none |
//!
//! Beyond Redisson: [`LockGuard::lost`] (resolves when the hold is lost;
//! blocking: [`wait_lost`](blocking::LockGuard::wait_lost),
//! [`is_lost`](blocking::LockGuard::is_lost), [`lost`](blocking::LockGuard::lost)),
//! [`LockGuard::token`] (fencing tokens, `native`),
//! [`FairLock::queue_position`] and [`inspect`](LockHandle::inspect).
//!
//! # Cancel safety
//!
//! Every async method documents what dropping its future does. In short:
//! dropping a waiting [`lock`](LockHandle::lock) or
//! [`try_lock_for`](LockHandle::try_lock_for) future at any await point takes
//! the waiter out of the queue, and if the grant raced the drop the lock is
//! released; no ghost waiter or leaked hold is left. Dropping a
//! [`LockGuard`] releases its hold in the background.
//!
//! # Shutting down
//!
//! A dropped guard is released by a background task. At the end of `main`
//! the runtime stops before that task runs, and the lock stays held until
//! its lease ends (30 s by default). Call [`LockClient::shutdown`] before
//! returning: it releases every hold the client still has, takes its waiters
//! out of their queues and waits for all background work.
//!
//! # Errors
//!
//! One [`Error`] type, `#[non_exhaustive]`, with predicates
//! ([`is_lock_lost`](Error::is_lock_lost), [`is_connection`](Error::is_connection),
//! [`is_auth`](Error::is_auth), [`is_invalid_input`](Error::is_invalid_input)).
//! Running out of a wait budget is not an error: `try_lock*` answer `None`. Bad input is refused before
//! anything is sent: empty names, names over [`MAX_NAME_LEN`], names whose
//! braces do not form a cluster hash tag (Redisson wraps a name without `{` as
//! `prefix:{NAME}` and uses a name with `{` as it is, so a name with braces
//! must contain one non-empty `{tag}`), durations under 1 ms or over
//! [`MAX_DURATION`].
//!
//! Connecting tells apart what a user can get wrong: a URL that does not
//! parse ([`Error::InvalidConfig`], naming the accepted forms), a server that
//! cannot be reached ([`Error::Connection`]), an address where something
//! other than Redis answers ([`Error::NotRedis`]), refused credentials
//! ([`Error::Auth`]), and a database number the server does not have
//! ([`Error::InvalidConfig`]).
//!
//! # Deployment
//!
//! Keep locks on a Redis with `maxmemory-policy noeviction`: under any other
//! policy Redis may evict a held lock's key (every lock key has a TTL, so
//! `volatile-*` policies too), and a second client then takes the lock.
//! Connecting logs a warning when the policy is another one;
//! [`LockClient::maxmemory_policy`] returns what was read. The minimal ACL
//! rules of each protocol are in `docs/deployment.md`.
//!
//! # Feature flags
//!
//! - `tls` (default): `rediss://` URLs, through rustls with the webpki roots.
//! - `metrics`: counters, gauges and histograms through the
//!   [`metrics`](https://docs.rs/metrics) facade, for any exporter
//!   (Prometheus, StatsD, OpenTelemetry); see `docs/observability.md`.
//!   [`LockClient::statistics`] and [`LockClient::status`] work without it.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]

mod acquire;
pub mod blocking;
mod client;
mod config;
mod core;
mod decimal;
mod disarm;
mod election;
mod error;
mod events;
mod guard;
mod handle;
mod hold;
mod kind;
mod label;
mod latch;
mod meters;
mod name;
mod owner;
mod protocol;
mod read_write;
mod retry;
mod semaphore;
mod settings;
mod stats;
mod transport;
mod wakeup;
mod watchdog;

pub use acquire::AcquireOptions;
pub use client::LockClient;
pub use config::{ClientConfig, MAX_DURATION};
pub use election::{Election, Leader, LeaderChanges, Leadership, MAX_LEADER_VALUE_LEN};
pub use error::{AclRefusal, Error, RedisError, Result};
pub use guard::LockGuard;
pub use handle::{FairLock, Lock, LockHandle};
pub use kind::LockKind;
pub use label::MAX_LABEL_LEN;
pub use latch::{CountDownLatch, LatchInfo, MAX_LATCH_COUNT, MAX_PARTY_LEN};
pub use meters::LockLabel;
pub use name::MAX_NAME_LEN;
pub use owner::Owner;
pub use protocol::{HoldMode, Holder, LockInfo, Protocol, QueuedWaiter};
pub use read_write::ReadWriteLock;
pub use semaphore::{
    CountedPermits, CountingSemaphore, PermitLease, Permits, Semaphore, SemaphoreInfo,
    SemaphoreKind, TakenPermit,
};
pub use stats::{HeldLock, Statistics, Status};

/// The README's examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

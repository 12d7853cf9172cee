//! The semaphores: [`Semaphore`] (permits with leases, that come back when
//! their holder dies) and [`CountingSemaphore`] (a plain counter).
//!
//! Both wait the same way ([`wait_for`]): one attempt; when busy, subscribe
//! to the semaphore's channel through the client's wake-up router, try
//! again (a release between the two attempts is not missed), then wait for
//! a message, the end of the soonest lease, or [`max_pause`] (whichever
//! comes first), and try again, until taken or the wait's budget is spent.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::{AcquireOptions, WakePacer};
use crate::config::check_duration;
use crate::core::ClientCore;
use crate::disarm::DisarmOnDrop;
use crate::error::{Error, Result};
use crate::events::{self, Event, LostCause};
use crate::guard::LockGuard;
use crate::handle::LockHandle;
use crate::owner::Owner;
use crate::protocol::native::read_write::NativeRwLock;
use crate::protocol::redisson::semaphore::{
    self as protocol, CounterAcquire, CountingSemaphore as CountingObject, ExpirableSemaphore,
    NOEXP, SemAcquire,
};
use crate::protocol::{ProtocolLock, QueuedWaiter};
use crate::watchdog::HeldState;

/// The shortest pause between two attempts of a waiter: a soonest lease
/// that already ended on this client's clock (its permit is reclaimed by
/// the next attempt) must not turn the wait into a busy loop.
const MIN_PAUSE: Duration = Duration::from_millis(10);

/// The longest pause between two attempts of a waiter that no message
/// woke: a third of the client's waiter ttl (2 s by default), as for every
/// lock. A lost message costs at most this long.
fn max_pause(core: &ClientCore) -> Duration {
    crate::protocol::refresh_interval(core.config().waiter_ttl)
}

/// How long permits are leased: until their guard releases them, the
/// permits of a holder that died come back when their lease ends (any
/// client's next call reclaims them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PermitLease {
    /// The client's lease ([`ClientConfig::lease`](crate::ClientConfig::lease),
    /// 30 s by default), renewed by a watchdog every third of it while the
    /// guard lives (the default).
    #[default]
    Watchdog,
    /// This lease, never renewed: the permits come back when it ends, guard
    /// or not. At least 1 ms, at most [`MAX_DURATION`](crate::MAX_DURATION).
    Fixed(Duration),
    /// No lease at all (Redisson's `acquire()` without a lease): the
    /// permits are taken until released. **A holder that crashes loses
    /// them for good**: nothing but [`Semaphore::set_permits`] (or a
    /// Redisson `addPermits`) gives them back. Under `redisson` only: the
    /// `native` semaphore refuses it with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) (every one of
    /// its holds ends with its lease).
    Unbounded,
}

/// What one attempt found.
enum Attempt<T> {
    Done(T),
    /// Busy: try again after a message, or at most after this long.
    Busy(Option<Duration>),
}

/// Wait for `attempt` to succeed within `wait` (`None`: forever; zero: one
/// attempt), listening on `channel` between attempts. `Ok(None)` when the
/// budget ran out.
///
/// `attempt` is given the last instant at which a call of it that failed
/// on the connection may be sent again: the wait's deadline (so that a
/// wait ends within its budget and one response timeout, whatever the
/// network does, and a zero wait is one call), or the retry budget from
/// now for a wait without a bound.
async fn wait_for<T, F, Fut>(
    core: &ClientCore,
    channel: &str,
    wait: Option<Duration>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut(Instant) -> Fut,
    Fut: std::future::Future<Output = Result<Attempt<T>>>,
{
    if let Some(wait) = wait.filter(|w| !w.is_zero()) {
        check_duration("wait", wait)?;
    }
    let _counted = core.enter_acquisition()?;
    let closing = core.closing();
    let deadline = wait.map(|wait| Instant::now() + wait);
    let mut subscription: Option<crate::wakeup::Subscription> = None;
    // Every release wakes every waiter of a Redisson semaphore: paced, not
    // an attempt per message.
    let mut pacer = WakePacer::default();
    loop {
        if let Some(subscription) = &mut subscription {
            subscription.mark_seen();
        }
        let retry_until = deadline.unwrap_or_else(|| Instant::now() + core.config().retry_budget);
        let hint = match attempt(retry_until).await? {
            Attempt::Done(value) => return Ok(Some(value)),
            Attempt::Busy(hint) => hint,
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Ok(None);
        }
        let Some(listening) = &mut subscription else {
            // Subscribed, then at once another attempt: a release published
            // before the subscription was made is seen by that attempt.
            // Waiting for the server's confirmation ends with the wait.
            let mut confirm = core.config().response_timeout;
            if let Some(left) = left {
                confirm = confirm.min(left);
            }
            subscription = Some(core.wakeups().subscribe(channel, confirm).await);
            continue;
        };
        let mut pause = max_pause(core);
        if let Some(hint) = hint {
            pause = pause.min(hint.max(MIN_PAUSE));
        }
        if let Some(left) = left {
            pause = pause.min(left);
        }
        let woken = tokio::select! {
            woken = listening.wait(pause) => woken,
            () = closing.cancelled() => return Err(Error::Closed),
        };
        pacer.pace(&woken, deadline, &closing).await?;
    }
}

/// The part of a Redisson semaphore its guards and background work share.
struct Shared {
    core: Arc<ClientCore>,
    object: ExpirableSemaphore,
}

/// A semaphore whose permits have leases. Get one with
/// [`LockClient::semaphore`](crate::LockClient::semaphore): under the
/// `native` protocol it is fair (first come, first served, with a fencing
/// token per acquisition); under `redisson` it is Redisson's
/// `RPermitExpirableSemaphore` (`redisson.getPermitExpirableSemaphore(name)`),
/// byte for byte, so Java services share it.
///
/// At most its total of permits are out at once. Each acquisition takes
/// `n` permits and returns a [`Permits`] guard that gives them back. The
/// permits of a holder that died come back when their lease ends; a live
/// holder's (renewed by the watchdog) never do. The page
/// `docs/semaphore.md` has both protocols' guarantees side by side.
///
/// ```no_run
/// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
/// use std::time::Duration;
///
/// let quota = client.semaphore("api-quota", 8)?; // 8 permits in all
/// let permits = quota.acquire(2).await?; // waits for 2 of them
/// tokio::select! {
///     () = call_the_api() => permits.release().await?,
///     () = permits.lost() => eprintln!("permits lost; stopping"),
/// }
/// if let Some(one) = quota.try_acquire_for(1, Duration::from_secs(5)).await? {
///     one.release().await?;
/// }
/// # Ok(()) }
/// # async fn call_the_api() {}
/// ```
///
/// # Under `redisson`
/// - **Not fair.** There is no queue: whichever waiter's attempt reaches
///   Redis first after a release takes the permits, and a large request
///   may wait while small ones keep taking what comes back.
/// - **Client clocks decide expiry.** A lease's end is written as the
///   taking client's wall-clock time, and a permit is reclaimed when any
///   client's clock has passed it: keep the clocks synchronised (NTP). A
///   client whose clock runs ahead reclaims live permits early.
/// - **The total** is set when the semaphore does not exist yet (by the
///   first call of a client given `permits`, as Redisson's
///   `trySetPermits`); an existing semaphore keeps its own total, which
///   [`set_permits`](Self::set_permits) changes.
/// - **Waiting** listens on `redisson_sc:{NAME}` and tries again on every
///   message, when the soonest lease ends, and at least every third of the
///   client's waiter ttl (2 s by default) in case a message is lost.
///
/// # Under `native`
/// - **Fair (FIFO).** A request is granted at once only when its permits
///   are free and nobody waits; otherwise it waits in line. A release (or
///   a reclaim) hands the permits to the head of the line, then to the
///   next while they fit: **a large request at the head is not overtaken**
///   by small ones behind it, so permits may idle meanwhile.
/// - **Fencing tokens**: each acquisition's [`Permits::token`], strictly
///   increasing.
/// - **Server time only**; a holder that crashed stops counting when its
///   lease ends (the watchdog's 30 s by default, or the explicit one), a
///   waiter that died when its waiter ttl does; every key expires on its
///   own. The total is kept while the semaphore is used and 20 s after:
///   a semaphore nobody held or waited for since then takes its total
///   again from the next call's `permits`.
/// - [`PermitLease::Unbounded`] is refused: every hold has a lease.
/// - The semaphore and the lock of one name are two objects (their keys,
///   `fairlock:{NAME}:sem:...`, differ).
#[derive(Clone)]
pub struct Semaphore {
    backend: Backend,
}

/// The protocol behind a semaphore.
#[derive(Clone)]
enum Backend {
    Redisson(Arc<Shared>),
    /// The native semaphore: each acquisition is a hold of the weighted
    /// engine (a fresh owner weighing its permits), through the lock's
    /// acquisition machinery (line, grant messages, watchdog, give-up).
    Native(LockHandle),
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// One taken permit, in a [`SemaphoreInfo`]: under `native` one
/// acquisition (its `n` permits), under `redisson` one permit.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakenPermit {
    /// The permit id: under `native` the acquisition's owner id
    /// (`CLIENT_UUID:N`, as [`Permits::ids`] shows it); under `redisson`
    /// 32 lowercase hex digits (Redisson shows it so).
    pub id: String,
    /// Who holds it: the owner id (`CLIENT_UUID:N`) under `native`. `None`
    /// under `redisson`, whose permit ids record no owner (a random id per
    /// permit, the same for a Java and a fairlock holder).
    pub owner: Option<String>,
    /// The label of the holder's client
    /// ([`ClientConfig::label`](crate::ClientConfig::label), `HOST:PID` by
    /// default) under `native`, when it wrote one (see
    /// [`Holder::label`](crate::Holder::label)). `None` under `redisson`.
    pub label: Option<String>,
    /// Time until its lease ends (on this client's clock under
    /// `redisson`); `None` for a permit taken without a lease.
    pub remaining_lease: Option<Duration>,
    /// How many permits it stands for: 1 under `redisson` (each permit has
    /// an id), the acquisition's `n` under `native` (one id per
    /// acquisition, its owner id).
    pub permits: u32,
    /// The acquisition's fencing token (`native`; `None` under `redisson`).
    pub token: Option<u64>,
}

/// Which semaphore a [`SemaphoreInfo`] describes, as far as Redis tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SemaphoreKind {
    /// The `native` protocol's fair semaphore.
    Native,
    /// Redisson's `RPermitExpirableSemaphore` ([`Semaphore`] under
    /// `redisson`): permit ids are taken (in `{NAME}:timeout`), or nothing
    /// is stored yet. Its whole state is shown.
    PermitExpirable,
    /// Only a count is stored under the name, and no permit id is taken:
    /// Redisson's plain `RSemaphore`
    /// ([`CountingSemaphore`], `redisson.getSemaphore(name)`), which
    /// records neither its total nor who holds its permits, or an
    /// `RPermitExpirableSemaphore` none of whose permits is taken. Redis
    /// cannot tell the two apart: `available` is the count, and `total` is
    /// what it would be for the expirable kind (a plain semaphore's total
    /// is not known).
    CountOnly,
}

/// A semaphore's state at one instant, from [`Semaphore::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name.
    pub name: String,
    /// The protocol it was read with.
    pub protocol: crate::Protocol,
    /// Which semaphore Redis holds under the name, as far as it tells.
    pub kind: SemaphoreKind,
    /// Whether Redis stores its total: `false` for a semaphore no call has
    /// set up yet (under `native` also one nobody held or waited for during
    /// 20 s, which forgot its total). `total` is then the handle's
    /// `permits`, which the next acquisition sets.
    pub exists: bool,
    /// All its permits: available and taken.
    pub total: i64,
    /// Permits free to take now. Below 0 after
    /// [`set_permits`](Semaphore::set_permits) lowered the total beneath
    /// what is taken.
    pub available: i64,
    /// Every taken permit, soonest lease end first.
    pub taken: Vec<TakenPermit>,
    /// The requests waiting, first in line first, each with the permits it
    /// asks for ([`QueuedWaiter::permits`]; its mode is
    /// [`HoldMode::Permits`](crate::HoldMode::Permits)). `native` only:
    /// Redisson's semaphore has no line.
    pub queue: Vec<QueuedWaiter>,
    /// `host:port` of the server that serves the semaphore: the server
    /// itself, or on a Redis Cluster the master of its hash slot (all of its
    /// keys share it), asked after the state was read. `None` when it could
    /// not be read.
    pub node: Option<String>,
}

impl Semaphore {
    pub(crate) fn new(core: Arc<ClientCore>, name: &str, permits: u32) -> Self {
        if core.dialect().protocol() == crate::Protocol::Native {
            return Self {
                backend: Backend::Native(LockHandle::native_semaphore(&core, name, permits)),
            };
        }
        let object = ExpirableSemaphore::new(name, permits, core.config().clock_offset_ms);
        Self {
            backend: Backend::Redisson(Arc::new(Shared { core, object })),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        match &self.backend {
            Backend::Redisson(shared) => &shared.object.name,
            Backend::Native(handle) => handle.name(),
        }
    }

    /// Take `n` permits, waiting as long as it takes; leased with the
    /// watchdog ([`PermitLease::Watchdog`]).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `n` is 0
    /// or above the semaphore's total (nothing is taken; under `redisson`
    /// also above 10,000);
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) when the name's keys
    /// hold other data (nothing is written);
    /// [`Error::Connection`](crate::Error::Connection) when Redis stays
    /// unreachable for the retry budget (with a bounded wait, for what is
    /// left of the wait: every wait ends within its budget and one
    /// response timeout, and a zero wait is one call);
    /// [`Error::Closed`](crate::Error::Closed) after
    /// [`LockClient::shutdown`](crate::LockClient::shutdown).
    ///
    /// # Cancel safety
    /// Dropping the future at any point leaves no permit taken: the ids of
    /// an attempt are chosen before it is sent, and an attempt whose reply
    /// was not read is undone in the background (exactly its ids are given
    /// back, if it took them). Under `native` the waiter leaves the line,
    /// and permits granted to it meanwhile are passed on, as a lock's
    /// [`lock`](crate::LockHandle::lock) does.
    pub async fn acquire(&self, n: u32) -> Result<Permits> {
        match self.acquire_with(n, None, PermitLease::Watchdog).await? {
            Some(permits) => Ok(permits),
            None => Err(Error::Protocol("a wait without a bound ended".into())),
        }
    }

    /// Take `n` permits if they are free now (one attempt).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, n: u32) -> Result<Option<Permits>> {
        self.acquire_with(n, Some(Duration::ZERO), PermitLease::Watchdog)
            .await
    }

    /// Take `n` permits, waiting at most `wait`; `None` when they did not
    /// come in time.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a
    /// `wait` above [`MAX_DURATION`](crate::MAX_DURATION).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, n: u32, wait: Duration) -> Result<Option<Permits>> {
        self.acquire_with(n, Some(wait), PermitLease::Watchdog)
            .await
    }

    /// Take `n` permits with `lease`, waiting at most `wait` (`None`: as
    /// long as it takes; zero: one attempt).
    ///
    /// # Errors
    /// As [`try_acquire_for`](Self::try_acquire_for), and
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a
    /// [`PermitLease::Fixed`] under 1 ms or above
    /// [`MAX_DURATION`](crate::MAX_DURATION);
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for
    /// [`PermitLease::Unbounded`] under `native`.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: PermitLease,
    ) -> Result<Option<Permits>> {
        let shared = match &self.backend {
            Backend::Redisson(shared) => shared,
            Backend::Native(handle) => return acquire_native(handle, None, n, wait, lease).await,
        };
        protocol::check_count(self.name(), n)?;
        if let PermitLease::Fixed(lease) = lease {
            check_duration("lease", lease)?;
        }
        let core = &shared.core;
        wait_for(
            core,
            shared.object.channel(),
            wait,
            |retry_until| async move {
                let ids: Vec<String> = (0..n).map(|_| protocol::new_permit_id()).collect();
                let now = shared.object.now_ms();
                let (expiry, local) = match lease {
                    PermitLease::Watchdog => (
                        now.saturating_add(millis(core.config().lease)),
                        Some(core.config().lease),
                    ),
                    PermitLease::Fixed(lease) => (now.saturating_add(millis(lease)), Some(lease)),
                    PermitLease::Unbounded => (NOEXP, None),
                };
                let sent_at = Instant::now();
                let undo = DisarmOnDrop::new(
                    Undo {
                        shared: Arc::clone(shared),
                        ids,
                    },
                    Undo::in_background,
                );
                let reply = core
                    .retry()
                    .run_until(retry_until, || {
                        shared.object.acquire(core.conn(), &undo.get().ids, expiry)
                    })
                    .await;
                match reply {
                    Ok(SemAcquire::Taken) => {
                        let mut undo = undo;
                        undo.disarm();
                        let ids = std::mem::take(&mut undo.get_mut().ids);
                        // Believed no longer than the lease measured from when
                        // the attempt was sent.
                        let expires = local.map_or_else(far_future, |lease| sent_at + lease);
                        Ok(Attempt::Done(Permits::redisson(
                            Arc::clone(shared),
                            ids,
                            expires,
                            lease,
                        )))
                    }
                    Ok(SemAcquire::AboveTotal { total }) => {
                        let mut undo = undo;
                        undo.disarm();
                        Err(Error::InvalidConfig(format!(
                            "semaphore {:?}: {n} permits asked for, above its total of {total}",
                            shared.object.name
                        )))
                    }
                    Ok(SemAcquire::Busy { soonest_expiry_ms }) => {
                        let mut undo = undo;
                        undo.disarm();
                        let now = shared.object.now_ms();
                        Ok(Attempt::Busy(soonest_expiry_ms.map(|at| {
                            Duration::from_millis(at.saturating_sub(now).max(0).unsigned_abs())
                        })))
                    }
                    // Refused before it ran (bad data, a script error): nothing
                    // to undo. A connection failure may have lost the reply of
                    // an attempt that ran: `undo` gives its ids back as it goes.
                    Err(err) => {
                        if !err.is_connection() {
                            let mut undo = undo;
                            undo.disarm();
                        }
                        Err(err)
                    }
                }
            },
        )
        .await
    }

    /// Take `n` permits as `owner`, as [`acquire_with`](Self::acquire_with)
    /// does otherwise: under `native` the request waits in the line under
    /// `owner`, whose place [`queue_position`](Self::queue_position) then
    /// tells (`fairlock exec --semaphore` shows it so), and the permits'
    /// id ([`Permits::ids`]) is `owner`. Under `redisson` the owner is not
    /// recorded: Redisson's permits have ids of their own and no owner, and
    /// there is no line.
    ///
    /// `owner` must come from this client
    /// ([`LockClient::new_owner`](crate::LockClient::new_owner)) and hold
    /// no permits of this semaphore: each acquisition is a hold of its own.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), and
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) under `native`
    /// when `owner` already holds permits of this semaphore or comes from
    /// another client (nothing is taken).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_as(
        &self,
        owner: &Owner,
        n: u32,
        wait: Option<Duration>,
        lease: PermitLease,
    ) -> Result<Option<Permits>> {
        match &self.backend {
            Backend::Native(handle) => acquire_native(handle, Some(owner), n, wait, lease).await,
            Backend::Redisson(_) => self.acquire_with(n, wait, lease).await,
        }
    }

    /// `owner`'s place in the semaphore's line (`native`):
    /// `Some((position, waiting))` with a 1-based position while a request
    /// of `owner` ([`acquire_as`](Self::acquire_as)) waits, `None` when it
    /// does not (it holds its permits, or has not queued yet). Always `None`
    /// under `redisson`, whose semaphore has no line. Cheap: O(log N),
    /// unlike [`inspect`](Self::inspect).
    ///
    /// # Errors
    /// [`Error::Connection`](crate::Error::Connection),
    /// [`Error::WrongType`](crate::Error::WrongType).
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        match &self.backend {
            Backend::Native(handle) => handle.queue_position(owner).await,
            Backend::Redisson(_) => Ok(None),
        }
    }

    /// The permits free to take now (after reclaiming expired ones).
    /// Initialises an absent semaphore with the total this handle was made
    /// with. Below 0 after [`set_permits`](Self::set_permits) lowered the
    /// total beneath what is taken.
    ///
    /// # Errors
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) for other data under
    /// the name; [`Error::Connection`](crate::Error::Connection).
    ///
    /// # Cancel safety
    /// Safe to drop: the call only reclaims expired permits, as any call does.
    pub async fn available(&self) -> Result<i64> {
        let shared = match &self.backend {
            Backend::Redisson(shared) => shared,
            Backend::Native(handle) => {
                let state = native_state(handle).await?;
                return Ok(signed(state.capacity).saturating_sub(signed(state.used())));
            }
        };
        let state = shared
            .core
            .retry()
            .run(|| shared.object.state(shared.core.conn(), false))
            .await?;
        Ok(state.available)
    }

    /// Every permit at one instant: the total, the available ones, each
    /// taken one with its holder (under `native`) and remaining lease, and
    /// the line (under `native`), after reclaiming expired ones.
    ///
    /// Unlike the other calls it never sets the total of a semaphore that
    /// has none ([`SemaphoreInfo::exists`] is then `false`): looking does
    /// not create it. Under `redisson` a count without any permit id taken
    /// may be Redisson's plain `RSemaphore` as well, whose total nobody
    /// knows: [`SemaphoreInfo::kind`] then says
    /// [`SemaphoreKind::CountOnly`].
    ///
    /// # Errors
    /// As [`available`](Self::available).
    ///
    /// # Cancel safety
    /// As [`available`](Self::available).
    pub async fn inspect(&self) -> Result<SemaphoreInfo> {
        let shared = match &self.backend {
            Backend::Redisson(shared) => shared,
            Backend::Native(handle) => return inspect_native(handle).await,
        };
        let state = shared
            .core
            .retry()
            .run(|| shared.object.state(shared.core.conn(), true))
            .await?;
        let now = shared.object.now_ms();
        // Absent: the total the next acquisition sets (the taken permits
        // of a count deleted by hand are still counted as taken).
        let available = if state.exists {
            state.available
        } else {
            i64::from(shared.object.permits).saturating_sub_unsigned(state.taken)
        };
        let mut taken: Vec<(i64, TakenPermit)> = state
            .permits
            .into_iter()
            .map(|(id, score)| {
                let remaining_lease = (score != NOEXP).then(|| {
                    Duration::from_millis(score.saturating_sub(now).max(0).unsigned_abs())
                });
                (
                    score,
                    TakenPermit {
                        id,
                        owner: None,
                        label: None,
                        remaining_lease,
                        permits: 1,
                        token: None,
                    },
                )
            })
            .collect();
        taken.sort_by_key(|(score, _)| *score);
        // A count and no permit id: the plain kind or an idle expirable one.
        let kind = if state.exists && state.taken == 0 {
            SemaphoreKind::CountOnly
        } else {
            SemaphoreKind::PermitExpirable
        };
        Ok(SemaphoreInfo {
            name: shared.object.name.clone(),
            protocol: crate::Protocol::Redisson,
            kind,
            exists: state.exists,
            total: available.saturating_add_unsigned(state.taken),
            available,
            taken: taken.into_iter().map(|(_, permit)| permit).collect(),
            queue: Vec::new(),
            node: shared
                .core
                .conn()
                .node_for(&shared.object.name, &shared.object.name)
                .await
                .ok(),
        })
    }

    /// Give back every taken permit, whoever holds it (the semaphore's
    /// counterpart of [`LockHandle::force_unlock`](crate::LockHandle::force_unlock);
    /// `fairlock force-unlock --semaphore NAME` on the command line), and
    /// let the waiters in. Returns how many permits were given back (under
    /// `native` an acquisition of `n` counts `n`; 0 when none was taken).
    ///
    /// - Under `native` every hold is removed and the line's head admitted
    ///   while it fits; a fairlock holder's client is told at once (on its
    ///   revocation channel), so its [`Permits::lost`] resolves within a
    ///   round trip.
    /// - Under `redisson` every permit id in `{NAME}:timeout` is given back
    ///   as Redisson's release of several ids does (the count raised by
    ///   their number, which is published on `redisson_sc:{NAME}`, so Java
    ///   waiters wake); permits whose lease had already ended are reclaimed
    ///   first, as by any call, and not counted. A permit id names no
    ///   owner, so nobody is told: a fairlock holder's `lost()` resolves at
    ///   its next renewal (a third of the lease), a Java holder's
    ///   `release` fails.
    ///
    /// # Errors
    /// [`Error::Connection`](crate::Error::Connection) (the call is not
    /// sent again: it may or may not have run);
    /// [`Error::WrongType`](crate::Error::WrongType) or
    /// [`Error::NotALock`](crate::Error::NotALock) when the name's keys
    /// hold other data (nothing is changed).
    ///
    /// # Cancel safety
    /// The command may or may not have run when the future is dropped.
    pub async fn force_release(&self) -> Result<u64> {
        let (core, released) = match &self.backend {
            Backend::Redisson(shared) => (
                &shared.core,
                shared.object.force_release(shared.core.conn()).await?,
            ),
            Backend::Native(handle) => {
                let (core, lock) = (handle.core(), native_object(handle)?);
                (core, lock.sem_force_release(core.conn()).await?.permits)
            }
        };
        core.events().record(Event::ForceUnlocked {
            lock: self.name(),
            released: released > 0,
        });
        Ok(released)
    }

    /// Make the semaphore's total `permits` (Redisson's `setPermits`): the
    /// available count moves by the difference, and may go below 0 while
    /// more than `permits` are taken (then nobody gets one until enough
    /// come back). An absent semaphore is created with `permits`.
    ///
    /// Under `native` a raise admits the waiters that now fit, in line
    /// order; a waiter that asks for more than the new total leaves the
    /// line with [`Error::InvalidConfig`](crate::Error::InvalidConfig).
    ///
    /// # Errors
    /// As [`available`](Self::available).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not have changed the total; calling
    /// again with the same `permits` makes it so either way.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        let shared = match &self.backend {
            Backend::Redisson(shared) => shared,
            Backend::Native(handle) => {
                let (core, lock) = (handle.core(), native_object(handle)?);
                core.retry()
                    .run(|| lock.set_permits(core.conn(), permits))
                    .await?;
                return Ok(());
            }
        };
        shared
            .core
            .retry()
            .run(|| shared.object.set_permits(shared.core.conn(), permits))
            .await?;
        Ok(())
    }
}

/// The native semaphore behind `handle`.
fn native_object(handle: &LockHandle) -> Result<&NativeRwLock> {
    match handle.protocol_lock() {
        ProtocolLock::NativeRw(lock) if lock.is_semaphore() => Ok(lock),
        _ => Err(Error::Protocol(
            "a native semaphore's handle is not one".into(),
        )),
    }
}

/// A native acquisition: one hold weighing `n`, of `owner` (which must
/// hold nothing of the semaphore) or a fresh owner.
async fn acquire_native(
    handle: &LockHandle,
    owner: Option<&Owner>,
    n: u32,
    wait: Option<Duration>,
    lease: PermitLease,
) -> Result<Option<Permits>> {
    if n == 0 {
        return Err(Error::InvalidConfig(format!(
            "semaphore {:?}: cannot take 0 permits (ask for 1 or more)",
            handle.name()
        )));
    }
    let mut options = AcquireOptions::new().weight(n);
    match lease {
        PermitLease::Watchdog => {}
        PermitLease::Fixed(lease) => options = options.lease(lease),
        PermitLease::Unbounded => {
            return Err(Error::InvalidConfig(format!(
                "semaphore {:?}: permits without a lease are Redisson's only (under the \
                 native protocol every hold has a lease: PermitLease::Watchdog or Fixed)",
                handle.name()
            )));
        }
    }
    if let Some(wait) = wait {
        options = options.wait(wait);
    }
    if let Some(owner) = owner {
        options = options.owner(owner.clone());
    }
    let guard = handle.acquire(options).await?;
    Ok(guard.map(|guard| Permits {
        inner: Inner::Native {
            ids: vec![guard.owner().to_string()],
            guard,
            lease,
        },
    }))
}

/// A native semaphore's state, read once (retried).
async fn native_state(
    handle: &LockHandle,
) -> Result<crate::protocol::native::read_write::SemState> {
    let (core, lock) = (handle.core(), native_object(handle)?);
    core.retry().run(|| lock.sem_state(core.conn())).await
}

async fn inspect_native(handle: &LockHandle) -> Result<SemaphoreInfo> {
    let state = native_state(handle).await?;
    let node = match native_object(handle) {
        Ok(lock) => handle
            .core()
            .conn()
            .node_for(handle.name(), lock.lock_key())
            .await
            .ok(),
        Err(_) => None,
    };
    let (total, used) = (signed(state.capacity), signed(state.used()));
    let mut holds = state.holds;
    holds.sort_by_key(|hold| hold.pttl);
    Ok(SemaphoreInfo {
        name: handle.name().to_owned(),
        protocol: crate::Protocol::Native,
        kind: SemaphoreKind::Native,
        exists: state.stored,
        total,
        available: total.saturating_sub(used),
        taken: holds
            .into_iter()
            .map(|hold| TakenPermit {
                owner: Some(hold.id.clone()),
                id: hold.id,
                label: hold.label,
                remaining_lease: Some(Duration::from_millis(hold.pttl.max(0).unsigned_abs())),
                permits: hold.weight,
                token: Some(hold.token),
            })
            .collect(),
        queue: state.queue,
        node,
    })
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Gives back, in the background, the permits of an attempt whose reply
/// nobody read (the future was dropped, or the connection failed after
/// sending it): exactly its ids, if it took them.
struct Undo {
    shared: Arc<Shared>,
    ids: Vec<String>,
}

impl Undo {
    fn in_background(&mut self) {
        let ids = std::mem::take(&mut self.ids);
        let shared = Arc::clone(&self.shared);
        release_in_background(shared, ids, "undo of a cancelled acquire");
    }
}

/// Give `ids` back from a background task (tracked: `flush` waits for it).
fn release_in_background(shared: Arc<Shared>, ids: Vec<String>, what: &'static str) {
    let core = Arc::clone(&shared.core);
    core.spawn_cleanup(async move {
        let core = &shared.core;
        let result = core
            .retry()
            .run(|| shared.object.release(core.conn(), &ids))
            .await;
        if let Err(err) = result {
            events::record(Event::CleanupFailed {
                lock: &shared.object.name,
                owner: &permits_owner(&ids),
                what,
                error: &err,
            });
        }
    });
}

/// How permits are named where an owner is expected (errors, events).
fn permits_owner(ids: &[String]) -> Owner {
    Owner::from_raw(&format!("permits {}", ids.join(",")))
}

/// Effectively never (a permit without a lease), for an `Instant`.
fn far_future() -> Instant {
    Instant::now() + crate::MAX_DURATION * 10
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Permits taken from a [`Semaphore`]: give them back with
/// [`release`](Self::release).
///
/// - dropping the guard without `release` gives them back in the
///   background (never blocking); call
///   [`LockClient::flush`](crate::LockClient::flush) before the process
///   exits so that this finishes;
/// - with the watchdog lease the permits are renewed every third of the
///   lease while the guard lives (Redisson's `updateLeaseTime`, which never
///   takes back a permit that is gone); [`lost`](Self::lost) resolves and
///   [`is_held`](Self::is_held) turns `false` when a renewal finds one of
///   them gone (its lease ran out and somebody reclaimed it, or it was
///   removed by hand), or renewals failed until the lease ran out;
/// - with a [`PermitLease::Fixed`] lease nothing renews them: they are
///   believed until that lease ends;
/// - under `native` the permits are one hold of the semaphore, renewed by
///   the client's watchdog as a lock's, with a fencing token
///   ([`token`](Self::token)).
///
/// `Send + Sync + 'static`.
///
/// ```no_run
/// # async fn demo(quota: fairlock::Semaphore) -> fairlock::Result<()> {
/// let permits = quota.acquire(3).await?;
/// println!("{} permit ids, token {:?}", permits.ids().len(), permits.token());
/// permits.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard gives the permits back right away"]
pub struct Permits {
    inner: Inner,
}

/// A guard's permits under each protocol.
enum Inner {
    Redisson(DisarmOnDrop<Held>),
    /// One hold of the native semaphore: the lock guard gives the watchdog,
    /// `lost()` and the release on drop.
    Native {
        guard: LockGuard,
        /// Its owner id, as [`Permits::ids`] shows it.
        ids: Vec<String>,
        lease: PermitLease,
    },
}

struct Held {
    shared: Arc<Shared>,
    ids: Vec<String>,
    state: Arc<HeldState>,
    lease: PermitLease,
    /// The renewal task of a watchdog lease.
    renewal: Option<tokio::task::AbortHandle>,
}

impl Held {
    fn stop_renewing(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }

    fn release_in_background(&mut self) {
        self.stop_renewing();
        let ids = std::mem::take(&mut self.ids);
        release_in_background(Arc::clone(&self.shared), ids, "release on drop");
    }
}

impl Permits {
    fn redisson(
        shared: Arc<Shared>,
        ids: Vec<String>,
        expires: Instant,
        lease: PermitLease,
    ) -> Self {
        let core = &shared.core;
        let state = HeldState::new(expires, Arc::clone(core.events()));
        let renewal = (lease == PermitLease::Watchdog).then(|| {
            let task = tokio::spawn(renew(
                Arc::clone(&shared),
                ids.clone(),
                Arc::downgrade(&state),
            ));
            task.abort_handle()
        });
        Self {
            inner: Inner::Redisson(DisarmOnDrop::new(
                Held {
                    shared,
                    ids,
                    state,
                    lease,
                    renewal,
                },
                Held::release_in_background,
            )),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Redisson(held) => &held.get().shared.object.name,
            Inner::Native { guard, .. } => guard.name(),
        }
    }

    /// The permit ids: under `redisson` one per permit, 32 lowercase hex
    /// digits each (as Redisson shows them; Redis holds the raw 16 bytes);
    /// under `native` one for the whole acquisition, its owner id
    /// (`CLIENT_UUID:N`).
    pub fn ids(&self) -> &[String] {
        match &self.inner {
            Inner::Redisson(held) => &held.get().ids,
            Inner::Native { ids, .. } => ids,
        }
    }

    /// How the permits are leased.
    pub fn lease(&self) -> PermitLease {
        match &self.inner {
            Inner::Redisson(held) => held.get().lease,
            Inner::Native { lease, .. } => *lease,
        }
    }

    /// The fencing token of this acquisition (`native`): strictly greater
    /// than every token granted before it, of the semaphore's every
    /// acquisition. `None` under `redisson`, whose semaphore has none.
    pub fn token(&self) -> Option<u64> {
        match &self.inner {
            Inner::Redisson(_) => None,
            Inner::Native { guard, .. } => guard.token(),
        }
    }

    /// `false` once a permit is known lost (see [`lost`](Self::lost)) or
    /// the lease last confirmed has passed without a renewal.
    pub fn is_held(&self) -> bool {
        match &self.inner {
            Inner::Redisson(held) => held.get().state.status().is_held(),
            Inner::Native { guard, .. } => guard.is_held(),
        }
    }

    /// A future that resolves when a permit of this guard is lost or may
    /// be: a renewal found it gone, or the lease last confirmed ran out
    /// (renewals failing, a pause longer than the lease, a
    /// [`PermitLease::Fixed`] lease ending). Also resolves once the
    /// permits are released.
    ///
    /// # Cancel safety
    /// Dropping it has no effect.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let lost: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            match &self.inner {
                Inner::Redisson(held) => {
                    let signal = held.get().state.signal();
                    Box::pin(async move { signal.lost().await })
                }
                Inner::Native { guard, .. } => Box::pin(guard.lost()),
            };
        lost
    }

    /// Give the permits back.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) when some permit was no
    /// longer taken, or past its lease (it was reclaimed, or removed by
    /// hand, and may be somebody else's now): under `redisson` the others
    /// are given back all the same. [`Error::Connection`](crate::Error::Connection)
    /// when Redis stayed unreachable for the retry budget (watchdog-leased
    /// permits then come back when their lease ends). After a call that had
    /// to be sent again, a permit the first sending gave back is not
    /// reported.
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the release: it is sent again from
    /// the background (giving back the same permits twice gives them back
    /// once).
    pub async fn release(self) -> Result<()> {
        let mut held = match self.inner {
            Inner::Redisson(held) => held,
            Inner::Native { guard, .. } => return guard.unlock().await,
        };
        held.get_mut().stop_renewing();
        let (shared, ids) = (Arc::clone(&held.get().shared), held.get().ids.clone());
        // Armed until the reply is read: a dropped future leaves the guard
        // armed, and its drop sends the release again.
        let core = &shared.core;
        let mut sent = 0_u32;
        let reply = core
            .retry()
            .run(|| {
                sent += 1;
                shared.object.release(core.conn(), &ids)
            })
            .await;
        held.disarm();
        let reply = reply?;
        if reply.lost > 0 && sent == 1 {
            return Err(Error::LockLost {
                name: shared.object.name.clone(),
                owner: permits_owner(&ids).to_string(),
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Permits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permits")
            .field("name", &self.name())
            .field("ids", &self.ids())
            .field("lease", &self.lease())
            .field("token", &self.token())
            .finish()
    }
}

/// The watchdog of one guard's permits: every renew interval (a third of
/// the lease), extend them to now + lease; stop when the guard is gone or
/// the client shuts down. One task per guard (not the client's batched
/// lock watchdog, whose registry is keyed by lock and owner).
async fn renew(shared: Arc<Shared>, ids: Vec<String>, state: Weak<HeldState>) {
    let core = &shared.core;
    let (lease, interval) = (core.config().lease, core.config().get_renew_interval());
    let retry = crate::retry::renewal_retry_delay(interval);
    let name = shared.object.name.as_str();
    let owner = permits_owner(&ids);
    let mut pause = interval;
    let closing = core.closing();
    loop {
        // A client shut down renews nothing more: its permits end with
        // their lease, unless their guard gives them back first.
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = closing.cancelled() => return,
        }
        let Some(state) = state.upgrade() else {
            return;
        };
        let sent_at = Instant::now();
        match shared.object.renew(core.conn(), &ids, lease).await {
            Ok(0) => {
                state.extend(sent_at + lease);
                core.events().record(Event::Renewed { lock: name });
                pause = interval;
            }
            Ok(_) => {
                state.mark_lost(name, owner.as_str(), LostCause::Expired);
                return;
            }
            Err(err) => {
                core.events().record(Event::RenewalFailed {
                    lock: name,
                    owner: owner.as_str(),
                    error: &err,
                });
                if Instant::now() >= state.status().expires {
                    state.mark_lost(name, owner.as_str(), LostCause::RenewalsFailed);
                    return;
                }
                pause = retry;
            }
        }
    }
}

/// The part of a counting semaphore its guards and background work share.
struct CountingShared {
    core: Arc<ClientCore>,
    object: CountingObject,
    /// The total this handle was made with: what a semaphore that does not
    /// exist yet is set up with.
    permits: u32,
}

/// A plain semaphore: Redisson's `RSemaphore`
/// (`redisson.getSemaphore(name)`), byte for byte. Get one with
/// [`LockClient::counting_semaphore`](crate::LockClient::counting_semaphore).
///
/// Only a count of available permits is kept, under the name: nothing
/// records who took them, so **permits taken by a process that dies never
/// come back** (only a release, or a Redisson `addPermits`, adds them). Use
/// [`Semaphore`] unless Java services already share an `RSemaphore`. Not
/// fair; it waits as [`Semaphore`] does.
///
/// ```no_run
/// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
/// let slots = client.counting_semaphore("import-slots", 4)?;
/// let taken = slots.acquire(1).await?;
/// // ... work ...
/// taken.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountingSemaphore {
    shared: Arc<CountingShared>,
}

impl CountingSemaphore {
    pub(crate) fn new(core: Arc<ClientCore>, name: &str, permits: u32) -> Self {
        Self {
            shared: Arc::new(CountingShared {
                core,
                object: CountingObject::new(name, permits),
                permits,
            }),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.shared.object.name
    }

    /// Take `n` permits, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) when `n` is 0,
    /// above 10,000, or above the handle's `permits` while the semaphore
    /// does not exist yet (it would be set up with that total; nothing is
    /// written). An existing semaphore records no total, only what is
    /// available (a Java service may have set it up with another), so a
    /// request there is never refused: it waits for its permits, as
    /// Redisson's `acquire(n)` does;
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) for other data under
    /// the name (nothing written); [`Error::Connection`](crate::Error::Connection)
    /// when an attempt got no answer: it is not sent again, and **may have
    /// taken the permits** (the semaphore records no owner, so nobody can
    /// tell); [`Error::Closed`](crate::Error::Closed) after shutdown.
    ///
    /// # Cancel safety
    /// Dropping the future leaves no permit taken: an attempt in flight
    /// runs on in a background task, which gives its permits back if it
    /// took them.
    pub async fn acquire(&self, n: u32) -> Result<CountedPermits> {
        match self.try_acquire_within(n, None).await? {
            Some(permits) => Ok(permits),
            None => Err(Error::Protocol("a wait without a bound ended".into())),
        }
    }

    /// Take `n` permits if they are free now (one attempt).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, n: u32) -> Result<Option<CountedPermits>> {
        self.try_acquire_within(n, Some(Duration::ZERO)).await
    }

    /// Take `n` permits, waiting at most `wait`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a
    /// `wait` above [`MAX_DURATION`](crate::MAX_DURATION).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, n: u32, wait: Duration) -> Result<Option<CountedPermits>> {
        self.try_acquire_within(n, Some(wait)).await
    }

    async fn try_acquire_within(
        &self,
        n: u32,
        wait: Option<Duration>,
    ) -> Result<Option<CountedPermits>> {
        let shared = &self.shared;
        protocol::check_count(self.name(), n)?;
        // One call per attempt (never sent again: see `acquire`), bounded by
        // the response timeout.
        wait_for(
            &shared.core,
            shared.object.channel(),
            wait,
            |_| async move {
                let (reply, taken) = tokio::sync::oneshot::channel();
                let background = Arc::clone(shared);
                shared.core.spawn_cleanup(async move {
                    let result = background.object.acquire(background.core.conn(), n).await;
                    // The caller is gone: give back what it took.
                    if let Err(Ok(CounterAcquire::Taken)) = reply.send(result) {
                        release_counted(&background, n, "undo of a cancelled acquire").await;
                    }
                });
                // Dropped before the reply was read (the caller cancelled): after
                // close(), a send fails (and the sender gives the permits back)
                // or has already happened, and the permits it reports taken are
                // given back here. Without it, a reply sent just before the drop
                // was lost with its permits.
                let mut pending =
                    DisarmOnDrop::new((taken, Arc::clone(shared), n), |(taken, shared, n)| {
                        taken.close();
                        if let Ok(Ok(CounterAcquire::Taken)) = taken.try_recv() {
                            let (shared, n) = (Arc::clone(shared), *n);
                            let core = Arc::clone(&shared.core);
                            core.spawn_cleanup(async move {
                                release_counted(&shared, n, "undo of a cancelled acquire").await;
                            });
                        }
                    });
                let reply = (&mut pending.get_mut().0).await;
                pending.disarm();
                match reply {
                    Ok(Ok(CounterAcquire::Taken)) => {
                        Ok(Attempt::Done(CountedPermits::new(Arc::clone(shared), n)))
                    }
                    Ok(Ok(CounterAcquire::Busy)) => Ok(Attempt::Busy(None)),
                    Ok(Ok(CounterAcquire::AboveTotal { total })) => {
                        Err(Error::InvalidConfig(format!(
                            "semaphore {:?}: {n} permits asked for, above the total of {total} it \
                         is set up with (nobody set it up yet)",
                            shared.object.name
                        )))
                    }
                    Ok(Err(err)) => Err(err),
                    Err(_) => Err(Error::Closed),
                }
            },
        )
        .await
    }

    /// The permits free to take now. Initialises an absent semaphore with
    /// the total this handle was made with.
    ///
    /// # Errors
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) for other data under
    /// the name; [`Error::Connection`](crate::Error::Connection).
    ///
    /// # Cancel safety
    /// Safe to drop.
    pub async fn available(&self) -> Result<i64> {
        let shared = &self.shared;
        shared
            .core
            .retry()
            .run(|| shared.object.available(shared.core.conn()))
            .await
    }
}

impl std::fmt::Debug for CountingSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingSemaphore")
            .field("name", &self.shared.object.name)
            .field("permits", &self.shared.permits)
            .finish()
    }
}

/// Give `n` permits back to a counting semaphore (retried: a lost reply
/// may give them back twice, as Redisson's release may).
async fn release_counted(shared: &CountingShared, n: u32, what: &'static str) {
    if let Err(err) = shared.object.release(shared.core.conn(), n).await {
        events::record(Event::CleanupFailed {
            lock: &shared.object.name,
            owner: &Owner::from_raw(&format!("{n} permits")),
            what,
            error: &err,
        });
    }
}

/// Permits taken from a [`CountingSemaphore`]: give them back with
/// [`release`](Self::release); dropping the guard gives them back in the
/// background. They cannot be lost: nothing records them, so nothing
/// takes them back (and a process that dies never gives them back).
///
/// ```no_run
/// # async fn demo(slots: fairlock::CountingSemaphore) -> fairlock::Result<()> {
/// let two = slots.acquire(2).await?;
/// assert_eq!(two.permits(), 2);
/// two.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping the guard gives the permits back right away"]
pub struct CountedPermits {
    held: DisarmOnDrop<Counted>,
}

struct Counted {
    shared: Arc<CountingShared>,
    n: u32,
}

impl Counted {
    fn release_in_background(&mut self) {
        let shared = Arc::clone(&self.shared);
        let n = self.n;
        self.shared.core.spawn_cleanup(async move {
            release_counted(&shared, n, "release on drop").await;
        });
    }
}

impl CountedPermits {
    fn new(shared: Arc<CountingShared>, n: u32) -> Self {
        Self {
            held: DisarmOnDrop::new(Counted { shared, n }, Counted::release_in_background),
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.held.get().shared.object.name
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.held.get().n
    }

    /// Give the permits back (Redisson's `release(n)`: add them to the
    /// count and publish the new count).
    ///
    /// # Errors
    /// [`Error::Connection`](crate::Error::Connection) when the call got no
    /// answer (it is not sent again: adding twice would make permits that
    /// never existed; the permits may or may not be back);
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) when the name's key was
    /// replaced by other data (nothing written).
    ///
    /// # Cancel safety
    /// Dropping the future after the call was sent: the permits are given
    /// back once (the call goes on); before: the guard's drop gives them
    /// back in the background.
    pub async fn release(mut self) -> Result<()> {
        let held = self.held.get();
        let (shared, n) = (Arc::clone(&held.shared), held.n);
        self.held.disarm();
        // Run to its end even if this future is dropped: the release is
        // made exactly once.
        let core = Arc::clone(&shared.core);
        let call =
            core.spawn_cleanup(async move { shared.object.release(shared.core.conn(), n).await });
        match call.await {
            Ok(reply) => reply.map(|_| ()),
            Err(_) => Err(Error::Closed),
        }
    }
}

impl std::fmt::Debug for CountedPermits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.get();
        f.debug_struct("CountedPermits")
            .field("name", &held.shared.object.name)
            .field("permits", &held.n)
            .finish()
    }
}

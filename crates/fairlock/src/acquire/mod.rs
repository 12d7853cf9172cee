//! The acquire engine: from options to a plan, one attempt with its
//! undo-exactly-once handshake (`attempt.rs`), and the wait loop as explicit
//! steps (`wait.rs`). It returns a registered [`Hold`]; guards wrap it.

mod attempt;
mod wait;

pub(crate) use wait::WakePacer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::config::check_duration;
use crate::error::{Error, Result};
use crate::events::AcquireRecord;
use crate::hold::{ArmedHold, Lease, LockShared, new_request_id};
use crate::owner::{Owner, OwnerTurn};

use attempt::Acquisition;

/// How to acquire: wait budget, lease and owner. Used with
/// [`LockHandle::acquire`](crate::LockHandle::acquire); the other acquire
/// methods are shorthands for it.
///
/// ```
/// use std::time::Duration;
/// let options = fairlock::AcquireOptions::new()
///     .wait(Duration::from_secs(5))
///     .lease(Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    wait: Option<Duration>,
    lease: Option<Duration>,
    owner: Option<Owner>,
    /// Only a re-entry counts: a fresh grant is undone (`LockGuard::reenter`).
    reenter_only: bool,
    /// What the acquisition weighs (a native semaphore's permits); `None`:
    /// 1. Crate-private: only the semaphore sets it.
    weight: Option<u32>,
}

impl AcquireOptions {
    /// Wait without a bound, watchdog lease, a fresh owner.
    pub fn new() -> Self {
        Self::default()
    }

    /// Give up after `wait` (`Duration::ZERO`: one attempt, never queue).
    /// Default: wait until granted.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Hold for `lease` and let it expire: the watchdog does not renew it.
    /// Default: the client's lease, renewed by the watchdog while held.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquire as `owner`: when it already holds the lock, this re-enters
    /// (the hold count goes up). Default: a fresh owner.
    ///
    /// The owner's hold count is read first (one more round trip), so that a
    /// retry after a lost reply neither counts a hold twice nor misses one.
    /// Acquisitions of one lock naming the same owner (several tasks at
    /// once, say) take turns, so every one of them counts exactly once on
    /// the server: the owner's guards always equal its hold count. A task
    /// waits for the turn within its wait budget (a single attempt, with a
    /// zero wait, at most one response timeout: the other task is then
    /// waiting in line, so the owner does not hold the lock).
    ///
    /// The owner must come from this client
    /// ([`LockClient::new_owner`](crate::LockClient::new_owner), a guard's
    /// [`owner`](crate::LockGuard::owner)); one made by another client is
    /// refused with [`Error::InvalidConfig`].
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Whether an owner was given.
    pub(crate) fn has_owner(&self) -> bool {
        self.owner.is_some()
    }

    /// Only accept a re-entry; a grant of a lock the owner no longer held is
    /// released again and reported as `None`.
    pub(crate) fn reenter_only(mut self) -> Self {
        self.reenter_only = true;
        self
    }

    /// Ask for `weight` (a native semaphore's permits).
    pub(crate) fn weight(mut self, weight: u32) -> Self {
        self.weight = Some(weight);
        self
    }
}

/// How long to wait.
#[derive(Debug, Clone, Copy)]
enum Budget {
    /// One attempt; never queue.
    Once,
    /// Until granted or until the deadline, when there is one.
    Until(Option<Instant>),
}

/// An acquisition, checked and ready to run.
struct Plan {
    lease: Lease,
    budget: Budget,
    /// The wait's bound, for the protocol (Redisson makes it the slot).
    wait: Option<Duration>,
    started: Instant,
    owner: Option<Owner>,
    reenter_only: bool,
    weight: u32,
    /// A native semaphore's acquisition: a hold of its own, never a
    /// re-entry of its owner's.
    weighted: bool,
}

impl Plan {
    /// Check the options against the client's settings.
    fn new(shared: &LockShared, options: AcquireOptions) -> Result<Self> {
        let started = Instant::now();
        let lease = match options.lease {
            Some(lease) => {
                check_duration("lease", lease)?;
                Lease::Explicit(lease)
            }
            None => Lease::Watchdog(shared.core().config().lease),
        };
        let (budget, wait) = match options.wait {
            Some(Duration::ZERO) => (Budget::Once, None),
            Some(wait) => {
                check_duration("wait", wait)?;
                (Budget::Until(Some(started + wait)), Some(wait))
            }
            None => (Budget::Until(None), None),
        };
        Ok(Self {
            lease,
            budget,
            wait,
            started,
            // As the lock stores it (a read-write lock's writer is
            // `OWNER:write`): turns, holds and scripts all use that id.
            owner: options
                .owner
                .map(|owner| shared.protocol().hold_owner(owner)),
            reenter_only: options.reenter_only,
            weight: options.weight.unwrap_or(1),
            weighted: options.weight.is_some(),
        })
    }

    /// The owner and its hold count before this acquisition: 0 for a fresh
    /// owner, read for an explicit one (a retry after a lost reply then
    /// neither counts a hold twice nor misses one), after waiting for the
    /// owner's turn (so that no other acquisition of the owner changes the
    /// count meanwhile). `None` when the wait budget ran out first.
    async fn owner(&mut self, shared: &LockShared) -> Result<Option<Known>> {
        let Some(owner) = self.owner.take() else {
            let owner = shared.protocol().hold_owner(shared.core().new_owner());
            return Ok(Some((owner, 0, None)));
        };
        let lock_key = shared.protocol().lock_key();
        let known = async {
            let turn = shared.core().owner_turn(lock_key, &owner).await?;
            let base = shared
                .protocol()
                .hold_count(shared.conn(), owner.as_str())
                .await?;
            Ok::<_, Error>((base, turn))
        };
        // Within the wait budget too: a slow reply or a long turn of
        // another task must not stretch it. A single attempt waits for the
        // turn at most one response timeout (the other task of the owner is
        // then waiting in line: the owner does not hold the lock), but a
        // guard's re-entry: its owner holds the lock, and the turn is held
        // by another call of that owner or by the undo of one whose reply
        // was lost, which retries for at most the retry budget. Answering
        // `None` then would say the hold was lost.
        let config = shared.core().config();
        let limit = match (self.wait, self.budget) {
            (Some(wait), _) => Some(self.started + wait),
            (None, Budget::Once) if self.reenter_only => {
                Some(self.started + config.retry_budget + config.response_timeout)
            }
            (None, Budget::Once) => Some(self.started + config.response_timeout),
            (None, Budget::Until(_)) => None,
        };
        let (base, turn) = match limit {
            Some(limit) => match tokio::time::timeout_at(limit, known).await {
                Ok(known) => known?,
                Err(_) => return Ok(None),
            },
            None => known.await?,
        };
        Ok(Some((owner, base, Some(turn))))
    }
}

/// An acquisition's owner, its hold count before it, and its turn (for an
/// explicit owner).
type Known = (Owner, u32, Option<OwnerTurn>);

/// The acquire behind every acquire method: `None` when the wait budget
/// ran out (see [`LockHandle::acquire`](crate::LockHandle::acquire)).
pub(crate) async fn acquire(
    shared: Arc<LockShared>,
    options: AcquireOptions,
) -> Result<Option<ArmedHold>> {
    let core = Arc::clone(shared.core());
    // Counts the outcome (a drop counts as cancelled) and carries the span.
    let record = AcquireRecord::start(core.events(), shared.name(), shared.protocol().fair());
    // Counted until this acquisition is over, so that `shutdown` can wait
    // for it to leave the queue or undo its grant.
    let planned = core
        .enter_acquisition()
        .and_then(|active| Ok((active, Plan::new(&shared, options)?)));
    let (_active, mut plan) = match planned {
        Ok(planned) => planned,
        Err(err) => {
            record.finish(Err(&err));
            return Err(err);
        }
    };
    let span = record.span();
    // The futures run in the span are pinned where they are made and the
    // span wraps a reference to them: moved into `Instrumented`, each was
    // copied whole (the acquisition's is several kilobytes: about 1,000
    // instructions per lock + unlock, docs/performance.md).
    let owner = std::pin::pin!(plan.owner(&shared))
        .instrument(span.clone())
        .await;
    let (owner, base, turn) = match owner {
        Ok(Some((owner, base, _))) if plan.weighted && base > 0 => {
            let err = Error::InvalidConfig(format!(
                "semaphore {:?}: {owner} already holds permits of it (each acquisition is a \
                 hold of its own: ask with a fresh owner)",
                shared.name()
            ));
            record.finish(Err(&err));
            return Err(err);
        }
        Ok(Some(owner)) => owner,
        Ok(None) => {
            record.finish(Ok(None));
            return Ok(None);
        }
        Err(err) => {
            record.finish(Err(&err));
            return Err(err);
        }
    };
    record.owner(&owner);
    let nonce = new_request_id();
    let grant_key = if plan.weighted {
        format!("{nonce}:w{}", plan.weight)
    } else {
        nonce.clone()
    };
    let acquisition = Arc::new(Acquisition {
        shared,
        owner,
        lease: plan.lease,
        wait: plan.wait,
        base,
        turn,
        nonce,
        grant_key,
        weight: plan.weight,
        progress: record.progress(),
        sent_changes: AtomicU64::new(0),
    });
    let acquired = std::pin::pin!(async move {
        let acquired = match plan.budget {
            Budget::Once => attempt::once(&acquisition, plan.reenter_only).await?,
            Budget::Until(deadline) => wait::until(&acquisition, deadline).await?,
        };
        match acquired {
            // Shut down meanwhile: the hold must not outlive `shutdown`.
            // (Boxed, as the replica check below: rare paths, kept out of
            // this future, which every acquisition moves whole.)
            Some(mut hold) if core.is_closed() => {
                hold.disarm();
                let _ = Box::pin(hold.get().release()).await;
                Err(Error::Closed)
            }
            Some(hold) if core.config().min_replicas.is_some() => {
                Box::pin(confirm_replicas(&acquisition, hold)).await
            }
            other => Ok(other),
        }
    });
    let acquired = acquired.instrument(span).await;
    match &acquired {
        Ok(hold) => record.finish(Ok(hold.as_ref().map(|hold| hold.get().token()))),
        Err(err) => record.finish(Err(err)),
    }
    acquired
}

/// With [`min_replicas`](crate::ClientConfig::min_replicas): undo the
/// acquisition of `hold` when too few replicas have it. Dropping this
/// future meanwhile drops the armed hold, which releases it in the
/// background.
async fn confirm_replicas(
    acquisition: &Acquisition,
    mut hold: ArmedHold,
) -> Result<Option<ArmedHold>> {
    let core = acquisition.shared.core();
    let hold_ref = hold.get();
    let synced = acquisition
        .shared
        .sync_replicas("acquisition", Some((hold_ref.owner(), hold_ref.token())))
        .await;
    // The replicas acknowledged what the server of *now* has: if it changed
    // since the attempt that made the grant (a failover), the grant may be
    // lost with the old master, and the acknowledgement says nothing about
    // it.
    let changed = acquisition.shared.conn().server_changes()
        != acquisition.sent_changes.load(Ordering::SeqCst);
    let synced = match synced {
        Ok(_) if changed => Err(Error::ReplicasNotSynced {
            name: acquisition.name().to_owned(),
            what: "acquisition",
            wanted: core.config().min_replicas.map_or(0, |(n, _)| n),
            acked: 0,
            timeout: core
                .config()
                .min_replicas
                .map_or_else(Duration::default, |(_, t)| t),
        }),
        synced => synced,
    };
    match synced {
        Ok(held_until) => {
            // Believed no longer than the acknowledged server keeps it.
            if let Some(held_until) = held_until {
                hold.get().state().cap(held_until);
            }
            Ok(Some(hold))
        }
        Err(err) => {
            hold.disarm();
            let _ = hold.get().release_unsynced().await;
            Err(err)
        }
    }
}

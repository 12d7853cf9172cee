//! Lock events: the one place where what happens to locks is recorded.
//!
//! Every module reports through [`record`]; today it writes `tracing`
//! events (target `fairlock`), and counters plug in here next. Each event
//! names the lock and the owner it concerns.

use std::fmt;
use tracing::{debug, info, warn};

use crate::owner::Owner;

/// Why a hold is known lost (or may be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostCause {
    /// A renewal or check found the lock gone or held by another owner or
    /// acquisition (expired, force-unlocked, taken over).
    Gone,
    /// Renewals kept failing until the confirmed lease ran out.
    RenewalsFailed,
    /// A handed-over grant was gone before it was claimed.
    GrantExpired,
    /// A handed-over grant could not be claimed before it ran out.
    ClaimFailed,
    /// A new acquisition by the same owner retired it.
    Retired,
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::Gone => "it is gone or held by another owner or acquisition",
            LostCause::RenewalsFailed => "the lease ran out while renewals failed",
            LostCause::GrantExpired => "the handed-over grant was gone before it was claimed",
            LostCause::ClaimFailed => "the handed-over grant could not be claimed in time",
            LostCause::Retired => "a new acquisition by the same owner replaced it",
        })
    }
}

/// Something that happened to a lock, a hold or a connection.
pub(crate) enum Event<'a> {
    /// An attempt found the lock busy; the waiter is in line.
    Queued {
        lock: &'a str,
        owner: &'a Owner,
        position: Option<u64>,
    },
    /// A script reply granted the lock (`reentry`: one more hold).
    Granted {
        lock: &'a str,
        owner: &'a Owner,
        token: Option<u64>,
        reentry: bool,
    },
    /// A release handed the lock to this waiter (native direct handoff).
    HandedOver {
        lock: &'a str,
        owner: &'a Owner,
        token: u64,
    },
    /// A grant message arrived too late to trust; the next attempt confirms it.
    LateGrant { lock: &'a str, owner: &'a Owner },
    /// A wait ran out of its budget.
    WaitTimedOut { lock: &'a str, owner: &'a Owner },
    /// An attempt failed on the connection and will be retried.
    AttemptFailed {
        lock: &'a str,
        owner: &'a Owner,
        error: &'a dyn fmt::Display,
        giving_up: bool,
    },
    /// A call that is safe to repeat failed on the connection; retried.
    CallRetried { error: &'a dyn fmt::Display },
    /// A re-entry found the hold lost and undid the fresh grant it got.
    ReentryFoundLost { lock: &'a str, owner: &'a Owner },
    /// A grant raced a cancellation and is released again.
    GrantUndone { lock: &'a str, owner: &'a Owner },
    /// One hold released (`how`: "unlock", "drop", "shutdown", ...).
    Released {
        lock: &'a str,
        owner: &'a Owner,
        how: &'static str,
        outcome: &'a dyn fmt::Debug,
    },
    /// A release or a queue exit failed for good; the lease or the waiter
    /// entry ends on its own.
    CleanupFailed {
        lock: &'a str,
        owner: &'a Owner,
        what: &'static str,
        error: &'a dyn fmt::Display,
    },
    /// Somebody force-unlocked the lock through this client.
    ForceUnlocked { lock: &'a str, released: bool },
    /// A hold is known lost.
    Lost {
        lock: &'a str,
        owner: &'a str,
        cause: LostCause,
    },
    /// A renewal failed; it is retried while the lease lasts.
    RenewalFailed {
        lock: &'a str,
        owner: &'a str,
        error: &'a dyn fmt::Display,
    },
    /// The pub/sub connection broke (or did not answer a PING); waiters are
    /// woken and it reconnects.
    PubSubLost { error: Option<&'a dyn fmt::Display> },
    /// A pub/sub (re)connection or (re)subscription failed; retried.
    PubSubRetry { error: &'a dyn fmt::Display },
    /// The client shut down; `unfinished` acquisitions outlived the wait.
    ShutDown { client: &'a str, unfinished: bool },
    /// Sentinel: the client switched to the master the sentinels name now.
    MasterSwitched {
        service: &'a str,
        from: &'a str,
        to: &'a str,
    },
    /// Sentinel: resolving the master failed; retried.
    SentinelRetry {
        service: &'a str,
        error: &'a dyn fmt::Display,
    },
    /// The server's eviction policy was read at connect (`Err`: it would
    /// not say).
    EvictionPolicy {
        addr: &'a str,
        policy: Result<Option<&'a str>, &'a dyn fmt::Display>,
    },
}

/// Record `event`.
pub(crate) fn record(event: Event<'_>) {
    match event {
        Event::Queued {
            lock,
            owner,
            position,
        } => debug!(lock, %owner, ?position, "waiting in queue"),
        Event::Granted {
            lock,
            owner,
            token,
            reentry,
        } => debug!(lock, %owner, ?token, reentry, "granted"),
        Event::HandedOver { lock, owner, token } => {
            debug!(lock, %owner, token, "handed over")
        }
        Event::LateGrant { lock, owner } => {
            debug!(lock, %owner, "handoff read late; confirming it")
        }
        Event::WaitTimedOut { lock, owner } => debug!(lock, %owner, "wait budget ran out"),
        Event::AttemptFailed {
            lock,
            owner,
            error,
            giving_up: true,
        } => warn!(lock, %owner, %error, "giving up: Redis unreachable or refusing service"),
        Event::AttemptFailed {
            lock, owner, error, ..
        } => {
            debug!(lock, %owner, %error, "attempt failed; retrying")
        }
        Event::CallRetried { error } => debug!(%error, "call failed; retrying"),
        Event::ReentryFoundLost { lock, owner } => {
            debug!(lock, %owner, "re-entry found the hold lost")
        }
        Event::GrantUndone { lock, owner } => {
            debug!(lock, %owner, "grant raced a cancellation; releasing it")
        }
        Event::Released {
            lock,
            owner,
            how,
            outcome,
        } => debug!(lock, %owner, how, ?outcome, "released"),
        Event::CleanupFailed {
            lock,
            owner,
            what,
            error,
        } => warn!(lock, %owner, %error, "{what} failed; it ends on its own (lease or waiter ttl)"),
        Event::ForceUnlocked { lock, released } => info!(lock, released, "force unlock"),
        Event::Lost {
            lock,
            owner,
            cause: LostCause::Retired,
        } => debug!(
            lock,
            owner, "a new acquisition retires an older hold of the same owner"
        ),
        Event::Lost { lock, owner, cause } => warn!(lock, owner, %cause, "lock lost"),
        Event::RenewalFailed { lock, owner, error } => {
            debug!(lock, owner, %error, "renewal failed; will retry")
        }
        Event::PubSubLost { error: Some(error) } => {
            warn!(%error, "pub/sub connection lost; waking all waiters and reconnecting")
        }
        Event::PubSubLost { error: None } => {
            warn!("pub/sub connection lost; waking all waiters and reconnecting")
        }
        Event::PubSubRetry { error } => debug!(%error, "pub/sub connection failed; retrying"),
        Event::ShutDown { client, unfinished } => {
            if unfinished {
                warn!("shutdown: some acquisitions did not finish within the response timeout");
            }
            info!(client, "lock client shut down")
        }
        Event::MasterSwitched { service, from, to } => {
            warn!(
                service,
                from, to, "sentinel: the master moved; following it"
            )
        }
        Event::SentinelRetry { service, error } => {
            debug!(service, %error, "sentinel: resolving the master failed; retrying")
        }
        Event::EvictionPolicy { addr, policy } => match policy {
            Err(error) => {
                debug!(addr, %error, "cannot read maxmemory-policy; eviction check skipped")
            }
            Ok(None) => debug!(addr, "no maxmemory-policy reported; eviction check skipped"),
            Ok(Some("noeviction")) => debug!(addr, "maxmemory-policy is noeviction"),
            Ok(Some(policy)) => warn!(
                addr,
                policy,
                "this maxmemory-policy lets Redis evict lock keys under memory pressure, and a \
                 lock whose key was evicted can be taken by a second holder while the first \
                 still holds it: set maxmemory-policy noeviction on servers that hold locks"
            ),
        },
    }
}

//! The protocol seam: what a lock protocol must do, and the typed replies.
//!
//! Each protocol is a set of Lua scripts plus the Rust that calls them and
//! decodes their replies into the enums below; nothing above this module
//! sees a raw `redis::Value`.

pub(crate) mod redisson;

use std::time::Duration;

/// The wire protocol a client speaks.
///
/// Locks taken under different protocols never exclude each other, even
/// with the same name: a deployment picks one protocol per lock name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// Redisson's `RFairLock` / `RLock` protocol, byte for byte: a Java
    /// service using `redisson.getFairLock(name)` or `getLock(name)` shares
    /// the lock with this client. Inherits Redisson's weaknesses (deadlines
    /// from client clocks, no fencing tokens).
    #[default]
    Redisson,
}

impl Protocol {
    /// The protocol's name as used on the command line: `"redisson"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Redisson => "redisson",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Protocol {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "redisson" => Ok(Protocol::Redisson),
            other => Err(crate::Error::InvalidConfig(format!(
                "unknown protocol {other:?} (expected \"redisson\")"
            ))),
        }
    }
}

/// Outcome of one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Granted to an owner that did not hold it.
    Acquired { token: Option<u64> },
    /// The owner already held it; its hold count is now `count`.
    Reentered { count: u32 },
    /// Held by someone else (or not our turn); we are queued. Try again
    /// after a wake-up or `ttl`. `position` is 1-based when just enqueued.
    Queued {
        ttl: Duration,
        position: Option<u64>,
    },
    /// Held by someone else; not queued (one-shot attempt).
    Busy,
}

/// Outcome of releasing one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The last hold was released; the lock is free (or handed on).
    Released,
    /// One hold was released; the owner still holds the lock.
    StillHeld,
    /// Somebody else holds the lock.
    NotOwner,
    /// Nobody holds the lock (it expired or was force-unlocked).
    NotHeld,
}

/// A point-in-time view of one lock, from [`LockHandle::inspect`](crate::LockHandle::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// The protocol the lock was read with.
    pub protocol: Protocol,
    /// Owners holding the lock with their hold counts (at most one entry
    /// for a well-formed lock).
    pub holders: Vec<Holder>,
    /// Time until the lease runs out, when held.
    pub remaining_lease: Option<Duration>,
    /// Fencing token of the current holder, where the protocol has one.
    pub token: Option<u64>,
    /// Waiters of a fair lock, first in line first.
    pub queue: Vec<QueuedWaiter>,
}

impl LockInfo {
    /// `true` when somebody holds the lock.
    pub fn is_locked(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// An owner holding a lock, in a [`LockInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id (`CLIENT_UUID:N`).
    pub owner: String,
    /// Its hold count (re-entries + 1).
    pub count: u32,
}

/// A queued waiter, in a [`LockInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// 1-based position in the queue.
    pub position: usize,
    /// The owner id (`CLIENT_UUID:N`).
    pub owner: String,
    /// Time left before the entry is considered dead and skipped; `None`
    /// when it has no deadline. Under `redisson` this is measured against
    /// the reading client's clock.
    pub expires_in: Option<Duration>,
}

//! A side of a read-write lock, as both protocols store it: the read side
//! under the owner's id, the write side under `OWNER:write` (Redisson's
//! field name, which the native protocol's holder ids follow), so that an
//! owner's read and write holds of one lock are two holds everywhere (its
//! turns, the watchdog's registry, the renewals).

use crate::owner::Owner;

/// The suffix of a writer's id (Redisson's field name in the lock hash).
pub(crate) const WRITE_SUFFIX: &str = ":write";

/// Which side of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwMode {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

impl RwMode {
    /// The side's name (Redisson's `mode` field while it holds the lock).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }

    /// The id under which this side stores `owner`'s holds: the owner
    /// itself for a reader, `OWNER:write` for the writer. Either form may
    /// be given: an owner read back from a write guard reads as itself.
    pub(crate) fn hold_owner(self, owner: Owner) -> Owner {
        let base = owner.as_str().strip_suffix(WRITE_SUFFIX);
        match (self, base) {
            (RwMode::Read, None) | (RwMode::Write, Some(_)) => owner,
            (RwMode::Read, Some(base)) => Owner::from_raw(base),
            (RwMode::Write, None) => Owner::from_raw(&crate::name::joined(owner.as_str(), "write")),
        }
    }
}

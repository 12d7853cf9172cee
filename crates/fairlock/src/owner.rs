//! Lock owners.

use std::fmt;
use std::sync::Arc;

/// Who holds a lock: the client's UUID and a number, written `UUID:N` (the
/// format of Redisson's lock hash fields, where N is a Java thread id).
///
/// Reentrancy keys on the owner: an owner that holds a lock can acquire it
/// again and must release it as many times. In async code tasks move between
/// threads, so each [`lock`](crate::LockHandle::lock) call takes a fresh owner
/// and re-entry goes through [`LockGuard::reenter`](crate::LockGuard::reenter)
/// or an owner passed explicitly with
/// [`AcquireOptions::owner`](crate::AcquireOptions::owner). The blocking API
/// keys on the calling thread, as Redisson does.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    pub(crate) fn new(client_id: &str, number: u64) -> Self {
        Self {
            id: format!("{client_id}:{number}").into(),
        }
    }

    /// An owner id read back from the registry of holds.
    pub(crate) fn from_raw(id: &str) -> Self {
        Self { id: id.into() }
    }

    /// The owner as stored in Redis: `CLIENT_UUID:N`.
    pub fn as_str(&self) -> &str {
        &self.id
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.id)
    }
}

//! Lock owners.

use std::collections::HashMap;
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
        // The number on the stack, the id in one buffer sized at once (a
        // `to_string` and a `joined` cost two more allocations).
        let number = crate::decimal::Decimal::new(number);
        let mut id = String::with_capacity(client_id.len() + 1 + number.len());
        id.push_str(client_id);
        id.push(':');
        id.push_str(&number);
        Self { id: id.into() }
    }

    /// An owner id as a lock stores it (a read-write lock's writer is
    /// `CLIENT_UUID:N:write`, see `ProtocolLock::hold_owner`).
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

/// One owner's turn at one lock: the acquisitions that name the same owner
/// (re-entries through [`AcquireOptions::owner`](crate::AcquireOptions::owner)
/// or [`LockGuard::reenter`](crate::LockGuard::reenter)) go one at a time.
///
/// An acquisition by a known owner reads the owner's hold count first and
/// tells the server that count (`base`): finding `base + 1` holds means an
/// earlier attempt of *this* acquisition succeeded and its reply was lost,
/// so it must not count again. Two acquisitions of one owner in flight at
/// once would read the same base, and the second would take the first's
/// hold for its own: more guards than the server counts, and the lock freed
/// while a guard still believes it holds it. Taking turns keeps the guards
/// of an owner equal to the server's hold count.
///
/// A turn is held for the whole acquisition, its background attempt and its
/// undo included (they keep the [`OwnerTurn`] alive), so the next
/// acquisition reads a count that nothing of the previous one can still
/// change. Releases do not take turns: they only lower the count, never
/// the secret the native lock records of its holder's latest acquisition,
/// by which a retry or an undo after a lost reply knows its own hold. Under
/// redisson (the count only) a release that lands between a lost reply and
/// its undo hides the attempt's hold: one hold too many, which ends with
/// the lease once the owner's last guard is gone (the lock is then held by
/// nobody who believes it: never two holders).
///
/// Turns live as long as somebody holds or waits for them: the map holds no
/// entry for an owner that is not acquiring.
#[derive(Default)]
pub(crate) struct OwnerTurns {
    turns: std::sync::Mutex<HashMap<TurnKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// (lock key, owner id).
type TurnKey = (String, String);

impl OwnerTurns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<TurnKey, Arc<tokio::sync::Mutex<()>>>> {
        // Every update is a single insert or remove: a poisoned map is
        // still consistent.
        self.turns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait for `owner`'s turn at the lock `lock_key`.
    ///
    /// # Cancel safety
    /// Dropping the future gives up the place in line; nothing else changes.
    pub(crate) async fn take(self: &Arc<Self>, lock_key: &str, owner: &Owner) -> OwnerTurn {
        let key = (lock_key.to_owned(), owner.as_str().to_owned());
        let mutex = Arc::clone(self.map().entry(key.clone()).or_default());
        let guard = mutex.lock_owned().await;
        OwnerTurn {
            turns: Arc::clone(self),
            key,
            _guard: guard,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// An owner's turn at a lock, given back on drop.
pub(crate) struct OwnerTurn {
    turns: Arc<OwnerTurns>,
    key: TurnKey,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for OwnerTurn {
    fn drop(&mut self) {
        let mut map = self.turns.map();
        // Nobody else holds or waits for this turn (the map and this guard
        // hold the only references): the entry goes. Clones are only made
        // under the map's lock, so none can appear meanwhile.
        if map
            .get(&self.key)
            .is_some_and(|mutex| Arc::strong_count(mutex) == 2)
        {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_of_one_owner_go_one_at_a_time_and_leave_nothing() {
        let turns = Arc::new(OwnerTurns::default());
        let owner = Owner::new("client", 1);
        let first = turns.take("lock", &owner).await;
        // Another owner, or another lock, does not wait.
        let other = turns.take("lock", &Owner::new("client", 2)).await;
        let elsewhere = turns.take("other-lock", &owner).await;
        let second = {
            let turns = Arc::clone(&turns);
            let owner = owner.clone();
            tokio::spawn(async move { turns.take("lock", &owner).await })
        };
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "the second turn waits for the first");
        drop(first);
        let second = second.await.unwrap();
        drop((second, other, elsewhere));
        assert_eq!(turns.len(), 0, "no entry outlives its turns");
    }
}

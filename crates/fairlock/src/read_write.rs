//! The read-write lock: [`ReadWriteLock`], a read side and a write side.

use crate::error::Result;
use crate::handle::LockHandle;
use crate::protocol::LockInfo;

/// A read-write lock: any number of readers at once, or one writer and
/// nobody else. Get one with
/// [`LockClient::read_write_lock`](crate::LockClient::read_write_lock).
///
/// Each side is a [`LockHandle`] with everything a lock handle has: `lock`,
/// `try_lock`, `try_lock_for`, explicit leases or the watchdog, re-entry,
/// `lost()` and `is_held()` on its guards, `force_unlock`, `inspect`.
///
/// ```no_run
/// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
/// let catalog = client.read_write_lock("catalog")?;
/// let reading = catalog.read().lock().await?; // beside other readers
/// // ... read ...
/// reading.unlock().await?;
/// let writing = catalog.write().lock().await?; // alone
/// // ... write ...
/// writing.unlock().await?;
/// # Ok(())
/// # }
/// ```
///
/// # Rules
/// - **Readers share, a writer is alone.** A writer is admitted when
///   nobody holds the lock; a reader when nobody writes.
/// - **Re-entry** on each side, per owner, as for a lock.
/// - **Downgrade**: the writer may take the read side too (pass its owner,
///   [`AcquireOptions::owner`](crate::AcquireOptions::owner)); releasing the
///   write hold then leaves the read hold, and other readers may enter.
/// - **No upgrade**: an owner that reads and asks for the write side would
///   wait for itself forever; it gets [`Error::WouldDeadlock`](crate::Error::WouldDeadlock)
///   at once instead (Redisson lets it hang).
/// - **Owners.** The writer's owner id is its owner's with `:write`
///   appended (`CLIENT_UUID:N:write`, Redisson's field name): a write
///   guard's [`owner`](crate::LockGuard::owner) reads that way, and either
///   form names the same owner to either side, and to any other lock of
///   the client (which stores the owner itself).
///
/// # Under `redisson`
/// Redisson's `RReadWriteLock`, byte for byte (the hash under the name with
/// `mode` and a field per owner, each read hold's
/// `{NAME}:OWNER:rwlock_timeout:N` key, the messages `0` and `1` on
/// `redisson_rwlock:{NAME}`), so a Java service using
/// `redisson.getReadWriteLock(name)` shares it. Its rules are Redisson's,
/// and so is its weakness: **it is not fair**. A reader is admitted whenever
/// the lock is in read mode, even while a writer waits, so a steady stream
/// of readers starves writers (Redisson issue 5379); there is no queue
/// ([`inspect`](Self::inspect) shows holders only). Two differences that no
/// Redisson client can observe as a change of state: a write re-entry
/// keeps the longer of the leases instead of adding them, and releasing
/// one read hold never shortens the lease of a writer that also reads.
///
/// # Under `native`
/// **Fair**: one line for both sides, first come, first served. A reader
/// that comes while a writer waits queues behind it (no writer starves);
/// the readers queued together behind a writer are admitted together when
/// it leaves; a writer waits only for those who came before it. Every
/// acquisition gets a fencing token ([`LockGuard::token`](crate::LockGuard::token)),
/// strictly increasing across both sides. A release hands the lock to the
/// next reader group or writer directly (each is told by a signed grant
/// message, as the lock's waiters are), a crashed holder stops counting
/// when its lease ends and a dead waiter when its waiter ttl does, and
/// every key expires on its own. The downgrade passes the line: the
/// writer's own read request is granted at once (queueing it behind the
/// waiters its write hold keeps out would deadlock). The read-write lock
/// and the lock of one name are two objects (their keys differ). Keys and
/// rules: `docs/read-write-lock.md`.
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    read: LockHandle,
    write: LockHandle,
}

impl ReadWriteLock {
    pub(crate) fn new(read: LockHandle, write: LockHandle) -> Self {
        Self { read, write }
    }

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

    /// Both sides at one instant: the writer (if any) first, then the
    /// readers, each with its [`HoldMode`](crate::HoldMode) and hold count.
    ///
    /// # Errors
    /// As [`LockHandle::inspect`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.read.inspect().await
    }
}

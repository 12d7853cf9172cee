//! The kinds of lock: [`LockKind`].

/// The kind of a lock, for code that picks it at run time
/// ([`LockClient::handle`](crate::LockClient::handle)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The fair (FIFO) lock: [`FairLock`](crate::FairLock), Redisson's `RFairLock`.
    Fair,
    /// The non-fair lock: [`Lock`](crate::Lock), Redisson's `RLock`.
    NonFair,
    /// The read side of a read-write lock ([`ReadWriteLock::read`](crate::ReadWriteLock::read)),
    /// Redisson's `RReadWriteLock.readLock()`: shared with other readers.
    Read,
    /// The write side of a read-write lock ([`ReadWriteLock::write`](crate::ReadWriteLock::write)),
    /// Redisson's `RReadWriteLock.writeLock()`: alone.
    Write,
}

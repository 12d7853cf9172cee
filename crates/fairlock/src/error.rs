//! The crate's error type.

use std::time::Duration;

/// A specialized `Result` whose error defaults to [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, holding or releasing a lock.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a
/// wildcard arm. The predicates ([`is_lock_lost`](Error::is_lock_lost),
/// [`is_connection`](Error::is_connection), [`is_auth`](Error::is_auth),
/// [`is_invalid_input`](Error::is_invalid_input))
/// are the stable way to branch on a class of errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name cannot be used; `reason` says why.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (truncated to 64 characters).
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// A duration argument is zero, below one millisecond, or above
    /// [`MAX_DURATION`](crate::MAX_DURATION).
    #[error("invalid {what}: {value:?} ({reason})")]
    InvalidDuration {
        /// Which argument: `"lease"`, `"wait"`, `"waiter slot"`, ...
        what: &'static str,
        /// The value given.
        value: Duration,
        /// Why it was rejected.
        reason: &'static str,
    },

    /// The configuration or URL is unusable.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The lock was no longer held by this owner: its lease ran out, another
    /// client force-unlocked it, or Redis lost it.
    #[error("lock {name:?} is no longer held by {owner}")]
    LockLost {
        /// The lock name.
        name: String,
        /// The owner that believed it held the lock.
        owner: String,
    },

    /// An unlock was attempted by an owner that does not hold the lock while
    /// somebody else does.
    #[error("lock {name:?} is not held by {owner}")]
    NotOwner {
        /// The lock name.
        name: String,
        /// The owner that tried to unlock.
        owner: String,
    },

    /// A key of the lock holds a value of another Redis type (Redis answered
    /// `WRONGTYPE`). Nothing was changed.
    #[error("key {key:?} of lock {name:?} holds a value of the wrong Redis type")]
    WrongType {
        /// The lock name.
        name: String,
        /// The key that was checked first (the lock key).
        key: String,
        /// The Redis error.
        #[source]
        source: redis::RedisError,
    },

    /// Redis could not be reached, or the connection broke and did not come
    /// back within the retry budget.
    #[error("cannot reach Redis at {addr}: {source}")]
    Connection {
        /// `host:port` (or socket path) of the server.
        addr: String,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },

    /// Redis answered that it cannot serve requests right now (`BUSY` running
    /// a slow script, `LOADING` its data, `TRYAGAIN`, `MASTERDOWN`,
    /// `READONLY` after a failover demoted it, `OOM` under `noeviction`) and
    /// kept answering so for the retry budget. Nothing was changed by the
    /// refused call; the message names the server's answer.
    #[error("Redis at {addr} cannot serve requests now: {source}")]
    Unavailable {
        /// `host:port` (or socket path) of the server.
        addr: String,
        /// The server's answer.
        #[source]
        source: redis::RedisError,
    },

    /// Something answered at the address, but not as a Redis server does
    /// (an HTTP server, another database, a TLS endpoint reached without
    /// TLS...): the URL points at the wrong host or port. Reported when
    /// connecting; retrying does not help.
    #[error("{addr} did not answer as a Redis server: {source}")]
    NotRedis {
        /// `host:port` (or socket path) that was reached.
        addr: String,
        /// What the reply failed on.
        #[source]
        source: redis::RedisError,
    },

    /// The server refused the credentials (wrong password or ACL user).
    #[error("authentication to Redis at {addr} failed: {source}")]
    Auth {
        /// `host:port` of the server.
        addr: String,
        /// The underlying error.
        #[source]
        source: redis::RedisError,
    },

    /// Redis answered a command with an error that fits no other variant.
    #[error("Redis error: {0}")]
    Redis(#[source] redis::RedisError),

    /// A script answered with a reply this version does not understand
    /// (for example another library wrote the keys in another format).
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),

    /// The [`LockClient`](crate::LockClient) was shut down.
    #[error("the lock client was shut down")]
    Closed,
}

impl Error {
    /// `true` for [`Error::LockLost`].
    pub fn is_lock_lost(&self) -> bool {
        matches!(self, Error::LockLost { .. })
    }

    /// `true` when Redis could not be reached ([`Error::Connection`]) or
    /// could not serve requests ([`Error::Unavailable`]) for the retry budget:
    /// the failures that retrying later can cure.
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection { .. } | Error::Unavailable { .. })
    }

    /// `true` when the credentials were refused ([`Error::Auth`]).
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. })
    }

    /// `true` for errors caused by the caller's arguments or configuration.
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self,
            Error::InvalidName { .. } | Error::InvalidDuration { .. } | Error::InvalidConfig(_)
        )
    }

    /// Classify a Redis error from a call against `addr` on lock `name`.
    pub(crate) fn from_redis(err: redis::RedisError, addr: &str, name: &str, key: &str) -> Self {
        if is_connection_error(&err) {
            return Error::Connection {
                addr: addr.to_owned(),
                source: err,
            };
        }
        if is_unavailable_error(&err) {
            return Error::Unavailable {
                addr: addr.to_owned(),
                source: err,
            };
        }
        if err.kind() == redis::ErrorKind::AuthenticationFailed
            || err.code() == Some("WRONGPASS")
            || err.code() == Some("NOAUTH")
        {
            return Error::Auth {
                addr: addr.to_owned(),
                source: err,
            };
        }
        // A script that touches a key of another type fails with a
        // script error whose message carries WRONGTYPE.
        if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
            return Error::WrongType {
                name: name.to_owned(),
                key: key.to_owned(),
                source: err,
            };
        }
        Error::Redis(err)
    }

    /// Classify an error from connecting or a call that names no lock.
    pub(crate) fn from_redis_conn(err: redis::RedisError, addr: &str) -> Self {
        Self::from_redis(err, addr, "", "")
    }

    /// Classify an error from the first exchange with a server (the
    /// handshake and a `PING`): a reply that does not parse as RESP, or a
    /// `PING` answered with something other than a status, means the
    /// address is not a Redis server.
    pub(crate) fn from_first_reply(err: redis::RedisError, addr: &str) -> Self {
        if matches!(
            err.kind(),
            redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
        ) {
            return Error::NotRedis {
                addr: addr.to_owned(),
                source: err,
            };
        }
        Self::from_redis_conn(err, addr)
    }
}

/// Errors after which retrying on a new connection can succeed.
pub(crate) fn is_connection_error(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
}

/// Server answers that refuse a command before it runs, for a while: a
/// retry of the same call is safe and can succeed. A script refused with one
/// of these did not run (Redis checks `OOM` before a script's first write,
/// and never runs part of a script for the others).
const UNAVAILABLE_CODES: [&str; 6] = [
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "OOM",
];

fn is_unavailable_error(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::BusyLoading
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::MasterDown
                | redis::ServerErrorKind::ReadOnly
        )
    ) || err
        .code()
        .is_some_and(|code| UNAVAILABLE_CODES.contains(&code))
}

pub(crate) fn truncate_name(name: &str) -> String {
    name.chars().take(64).collect()
}

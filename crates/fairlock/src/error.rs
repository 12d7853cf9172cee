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

    /// The owner asked for a read-write lock's write side while it holds
    /// the read side (an upgrade): it would wait for itself forever.
    /// Release the read holds first. Nothing was changed.
    #[error(
        "lock {name:?}: {owner} holds the read lock and asked for the write lock, which would wait for itself forever (release the read lock first)"
    )]
    WouldDeadlock {
        /// The lock name.
        name: String,
        /// The owner (its write id, `CLIENT_UUID:N:write`).
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
        source: RedisError,
    },

    /// A key of the lock holds data that is not a lock of this protocol
    /// (application data under the lock's name, or a lock written by
    /// something else in another format), or a value the lock's scripts
    /// read back is malformed (a counter that is not a decimal integer in
    /// range, say). Nothing was written or deleted: fairlock never touches
    /// data that is not its own. `reason` says what was found.
    #[error("{key:?} holds data that is not a fairlock/Redisson lock (lock {name:?}: {reason})")]
    NotALock {
        /// The lock name.
        name: String,
        /// The key that holds the foreign or malformed data.
        key: String,
        /// What was found there.
        reason: String,
    },

    /// The lock is held in the key layout of an older fairlock version
    /// (the native lock's layout `version`, before version 2): a client of
    /// that version holds it. The two layouts never both hold one name: this
    /// client refuses (nothing was changed), and clients of the older
    /// version refuse a lock held in this layout (they see a key of another
    /// type). Upgrade every client of the name, or let the older ones drain
    /// (their holds end with their release or lease), then retry.
    #[error(
        "lock {name:?} is held in the native key layout version {version} of an older fairlock ({key:?}): upgrade every client of this lock, or retry once the older clients released it"
    )]
    OlderLayout {
        /// The lock name.
        name: String,
        /// The key that holds the older layout.
        key: String,
        /// The older layout's version.
        version: u32,
    },

    /// Redis could not be reached, or the connection broke and did not come
    /// back within the retry budget.
    #[error("cannot reach Redis at {addr}: {source}")]
    Connection {
        /// `host:port` (or socket path) of the server.
        addr: String,
        /// The underlying error.
        #[source]
        source: RedisError,
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
        source: RedisError,
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
        source: RedisError,
    },

    /// The server refused the credentials (wrong password or ACL user).
    #[error("authentication to Redis at {addr} failed: {source}")]
    Auth {
        /// `host:port` of the server.
        addr: String,
        /// The underlying error.
        #[source]
        source: RedisError,
    },

    /// Redis answered a command with an error that fits no other variant.
    /// When the server's ACL refused the call (or a command, key or channel
    /// inside a script), the message says which kind of rule is missing
    /// before the server's own text, alike for Redis and Valkey, whose texts
    /// differ; [`Error::acl_refusal`] tells it to code.
    #[error("Redis error: {}", describe(.0))]
    Redis(#[source] RedisError),

    /// A script answered with a reply this version does not understand
    /// (for example another library wrote the keys in another format).
    #[error("unexpected reply from Redis: {0}")]
    Protocol(String),

    /// Fewer replicas than
    /// [`min_replicas`](crate::ClientConfig::min_replicas) asks for
    /// acknowledged an acquisition or a release within its timeout. An
    /// acquisition was undone (the lock released again); a release is done
    /// all the same.
    #[error(
        "lock {name:?}: {acked} of {wanted} replicas acknowledged the {what} within {timeout:?}"
    )]
    ReplicasNotSynced {
        /// The lock name.
        name: String,
        /// `"acquisition"`, `"release"`, or (reported to the lost-lock
        /// signal and the logs, not returned) `"renewal"` / `"claim"`.
        what: &'static str,
        /// How many replicas were asked for.
        wanted: u32,
        /// How many acknowledged in time.
        acked: u32,
        /// The timeout it waited for.
        timeout: Duration,
    },

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

    /// What the server's ACL refused, for an [`Error::Redis`] that is an ACL
    /// refusal (see [`RedisError::acl_refusal`]); `None` otherwise.
    pub fn acl_refusal(&self) -> Option<AclRefusal> {
        match self {
            Error::Redis(source) => source.acl_refusal(),
            _ => None,
        }
    }
}

/// What an ACL refused: the kind of rule the user lacks (see the minimal
/// ACL rules in `docs/deployment.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AclRefusal {
    /// A command (a `+command` rule), sent directly or called by a script.
    Command,
    /// A key (a `~pattern` rule).
    Key,
    /// A pub/sub channel (a `&pattern` rule): a `SUBSCRIBE`, or a `PUBLISH`
    /// inside a script (the wake-up of the next waiter).
    Channel,
}

impl std::fmt::Display for AclRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AclRefusal::Command => "the ACL refused a command (the user lacks a +command rule)",
            AclRefusal::Key => "the ACL refused a key (the user lacks a ~key rule)",
            AclRefusal::Channel => "the ACL refused a channel (the user lacks a &channel rule)",
        })
    }
}

/// The text of [`Error::Redis`]: what the ACL refused, when it did, then the
/// server's answer.
fn describe(err: &RedisError) -> String {
    match err.acl_refusal() {
        Some(refusal) => format!("{refusal}: {err}"),
        None => err.to_string(),
    }
}

/// What the ACL refused, read from the text of a server error with `code`.
/// Top-level refusals carry the code `NOPERM` (Redis and Valkey); a refusal
/// inside a script is a plain `ERR` whose text differs between the servers:
/// Redis 7 "The user executing the script can't publish to the channel
/// mentioned in the command", "... can't run this command or subcommand",
/// "... can't access at least one of the keys ..."; Valkey 8 and 9 "ACL
/// failure in script: No permissions to access a channel", "... User U has
/// no permissions to run the 'set' command", "... No permissions to access a
/// key".
pub(crate) fn classify_acl_refusal(code: Option<&str>, text: &str) -> Option<AclRefusal> {
    let text = text.to_ascii_lowercase();
    let script_refusal = text.contains("acl failure in script")
        || text.contains("the user executing the script can't");
    if code != Some("NOPERM") && !script_refusal {
        return None;
    }
    // A refused command first: its name may contain "key" or "channel".
    if text.contains("can't run this command") || text.contains("permissions to run the") {
        Some(AclRefusal::Command)
    } else if text.contains("channel") {
        Some(AclRefusal::Channel)
    } else if text.contains("key") {
        Some(AclRefusal::Key)
    } else {
        Some(AclRefusal::Command)
    }
}

/// A name cut to 64 characters, for error messages.
pub(crate) fn truncate_name(name: &str) -> String {
    name.chars().take(64).collect()
}

/// An error reported by the Redis client (a server reply, an I/O failure, a
/// timeout), kept opaque so that the Redis client library this crate uses
/// is not part of its API. [`Display`](std::fmt::Display) shows what
/// happened; [`source`](std::error::Error::source) continues the chain.
pub struct RedisError(redis::RedisError);

impl RedisError {
    pub(crate) fn new(err: redis::RedisError) -> Self {
        Self(err)
    }

    /// The error code of a server reply (`"NOPERM"`, `"WRONGTYPE"`,
    /// `"BUSY"`, ...); `None` for errors that are not server replies.
    pub fn code(&self) -> Option<&str> {
        self.0.code()
    }

    /// The text of a server reply after its code; `None` when there is none.
    pub fn detail(&self) -> Option<&str> {
        self.0.detail()
    }

    /// What the server's ACL refused, when this is an ACL refusal: a
    /// `NOPERM` reply, or a script that failed at a command, key or channel
    /// its user may not use (Redis and Valkey word these differently; both
    /// are recognised). `None` for every other error.
    pub fn acl_refusal(&self) -> Option<AclRefusal> {
        classify_acl_refusal(self.code(), &self.0.to_string())
    }

    /// `true` when no reply came within the response timeout.
    pub fn is_timeout(&self) -> bool {
        self.0.is_timeout()
    }

    /// `true` when the server refused the connection (nothing listens there).
    pub fn is_connection_refusal(&self) -> bool {
        self.0.is_connection_refusal()
    }

    /// `true` when the connection was closed before a reply came.
    pub fn is_connection_dropped(&self) -> bool {
        self.0.is_connection_dropped()
    }

    #[cfg(test)]
    pub(crate) fn timeout_for_tests() -> Self {
        Self(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "test timeout",
        )))
    }
}

impl std::fmt::Display for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl std::fmt::Debug for RedisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for RedisError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The servers' texts, as Redis 7.0 and Valkey 8.1/9.1 answer them.
    #[test]
    fn acl_refusals_of_redis_and_valkey_are_told_apart() {
        let cases = [
            (
                Some("ERR"),
                "The user executing the script can't publish to the channel mentioned in the command script: afd1, on @user_script:1.",
                Some(AclRefusal::Channel),
            ),
            (
                Some("ERR"),
                "ACL failure in script: No permissions to access a channel script: on @user_script:1.",
                Some(AclRefusal::Channel),
            ),
            (
                Some("ERR"),
                "The user executing the script can't run this command or subcommand script: 8b2a, on @user_script:1.",
                Some(AclRefusal::Command),
            ),
            (
                Some("ERR"),
                "ACL failure in script: User u has no permissions to run the 'set' command script: on @user_script:1.",
                Some(AclRefusal::Command),
            ),
            (
                Some("ERR"),
                "The user executing the script can't access at least one of the keys mentioned in the command arguments script: e6c7, on @user_script:1.",
                Some(AclRefusal::Key),
            ),
            (
                Some("ERR"),
                "ACL failure in script: No permissions to access a key script: on @user_script:1.",
                Some(AclRefusal::Key),
            ),
            (
                Some("NOPERM"),
                "NOPERM User u has no permissions to run the 'keys' command",
                Some(AclRefusal::Command),
            ),
            (
                Some("NOPERM"),
                "NOPERM No permissions to access a key",
                Some(AclRefusal::Key),
            ),
            (
                Some("NOPERM"),
                "NOPERM this user has no permissions to access one of the channels used as arguments",
                Some(AclRefusal::Channel),
            ),
            (Some("ERR"), "Error running script: no such key", None),
            (
                Some("WRONGTYPE"),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                None,
            ),
            (None, "broken pipe", None),
        ];
        for (code, text, want) in cases {
            assert_eq!(classify_acl_refusal(code, text), want, "{code:?} {text}");
        }
    }
}

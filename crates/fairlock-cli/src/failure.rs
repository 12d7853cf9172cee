//! Exit codes, their table in `--help`, and what each library error tells
//! the user (in the user's terms, with what to do about it).

use fairlock::Error;

/// Exit codes (sysexits.h where one fits), listed by [`table`].
pub(crate) mod exit {
    /// force-unlock: the confirmation was declined; demo, torture: a check failed.
    pub(crate) const DECLINED_OR_FAILED: u8 = 1;
    /// torture: the run checked nothing of something it meant to check.
    pub(crate) const INCONCLUSIVE: u8 = 2;
    /// Bad usage: unknown flag, value out of range, bad lock name or URL.
    pub(crate) const USAGE: u8 = 64;
    /// Redis unreachable, not Redis, or refusing us.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// Anything else that went wrong inside fairlock.
    pub(crate) const SOFTWARE: u8 = 70;
    /// The lock was lost while the command ran.
    pub(crate) const LOST: u8 = 71;
    /// The lock was not acquired within `--wait`.
    pub(crate) const TIMEOUT: u8 = 75;
    /// The command exists but could not be run.
    pub(crate) const CANNOT_RUN: u8 = 126;
    /// The command was not found.
    pub(crate) const NOT_FOUND: u8 = 127;
}

/// The subcommands, for the exit codes that apply to each.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Sub {
    Exec,
    Elect,
    Leader,
    Inspect,
    ForceUnlock,
    Watch,
    Demo,
    Torture,
    Bench,
    Latch,
}

const ALL: &[Sub] = &[
    Sub::Exec,
    Sub::Elect,
    Sub::Leader,
    Sub::Inspect,
    Sub::ForceUnlock,
    Sub::Watch,
    Sub::Demo,
    Sub::Torture,
    Sub::Bench,
    Sub::Latch,
];

/// Every way `fairlock` exits: code, the subcommands it applies to, meaning.
const ROWS: &[(&str, &[Sub], &str)] = &[
    (
        "CMD's",
        &[Sub::Exec],
        "the command ran under the lock: its own exit code (128+N if it died of signal N)",
    ),
    (
        "CMD's",
        &[Sub::Elect],
        "the command ran while leading: its own exit code (128+N if it died of signal N)",
    ),
    ("0", ALL, "success"),
    (
        "1",
        &[Sub::ForceUnlock],
        "the confirmation was declined: nothing was changed",
    ),
    (
        "1",
        &[Sub::Demo, Sub::Torture],
        "a check failed: the summary names the violations",
    ),
    (
        "1",
        &[Sub::Latch],
        "latch set: the latch is counting down already (nothing was changed)",
    ),
    (
        "2",
        &[Sub::Torture],
        "inconclusive: the run checked nothing of something it meant to check (the summary \
         says what)",
    ),
    (
        "64",
        ALL,
        "bad usage: unknown flag, value out of range, bad lock name or Redis URL, \
         a database the server lacks, a lock name used by another kind of key or by data \
         that is not a lock",
    ),
    (
        "69",
        ALL,
        "Redis unavailable: unreachable, not a Redis server, password or ACL permission \
         refused",
    ),
    (
        "69",
        &[Sub::Demo, Sub::Torture, Sub::Bench],
        "without --redis: a private redis-server could not be started",
    ),
    ("70", ALL, "internal error (a bug: please report it)"),
    (
        "71",
        &[Sub::Exec],
        "the lock was lost while the command ran",
    ),
    (
        "71",
        &[Sub::Elect],
        "the leadership was lost while the command ran",
    ),
    (
        "75",
        &[Sub::Exec],
        "not acquired within --wait (the queue entry is removed)",
    ),
    (
        "75",
        &[Sub::Elect],
        "not leading within --wait (the candidate left the line)",
    ),
    (
        "75",
        &[Sub::Latch],
        "latch wait: the count did not reach 0 within --timeout",
    ),
    (
        "126",
        &[Sub::Exec],
        "the command could not be run (not executable)",
    ),
    (
        "126",
        &[Sub::Elect],
        "the command could not be run (not executable)",
    ),
    ("127", &[Sub::Exec], "the command was not found"),
    ("127", &[Sub::Elect], "the command was not found"),
    (
        "128+N",
        &[Sub::Exec],
        "signal N arrived while waiting for the lock (the queue entry is removed)",
    ),
    (
        "128+N",
        &[Sub::Elect],
        "signal N arrived while campaigning (the candidate left the line)",
    ),
    (
        "128+N",
        &[Sub::Torture],
        "signal N (SIGINT, SIGTERM, SIGHUP) stopped the run early: the summary covers the run \
         so far",
    ),
];

fn name(sub: Sub) -> &'static str {
    match sub {
        Sub::Exec => "exec",
        Sub::Elect => "elect",
        Sub::Leader => "leader",
        Sub::Inspect => "inspect",
        Sub::ForceUnlock => "force-unlock",
        Sub::Watch => "watch",
        Sub::Demo => "demo",
        Sub::Torture => "torture",
        Sub::Bench => "bench",
        Sub::Latch => "latch",
    }
}

/// The exit code table: of one subcommand, or (`None`) of all, each row
/// that does not apply to every subcommand naming those it applies to.
pub(crate) fn table(only: Option<Sub>) -> String {
    let mut out = String::from("Exit codes:\n");
    for (code, subs, meaning) in ROWS {
        let line = match only {
            Some(sub) if !subs.contains(&sub) => continue,
            Some(_) => format!("  {code:<7}{meaning}\n"),
            None if subs.len() == ALL.len() => format!("  {code:<7}{meaning}\n"),
            None => {
                let who: Vec<&str> = subs.iter().map(|s| name(*s)).collect();
                format!("  {code:<7}{}: {meaning}\n", who.join(", "))
            }
        };
        out += &line;
    }
    out.truncate(out.trim_end().len());
    out
}

/// An error with the exit code it maps to.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// Where the URL comes from, for the hints.
const WHERE_URL: &str = "--redis or $REDIS_URL";

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        use exit::{LOST, SOFTWARE, UNAVAILABLE, USAGE};
        match &err {
            Error::Connection { addr, source } => Self::new(UNAVAILABLE, unreachable(addr, source)),
            Error::NotRedis { addr, .. } => Self::new(
                UNAVAILABLE,
                format!(
                    "{addr} did not answer as a Redis server: check the host and port in \
                     {WHERE_URL}"
                ),
            ),
            Error::Auth { addr, source } if source.code() == Some("NOAUTH") => Self::new(
                UNAVAILABLE,
                format!(
                    "Redis at {addr} requires a password: put it in the URL, \
                     redis://:PASSWORD@HOST:PORT (or redis://USER:PASSWORD@HOST:PORT)"
                ),
            ),
            Error::Auth { addr, .. } => Self::new(
                UNAVAILABLE,
                format!(
                    "Redis at {addr} refused the user or password of the URL: check them in \
                     {WHERE_URL} (redis://USER:PASSWORD@HOST:PORT)"
                ),
            ),
            Error::Unavailable { addr, source } => Self::new(
                UNAVAILABLE,
                format!("Redis at {addr} cannot serve requests now ({source}); try again later"),
            ),
            // A NOPERM refusal of a call, or one inside a script (a plain
            // ERR, worded differently by Redis and Valkey).
            Error::Redis(source) if source.acl_refusal().is_some() => Self::new(
                UNAVAILABLE,
                format!(
                    "the Redis user may not do what fairlock needs ({}: {}): grant it the ACL \
                     rules of docs/deployment.md",
                    source
                        .acl_refusal()
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    source.detail().unwrap_or("NOPERM")
                ),
            ),
            Error::WrongType { name, key, .. } => Self::new(
                USAGE,
                format!(
                    "the key {key:?} of lock {name:?} holds another kind of data: the name is \
                     taken by something else in this Redis database; use another lock name"
                ),
            ),
            Error::NotALock { name, key, reason } => Self::new(
                USAGE,
                format!(
                    "{name} holds data that is not a fairlock/Redisson lock (key {key:?}: \
                     {reason}); nothing was changed: use another lock name"
                ),
            ),
            Error::OlderLayout { name, version, .. } => Self::new(
                UNAVAILABLE,
                format!(
                    "{name} is held by a client of an older fairlock (the native key layout \
                     version {version}); nothing was changed: upgrade every client of this \
                     lock, or retry once the older clients released it"
                ),
            ),
            Error::InvalidConfig(message) => Self::new(USAGE, message.clone()),
            Error::WouldDeadlock { .. } => Self::new(USAGE, err.to_string()),
            _ if err.is_invalid_input() => Self::new(USAGE, err.to_string()),
            _ if err.is_lock_lost() => Self::new(LOST, err.to_string()),
            _ => Self::new(
                SOFTWARE,
                format!("{err} (an internal error: please report it)"),
            ),
        }
    }
}

/// A failure to connect: as [`Failure::from`], but what only happens on
/// the first exchange is said as such: a server that hung up before
/// answering (a TLS server reached without TLS, a proxy with nothing
/// behind it), or one that answered the first command with an error
/// (protected mode, too many clients).
pub(crate) fn connect_failure(err: Error) -> Failure {
    match &err {
        Error::Connection { addr, source }
            if source.is_connection_dropped() && !source.is_connection_refusal() =>
        {
            Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "{addr} closed the connection before answering ({source}); check the host and \
                 port in {WHERE_URL}, and the scheme: rediss:// for a server with TLS, redis:// \
                 without"
                ),
            )
        }
        Error::Redis(source) if source.acl_refusal().is_none() => Failure::new(
            exit::UNAVAILABLE,
            format!("the Redis server refused to serve fairlock: {source}"),
        ),
        _ => Failure::from(err),
    }
}

/// A refused `AUTH` of a password given to a server that has none.
pub(crate) fn no_password_set(addr: &str) -> Failure {
    Failure::new(
        exit::UNAVAILABLE,
        format!(
            "Redis at {addr} has no password set, but the URL gives one: remove the password \
             from the URL in {WHERE_URL} (redis://HOST:PORT)"
        ),
    )
}

/// Whether the server at `url` refused the URL's password because it has
/// none to check: Redis answers `AUTH PASSWORD` with "ERR AUTH <password>
/// called without any password configured for the default user". redis-rs
/// reports every refused `AUTH` alike, without the server's words, so the
/// question is asked again here, on a connection without credentials. Only
/// for a password without a user (with a user, a user without a password
/// takes any).
pub(crate) async fn has_no_password(url: &str) -> bool {
    let Ok(client) = crate::redis_client(url) else {
        return false;
    };
    let info = client.get_connection_info().clone();
    let settings = info.redis_settings();
    let (None, Some(password)) = (settings.username(), settings.password().map(str::to_owned))
    else {
        return false;
    };
    let info = info.set_redis_settings(redis::RedisConnectionInfo::default());
    let Ok(client) = redis::Client::open(info) else {
        return false;
    };
    let ask = async {
        let mut connection = client.get_multiplexed_async_connection().await.ok()?;
        let reply: redis::RedisResult<()> = redis::cmd("AUTH")
            .arg(&password)
            .query_async(&mut connection)
            .await;
        let refusal = reply.err()?;
        Some(
            refusal
                .detail()?
                .contains("without any password configured"),
        )
    };
    tokio::time::timeout(std::time::Duration::from_secs(3), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// The server could not be reached: say how, and what to check.
fn unreachable(addr: &str, source: &fairlock::RedisError) -> String {
    if source.is_connection_refusal() {
        format!(
            "cannot reach Redis at {addr} ({source}); is a Redis server running there? \
             Check {WHERE_URL}"
        )
    } else if source.is_timeout() {
        format!(
            "Redis at {addr} did not answer in time; check the host and port in {WHERE_URL} \
             (and the scheme: rediss:// for a server with TLS, redis:// without)"
        )
    } else {
        format!("cannot reach Redis at {addr} ({source}); check the host and port in {WHERE_URL}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_list_what_applies() {
        let all = table(None);
        assert!(all.contains("  1      force-unlock: the confirmation was declined"));
        assert!(all.contains("  64     bad usage"));
        let inspect = table(Some(Sub::Inspect));
        assert!(!inspect.contains("75") && !inspect.contains("\n  1 "));
        let exec = table(Some(Sub::Exec));
        assert!(exec.contains("  128+N  signal N"));
    }
}

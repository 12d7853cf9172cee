//! Lua scripts on the wire: a [`Script`] (its SHA-1 computed once, and a
//! variant that publishes with SPUBLISH for a cluster with sharded
//! pub/sub), what a client's connection knows of the servers' script caches
//! ([`ScriptLog`]), and one call: EVALSHA, and the script sent again after
//! `NOSCRIPT` ([`eval_cached`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use redis::FromRedisValue;
use redis::aio::ConnectionManager;

use crate::events::{Event, Recorder};

/// A Lua script: its SHA-1 computed once, run with EVALSHA. On a cluster
/// with sharded pub/sub the script's wake-up publications run as SPUBLISH
/// (a variant made once from the same source, see [`sharded_source`]).
pub(crate) struct Script {
    /// Its file name, for events.
    name: &'static str,
    /// A small number of its own, for [`ScriptLog`] (scripts are statics:
    /// there are as many as the protocols have files).
    id: u32,
    pub(super) plain: redis::Script,
    pub(super) plain_code: String,
    pub(super) sharded: redis::Script,
    pub(super) sharded_code: String,
}

impl Script {
    pub(crate) fn new(name: &'static str, code: &str) -> Self {
        static NEXT_ID: AtomicU32 = AtomicU32::new(0);
        let sharded_code = sharded_source(code);
        Self {
            name,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            plain: redis::Script::new(code),
            plain_code: code.to_owned(),
            sharded: redis::Script::new(&sharded_code),
            sharded_code,
        }
    }
}

/// What one client's connection knows of the servers' script caches:
/// which script has run on which key group (the server, or a cluster hash
/// slot). A `NOSCRIPT` reply for a script that ran there before means the
/// server serving that group changed under the client (a failover, a slot
/// migration, a restart or a `SCRIPT FLUSH`): counted as a server change,
/// which names the cause when a hold is then found lost.
///
/// Memory: one `u64` per group (a bit per script), 8 bytes on one server,
/// 128 KiB on a cluster (16,384 slots); scripts with an id of 64 or more
/// (none today) are not tracked.
pub(crate) struct ScriptLog {
    ran: Box<[AtomicU64]>,
    /// Server changes seen through `NOSCRIPT` replies.
    pub(super) changes: AtomicU64,
    events: Arc<Recorder>,
}

impl ScriptLog {
    pub(super) fn new(groups: usize, events: Arc<Recorder>) -> Self {
        Self {
            ran: (0..groups).map(|_| AtomicU64::new(0)).collect(),
            changes: AtomicU64::new(0),
            events,
        }
    }

    /// The word and bit of `script` in `group`.
    fn bit(&self, script: &Script, group: u16) -> Option<(&AtomicU64, u64)> {
        let word = self
            .ran
            .get(usize::from(group))
            .or_else(|| self.ran.first())?;
        (script.id < 64).then(|| (word, 1u64 << script.id))
    }

    /// `script` ran on `group`.
    pub(super) fn ran(&self, script: &Script, group: u16) {
        if let Some((word, bit)) = self.bit(script, group) {
            // A load first: the bit is set after the first call, and a
            // read costs less than a read-modify-write on the hot path.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// `server` answered `NOSCRIPT` for `script` on `group`: it is sent
    /// again in full.
    pub(super) fn reloaded(&self, script: &Script, group: u16, server: &str) {
        let ran_before = self
            .bit(script, group)
            .is_some_and(|(word, bit)| word.load(Ordering::Relaxed) & bit != 0);
        if ran_before {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
        self.events.record(Event::ScriptReloaded {
            script: script.name,
            server,
            ran_before,
        });
    }
}

/// A script reply that is one integer or an array of integers (the native
/// acquire answers an uncontended take with the token alone: an integer
/// reply costs the client less to read than an array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ints {
    One(i64),
    Many(Vec<i64>),
}

impl FromRedisValue for Ints {
    fn from_redis_value(value: redis::Value) -> std::result::Result<Self, redis::ParsingError> {
        match value {
            redis::Value::Int(n) => Ok(Self::One(n)),
            other => Vec::from_redis_value(other).map(Self::Many),
        }
    }
}

/// How a script the server lacks is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reload {
    /// `EVAL` with the source (one round trip; a cluster, where `SCRIPT
    /// LOAD` would have to reach the node of the slot).
    Eval,
    /// `SCRIPT LOAD` then `EVALSHA` again (one server: the documented ACL
    /// rules allow `EVALSHA` and `SCRIPT LOAD`, never `EVAL`).
    Load,
}

/// Run the script whose SHA-1 is `hash` (source `code`) on `conn`:
/// EVALSHA, and after `NOSCRIPT` (the server has not run it, or lost its
/// script cache) send it again as `reload` says, within what is left of the
/// one response timeout the calls share, so a call takes at most one
/// response timeout, not two. `reloaded` is called when the script is sent
/// again. Cancelling it drops the reply; the script may have run (the
/// scripts are safe to send again).
#[allow(clippy::too_many_arguments)]
pub(super) async fn eval_cached<C, T>(
    conn: &mut C,
    hash: &str,
    code: &str,
    keys: &[&str],
    args: &[&str],
    response_timeout: Duration,
    reload: Reload,
    reloaded: impl FnOnce(),
) -> redis::RedisResult<T>
where
    C: SendCommand,
    T: FromRedisValue,
{
    let deadline = tokio::time::Instant::now() + response_timeout;
    let evalsha = script_call("EVALSHA", hash, keys, args);
    let first = async {
        let value = conn.send_command(&evalsha).await?.extract_error()?;
        Ok::<T, redis::RedisError>(redis::from_redis_value(value)?)
    };
    match first.await {
        Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            reloaded();
            let again = async {
                match reload {
                    Reload::Eval => {
                        script_call("EVAL", code, keys, args)
                            .query_async(conn)
                            .await
                    }
                    Reload::Load => {
                        redis::cmd("SCRIPT")
                            .arg("LOAD")
                            .arg(code)
                            .query_async::<()>(conn)
                            .await?;
                        evalsha.query_async(conn).await
                    }
                }
            };
            match tokio::time::timeout_at(deadline, again).await {
                Ok(reply) => reply,
                Err(_) => Err(super::errors::timed_out(
                    "sending the script again after NOSCRIPT timed out",
                )),
            }
        }
        reply => reply,
    }
}

/// A connection's way to send one command on the hot path: the inherent
/// method where the connection has one (`ConnectionLike` boxes every
/// call's future).
pub(super) trait SendCommand: redis::aio::ConnectionLike + Send {
    fn send_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> impl Future<Output = redis::RedisResult<redis::Value>> + Send + 'a;
}

impl SendCommand for ConnectionManager {
    fn send_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> impl Future<Output = redis::RedisResult<redis::Value>> + Send + 'a {
        self.send_packed_command(cmd)
    }
}

impl SendCommand for redis::cluster_async::ClusterConnection {
    fn send_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> impl Future<Output = redis::RedisResult<redis::Value>> + Send + 'a {
        redis::aio::ConnectionLike::req_packed_command(self, cmd)
    }
}

/// `EVALSHA hash` or `EVAL code` with its keys and arguments, built in
/// buffers sized for it at once: a command grown argument by argument
/// reallocated several times (about 7,000 instructions per lock + unlock,
/// a tenth of the client's work then; docs/performance.md).
fn script_call(command: &str, script: &str, keys: &[&str], args: &[&str]) -> redis::Cmd {
    let count = 3 + keys.len() + args.len();
    let bytes = command.len()
        + script.len()
        + 3 // the number of keys, at most 3 digits in practice
        + keys.iter().map(|k| k.len()).sum::<usize>()
        + args.iter().map(|a| a.len()).sum::<usize>();
    let mut cmd = redis::Cmd::with_capacity(count, bytes);
    cmd.arg(command).arg(script).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// The script with every `redis.call('publish', ...)` on a lock's own
/// channel turned into `redis.call('spublish', ...)`. The lock channels
/// carry the lock's hash tag, so on a cluster they live in the slot of the
/// keys the script touches; the revocation channel
/// (`fairlock:revoked:CLIENT`, published with `revoked_prefix`) belongs to
/// no slot and stays a cluster-wide PUBLISH.
pub(crate) fn sharded_source(code: &str) -> String {
    code.lines()
        .map(|line| {
            if line.contains("revoked_prefix") {
                line.to_owned()
            } else {
                line.replace("redis.call('publish',", "redis.call('spublish',")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::sharded_source;

    /// Every publication in every protocol script: on a lock's channel it
    /// becomes SPUBLISH in the sharded variant, on the revocation channel
    /// it stays PUBLISH; nothing else changes.
    #[test]
    fn sharded_scripts_publish_lock_channels_with_spublish() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol");
        let mut spublish = 0;
        for sub in ["native", "redisson"] {
            for entry in std::fs::read_dir(format!("{dir}/{sub}")).unwrap() {
                let path = entry.unwrap().path();
                let code = std::fs::read_to_string(&path).unwrap();
                let sharded = sharded_source(&code);
                assert_eq!(sharded.lines().count(), code.lines().count(), "{path:?}");
                for (before, after) in code.lines().zip(sharded.lines()) {
                    if !before.contains("redis.call('publish'") {
                        assert_eq!(before, after, "{path:?}");
                    } else if before.contains("revoked_prefix") {
                        assert_eq!(before, after, "{path:?}: revocations stay PUBLISH");
                    } else {
                        assert!(after.contains("redis.call('spublish'"), "{path:?}: {after}");
                        assert!(!after.contains("redis.call('publish'"), "{path:?}: {after}");
                        spublish += 1;
                    }
                }
                // A publication written another way would escape the rule.
                assert_eq!(
                    code.matches("'publish'").count(),
                    code.matches("redis.call('publish'").count(),
                    "{path:?}"
                );
            }
        }
        // native: grant and free; redisson: head and non-fair releases.
        assert!(spublish >= 4, "{spublish}");
    }
}

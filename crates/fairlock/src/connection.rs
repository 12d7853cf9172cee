//! The command connection: one multiplexed, self-reconnecting connection per
//! client, and the script runner that maps Redis errors to [`Error`].
//!
//! ## Behavior
//! - A command that finds the connection broken fails with
//!   [`Error::Connection`]; the connection reconnects in the background and
//!   the next command uses the new one. Callers that wait (acquire loops)
//!   retry within [`ClientConfig::retry_budget`].
//! - A command that gets no reply within the response timeout fails with
//!   [`Error::Connection`]. It may or may not have run on the server; the
//!   scripts are written so that a retry is safe (see `reconcile` in the
//!   acquire scripts and the unlock result cache).
//! - At connect the server's `maxmemory-policy` is read (`CONFIG GET`); a
//!   policy under which Redis may evict lock keys is logged as a warning
//!   (see `docs/deployment.md`). A server that refuses `CONFIG` is not
//!   checked, and the connect goes on.

use std::collections::HashMap;
use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, FromRedisValue, Script, ToRedisArgs};
use tracing::{debug, warn};

use crate::config::ClientConfig;
use crate::error::{Error, Result};

#[derive(Clone)]
pub(crate) struct Connection {
    manager: ConnectionManager,
    addr: Arc<str>,
    /// The server's `maxmemory-policy` as read at connect; `None` when the
    /// server would not say (CONFIG refused or renamed).
    maxmemory_policy: Option<Arc<str>>,
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Read the server's `maxmemory-policy` and warn when it lets Redis evict
/// lock keys: every lock key has a TTL, so `volatile-*` policies can evict
/// them as well as `allkeys-*`; only `noeviction` never does. An evicted lock
/// key is a free lock, and a second client takes a lock that is still held.
///
/// `None` when the server does not answer: an ACL user without
/// `+config|get` (NOPERM), or a managed service that renamed or disabled
/// `CONFIG` (unknown command). The check is advice, never a reason to fail
/// the connect.
async fn check_eviction_policy(probe: &mut MultiplexedConnection, addr: &str) -> Option<Arc<str>> {
    let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(probe)
        .await;
    let policy = match reply {
        Ok(mut settings) => settings.remove("maxmemory-policy"),
        Err(err) => {
            debug!(%addr, error = %err, "cannot read maxmemory-policy; eviction check skipped");
            return None;
        }
    };
    match policy.as_deref() {
        None => debug!(%addr, "no maxmemory-policy reported; eviction check skipped"),
        Some("noeviction") => debug!(%addr, "maxmemory-policy is noeviction"),
        Some(policy) => warn!(
            %addr,
            %policy,
            "this maxmemory-policy lets Redis evict lock keys under memory pressure, and a lock \
             whose key was evicted can be taken by a second holder while the first still holds \
             it: set maxmemory-policy noeviction on servers that hold locks"
        ),
    }
    policy.map(Arc::from)
}

/// A refused `SELECT`: the server has fewer databases (`databases`, 16 by
/// default) than the URL asks for. Other failures keep their class.
fn missing_database(err: redis::RedisError, addr: &str, db: i64) -> Error {
    if err.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) {
        return Error::from_redis_conn(err, addr);
    }
    let said = err.detail().unwrap_or("refused");
    Error::InvalidConfig(format!(
        "Redis at {addr} has no database {db} (it answered: {said}); use a database the \
         server has, from 0 to its `databases` setting minus one (0 to 15 by default), \
         as in redis://HOST:PORT/0"
    ))
}

impl Connection {
    /// Connect, failing fast (with the address in the error) when the server
    /// is down, is not a Redis server ([`Error::NotRedis`]), refuses the
    /// credentials, or lacks the URL's database ([`Error::InvalidConfig`]).
    pub(crate) async fn connect(config: &ClientConfig) -> Result<(Self, redis::Client)> {
        let addr: Arc<str> = config.address().into();
        let client = config.redis_client()?;
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout));
        // The probe runs the handshake (AUTH) once, on database 0, then
        // selects the URL's database itself: a down server, a server of
        // another kind, a wrong password and a missing database are each
        // reported now and told apart.
        let mut probe = config
            .probe_client()?
            .get_multiplexed_async_connection_with_config(&probe_config)
            .await
            .map_err(|e| Error::from_first_reply(e, &addr))?;
        redis::cmd("PING")
            .query_async::<()>(&mut probe)
            .await
            .map_err(|e| Error::from_first_reply(e, &addr))?;
        let db = config.db();
        if db != 0 {
            redis::cmd("SELECT")
                .arg(db)
                .query_async::<()>(&mut probe)
                .await
                .map_err(|e| missing_database(e, &addr, db))?;
        }
        let maxmemory_policy = check_eviction_policy(&mut probe, &addr).await;
        drop(probe);

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout))
            .set_number_of_retries(1)
            .set_min_delay(std::time::Duration::from_millis(20))
            .set_max_delay(std::time::Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config)
            .await
            .map_err(|e| Error::from_redis_conn(e, &addr))?;
        Ok((
            Self {
                manager,
                addr,
                maxmemory_policy,
            },
            client,
        ))
    }

    /// The server's `maxmemory-policy` as read at connect, if it could be read.
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// Run `script` (EVALSHA, loading it once on NOSCRIPT). `name` and the
    /// first key are used in error messages.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let mut manager = self.manager.clone();
        invocation.invoke_async(&mut manager).await.map_err(|e| {
            Error::from_redis(e, &self.addr, name, keys.first().copied().unwrap_or(""))
        })
    }

    /// Run one plain command.
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[impl ToRedisArgs],
    ) -> Result<T> {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        for arg in args {
            cmd.arg(arg);
        }
        let mut manager = self.manager.clone();
        cmd.query_async(&mut manager)
            .await
            .map_err(|e| Error::from_redis(e, &self.addr, name, key))
    }
}

//! The command connection: one multiplexed, self-reconnecting connection per
//! client, and the script runner that maps Redis errors to [`Error`].
//!
//! ## Behavior
//! - A command that finds the connection broken fails with
//!   [`Error::Connection`]; the connection reconnects in the background and
//!   the next command uses the new one. Callers that wait (acquire loops)
//!   retry within the retry budget (see `retry.rs`).
//! - A command that gets no reply within the response timeout fails with
//!   [`Error::Connection`]. It may or may not have run on the server; the
//!   scripts are written so that a retry is safe (the base hold count in
//!   the acquire scripts and the unlock result cache).
//! - A script is sent with EVALSHA, and loaded again after NOSCRIPT (a
//!   restarted or flushed server).
//! - At connect the server's `maxmemory-policy` is read (`CONFIG GET`); a
//!   policy under which Redis may evict lock keys is logged as a warning
//!   (see `docs/deployment.md`). A server that refuses `CONFIG` is not
//!   checked, and the connect goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, FromRedisValue};

use super::endpoint::Endpoint;
use super::errors::{from_first_reply, from_redis, from_redis_conn};
use super::pubsub::PubSubConnector;
use crate::error::{Error, Result};
use crate::events::{self, Event};

/// A Lua script: its SHA-1 computed once, run with EVALSHA.
pub(crate) struct Script(redis::Script);

impl Script {
    pub(crate) fn new(code: &str) -> Self {
        Self(redis::Script::new(code))
    }
}

/// How long connecting and each reply may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// The command connection of one client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connection {
    manager: ConnectionManager,
    addr: Arc<str>,
    maxmemory_policy: Option<Arc<str>>,
}

impl Connection {
    /// Connect to `endpoint`: a probe tells apart a server that is down, is
    /// not Redis, refuses the credentials or lacks the database, then the
    /// reconnecting command connection is made. Also returns what opens
    /// pub/sub connections to the same server.
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<(Self, PubSubConnector)> {
        let addr: Arc<str> = endpoint.address().into();
        let client = endpoint.redis_client()?;
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response));
        // The probe runs the handshake (AUTH) once, on database 0, then
        // selects the URL's database itself: a down server, a server of
        // another kind, a wrong password and a missing database are each
        // reported now and told apart.
        let mut probe = endpoint
            .probe_client()?
            .get_multiplexed_async_connection_with_config(&probe_config)
            .await
            .map_err(|e| from_first_reply(e, &addr))?;
        redis::cmd("PING")
            .query_async::<()>(&mut probe)
            .await
            .map_err(|e| from_first_reply(e, &addr))?;
        let db = endpoint.db();
        if db != 0 {
            redis::cmd("SELECT")
                .arg(db)
                .query_async::<()>(&mut probe)
                .await
                .map_err(|e| missing_database(e, &addr, db))?;
        }
        let maxmemory_policy = read_eviction_policy(&mut probe, &addr).await;
        drop(probe);

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config)
            .await
            .map_err(|e| from_redis_conn(e, &addr))?;
        let connection = Self {
            manager,
            addr,
            maxmemory_policy,
        };
        Ok((connection, PubSubConnector::new(client, timeouts)))
    }

    /// The server's `maxmemory-policy` as read at connect.
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// Run `script` for lock `name` (named in errors, with the first key).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        let mut invocation = script.0.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let mut manager = self.manager.clone();
        invocation
            .invoke_async(&mut manager)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, keys.first().copied().unwrap_or("")))
    }

    /// Run one command on `key` of lock `name`.
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        let mut manager = self.manager.clone();
        cmd.query_async(&mut manager)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, key))
    }
}

async fn read_eviction_policy(probe: &mut MultiplexedConnection, addr: &str) -> Option<Arc<str>> {
    let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(probe)
        .await;
    let policy = match reply {
        Ok(mut settings) => settings.remove("maxmemory-policy"),
        Err(err) => {
            events::record(Event::EvictionPolicy {
                addr,
                policy: Err(&err),
            });
            return None;
        }
    };
    events::record(Event::EvictionPolicy {
        addr,
        policy: Ok(policy.as_deref()),
    });
    policy.map(Arc::from)
}

fn missing_database(err: redis::RedisError, addr: &str, db: i64) -> Error {
    if err.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) {
        return from_redis_conn(err, addr);
    }
    let said = err.detail().unwrap_or("refused");
    Error::InvalidConfig(format!(
        "Redis at {addr} has no database {db} (it answered: {said}); use a database the \
         server has, from 0 to its `databases` setting minus one (0 to 15 by default), \
         as in redis://HOST:PORT/0"
    ))
}

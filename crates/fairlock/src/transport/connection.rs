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

use super::endpoint::{Endpoint, Topology};
use super::errors::{from_first_reply, from_redis, from_redis_conn};
use super::pubsub::PubSubConnector;
use super::sentinel::Follower;
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

/// The command connection of one client: one server, or the master a
/// sentinel deployment names now (`sentinel.rs`). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connection {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Standalone(Box<Direct>),
    Sentinel(Arc<Follower>),
}

impl Connection {
    /// Connect to `endpoint`: a probe tells apart a server that is down, is
    /// not Redis, refuses the credentials or lacks the database, then the
    /// reconnecting command connection is made. Also returns what opens
    /// pub/sub connections to the same server (for Sentinel: to the master
    /// known at the time).
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<(Self, PubSubConnector)> {
        match endpoint.topology() {
            Topology::Standalone => {
                let direct = Direct::connect(endpoint, timeouts).await?;
                let pubsub = PubSubConnector::new(direct.client.clone(), timeouts);
                let backend = Backend::Standalone(Box::new(direct));
                Ok((Self { backend }, pubsub))
            }
            Topology::Sentinel(spec) => {
                let follower = Follower::connect(endpoint, Arc::clone(spec), timeouts).await?;
                let pubsub = PubSubConnector::following(Arc::clone(&follower), timeouts);
                let backend = Backend::Sentinel(follower);
                Ok((Self { backend }, pubsub))
            }
        }
    }

    /// The server's `maxmemory-policy` as read at connect (for Sentinel:
    /// on the master found first).
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        match &self.backend {
            Backend::Standalone(direct) => direct.maxmemory_policy(),
            Backend::Sentinel(follower) => follower.first_maxmemory_policy(),
        }
    }

    /// Run `script` for lock `name` (named in errors, with the first key).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        match &self.backend {
            Backend::Standalone(direct) => direct.script(script, name, keys, args).await,
            Backend::Sentinel(follower) => {
                let (direct, seen) = follower.current();
                let result = direct.script(script, name, keys, args).await;
                if let Err(err) = &result {
                    follower.after_error(err, seen);
                }
                result
            }
        }
    }

    /// Run one command on `key` of lock `name`.
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        match &self.backend {
            Backend::Standalone(direct) => direct.command(name, command, key, args).await,
            Backend::Sentinel(follower) => {
                let (direct, seen) = follower.current();
                let result = direct.command(name, command, key, args).await;
                if let Err(err) = &result {
                    follower.after_error(err, seen);
                }
                result
            }
        }
    }

    /// Wait until `replicas` replicas acknowledged every write this client
    /// made so far, at most `timeout` (Redis `WAIT`); returns how many did.
    /// Runs on a connection of its own: a `WAIT` blocks the connection it is
    /// sent on, and must not hold up the client's other commands.
    pub(crate) async fn sync_replicas(&self, replicas: u32, timeout: Duration) -> Result<u32> {
        match &self.backend {
            Backend::Standalone(direct) => direct.sync_replicas(replicas, timeout).await,
            Backend::Sentinel(follower) => {
                let (direct, seen) = follower.current();
                let result = direct.sync_replicas(replicas, timeout).await;
                if let Err(err) = &result {
                    follower.after_error(err, seen);
                }
                result
            }
        }
    }
}

/// A connection to one server. Cheap to clone.
#[derive(Clone)]
pub(super) struct Direct {
    manager: ConnectionManager,
    client: redis::Client,
    addr: Arc<str>,
    maxmemory_policy: Option<Arc<str>>,
    /// Idle connections for `WAIT` (see [`Connection::sync_replicas`]).
    replica_waits: Arc<std::sync::Mutex<Vec<MultiplexedConnection>>>,
}

impl Direct {
    /// Connect to the server of a standalone `endpoint` (see
    /// [`Connection::connect`]).
    pub(super) async fn connect(endpoint: &Endpoint, timeouts: Timeouts) -> Result<Self> {
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
        Ok(Self {
            manager,
            client,
            addr,
            maxmemory_policy,
            replica_waits: Arc::default(),
        })
    }

    /// The server's `maxmemory-policy` as read at connect.
    pub(super) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// `host:port` of the server.
    pub(super) fn address(&self) -> &str {
        &self.addr
    }

    /// The Redis client of this server (for pub/sub connections).
    pub(super) fn client(&self) -> &redis::Client {
        &self.client
    }

    async fn script<T: FromRedisValue>(
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

    async fn command<T: FromRedisValue>(
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

    /// `PUBLISH` (a write every replica receives, so that `WAIT` covers
    /// whatever this client or a handoff wrote before) then `WAIT`, on an
    /// idle connection of the pool (a new one when none is idle).
    async fn sync_replicas(&self, replicas: u32, timeout: Duration) -> Result<u32> {
        let pooled = self
            .replica_waits
            .lock()
            .ok()
            .and_then(|mut idle| idle.pop());
        let mut conn = match pooled {
            Some(conn) => conn,
            None => {
                // The reply to WAIT comes after `timeout` at worst.
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(3)))
                    .set_response_timeout(Some(timeout + Duration::from_secs(3)));
                self.client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| from_redis_conn(e, &self.addr))?
            }
        };
        let timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let (_, acked): (i64, i64) = redis::pipe()
            .cmd("PUBLISH")
            .arg(REPLICA_SYNC_CHANNEL)
            .arg("")
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout_ms)
            .query_async(&mut conn)
            .await
            .map_err(|e| from_redis_conn(e, &self.addr))?;
        if let Ok(mut idle) = self.replica_waits.lock() {
            if idle.len() < 8 {
                idle.push(conn);
            }
        }
        Ok(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))
    }
}

/// The channel `sync_replicas` publishes on (nobody listens; the message
/// only advances the replication offset that `WAIT` waits for).
const REPLICA_SYNC_CHANNEL: &str = "fairlock:replica-sync";

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

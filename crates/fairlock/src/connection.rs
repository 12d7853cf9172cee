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

use std::sync::Arc;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, FromRedisValue, Script, ToRedisArgs};

use crate::config::ClientConfig;
use crate::error::{Error, Result};

#[derive(Clone)]
pub(crate) struct Connection {
    manager: ConnectionManager,
    addr: Arc<str>,
}

/// Milliseconds since the Unix epoch by this machine's clock.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Connection {
    /// Connect, failing fast (with the address in the error) when the server
    /// is down or refuses the credentials.
    pub(crate) async fn connect(config: &ClientConfig) -> Result<(Self, redis::Client)> {
        let addr: Arc<str> = config.address().into();
        let client = config.redis_client()?;
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout));
        // The probe runs the handshake (AUTH, SELECT) once, so that a down
        // server or wrong password is reported now and precisely.
        let mut probe = client
            .get_multiplexed_async_connection_with_config(&probe_config)
            .await
            .map_err(|e| Error::from_redis_conn(e, &addr))?;
        redis::cmd("PING")
            .query_async::<()>(&mut probe)
            .await
            .map_err(|e| Error::from_redis_conn(e, &addr))?;
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
        Ok((Self { manager, addr }, client))
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

//! What `fairlock bench` reads beside the operations: the server's CPU time
//! and command counts (`INFO cpu`, `INFO commandstats`), the benchmark
//! process's own CPU time (`getrusage`), and PING round trips.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use crate::{Failure, exit};

/// A plain connection for the measurements (and the critical section).
/// Its replies may take long: a Redis busy with 10,000 waiters lining up,
/// on a loaded machine, answers after seconds (redis-rs gives up after
/// 500 ms by default).
pub(crate) async fn connect(url: &str) -> Result<MultiplexedConnection, Failure> {
    let client = crate::redis_client(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad Redis URL {url:?}: {e}")))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(Some(Duration::from_secs(60)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot connect to {url}: {e}")))
}

pub(crate) fn redis_failure(what: &str, err: redis::RedisError) -> Failure {
    Failure::new(exit::UNAVAILABLE, format!("{what}: {err}"))
}

/// Server counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Server {
    /// `used_cpu_user + used_cpu_sys`, seconds.
    cpu: f64,
    /// Calls of every command but INFO (commands run by scripts included).
    calls: u64,
    /// Calls of EVAL, EVALSHA, FCALL and their read-only forms.
    script_calls: u64,
    /// Their time inside Redis, microseconds.
    script_usec: u64,
}

impl Server {
    pub(crate) async fn read(conn: &mut MultiplexedConnection) -> Result<Self, Failure> {
        let cpu: String = redis::cmd("INFO")
            .arg("cpu")
            .query_async(conn)
            .await
            .map_err(|e| redis_failure("INFO cpu", e))?;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .map_err(|e| redis_failure("INFO commandstats", e))?;
        Ok(Self::parse(&cpu, &stats))
    }

    /// Script calls so far (EVAL, EVALSHA, FCALL and their read-only forms).
    pub(crate) fn script_calls(&self) -> u64 {
        self.script_calls
    }

    /// Whether no script ran between `earlier` and this.
    pub(crate) fn same_scripts(&self, earlier: &Server) -> bool {
        self.script_calls == earlier.script_calls
    }

    fn parse(cpu: &str, stats: &str) -> Self {
        let mut server = Server::default();
        for line in cpu.lines() {
            if let Some((key, value)) = line.trim().split_once(':') {
                if key == "used_cpu_user" || key == "used_cpu_sys" {
                    server.cpu += value.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
        for (name, (calls, usec)) in CommandStats::parse(stats).0 {
            server.calls += calls;
            if matches!(
                name.as_str(),
                "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
            ) {
                server.script_calls += calls;
                server.script_usec += usec;
            }
        }
        server
    }
}

/// Let a line's enqueue traffic settle before measuring: wait until no
/// script ran for 300 ms (at most 10 s, on a server others use).
pub(crate) async fn settle(admin: &mut MultiplexedConnection) -> Result<(), Failure> {
    let settle = Instant::now() + Duration::from_secs(10);
    let mut before = Server::read(admin).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = Server::read(admin).await?;
        if now.same_scripts(&before) || Instant::now() > settle {
            return Ok(());
        }
        before = now;
    }
}

/// Calls and usec of each command (`INFO commandstats`, INFO left out;
/// Redis 7 counts the commands scripts run under their own names): where
/// a script's time goes, step by step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CommandStats(pub(crate) std::collections::BTreeMap<String, (u64, u64)>);

impl CommandStats {
    pub(crate) async fn read(conn: &mut MultiplexedConnection) -> Result<Self, Failure> {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await
            .map_err(|e| redis_failure("INFO commandstats", e))?;
        Ok(Self::parse(&stats))
    }

    fn parse(stats: &str) -> Self {
        let mut all = std::collections::BTreeMap::new();
        for line in stats.lines() {
            let Some((name, fields)) = line
                .trim()
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            if name == "info" {
                continue;
            }
            let field = |wanted: &str| -> u64 {
                fields
                    .split(',')
                    .filter_map(|f| f.split_once('='))
                    .find(|(k, _)| *k == wanted)
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0)
            };
            all.insert(name.to_owned(), (field("calls"), field("usec")));
        }
        Self(all)
    }

    /// What ran since `earlier`: the commands whose calls went up.
    pub(crate) fn since(&self, earlier: &CommandStats) -> CommandStats {
        Self(
            self.0
                .iter()
                .filter_map(|(name, &(calls, usec))| {
                    let (c0, u0) = earlier.0.get(name).copied().unwrap_or((0, 0));
                    (calls > c0).then(|| (name.clone(), (calls - c0, usec.saturating_sub(u0))))
                })
                .collect(),
        )
    }
}

/// This process's CPU time (user + system), seconds.
pub(crate) fn client_cpu() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            seconds(usage.user_time()) + seconds(usage.system_time())
        }
        Err(_) => 0.0,
    }
}

/// The costs of one measured stretch: started by [`Meter::start`].
pub(crate) struct Meter {
    server: Server,
    client_cpu: f64,
    started: Instant,
}

/// What one stretch cost, in total.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cost {
    pub(crate) seconds: f64,
    pub(crate) redis_cpu_seconds: f64,
    pub(crate) commands: u64,
    pub(crate) script_calls: u64,
    pub(crate) script_usec: u64,
    pub(crate) client_cpu_seconds: f64,
}

impl Meter {
    pub(crate) async fn start(conn: &mut MultiplexedConnection) -> Result<Self, Failure> {
        let server = Server::read(conn).await?;
        Ok(Self {
            server,
            client_cpu: client_cpu(),
            started: Instant::now(),
        })
    }

    pub(crate) async fn stop(self, conn: &mut MultiplexedConnection) -> Result<Cost, Failure> {
        let seconds = self.started.elapsed().as_secs_f64();
        let client = client_cpu();
        let server = Server::read(conn).await?;
        Ok(Cost {
            seconds,
            redis_cpu_seconds: (server.cpu - self.server.cpu).max(0.0),
            commands: server.calls.saturating_sub(self.server.calls),
            script_calls: server.script_calls.saturating_sub(self.server.script_calls),
            script_usec: server.script_usec.saturating_sub(self.server.script_usec),
            client_cpu_seconds: (client - self.client_cpu).max(0.0),
        })
    }
}

/// PING round trips per second, one at a time on one connection, for
/// `duration`; with the costs.
pub(crate) async fn ping(
    conn: &mut MultiplexedConnection,
    admin: &mut MultiplexedConnection,
    duration: Duration,
) -> Result<(u64, Cost), Failure> {
    for _ in 0..100 {
        ping_once(conn).await?;
    }
    let meter = Meter::start(admin).await?;
    let mut n = 0u64;
    while meter.started.elapsed() < duration {
        for _ in 0..50 {
            ping_once(conn).await?;
        }
        n += 50;
    }
    Ok((n, meter.stop(admin).await?))
}

async fn ping_once(conn: &mut MultiplexedConnection) -> Result<(), Failure> {
    redis::cmd("PING")
        .query_async::<()>(conn)
        .await
        .map_err(|e| redis_failure("PING", e))
}

/// The server and its version, from `INFO server`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    /// `"Redis"` or `"Valkey"`.
    pub(crate) name: &'static str,
    /// The server's own version.
    pub(crate) version: String,
}

impl ServerVersion {
    /// Valkey answers `redis_version:7.2.4` whatever its own version, and
    /// names itself with `server_name:valkey` and `valkey_version`.
    pub(crate) fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(str::to_owned)
        };
        let valkey = field("valkey_version")
            .or_else(|| (field("server_name").as_deref() == Some("valkey")).then(String::new));
        match valkey {
            Some(version) => Self {
                name: "Valkey",
                version: if version.is_empty() {
                    "unknown".to_owned()
                } else {
                    version
                },
            },
            None => Self {
                name: "Redis",
                version: field("redis_version").unwrap_or_else(|| "unknown".to_owned()),
            },
        }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

/// The server and its version.
pub(crate) async fn server_version(
    conn: &mut MultiplexedConnection,
) -> Result<ServerVersion, Failure> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .map_err(|e| redis_failure("INFO server", e))?;
    Ok(ServerVersion::parse(&info))
}

/// Delete every key whose name contains `part` (the run's unique lock
/// name), with SCAN: the lock's keys under both protocols and the counter.
pub(crate) async fn delete_keys(
    conn: &mut MultiplexedConnection,
    part: &str,
) -> Result<(), Failure> {
    let pattern = format!("*{part}*");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(|e| redis_failure("SCAN", e))?;
        if !keys.is_empty() {
            redis::cmd("DEL")
                .arg(&keys)
                .query_async::<()>(conn)
                .await
                .map_err(|e| redis_failure("DEL", e))?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The machine's load average (1 minute), where /proc tells it.
pub(crate) fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_commandstats() {
        let cpu = "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n";
        let stats = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=500,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_get:calls=7,usec=7,usec_per_call=1.00\r\n\
            cmdstat_info:calls=99,usec=900,usec_per_call=9.09\r\n";
        let server = Server::parse(cpu, stats);
        assert!((server.cpu - 3.75).abs() < 1e-9);
        assert_eq!(server.calls, 17);
        assert_eq!(server.script_calls, 10);
        assert_eq!(server.script_usec, 500);
        let before = CommandStats::parse(stats);
        assert_eq!(before.0.get("get"), Some(&(7, 7)));
        assert!(!before.0.contains_key("info"));
        let after = CommandStats::parse(
            "cmdstat_evalsha:calls=12,usec=640\r\ncmdstat_get:calls=7,usec=7\r\n\
             cmdstat_zadd:calls=3,usec=4\r\n",
        );
        let ran = after.since(&before);
        assert_eq!(ran.0.get("evalsha"), Some(&(2, 140)));
        assert_eq!(ran.0.get("zadd"), Some(&(3, 4)));
        assert!(!ran.0.contains_key("get"));
    }

    #[test]
    fn tells_valkey_from_redis() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(ServerVersion::parse(redis).to_string(), "Redis 7.0.15");
        let valkey = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
            valkey_version:9.1.2\r\nvalkey_release_stage:ga\r\n";
        assert_eq!(ServerVersion::parse(valkey).to_string(), "Valkey 9.1.2");
        let unnumbered = "redis_version:7.2.4\r\nserver_name:valkey\r\n";
        assert_eq!(
            ServerVersion::parse(unnumbered).to_string(),
            "Valkey unknown"
        );
    }
}

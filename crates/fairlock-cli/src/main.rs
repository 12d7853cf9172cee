//! `fairlock`: run a command under a distributed lock on Redis, inspect and
//! force-unlock locks, and a live demo.

#![warn(rust_2018_idioms)]
#![forbid(unsafe_code)]

mod demo;
mod duration;
mod exec;
mod history;
mod inspect;
mod private_redis;
mod torture;
mod torture_proxy;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fairlock::{ClientConfig, LockClient, Protocol};

/// Exit codes (sysexits.h), documented in `--help` and the README.
pub(crate) mod exit {
    /// Bad usage: unknown flag, bad duration, bad lock name.
    pub(crate) const USAGE: u8 = 64;
    /// Redis unreachable or authentication failed.
    pub(crate) const UNAVAILABLE: u8 = 69;
    /// Anything else that went wrong inside fairlock.
    pub(crate) const SOFTWARE: u8 = 70;
    /// The lock was lost while the command ran.
    pub(crate) const LOST: u8 = 71;
    /// The lock was not acquired within `--wait`.
    pub(crate) const TIMEOUT: u8 = 75;
}

const EXIT_CODES: &str = "\
Exit codes:
  CMD's own code   exec: the command's exit code (128+N if it died of signal N)
  0                success
  64               bad usage (unknown flag, bad duration, bad lock name)
  69               Redis unreachable or authentication failed
  70               internal error
  71               exec: the lock was lost while the command ran
  75               exec: the lock was not acquired within --wait (no queue entry is left)";

#[derive(Parser, Debug)]
#[command(
    name = "fairlock",
    version,
    about = "Distributed fair (FIFO) locks on Redis, compatible with Redisson",
    after_help = EXIT_CODES
)]
pub(crate) struct Cli {
    /// Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS).
    /// Default: $REDIS_URL, else redis://127.0.0.1:6379 (the demo starts a
    /// private redis-server instead).
    #[arg(long, global = true, value_name = "URL")]
    redis: Option<String>,

    /// Lock protocol: `native` (fencing tokens, server time, direct handoff)
    /// or `redisson` (shares locks with Java services using Redisson's
    /// getFairLock/getLock). The two never exclude each other on one name.
    #[arg(long, global = true, default_value = "native", value_parser = parse_protocol)]
    protocol: Protocol,

    /// Lease of a held lock (renewed every lease/3 while held), e.g. 500ms, 30s, 5m.
    /// Default: 30s (torture: 1s, so that faults play out quickly).
    #[arg(long, global = true, value_name = "DUR", value_parser = duration::parse)]
    lease: Option<Duration>,

    /// native: a waiter refreshes its place every third of this and is
    /// skipped once it stopped refreshing for this long (its process died).
    #[arg(long, global = true, value_name = "DUR", default_value = "6s", value_parser = duration::parse)]
    waiter_ttl: Duration,

    /// redisson: how long a queued waiter's place lasts beyond the waiter
    /// ahead of it (Redisson's fairLockWaitTimeout); --wait replaces it.
    #[arg(long, global = true, value_name = "DUR", default_value = "300s", value_parser = duration::parse)]
    waiter_slot: Duration,

    /// Log level for fairlock's own diagnostics on stderr (error, warn, info,
    /// debug, trace).
    #[arg(long, global = true, default_value = "warn", value_name = "LEVEL")]
    log_level: tracing_subscriber::filter::LevelFilter,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Acquire NAME, run CMD, release when it exits.
    ///
    /// Waits in line (forever unless --wait) and shows "waiting for NAME:
    /// position P of Q" on stderr. CMD gets FAIRLOCK_NAME, FAIRLOCK_OWNER and,
    /// where the protocol gives one, FAIRLOCK_TOKEN.
    ///
    /// Nothing of CMD runs without the lock. CMD runs in a process group of
    /// its own; whatever it leaves running in that group when it exits gets
    /// SIGKILL before the lock is released. If the lock is lost, the group
    /// gets SIGTERM, then SIGKILL once CMD exited or after --grace (unless
    /// --on-lost ignore). If fairlock itself dies, even of SIGKILL, a helper
    /// process (a second fairlock, in CMD's group) kills the group.
    /// Processes that leave the group (setsid, daemons) are not followed.
    ///
    /// Signals reach CMD once. SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    /// fairlock are passed on to CMD's group. Run in the foreground of a
    /// terminal, CMD's group is the terminal's foreground group while CMD
    /// runs: CMD reads the terminal, and Ctrl-C and Ctrl-\ go to it straight
    /// from the terminal (not through fairlock). Ctrl-Z suspends fairlock
    /// with CMD; the lease is not renewed meanwhile.
    ///
    /// Example (cron, one host at a time, give up after a minute):
    ///   fairlock exec nightly-report --wait 1m -- /usr/local/bin/report --full
    #[command(after_help = EXIT_CODES)]
    Exec(exec::ExecArgs),
    /// Show who holds NAME, for how long, and who waits in which order.
    Inspect(inspect::InspectArgs),
    /// Release NAME whoever holds it, and wake the next waiter.
    ForceUnlock(inspect::ForceUnlockArgs),
    /// N clients contend for one fair lock; a live view, then a summary.
    ///
    /// Without --redis or $REDIS_URL, starts a private redis-server from PATH
    /// on a free port and stops it at the end.
    Demo(demo::DemoArgs),
    /// A randomized multi-process workload with fault injection, checked for
    /// overlaps, FIFO order, fencing tokens and liveness; prints a summary.
    ///
    /// Without --redis or $REDIS_URL, starts a private redis-server. A soak:
    ///   fairlock torture --duration 20m
    /// Exit 0 when no violation was found, 1 otherwise.
    Torture(torture::TortureArgs),
    /// One worker process of `torture` (internal).
    #[command(hide = true)]
    TortureWorker(torture::WorkerArgs),
    /// Kills the process group of an `exec` command when `exec` dies (internal).
    #[command(hide = true)]
    ExecSentinel(exec::SentinelArgs),
}

fn parse_protocol(text: &str) -> Result<Protocol, String> {
    text.parse().map_err(|e: fairlock::Error| e.to_string())
}

impl Cli {
    /// The URL: --redis, else $REDIS_URL, else the local default.
    fn url(&self) -> String {
        self.explicit_url()
            .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
    }

    /// --redis or $REDIS_URL, if either was given.
    fn explicit_url(&self) -> Option<String> {
        self.redis
            .clone()
            .or_else(|| std::env::var("REDIS_URL").ok().filter(|u| !u.is_empty()))
    }

    /// The lease: `--lease`, else 30 s (`torture` picks its own default).
    pub(crate) fn lease(&self) -> Duration {
        self.lease.unwrap_or(ClientConfig::DEFAULT_LEASE)
    }

    fn config(&self, url: &str) -> Result<ClientConfig, Failure> {
        Ok(ClientConfig::from_url(url)?
            .protocol(self.protocol)
            .lease(self.lease())
            .waiter_ttl(self.waiter_ttl)
            .waiter_slot(self.waiter_slot))
    }

    async fn connect(&self, url: &str) -> Result<LockClient, Failure> {
        Ok(LockClient::with_config(self.config(url)?).await?)
    }
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

impl From<fairlock::Error> for Failure {
    fn from(err: fairlock::Error) -> Self {
        let code = if err.is_connection() || err.is_auth() {
            exit::UNAVAILABLE
        } else if err.is_invalid_input() {
            exit::USAGE
        } else if err.is_lock_lost() {
            exit::LOST
        } else {
            exit::SOFTWARE
        };
        Self::new(code, err.to_string())
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let code = if err.use_stderr() { exit::USAGE } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_max_level(cli.log_level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("fairlock: cannot start the async runtime: {err}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(async {
        match &cli.command {
            Command::Exec(args) => exec::run(&cli, args).await,
            Command::Inspect(args) => inspect::inspect(&cli, args).await,
            Command::ForceUnlock(args) => inspect::force_unlock(&cli, args).await,
            Command::Demo(args) => demo::run(&cli, args).await,
            Command::Torture(args) => torture::run(&cli, args).await,
            Command::TortureWorker(args) => torture::worker(&cli, args).await,
            Command::ExecSentinel(args) => exec::sentinel(args).await,
        }
    });
    // Background releases get a moment to finish; the runtime then stops.
    runtime.shutdown_timeout(Duration::from_secs(2));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("fairlock: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

//! `fairlock`: run a command under a distributed lock on Redis, inspect and
//! force-unlock locks, and a live demo.

#![warn(rust_2018_idioms)]
#![forbid(unsafe_code)]

mod bench;
mod demo;
mod duration;
mod elect;
mod exec;
mod failure;
mod history;
mod inspect;
mod latch;
mod metrics_server;
mod private_cluster;
mod private_redis;
mod private_sentinel;
mod progress;
mod torture;
mod torture_proxy;
mod watch;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Parser, Subcommand};
use fairlock::{ClientConfig, LockClient, Protocol};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

pub(crate) use failure::{Failure, Sub, exit};

/// The help heading of the options every subcommand takes.
const GLOBAL: &str = "Global options";

/// The help's closing text for one subcommand: an example, then its exit codes.
fn after_help(sub: Sub, example: &str) -> String {
    format!("Example:\n  {example}\n\n{}", failure::table(Some(sub)))
}

#[derive(Parser, Debug)]
#[command(
    name = "fairlock",
    version,
    about = "Distributed fair (FIFO) locks on Redis, compatible with Redisson",
    after_help = format!(
        "Example:\n  fairlock --redis redis://locks.internal:6379 exec nightly-report --wait 1m -- \
         /usr/local/bin/report --full\n\n{}",
        failure::table(None)
    )
)]
pub(crate) struct Cli {
    /// Redis URL: redis://[USER[:PASSWORD]@]HOST[:PORT][/DB], rediss:// for
    /// TLS, redis+unix:///PATH, Redis Sentinel:
    /// redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]
    /// (rediss+sentinel:// for TLS; USER:PASSWORD are the data nodes'), or a
    /// Redis Cluster: redis+cluster://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]
    /// (rediss+cluster:// for TLS). Query parameters give lock settings:
    /// ?protocol=redisson&lease=30s&waiter_ttl=6s&response_timeout=3s...
    /// ($FAIRLOCK_PROTOCOL, $FAIRLOCK_LEASE... override them; flags override
    /// both). Default: $FAIRLOCK_URL, else $REDIS_URL, else
    /// redis://127.0.0.1:6379 (demo and torture start a private
    /// redis-server instead).
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL)]
    redis: Option<String>,

    /// Sentinel URLs: the user the sentinels themselves authenticate (empty:
    /// the default user). Only with --sentinel-password.
    #[arg(long, global = true, value_name = "USER", env = "FAIRLOCK_SENTINEL_USER", help_heading = GLOBAL)]
    sentinel_user: Option<String>,

    /// Sentinel URLs: the password of the sentinels themselves (the URL's
    /// password is the data nodes'). Prefer the environment variable: a
    /// flag shows in `ps`.
    #[arg(long, global = true, value_name = "PASSWORD", env = "FAIRLOCK_SENTINEL_PASSWORD", hide_env_values = true, help_heading = GLOBAL)]
    sentinel_password: Option<String>,

    /// Lock protocol: `native` (fencing tokens, server time, direct handoff)
    /// or `redisson` (shares locks with Java services using Redisson's
    /// getFairLock/getLock). The two never exclude each other on one name.
    /// Default: $FAIRLOCK_PROTOCOL, else the URL's protocol parameter, else
    /// native.
    #[arg(long = "protocol", id = "protocol", global = true, value_name = "PROTOCOL", value_parser = parse_protocol, help_heading = GLOBAL)]
    protocol_flag: Option<Protocol>,

    /// Who this process is, as `inspect` and `watch` show it beside the
    /// owner id of each lock it holds or waits for (up to 128 bytes, no
    /// control characters). Default: $FAIRLOCK_LABEL, else the URL's label
    /// parameter, else HOST:PID.
    #[arg(long, global = true, value_name = "LABEL", value_parser = parse_label, help_heading = GLOBAL)]
    label: Option<String>,

    /// The protocol: --protocol, else the environment's or the URL's
    /// (filled in by [`Cli::resolve`]).
    #[arg(skip)]
    protocol: Protocol,

    /// The settings the environment and the URL give (filled in by
    /// [`Cli::resolve`]).
    #[arg(skip)]
    from_text: Option<ClientConfig>,

    /// Level of fairlock's own diagnostics on stderr: off, error, warn, info,
    /// debug, trace. Default: warn, or the bare level in $RUST_LOG. $RUST_LOG
    /// also takes per-target levels (tracing's EnvFilter syntax, e.g.
    /// RUST_LOG=fairlock=debug). Coloured only on a terminal, and not when
    /// $NO_COLOR is set.
    #[arg(long, global = true, value_name = "LEVEL", help_heading = GLOBAL)]
    log_level: Option<LevelFilter>,

    /// The lock settings, accepted before the subcommand too (where they
    /// stood before they moved into the subcommands that use them).
    #[command(flatten)]
    before_subcommand: LockSettingsBefore,

    #[command(subcommand)]
    command: Command,
}

/// Settings of the locks a subcommand takes (`exec`, `demo`, `torture`).
#[derive(clap::Args, Debug, Clone, Default)]
#[command(next_help_heading = "Lock settings")]
pub(crate) struct LockSettings {
    /// Lease of a held lock, renewed every third of it while held, e.g.
    /// 500ms, 30s, 5m (3ms to 365days). Default: 30s (torture: 1s).
    #[arg(long, value_name = "DUR", value_parser = duration::lease, allow_hyphen_values = true)]
    lease: Option<Duration>,

    /// native: a waiter refreshes its place every third of this and is
    /// skipped once it stopped refreshing for this long (its process died)
    /// (30ms to 365days). Default: 6s.
    #[arg(long, value_name = "DUR", value_parser = duration::waiter_ttl, allow_hyphen_values = true)]
    waiter_ttl: Option<Duration>,

    /// redisson: how long a queued waiter's place lasts beyond the waiter
    /// ahead of it (Redisson's fairLockWaitTimeout); exec --wait replaces it
    /// (1ms to 365days). Default: 300s.
    #[arg(long, value_name = "DUR", value_parser = duration::wait, allow_hyphen_values = true)]
    waiter_slot: Option<Duration>,
}

/// [`LockSettings`] given before the subcommand: hidden, same meaning.
#[derive(clap::Args, Debug, Clone, Default)]
struct LockSettingsBefore {
    #[arg(long = "lease", id = "lease_before", hide = true, value_parser = duration::lease, allow_hyphen_values = true)]
    lease: Option<Duration>,
    #[arg(long = "waiter-ttl", id = "waiter_ttl_before", hide = true, value_parser = duration::waiter_ttl, allow_hyphen_values = true)]
    waiter_ttl: Option<Duration>,
    #[arg(long = "waiter-slot", id = "waiter_slot_before", hide = true, value_parser = duration::wait, allow_hyphen_values = true)]
    waiter_slot: Option<Duration>,
}

/// Lock settings given after a subcommand that takes no lock (`inspect`,
/// `force-unlock`, `watch`, `bench`): hidden, read only to be refused by
/// [`Cli::refuse_settings`] with a word on where they apply (instead of
/// clap's advice to pass them after `--`).
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct MisplacedSettings {
    #[arg(
        long = "lease",
        id = "lease_misplaced",
        hide = true,
        allow_hyphen_values = true
    )]
    lease: Option<String>,
    #[arg(
        long = "waiter-ttl",
        id = "waiter_ttl_misplaced",
        hide = true,
        allow_hyphen_values = true
    )]
    waiter_ttl: Option<String>,
    #[arg(
        long = "waiter-slot",
        id = "waiter_slot_misplaced",
        hide = true,
        allow_hyphen_values = true
    )]
    waiter_slot: Option<String>,
}

impl LockSettings {
    /// These settings, each completed by the one given before the subcommand.
    fn or_before(&self, before: &LockSettingsBefore) -> Self {
        Self {
            lease: self.lease.or(before.lease),
            waiter_ttl: self.waiter_ttl.or(before.waiter_ttl),
            waiter_slot: self.waiter_slot.or(before.waiter_slot),
        }
    }

    /// The lease: `--lease`, else `default`.
    pub(crate) fn lease_or(&self, default: Duration) -> Duration {
        self.lease.unwrap_or(default)
    }

    pub(crate) fn waiter_ttl(&self) -> Duration {
        self.waiter_ttl.unwrap_or(ClientConfig::DEFAULT_WAITER_TTL)
    }

    pub(crate) fn waiter_slot(&self) -> Duration {
        self.waiter_slot
            .unwrap_or(ClientConfig::DEFAULT_WAITER_SLOT)
    }
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
    #[command(after_help = after_help(
        Sub::Exec,
        "fairlock exec nightly-report --wait 1m -- /usr/local/bin/report --full"
    ))]
    Exec(exec::ExecArgs),
    /// Campaign in the election NAME; run CMD only while leading.
    ///
    /// Candidates wait in the fair lock NAME's line and lead in arrival
    /// order. Once leading, publishes --value (shown by `fairlock leader`)
    /// and runs CMD as `exec` runs it under a lock: in a process group of
    /// its own, which gets SIGTERM, then SIGKILL after --grace, when the
    /// leadership is lost, and SIGKILL if fairlock dies. CMD gets
    /// FAIRLOCK_NAME, FAIRLOCK_OWNER and FAIRLOCK_TERM (the term: the
    /// fencing token of the leadership, also in FAIRLOCK_TOKEN). Resigns
    /// when CMD exits.
    #[command(after_help = after_help(
        Sub::Elect,
        "fairlock elect scheduler --value \"$(hostname)\" -- /usr/local/bin/scheduler"
    ))]
    Elect(elect::ElectArgs),
    /// Show who leads the election NAME: its value, label and term.
    ///
    /// With --watch, prints every change of leader as it happens (a new
    /// leader, a new value, nobody), until SIGINT or SIGTERM.
    #[command(after_help = after_help(Sub::Leader, "fairlock leader scheduler --watch --json"))]
    Leader(elect::LeaderArgs),
    /// Show who holds NAME, for how long, and who waits in which order.
    ///
    /// Reads the lock under --protocol, and says so when the other
    /// protocol's keys hold the name (then pass that --protocol). A
    /// read-write lock shows each holder and waiter as reader or writer.
    /// With --semaphore, NAME is a semaphore: its total, the permits
    /// available, who holds how many, and the line with the permits each
    /// waiter asks for.
    #[command(after_help = after_help(Sub::Inspect, "fairlock inspect nightly-report --json"))]
    Inspect(inspect::InspectArgs),
    /// Release NAME whoever holds it, and wake the next waiter.
    ///
    /// With --semaphore, gives back every taken permit of the semaphore
    /// NAME and lets its waiters in. On a terminal, asks before it does
    /// (unless --yes). A `fairlock exec`
    /// holder stops its command and exits 71 once it notices (at its next
    /// lease renewal at the latest); a fairlock library holder's `lost()`
    /// resolves; any other holder keeps running, unaware, unless it checks.
    #[command(after_help = after_help(Sub::ForceUnlock, "fairlock force-unlock nightly-report --yes"))]
    ForceUnlock(inspect::ForceUnlockArgs),
    /// A live view of locks: holder, hold time, lease left, token, queue
    /// length and the longest wait, per lock.
    ///
    /// With --semaphore, the NAMEs are semaphores: the permits taken of the
    /// total, by whom, and the line with the permits each waiter asks for.
    ///
    /// Redrawn in place on a terminal; one line per lock and refresh
    /// otherwise; --json for one JSON object per lock and refresh. Hold and
    /// wait times are as observed by watch (">=" for a holder or waiter
    /// already there at the first refresh). Runs until SIGINT or SIGTERM,
    /// or --count refreshes.
    #[command(after_help = after_help(Sub::Watch, "fairlock watch nightly-report orders --interval 2s"))]
    Watch(watch::WatchArgs),
    /// N clients contend for one fair lock: a timeline of the first
    /// handoffs, then a summary.
    ///
    /// Without --redis or $REDIS_URL, starts a private redis-server from PATH
    /// on a free port and stops it at the end.
    #[command(after_help = after_help(Sub::Demo, "fairlock demo --clients 5 --rounds 20"))]
    Demo(demo::DemoArgs),
    /// A randomized multi-process workload with fault injection, checked for
    /// overlaps, FIFO order, fencing tokens and liveness; prints a summary.
    ///
    /// Without --redis or $REDIS_URL, starts a private redis-server. Shows
    /// its progress while it runs (a live line on a terminal, a line every
    /// 10 s otherwise) and ends on time; a long soak runs for minutes.
    /// SIGINT, SIGTERM or SIGHUP stops it early with the summary of the run
    /// so far.
    #[command(after_help = after_help(Sub::Torture, "fairlock torture --duration 20m"))]
    Torture(torture::TortureArgs),
    /// Measure fairlock's locks (both protocols, fair and non-fair) beside
    /// rslock in one run: rates, ratios, Redis and client CPU per operation.
    ///
    /// Without --redis or $REDIS_URL, starts a private redis-server from PATH
    /// on a free port and stops it at the end. Each round runs every
    /// implementation in turn, so that the machine's noise hits all alike;
    /// the table states the spread between rounds. Scenarios: uncontended,
    /// contended (--workers), handoff (latency) and queue (--waiters); all
    /// by default.
    #[command(after_help = after_help(Sub::Bench, "fairlock bench contended --workers 8,32 --rounds 5 --svg perf.svg"))]
    Bench(bench::BenchArgs),
    /// A count-down latch: set it, count it down, wait until it reaches 0,
    /// inspect or delete it.
    ///
    /// Under --protocol native its keys are fairlock:{NAME}:latch...;
    /// under redisson it is Redisson's RCountDownLatch (the count under
    /// NAME), shared with Java services. `wait` returns once the count
    /// reached 0 (or the latch was deleted or expired).
    #[command(after_help = after_help(Sub::Latch, "fairlock latch deploy-ready set 3 && fairlock latch deploy-ready wait --timeout 5m"))]
    Latch(latch::LatchArgs),
    /// One worker process of `torture` (internal).
    #[command(hide = true)]
    TortureWorker(torture::WorkerArgs),
    /// Kills the process group of an `exec` command when `exec` dies (internal).
    #[command(hide = true)]
    ExecSentinel(exec::SentinelArgs),
}

fn parse_protocol(text: &str) -> Result<Protocol, String> {
    text.parse()
        .map_err(|_| "use native or redisson".to_owned())
}

/// A client label, checked as the library checks it.
fn parse_label(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("the label is empty".to_owned())
    } else if text.len() > fairlock::MAX_LABEL_LEN {
        Err(format!(
            "the label is longer than {} bytes",
            fairlock::MAX_LABEL_LEN
        ))
    } else if text.chars().any(char::is_control) {
        Err("the label contains a control character".to_owned())
    } else {
        Ok(text.to_owned())
    }
}

impl Cli {
    /// Read the settings the environment and the URL give, and settle the
    /// protocol: --protocol, else theirs.
    fn resolve(&mut self) -> Result<(), Failure> {
        let config = self.config_from_text(&self.url())?;
        self.protocol = self.protocol_flag.unwrap_or(config.get_protocol());
        self.from_text = Some(config);
        Ok(())
    }

    /// The settings of `url`'s query parameters and of the `FAIRLOCK_*`
    /// variables (the variables win). The sentinels' credentials are the
    /// flags' business ([`with_sentinel_auth`](Self::with_sentinel_auth)).
    fn config_from_text(&self, url: &str) -> Result<ClientConfig, Failure> {
        let config = ClientConfig::from_env_with(|var| match var {
            "FAIRLOCK_URL" => Some(url.to_owned()),
            "REDIS_URL" | "FAIRLOCK_SENTINEL_USER" | "FAIRLOCK_SENTINEL_PASSWORD" => None,
            _ => std::env::var(var).ok(),
        })?;
        // --label wins over $FAIRLOCK_LABEL and the URL's parameter.
        Ok(match &self.label {
            Some(label) => config.label(label.as_str()),
            None => config,
        })
    }

    /// The URL: --redis, else $FAIRLOCK_URL, else $REDIS_URL, else the local
    /// default.
    fn url(&self) -> String {
        self.explicit_url()
            .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
    }

    /// --redis, $FAIRLOCK_URL or $REDIS_URL, if one was given.
    fn explicit_url(&self) -> Option<String> {
        let var = |name| std::env::var(name).ok().filter(|u: &String| !u.is_empty());
        self.redis
            .clone()
            .or_else(|| var("FAIRLOCK_URL"))
            .or_else(|| var("REDIS_URL"))
    }

    /// The lock settings of a subcommand that takes locks, completed by
    /// those given before the subcommand, then by the environment's and the
    /// URL's (a lease only when they change it from the library's default,
    /// so that a subcommand's own default lease stays).
    pub(crate) fn settings(&self, own: &LockSettings) -> LockSettings {
        let mut settings = own.or_before(&self.before_subcommand);
        if let Some(text) = &self.from_text {
            if text.get_lease() != ClientConfig::DEFAULT_LEASE {
                settings.lease = settings.lease.or(Some(text.get_lease()));
            }
            settings.waiter_ttl = settings.waiter_ttl.or(Some(text.get_waiter_ttl()));
            settings.waiter_slot = settings.waiter_slot.or(Some(text.get_waiter_slot()));
        }
        settings
    }

    /// Refuse lock settings given to a subcommand that takes no lock,
    /// before or after its name.
    fn refuse_settings(&self, sub: &str, after: &MisplacedSettings) -> Result<(), Failure> {
        let before = &self.before_subcommand;
        let given: Vec<&str> = [
            (before.lease.is_some() || after.lease.is_some(), "--lease"),
            (
                before.waiter_ttl.is_some() || after.waiter_ttl.is_some(),
                "--waiter-ttl",
            ),
            (
                before.waiter_slot.is_some() || after.waiter_slot.is_some(),
                "--waiter-slot",
            ),
        ]
        .into_iter()
        .filter_map(|(given, flag)| given.then_some(flag))
        .collect();
        if given.is_empty() {
            return Ok(());
        }
        Err(Failure::new(
            exit::USAGE,
            format!(
                "{} applies to exec, demo and torture, not to {sub}",
                given.join(", ")
            ),
        ))
    }

    fn config(
        &self,
        url: &str,
        settings: &LockSettings,
        default_lease: Duration,
    ) -> Result<ClientConfig, Failure> {
        let mut config = self.config_from_text(url)?.protocol(self.protocol);
        // A flag wins; else the environment's or the URL's; else the
        // subcommand's default lease.
        config = match settings.lease {
            Some(lease) => config.lease(lease),
            None if config.get_lease() == ClientConfig::DEFAULT_LEASE => {
                config.lease(default_lease)
            }
            None => config,
        };
        if let Some(ttl) = settings.waiter_ttl {
            config = config.waiter_ttl(ttl);
        }
        if let Some(slot) = settings.waiter_slot {
            config = config.waiter_slot(slot);
        }
        Ok(self.with_sentinel_auth(config))
    }

    /// `config` with the sentinels' credentials, when given.
    pub(crate) fn with_sentinel_auth(&self, config: ClientConfig) -> ClientConfig {
        match &self.sentinel_password {
            Some(password) => config.sentinel_auth(
                self.sentinel_user.clone().unwrap_or_default(),
                password.clone(),
            ),
            None => config,
        }
    }

    /// A client for `url` with these lock settings (lease default 30 s).
    async fn connect(&self, url: &str, settings: &LockSettings) -> Result<LockClient, Failure> {
        self.connect_with_lease(url, settings, ClientConfig::DEFAULT_LEASE)
            .await
    }

    /// As [`connect`](Self::connect), with another default lease.
    async fn connect_with_lease(
        &self,
        url: &str,
        settings: &LockSettings,
        default_lease: Duration,
    ) -> Result<LockClient, Failure> {
        let config = self.config(url, settings, default_lease)?;
        match LockClient::with_config(config).await {
            Ok(client) => Ok(client),
            Err(fairlock::Error::Auth { addr, .. }) if failure::has_no_password(url).await => {
                Err(failure::no_password_set(&addr))
            }
            Err(err) => Err(failure::connect_failure(err)),
        }
    }
}

/// A Redis client of redis-rs for `url`, without fairlock's own query
/// parameters (redis-rs reads `protocol` as the RESP version).
pub(crate) fn redis_client(url: &str) -> redis::RedisResult<redis::Client> {
    redis::Client::open(without_lock_settings(url))
}

/// `url` without the query parameters [`ClientConfig`] reads.
fn without_lock_settings(url: &str) -> String {
    let Some((base, rest)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = match rest.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (rest, None),
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(key, _)| key);
            !pair.is_empty() && !ClientConfig::URL_PARAMETERS.contains(&key)
        })
        .collect();
    let mut url = base.to_owned();
    if !kept.is_empty() {
        url = format!("{url}?{}", kept.join("&"));
    }
    if let Some(fragment) = fragment {
        url = format!("{url}#{fragment}");
    }
    url
}

/// Diagnostics on stderr: `--log-level` for everything, `$RUST_LOG`
/// (EnvFilter) for per-target levels; colour only on a terminal, and not
/// with `$NO_COLOR` set (to anything but the empty string).
fn init_logging(level: Option<LevelFilter>) {
    let rust_log = std::env::var("RUST_LOG").unwrap_or_default();
    let mut filter = EnvFilter::builder().parse_lossy(&rust_log);
    let bare_level_in_env = rust_log
        .split(',')
        .map(str::trim)
        .any(|directive| !directive.is_empty() && directive.parse::<LevelFilter>().is_ok());
    match level {
        // A bare level replaces the environment's bare level, if any.
        Some(level) => filter = filter.add_directive(level.into()),
        None if !bare_level_in_env => filter = filter.add_directive(LevelFilter::WARN.into()),
        None => {}
    }
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .with_target(false)
        .init();
}

/// The flags that take a duration.
const DURATION_FLAGS: &[&str] = &[
    "--lease",
    "--waiter-ttl",
    "--waiter-slot",
    "--wait",
    "--grace",
    "--hold",
    "--interval",
    "--duration",
];

/// For `exec NAME CMD...` without `--`: a tip that the command goes after
/// `--`, with the line as it should have been (clap says only that CMD's
/// first word was unexpected); for a duration flag right before `--`, that
/// it lacks its value.
fn command_tip(err: &clap::Error, args: &[String]) -> Option<String> {
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let usage = err.get(ContextKind::Usage)?.to_string();
    let Some(ContextValue::String(unexpected)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    // A duration flag takes values that start with `-` (to refuse negative
    // ones plainly), so clap reads `--wait -- CMD` as `--wait` without a
    // value and CMD as unexpected.
    if let Some(end) = args.iter().position(|a| a == "--") {
        if let Some(flag) = args[..end]
            .last()
            .filter(|a| DURATION_FLAGS.contains(&a.as_str()))
        {
            return Some(format!(
                "{flag} needs a value before `--`, a duration such as 30s"
            ));
        }
    }
    if !usage.contains("fairlock exec ") || unexpected.starts_with('-') {
        return None;
    }
    let at = args.iter().skip(1).position(|a| a == unexpected)? + 1;
    if args[..at].iter().any(|a| a == "--") {
        return None;
    }
    let mut line = vec!["fairlock".to_owned()];
    line.extend(args[1..at].iter().cloned());
    line.push("--".to_owned());
    line.extend(args[at..].iter().cloned());
    Some(format!(
        "the command to run goes after `--`: `{}`",
        line.join(" ")
    ))
}

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(mut err) => {
            if let Some(tip) = command_tip(&err, &std::env::args().collect::<Vec<_>>()) {
                err.insert(
                    ContextKind::Suggested,
                    ContextValue::StyledStrs(vec![tip.into()]),
                );
            }
            let code = if err.use_stderr() { exit::USAGE } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    if let Err(failure) = cli.resolve() {
        eprintln!("fairlock: {}", failure.message);
        return ExitCode::from(failure.code);
    }
    init_logging(cli.log_level);
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
            Command::Elect(args) => elect::elect(&cli, args).await,
            Command::Leader(args) => {
                cli.refuse_settings("leader", &args.misplaced)?;
                elect::leader(&cli, args).await
            }
            Command::Inspect(args) => {
                cli.refuse_settings("inspect", &args.misplaced)?;
                inspect::inspect(&cli, args).await
            }
            Command::ForceUnlock(args) => {
                cli.refuse_settings("force-unlock", &args.misplaced)?;
                inspect::force_unlock(&cli, args).await
            }
            Command::Watch(args) => {
                cli.refuse_settings("watch", &args.misplaced)?;
                watch::run(&cli, args).await
            }
            Command::Latch(args) => {
                cli.refuse_settings("latch", &args.misplaced)?;
                latch::run(&cli, args).await
            }
            Command::Demo(args) => demo::run(&cli, args).await,
            Command::Torture(args) => torture::run(&cli, args).await,
            Command::Bench(args) => bench::run(&cli, args).await,
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

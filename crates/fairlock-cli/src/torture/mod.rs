//! `fairlock torture`: a randomized multi-process workload with fault
//! injection, checked against the history checker (see `history/`).
//!
//! The orchestrator starts worker processes (`fairlock torture-worker`,
//! hidden), each running several tasks that take a fair and a non-fair lock
//! with random hold times, random `try_lock_for` timeouts and random
//! cancellations, and print one JSON line per hold or failed wait. Meanwhile
//! it samples the fair lock's queue and injects faults: SIGKILL a worker
//! (and start a new one), SIGSTOP it past its lease and SIGCONT it, delay
//! every reply (slow, below the response timeout), kill the pub/sub
//! connections silently, cut every connection (workers reach Redis through
//! a loopback proxy), run a BUSY script, flood every subscribed channel
//! with PUBLISHes for 2 s, or `SCRIPT FLUSH`. All along it publishes forged
//! grant messages to every queued waiter. Workers differ in their settings
//! (waiter ttl, lease), and their non-fair rounds sometimes reuse one owner
//! across acquisitions, so a hold lost to a pause is followed by a new one
//! of the same owner.
//!
//! Under `native` some rounds campaign in a leader election instead: each
//! leadership is a hold of [`ELECT`] whose token is its term, so the same
//! checks find two leaders believing at once (an overlap) or terms out of
//! order.
//!
//! [`run`] goes step by step: [`Plan::new`] (what the run does),
//! [`prepare`] (Redis, the observer, the fault proxy), [`Workers::start`]
//! (the worker processes, under `tokio::process`, their output read by a
//! task each), [`Injector::run`] (queue samples, forged grants and faults
//! until the deadline, a signal or a failure), [`Workers::wind_down`],
//! [`collect`] (the history), [`check`] and [`print_summary`]. However the
//! fault phase ends, the run goes through the wind-down and the summary,
//! and says why it ended.
//!
//! One concern per file: this one holds the options, the plan and the run's
//! steps; `stage.rs` the Redis deployment and what is prepared on it,
//! `workload.rs` the worker processes, `faults.rs` the fault injection and
//! `report.rs` the checks and the summary.

mod combos;
mod faults;
mod latch;
mod report;
mod stage;
mod workload;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use nix::sys::signal::Signal;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use tokio::sync::watch;

use crate::history::{self, Bounds, Failovers, combo};
use crate::private_cluster::{self, PrivateCluster};
use crate::private_redis::PrivateRedis;
use crate::private_sentinel::{self, PrivateSentinel};
use crate::progress::LiveLine;
use crate::{Cli, Failure, LockSettings, duration, exit};

use faults::Injector;
use report::{check, collect, print_summary};
use stage::{ChangedSetting, Deployment, Stage, lock_deployment, prepare, spread_locks};
use workload::{Reports, Workers};
pub(crate) use workload::{WorkerArgs, worker};

const FAIR: &str = "torture-fair";
const PLAIN: &str = "torture-plain";
/// The read-write lock, under the protocols that have one.
const RW: &str = "torture-rw";
/// The semaphore, and its permits.
const SEM: &str = "torture-sem";
const SEM_PERMITS: u32 = 3;
/// The leader election (native): its leaderships are holds of this name.
const ELECT: &str = "torture-elect";
const MAX_HOLD_MS: u64 = 15;

#[derive(clap::Args, Debug)]
pub(crate) struct TortureArgs {
    /// How long to run, e.g. 30s, 20m (1s to 30days).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = duration::run_time, allow_hyphen_values = true)]
    duration: Duration,
    /// Worker processes (at least 1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=32))]
    processes: u16,
    /// Tasks per worker process.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    tasks: u16,
    /// Do not inject faults (kills and pauses of workers).
    #[arg(long)]
    no_faults: bool,
    /// standalone: one redis-server (a private one, or --redis). sentinel:
    /// a private master and replica behind three sentinels, with failover
    /// faults besides the workers' (SIGKILL or SIGSTOP of the master,
    /// SENTINEL FAILOVER, a sentinel frozen for a while). cluster: a
    /// private cluster of three masters with a replica each, the locks
    /// spread over them, with faults on the master serving a busy lock
    /// (CLUSTER FAILOVER, SIGKILL, SIGSTOP, its slot migrated to another
    /// master). Overlaps that start at a failover are counted apart.
    /// sentinel and cluster start their own deployment: they refuse --redis.
    #[arg(long, value_enum, default_value_t = Topology::Standalone)]
    topology: Topology,
    /// The feature combinations rounds draw besides ordinary rounds
    /// (comma-separated), or none. Default: every one the topology allows.
    /// A run that drew one but never exercised it ends inconclusive.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    combinations: Option<Vec<Combination>>,
    /// Against a server it did not start (--redis or $REDIS_URL), inject
    /// the faults that change the server for every client, not only the
    /// torture's: `CONFIG SET busy-reply-threshold 100` (restored at the
    /// end, also after an error or a stop signal), 300 ms BUSY scripts,
    /// `SCRIPT FLUSH` and PUBLISH floods on every subscribed channel.
    /// Without it such a server only sees the torture's own locks and keys
    /// (the faults of the workers and of their connections, through a
    /// proxy, go on). A private server always gets them all.
    #[arg(long)]
    server_faults: bool,
    #[command(flatten)]
    settings: LockSettings,
}

/// A feature combination a round may draw (see `history::combo`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combination {
    /// A re-entry with another lease kind than its hold's (watchdog,
    /// explicit, longer or shorter).
    ReentryLease,
    /// Several tasks acquiring at once under one explicit owner.
    SharedOwner,
    /// A force-unlock right after a release (during the handoff).
    ForceUnlockAtHandoff,
    /// Names that spell another lock's keys (must be refused under
    /// redisson).
    NameProbe,
    /// Application data (a hash, a string) under a lock's key: refused,
    /// left untouched (standalone only).
    ForeignData,
    /// A native semaphore whose meta outlived every hold (the holders set
    /// expired with the hold keys) while two requests wait, then a give-up
    /// of the second or a force-release: the head it admits keeps its
    /// weight in meta and gives its permits back (native, standalone only).
    SemaphoreStaleMeta,
    /// A count-down latch with waiters, counted down to 0: no wait returns
    /// before 0, none stays blocked after (standalone only: a failover may
    /// lose a latch, which opens it).
    Latch,
    /// A SENTINEL FAILOVER right after a handoff, half the workers
    /// waiting for a replica (min_replicas) (sentinel, with faults).
    FailoverAtHandoff,
    /// None of them.
    None,
}

impl Combination {
    /// Its name in the history.
    fn name(self) -> Option<&'static str> {
        Some(match self {
            Combination::ReentryLease => combo::REENTRY_LEASE,
            Combination::SharedOwner => combo::SHARED_OWNER,
            Combination::ForceUnlockAtHandoff => combo::FORCE_UNLOCK_AT_HANDOFF,
            Combination::NameProbe => combo::NAME_PROBE,
            Combination::ForeignData => combo::FOREIGN_DATA,
            Combination::SemaphoreStaleMeta => combo::SEMAPHORE_STALE_META,
            Combination::FailoverAtHandoff => combo::FAILOVER_AT_HANDOFF,
            Combination::Latch => combo::LATCH,
            Combination::None => return None,
        })
    }

    /// Whether a run of `topology` (with faults or not) under `protocol`
    /// can draw it.
    fn applies(self, topology: Topology, faults: bool, protocol: Protocol) -> bool {
        match self {
            Combination::ForeignData | Combination::Latch => topology == Topology::Standalone,
            Combination::SemaphoreStaleMeta => {
                topology == Topology::Standalone && protocol == Protocol::Native
            }
            Combination::FailoverAtHandoff => topology == Topology::Sentinel && faults,
            _ => true,
        }
    }
}

/// The Redis deployment a torture runs on.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server.
    Standalone,
    /// A master and a replica behind three sentinels.
    Sentinel,
    /// Three masters with a replica each.
    Cluster,
}

impl Topology {
    fn as_str(self) -> &'static str {
        match self {
            Topology::Standalone => "standalone",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
        }
    }
}

/// How often the progress line is written when stderr is not a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// A small xorshift generator: reproducible from the seed, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The server's clock (µs), retried for up to 10 s: the torture's own BUSY
/// scripts and connection cuts refuse calls for a while.
async fn server_time_us(conn: &mut impl ConnectionLike) -> Result<u64, Failure> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        match redis::cmd("TIME").query_async::<(u64, u64)>(conn).await {
            Ok((sec, usec)) => return Ok(sec * 1_000_000 + usec),
            Err(e) if Instant::now() >= give_up => {
                return Err(Failure::new(exit::UNAVAILABLE, format!("TIME: {e}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn raw_connection(url: &str) -> Result<MultiplexedConnection, Failure> {
    crate::redis_client(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad URL: {e}")))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot reach Redis: {e}")))
}

/// The workers' lease: `--lease`, else 1 s so that faults play out quickly.
fn lease(settings: &LockSettings) -> Duration {
    settings.lease_or(Duration::from_secs(1))
}

/// What one run does, fixed before it starts.
struct Plan {
    duration: Duration,
    processes: u16,
    tasks: u16,
    faults: bool,
    topology: Topology,
    protocol: Protocol,
    settings: LockSettings,
    /// The workers' lease (some get twice this).
    lease: Duration,
    /// How long a paused worker stays stopped: past the lease.
    pause_for: Duration,
    /// The combinations drawn (`history::combo` names).
    combos: Vec<&'static str>,
    /// The torture started the server (or deployment) itself.
    private: bool,
    /// Faults that change the server for every client: on a private
    /// server, or with --server-faults.
    server_faults: bool,
}

impl Plan {
    /// Whether the workers take the read-write lock [`RW`] too (both
    /// protocols have one).
    fn read_write(&self) -> bool {
        matches!(self.protocol, Protocol::Redisson | Protocol::Native)
    }

    fn new(cli: &Cli, args: &TortureArgs) -> Self {
        let settings = cli.settings(&args.settings);
        let lease = lease(&settings);
        let faults = !args.no_faults;
        let all = [
            Combination::ReentryLease,
            Combination::SharedOwner,
            Combination::ForceUnlockAtHandoff,
            Combination::NameProbe,
            Combination::ForeignData,
            Combination::SemaphoreStaleMeta,
            Combination::FailoverAtHandoff,
            Combination::Latch,
        ];
        let chosen = args.combinations.as_deref().unwrap_or(&all);
        let combos = chosen
            .iter()
            .filter(|c| c.applies(args.topology, faults, cli.protocol))
            .filter_map(|c| c.name())
            .collect();
        // Sentinel and Cluster deployments are always the torture's own.
        let private = args.topology != Topology::Standalone || cli.explicit_url().is_none();
        Self {
            combos,
            private,
            server_faults: private || args.server_faults,
            duration: args.duration,
            processes: args.processes,
            tasks: args.tasks,
            faults,
            topology: args.topology,
            protocol: cli.protocol,
            settings,
            lease,
            pause_for: lease + Duration::from_millis(300),
        }
    }

    /// The first line of the run.
    fn banner(&self) -> String {
        format!(
            "torture: {} ({} protocol, {} topology), {} processes x {} tasks, faults {}, lease {}",
            duration::format(self.duration),
            self.protocol,
            self.topology.as_str(),
            self.processes,
            self.tasks,
            if self.faults { "on" } else { "off" },
            duration::format(self.lease),
        ) + &self.banner_more()
    }

    /// What the banner says besides: server faults refused on a server it
    /// did not start, the combinations drawn.
    fn banner_more(&self) -> String {
        let mut more = String::new();
        if self.faults && !self.server_faults {
            more += "\nserver faults off: a server this run did not start (--server-faults \
                     to inject BUSY scripts, SCRIPT FLUSH, PUBLISH floods)";
        }
        more += &format!(
            "\ncombinations drawn: {}",
            if self.combos.is_empty() {
                "none".to_owned()
            } else {
                self.combos.join(", ")
            }
        );
        more
    }

    /// The combinations the workers draw (the orchestrator draws failovers
    /// at handoffs itself).
    fn worker_combos(&self) -> Vec<&'static str> {
        self.combos
            .iter()
            .copied()
            .filter(|c| *c != combo::FAILOVER_AT_HANDOFF)
            .collect()
    }

    /// The inputs of the liveness bound.
    fn bounds(&self) -> Bounds {
        let slot = if self.protocol == Protocol::Redisson {
            self.settings.waiter_slot()
        } else {
            self.settings.waiter_ttl()
        };
        Bounds {
            max_hold_us: MAX_HOLD_MS * 1000,
            handoff_us: 300_000,
            // Workers may have twice the lease (their settings differ).
            per_fault_us: (self.lease * 2
                + slot
                + self.pause_for
                + Duration::from_secs(1)
                + self.failover_time())
            .as_micros() as u64,
            base_us: 3_000_000,
        }
    }

    /// How long a failover may take to play out: the sentinels' down-after,
    /// an election and the clients' re-resolution (0 without Sentinel).
    fn failover_time(&self) -> Duration {
        match self.topology {
            Topology::Standalone => Duration::ZERO,
            Topology::Sentinel => private_sentinel::DOWN_AFTER * 3 + Duration::from_secs(7),
            // A frozen master is resumed after three node timeouts, and
            // may grant until it learns it was demoted.
            Topology::Cluster => private_cluster::NODE_TIMEOUT * 3 + Duration::from_secs(7),
        }
    }

    /// How long after a failover a hold may still overlap one that the
    /// failover lost: until the lost holder's renewal (a third of twice
    /// the lease) once the new master answers.
    fn failover_window(&self) -> Duration {
        self.failover_time() + self.lease * 2
    }
}

/// `fairlock torture`: plan, prepare Redis, start the workers, inject
/// faults, wind down, collect, check, report.
pub(crate) async fn run(cli: &Cli, args: &TortureArgs) -> Result<u8, Failure> {
    let plan = Plan::new(cli, args);
    if plan.topology != Topology::Standalone && cli.explicit_url().is_some() {
        return Err(Failure::new(
            exit::USAGE,
            format!(
                "--topology {} starts a private deployment of its own: drop --redis (and \
                 $REDIS_URL)",
                plan.topology.as_str()
            ),
        ));
    }
    if plan.topology == Topology::Sentinel {
        let deployment = tokio::task::spawn_blocking(PrivateSentinel::start)
            .await
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("sentinel start: {e}")))?
            .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
        let deployment = Arc::new(Mutex::new(deployment));
        let url = lock_deployment(&deployment).url();
        let stage = Deployment {
            sentinel: Some(Arc::clone(&deployment)),
            ..Deployment::default()
        };
        let result = run_against(cli, &plan, url, stage).await;
        let _ = tokio::task::spawn_blocking(move || drop(deployment)).await;
        return result;
    }
    if plan.topology == Topology::Cluster {
        let read_write = plan.read_write();
        let cluster = tokio::task::spawn_blocking(move || {
            let cluster = PrivateCluster::start()?;
            let locks = spread_locks(&cluster, read_write)?;
            Ok::<_, String>((cluster, locks))
        })
        .await
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cluster start: {e}")))?
        .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
        let (cluster, locks) = cluster;
        let url = cluster.url();
        let cluster = Arc::new(Mutex::new(cluster));
        let stage = Deployment {
            cluster: Some(Arc::clone(&cluster)),
            ..locks
        };
        let result = run_against(cli, &plan, url, stage).await;
        let _ = tokio::task::spawn_blocking(move || drop(cluster)).await;
        return result;
    }
    let (url, server) = match cli.explicit_url() {
        Some(url) => (url, None),
        None => {
            // Starting it waits for its port: not on the runtime's threads.
            let server = tokio::task::spawn_blocking(PrivateRedis::start)
                .await
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("redis-server start: {e}")))?
                .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
            (server.url(), Some(server))
        }
    };
    let result = run_against(cli, &plan, url, Deployment::default()).await;
    if let Some(server) = server {
        // Killed and reaped: not on the runtime's threads either.
        let _ = tokio::task::spawn_blocking(move || drop(server)).await;
    }
    result
}

async fn run_against(
    cli: &Cli,
    plan: &Plan,
    url: String,
    deployment: Deployment,
) -> Result<u8, Failure> {
    let stage = prepare(cli, plan, url, deployment).await?;
    let result = run_on(cli, plan, &stage).await;
    if let Some(changed) = &stage.changed {
        changed.restore().await;
    }
    stage.observer.shutdown().await;
    result
}

/// The run on a prepared stage: everything but undoing what `prepare`
/// changed on the server.
async fn run_on(cli: &Cli, plan: &Plan, stage: &Stage) -> Result<u8, Failure> {
    println!("{}", plan.banner());
    let stop = StopSignals::listen(stage.changed.clone())?;
    let reports = Arc::new(Reports::default());
    let started = Instant::now();
    let mut clock = stage.conn.clone();
    let started_us = server_time_us(&mut clock).await?;
    let deadline = started + plan.duration;
    let mut workers = Workers::start(cli, plan, stage, &reports)?;
    let mut injector = Injector::new(plan, stage, workers.seed)?;
    let end = injector.run(&mut workers, started, deadline, &stop).await;
    let early = end.why().map(|why| {
        format!(
            "after {} of {}: {why}",
            duration::format(Duration::from_secs(started.elapsed().as_secs())),
            duration::format(plan.duration)
        )
    });
    if let Some(early) = &early {
        eprintln!("torture: stopping early {early}");
    }
    workers.wind_down(early.is_some(), &stop).await;
    let history = collect(&reports, &injector.injected.hits);
    keep_history(&history, &injector.queues);
    let ended_us = server_time_us(&mut clock).await.unwrap_or(started_us);
    let failovers = Failovers {
        at: injector.injected.failovers.clone(),
        settle_us: plan.failover_time().as_micros() as u64,
        window_us: plan.failover_window().as_micros() as u64,
        acked_clients: history
            .events
            .iter()
            .filter_map(|e| match e {
                history::Event::Client {
                    id, min_replicas, ..
                } if *min_replicas > 0 => Some(id.clone()),
                _ => None,
            })
            .collect(),
    };
    let mut verdict = check(
        plan,
        &history,
        injector.queues,
        &failovers,
        &injector.injected,
    );
    verdict.stall = history::longest_stall(&history.events, started_us, ended_us);
    verdict.stall.1 = verdict.stall.1.saturating_sub(started_us);
    print_summary(
        plan,
        &history,
        &injector.injected,
        &verdict,
        started.elapsed(),
        early.as_deref(),
    );
    match end {
        End::Deadline => Ok(verdict.exit_code()),
        End::Failed(failure) => Err(failure),
        End::Signal(signal) => Ok(128 + signal as u8),
    }
}

/// SIGINT, SIGTERM and SIGHUP stop the run early: the fault phase ends,
/// the workers are killed, and the summary covers the run so far (exit
/// 128+N). A second one exits at once.
struct StopSignals(watch::Receiver<i32>);

impl StopSignals {
    /// `changed`: a setting to restore before exiting at once.
    fn listen(changed: Option<ChangedSetting>) -> Result<Self, Failure> {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind| {
            signal(kind)
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot handle signals: {e}")))
        };
        let mut int = listen(SignalKind::interrupt())?;
        let mut term = listen(SignalKind::terminate())?;
        let mut hup = listen(SignalKind::hangup())?;
        let (tx, rx) = watch::channel(0);
        tokio::spawn(async move {
            loop {
                let signal = tokio::select! {
                    _ = int.recv() => Signal::SIGINT,
                    _ = term.recv() => Signal::SIGTERM,
                    _ = hup.recv() => Signal::SIGHUP,
                };
                if *tx.borrow() != 0 {
                    eprintln!("torture: {signal} again: exiting at once, without the summary");
                    if let Some(changed) = &changed {
                        changed.restore_blocking();
                    }
                    std::process::exit(128 + signal as i32);
                }
                let _ = tx.send(signal as i32);
            }
        });
        Ok(Self(rx))
    }

    /// The first stop signal that arrived, if one did.
    fn received(&self) -> Option<Signal> {
        Signal::try_from(*self.0.borrow()).ok()
    }
}

/// How the fault phase ended.
enum End {
    /// At the deadline: the whole run.
    Deadline,
    /// A stop signal arrived.
    Signal(Signal),
    /// The orchestrator could not go on (Redis gone, no new worker).
    Failed(Failure),
}

impl End {
    /// Why the run stopped before its deadline, if it did.
    fn why(&self) -> Option<String> {
        match self {
            End::Deadline => None,
            End::Signal(signal) => Some(signal.to_string()),
            End::Failed(failure) => Some(failure.message.clone()),
        }
    }
}

/// The progress line: each second on a terminal, every
/// [`PROGRESS_EVERY`] otherwise.
struct Progress {
    line: LiveLine,
    every: Duration,
    next: Instant,
    started: Instant,
    duration: Duration,
}

impl Progress {
    fn new(started: Instant, duration: Duration) -> Self {
        let line = LiveLine::stderr();
        let every = if line.in_place() {
            Duration::from_secs(1)
        } else {
            PROGRESS_EVERY
        };
        Self {
            line,
            every,
            next: started + every,
            started,
            duration,
        }
    }

    /// Show the line if it is time to.
    fn tick(&mut self, holds: u64, faults: u32) {
        if Instant::now() < self.next {
            return;
        }
        self.line.show(&format!(
            "torture: {} of {}, {holds} holds, {faults} faults so far",
            duration::format(Duration::from_secs(self.started.elapsed().as_secs())),
            duration::format(self.duration),
        ));
        self.next += self.every;
    }
}

/// With `$FAIRLOCK_TORTURE_HISTORY` set to a path: write the history there
/// (one JSON event a line, then one `fault AT CLIENT` line per fault, then
/// one `queue LOCK AT OWNER...` line per queue snapshot), to look into a
/// violation after the run. Failing to write only warns.
fn keep_history(history: &report::History, queues: &HashMap<String, history::QueueLog>) {
    let Some(path) = std::env::var_os("FAIRLOCK_TORTURE_HISTORY") else {
        return;
    };
    let mut text = String::new();
    for event in &history.events {
        if let Ok(line) = serde_json::to_string(event) {
            text.push_str(&line);
            text.push('\n');
        }
    }
    for fault in &history.faults {
        text.push_str(&format!("fault {} {}\n", fault.at, fault.client));
    }
    for (lock, log) in queues {
        for (i, owners) in log.snapshots.iter().enumerate() {
            let at = log.deadlines.get(i).map_or(0, |(at, _)| *at);
            text.push_str(&format!("queue {lock} {at} {}\n", owners.join(" ")));
        }
    }
    if let Err(err) = std::fs::write(&path, text) {
        eprintln!("torture: cannot write the history to {path:?}: {err}");
    }
}

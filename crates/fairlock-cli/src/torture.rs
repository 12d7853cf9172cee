//! `fairlock torture`: a randomized multi-process workload with fault
//! injection, checked against the history checker (see `history.rs`).
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
//! [`run`] goes step by step: [`Plan::new`] (what the run does),
//! [`prepare`] (Redis, the observer, the fault proxy), [`Workers::start`]
//! (the worker processes, under `tokio::process`, their output read by a
//! task each), [`Injector::run`] (queue samples, forged grants and faults
//! until the deadline, a signal or a failure), [`Workers::wind_down`],
//! [`collect`] (the history), [`check`] and [`print_summary`]. However the
//! fault phase ends, the run goes through the wind-down and the summary,
//! and says why it ended.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{AcquireOptions, FairLock, LockClient, Owner, Protocol};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::history::{self, Bounds, Event, Failover, Failovers, Hold, QueueLog, Report};
use crate::private_cluster::{self, PrivateCluster};
use crate::private_redis::PrivateRedis;
use crate::private_sentinel::{self, PrivateSentinel};
use crate::progress::LiveLine;
use crate::torture_proxy::FaultProxy;
use crate::{Cli, Failure, LockSettings, duration, exit};

const FAIR: &str = "torture-fair";
const PLAIN: &str = "torture-plain";
const MAX_HOLD_MS: u64 = 15;

#[derive(clap::Args, Debug)]
pub(crate) struct TortureArgs {
    /// How long to run, e.g. 30s, 20m (1s to 30days).
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = duration::run_time)]
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
    #[command(flatten)]
    settings: LockSettings,
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

#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    tasks: u16,
    #[arg(long, value_parser = duration::parse)]
    duration: Duration,
    #[arg(long)]
    seed: u64,
    /// Where to read the server clock (default: --redis).
    #[arg(long)]
    clock: Option<String>,
    /// The fair locks to take (one at random each fair round).
    #[arg(long, value_delimiter = ',', default_value = FAIR)]
    fair_locks: Vec<String>,
    #[command(flatten)]
    settings: LockSettings,
}

/// At most one sentinel is frozen per this long. A sentinel whose timer
/// was delayed by more than 2 s (a SIGSTOP) enters TILT mode for 30 s: it
/// takes no action and answers no to its peers' "is the master down"
/// questions. Frozen more often, two of the three sentinels were in TILT
/// at once and no failover could happen (a killed master stayed the master
/// for minutes, and nothing was granted).
const SENTINEL_FREEZE_EVERY: Duration = Duration::from_secs(40);

/// How often the progress line is written when stderr is not a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How long workers get, after the run, to release their locks and exit.
const WIND_DOWN: Duration = Duration::from_secs(10);
/// How long the rest of the workers' output may take to be read once they
/// exited (it ends with them: nothing else holds their stdout).
const DRAIN: Duration = Duration::from_secs(5);

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
    redis::Client::open(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad URL: {e}")))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot reach Redis: {e}")))
}

/// A worker task's connection for reading the server's clock. It goes
/// through the fault proxy, and a cut breaks a multiplexed connection for
/// good (every later call fails): this one connects again.
async fn time_connection(url: &str) -> Result<ConnectionManager, Failure> {
    redis::Client::open(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad URL: {e}")))?
        .get_connection_manager()
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot reach Redis: {e}")))
}

/// A worker's stdout, shared by its tasks: one whole line per event.
#[derive(Clone)]
struct EventOut(Arc<tokio::sync::Mutex<tokio::io::Stdout>>);

impl EventOut {
    fn stdout() -> Self {
        Self(Arc::new(tokio::sync::Mutex::new(tokio::io::stdout())))
    }

    /// Write `event` and flush it: once this returns, the line is in the
    /// pipe, even if the process is killed next. Errors (the orchestrator
    /// is gone) are ignored.
    async fn write(&self, event: &Event) {
        let mut line = event.to_line();
        line.push('\n');
        let mut out = self.0.lock().await;
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    }
}

/// One worker process: tasks taking the locks until the duration is over.
pub(crate) async fn worker(cli: &Cli, args: &WorkerArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let clock = args.clock.clone().unwrap_or_else(|| url.clone());
    let client = cli.connect(&url, &cli.settings(&args.settings)).await?;
    let out = EventOut::stdout();
    out.write(&Event::Client {
        pid: std::process::id(),
        id: client.id().to_owned(),
    })
    .await;
    let deadline = Instant::now() + args.duration;
    let fair_locks: Arc<[String]> = args.fair_locks.clone().into();
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let fair_locks = Arc::clone(&fair_locks);
        let client = client.clone();
        let out = out.clone();
        let mut conn = time_connection(&clock).await?;
        let mut rng = Rng(args.seed.wrapping_mul(31).wrapping_add(u64::from(t)) | 1);
        // Reused by some non-fair rounds: a new hold of an owner whose
        // earlier hold was lost (a pause) must not be touched by the old guard.
        let owner = client.new_owner();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                // A round still waiting at the deadline is dropped (the
                // waiter leaves its queue): the run ends on time.
                let round = one_round(&client, &mut conn, &mut rng, &owner, &fair_locks);
                let event = match tokio::time::timeout_at(deadline.into(), round).await {
                    Ok(Ok(event)) => event,
                    Ok(Err(_)) => continue,
                    Err(_) => break,
                };
                out.write(&event).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    client.shutdown().await;
    Ok(0)
}

async fn one_round(
    client: &LockClient,
    conn: &mut ConnectionManager,
    rng: &mut Rng,
    owner: &Owner,
    fair_locks: &[String],
) -> Result<Event, Failure> {
    let fair = rng.below(10) < 7 && !fair_locks.is_empty();
    let name = if fair {
        fair_locks[rng.below(fair_locks.len() as u64) as usize].as_str()
    } else {
        PLAIN
    };
    let requested = server_time_us(conn).await?;
    let mut opts = options(rng);
    if !fair && rng.below(100) < 30 {
        opts = opts.owner(owner.clone());
    }
    let cancel = rng.below(100) < 15;
    let limit = Duration::from_millis(rng.below(50));
    let acquire = async {
        if fair {
            client.fair_lock(name)?.acquire(opts).await
        } else {
            client.lock(name)?.acquire(opts).await
        }
    };
    let outcome = if cancel {
        // Cancelled at a random moment.
        match tokio::time::timeout(limit, acquire).await {
            Ok(result) => result,
            Err(_) => {
                return Ok(Event::NoGrant {
                    lock: name.into(),
                    outcome: "cancelled".into(),
                });
            }
        }
    } else {
        acquire.await
    };
    let guard = match outcome {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            return Ok(Event::NoGrant {
                lock: name.into(),
                outcome: "timeout".into(),
            });
        }
        Err(_) => {
            return Ok(Event::NoGrant {
                lock: name.into(),
                outcome: "error".into(),
            });
        }
    };
    let start = server_time_us(conn).await?;
    tokio::time::sleep(Duration::from_millis(rng.below(MAX_HOLD_MS))).await;
    let end = server_time_us(conn).await?;
    let valid = guard.is_held();
    let event = Event::Hold(Hold {
        lock: name.into(),
        owner: guard.owner().to_string(),
        token: guard.token(),
        requested,
        start,
        end,
        valid,
    });
    let _ = guard.unlock().await;
    Ok(event)
}

fn options(rng: &mut Rng) -> AcquireOptions {
    if rng.below(100) < 25 {
        AcquireOptions::new().wait(Duration::from_millis(20 + rng.below(400)))
    } else {
        AcquireOptions::new()
    }
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
}

impl Plan {
    fn new(cli: &Cli, args: &TortureArgs) -> Self {
        let settings = cli.settings(&args.settings);
        let lease = lease(&settings);
        Self {
            duration: args.duration,
            processes: args.processes,
            tasks: args.tasks,
            faults: !args.no_faults,
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
        )
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
        let cluster = tokio::task::spawn_blocking(|| {
            let cluster = PrivateCluster::start()?;
            let locks = spread_locks(&cluster)?;
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

/// The private deployment a run uses besides its URL, and the locks it
/// takes.
struct Deployment {
    sentinel: Option<Arc<Mutex<PrivateSentinel>>>,
    cluster: Option<Arc<Mutex<PrivateCluster>>>,
    /// The fair locks the workers take: one, or on a cluster one per master.
    fair_locks: Vec<String>,
    /// Cluster: every lock's hash slot.
    slots: Vec<(String, u16)>,
}

impl Default for Deployment {
    fn default() -> Self {
        Self {
            sentinel: None,
            cluster: None,
            fair_locks: vec![FAIR.to_owned()],
            slots: Vec::new(),
        }
    }
}

/// The locks of a cluster run: the fair ones, [`FAIR`] then
/// `torture-fair-N` names until every master serves one; and the slot of
/// each lock, [`PLAIN`] included. A lock's keys share the hash tag of its
/// name under both protocols (Redisson's lock key is the bare name, of
/// the same slot).
fn spread_locks(cluster: &PrivateCluster) -> Result<Deployment, String> {
    let masters = cluster.masters()?;
    let mut served = std::collections::HashSet::new();
    let mut fair = Vec::new();
    let mut slots = Vec::new();
    for i in 0..200 {
        if served.len() == masters.len() {
            break;
        }
        let name = if i == 0 {
            FAIR.to_owned()
        } else {
            format!("{FAIR}-{i}")
        };
        let slot = cluster.slot_of(&format!("{{{name}}}"))?;
        if served.insert(cluster.master_of(slot)?) {
            slots.push((name.clone(), slot));
            fair.push(name);
        }
    }
    slots.push((PLAIN.to_owned(), cluster.slot_of(&format!("{{{PLAIN}}}"))?));
    Ok(Deployment {
        fair_locks: fair,
        slots,
        ..Deployment::default()
    })
}

fn lock_cluster(cluster: &Mutex<PrivateCluster>) -> std::sync::MutexGuard<'_, PrivateCluster> {
    cluster.lock().unwrap_or_else(|e| e.into_inner())
}

/// `call` on the cluster, off the runtime's threads (its calls block, for
/// up to 2 s each on a node that does not answer).
async fn on_cluster<T: Send + 'static>(
    cluster: &Arc<Mutex<PrivateCluster>>,
    call: impl FnOnce(&mut PrivateCluster) -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let cluster = Arc::clone(cluster);
    tokio::task::spawn_blocking(move || call(&mut lock_cluster(&cluster)))
        .await
        .map_err(|e| format!("cluster call: {e}"))?
}

fn lock_deployment(
    deployment: &Mutex<PrivateSentinel>,
) -> std::sync::MutexGuard<'_, PrivateSentinel> {
    deployment.lock().unwrap_or_else(|e| e.into_inner())
}

async fn run_against(
    cli: &Cli,
    plan: &Plan,
    url: String,
    deployment: Deployment,
) -> Result<u8, Failure> {
    let stage = prepare(cli, plan, url, deployment).await?;
    println!("{}", plan.banner());
    let stop = StopSignals::listen()?;
    let reports = Arc::new(Reports::default());
    let started = Instant::now();
    let mut clock = stage.conn.clone();
    let started_us = server_time_us(&mut clock).await?;
    let deadline = started + plan.duration;
    let mut workers = Workers::start(cli, plan, &stage, &reports)?;
    let mut injector = Injector::new(plan, &stage, workers.seed)?;
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
    let ended_us = server_time_us(&mut clock).await.unwrap_or(started_us);
    let failovers = Failovers {
        at: injector.injected.failovers.clone(),
        settle_us: plan.failover_time().as_micros() as u64,
        window_us: plan.failover_window().as_micros() as u64,
    };
    let mut verdict = check(plan, &history, injector.queues, &failovers);
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
    stage.observer.shutdown().await;
    match end {
        End::Deadline => Ok(if verdict.violations() == 0 { 0 } else { 1 }),
        End::Failed(failure) => Err(failure),
        End::Signal(signal) => Ok(128 + signal as u8),
    }
}

/// Redis as the run uses it.
struct Stage {
    url: String,
    /// Where the workers connect: the fault proxy (Redis itself when
    /// faults are off, or under Sentinel or Cluster).
    worker_url: String,
    /// Where the server clock is read: Redis itself, or under Sentinel or
    /// Cluster the deployment's clock server.
    clock_url: String,
    /// Cleans the locks up first, then samples the fair queue.
    observer: LockClient,
    /// For server time and forged grants (under Sentinel or Cluster: the
    /// clock).
    conn: MultiplexedConnection,
    /// Standalone only: the workers' connections go through it.
    proxy: Option<FaultProxy>,
    /// Sentinel only: the deployment, for failover faults.
    sentinel: Option<Arc<Mutex<PrivateSentinel>>>,
    /// Cluster only: the cluster, for failover faults and migrations.
    cluster: Option<Arc<Mutex<PrivateCluster>>>,
    /// The fair locks the workers take.
    fair_locks: Vec<String>,
    /// Cluster only: every lock's hash slot.
    slots: Vec<(String, u16)>,
}

/// Connect, let BUSY scripts answer BUSY after 100 ms, start the fault
/// proxy, and release whatever an earlier run left held.
async fn prepare(
    cli: &Cli,
    plan: &Plan,
    url: String,
    deployment: Deployment,
) -> Result<Stage, Failure> {
    let Deployment {
        sentinel,
        cluster,
        fair_locks,
        slots,
    } = deployment;
    let observer = cli
        .connect_with_lease(&url, &plan.settings, plan.lease)
        .await?;
    let clock_url = match (&sentinel, &cluster) {
        (Some(deployment), _) => lock_deployment(deployment).clock_url(),
        (_, Some(cluster)) => lock_cluster(cluster).clock_url(),
        _ => url.clone(),
    };
    let mut conn = raw_connection(&clock_url).await?;
    // A busy script answers BUSY to everyone else after 100 ms.
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg("100")
        .query_async(&mut conn)
        .await;
    // Workers reach a standalone Redis through the fault proxy.
    let proxy = match sentinel.is_some() || cluster.is_some() {
        true => None,
        false => Some(
            FaultProxy::start(observer.config().address())
                .await
                .map_err(|e| {
                    Failure::new(exit::SOFTWARE, format!("cannot start the fault proxy: {e}"))
                })?,
        ),
    };
    let worker_url = match &proxy {
        Some(proxy) if plan.faults => proxy.url(&url),
        _ => url.clone(),
    };
    for key in fair_locks.iter().map(String::as_str).chain([PLAIN]) {
        let _ = observer.fair_lock(key)?.force_unlock().await;
    }
    Ok(Stage {
        url,
        worker_url,
        clock_url,
        observer,
        conn,
        proxy,
        sentinel,
        cluster,
        fair_locks,
        slots,
    })
}

/// SIGINT, SIGTERM and SIGHUP stop the run early: the fault phase ends,
/// the workers are killed, and the summary covers the run so far (exit
/// 128+N). A second one exits at once.
struct StopSignals(watch::Receiver<i32>);

impl StopSignals {
    fn listen() -> Result<Self, Failure> {
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

/// What the workers reported so far: every event, and how many holds.
#[derive(Default)]
struct Reports {
    events: Mutex<Vec<Event>>,
    holds: AtomicU64,
}

impl Reports {
    /// One line of a worker's output; anything but an event (a line cut
    /// short by SIGKILL) is skipped.
    fn add(&self, line: &str) {
        let Some(event) = Event::parse(line) else {
            return;
        };
        if matches!(event, Event::Hold(_)) {
            self.holds.fetch_add(1, Ordering::Relaxed);
        }
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    fn holds(&self) -> u64 {
        self.holds.load(Ordering::Relaxed)
    }

    fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Read a worker's output to its end, every line into `reports`. Bytes
/// that are not UTF-8 are replaced, not a reason to stop: the pipe is
/// drained until the worker closes it, so the worker never blocks on it.
async fn read_reports(stdout: ChildStdout, reports: Arc<Reports>) {
    let mut stdout = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdout.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => reports.add(String::from_utf8_lossy(&line).trim_end()),
        }
    }
}

/// One worker process, and the task reading its output.
struct Worker {
    pid: u32,
    child: Child,
    reader: JoinHandle<()>,
}

/// The worker processes of a run. Each is killed if dropped (an early
/// return, a panic): none outlives the orchestrator's run.
struct Workers<'a> {
    cli: &'a Cli,
    plan: &'a Plan,
    url: &'a str,
    clock: &'a str,
    fair_locks: String,
    reports: Arc<Reports>,
    /// The seed of the latest worker; the next one gets the next seed.
    seed: u64,
    running: Vec<Worker>,
    /// Workers killed as a fault (reaped): their output may still be read.
    killed: Vec<Worker>,
}

impl<'a> Workers<'a> {
    /// Start `plan.processes` workers for the whole run.
    fn start(
        cli: &'a Cli,
        plan: &'a Plan,
        stage: &'a Stage,
        reports: &Arc<Reports>,
    ) -> Result<Self, Failure> {
        let mut workers = Self {
            cli,
            plan,
            url: &stage.worker_url,
            clock: &stage.clock_url,
            fair_locks: stage.fair_locks.join(","),
            reports: Arc::clone(reports),
            seed: u64::from(std::process::id()) << 16 | 1,
            running: Vec::new(),
            killed: Vec::new(),
        };
        for _ in 0..plan.processes {
            let worker = workers.spawn(plan.duration)?;
            workers.running.push(worker);
        }
        Ok(workers)
    }

    /// Start one worker that runs for `run_for`, with settings of its own.
    fn spawn(&mut self, run_for: Duration) -> Result<Worker, Failure> {
        self.seed += 1;
        let seed = self.seed;
        let settings = &self.plan.settings;
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot find myself: {e}")))?;
        // Workers differ in their settings, as clients of one lock do.
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9) | 1);
        let lease = self.plan.lease * (1 + rng.below(2) as u32);
        let waiter_ttl = [
            settings.waiter_ttl(),
            Duration::from_secs(1),
            Duration::from_secs(2),
        ][rng.below(3) as usize];
        let mut child = Command::new(exe)
            .args([
                "--redis",
                self.url,
                "--protocol",
                self.cli.protocol.as_str(),
            ])
            .arg("torture-worker")
            .args(["--lease", &format!("{}ms", lease.as_millis())])
            .args(["--waiter-ttl", &format!("{}ms", waiter_ttl.as_millis())])
            .args([
                "--waiter-slot",
                &format!("{}ms", settings.waiter_slot().as_millis()),
            ])
            .args(["--tasks", &self.plan.tasks.to_string()])
            .args(["--duration", &format!("{}ms", run_for.as_millis().max(1))])
            .args(["--seed", &seed.to_string()])
            .args(["--clock", self.clock])
            .args(["--fair-locks", &self.fair_locks])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot start a worker: {e}")))?;
        let pid = child
            .id()
            .ok_or_else(|| Failure::new(exit::SOFTWARE, "a worker exited at once"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Failure::new(exit::SOFTWARE, "worker without stdout"))?;
        let reader = tokio::spawn(read_reports(stdout, Arc::clone(&self.reports)));
        Ok(Worker { pid, child, reader })
    }

    fn count(&self) -> usize {
        self.running.len()
    }

    fn pid(&self, index: usize) -> u32 {
        self.running[index].pid
    }

    fn signal(&self, index: usize, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid(index) as i32), signal);
    }

    /// SIGKILL worker `index`, start a fresh one in its place for what is
    /// `left` of the run, and reap the dead one.
    async fn replace(&mut self, index: usize, left: Duration) -> Result<(), Failure> {
        self.signal(index, Signal::SIGKILL);
        let fresh = self.spawn(left)?;
        let mut dead = std::mem::replace(&mut self.running[index], fresh);
        let _ = dead.child.wait().await;
        self.killed.push(dead);
        Ok(())
    }

    /// Workers stop by themselves at the deadline, then release their
    /// locks and exit; together they get [`WIND_DOWN`]. One that is still
    /// running after that is killed, and the reason is said. When the run
    /// stopped `early` (or a stop signal arrives meanwhile), they are
    /// killed at once. Then the rest of each one's output is read, for at
    /// most [`DRAIN`] in all.
    async fn wind_down(mut self, early: bool, stop: &StopSignals) {
        let until = Instant::now() + WIND_DOWN;
        let mut said = false;
        let mut killed_early = 0;
        for worker in &mut self.running {
            loop {
                let early = early || stop.received().is_some();
                match worker.child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if !early && Instant::now() < until => {
                        if !said && Instant::now() + WIND_DOWN / 2 > until {
                            eprintln!(
                                "torture: waiting for the workers to release their locks and exit"
                            );
                            said = true;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    _ => {
                        if early {
                            killed_early += 1;
                        } else {
                            eprintln!(
                                "torture: worker {} did not exit within {} of the end (stuck \
                                 releasing or reporting); killed it, its last holds may be missing",
                                worker.pid,
                                duration::format(WIND_DOWN)
                            );
                        }
                        let _ = kill(Pid::from_raw(worker.pid as i32), Signal::SIGKILL);
                        if tokio::time::timeout(DRAIN, worker.child.wait())
                            .await
                            .is_err()
                        {
                            eprintln!(
                                "torture: worker {} did not die of SIGKILL within {}",
                                worker.pid,
                                duration::format(DRAIN)
                            );
                        }
                        break;
                    }
                }
            }
        }
        if killed_early > 0 {
            eprintln!(
                "torture: killed {killed_early} workers still running; their last holds may be missing"
            );
        }
        let drained_by = Instant::now() + DRAIN;
        for worker in self.running.iter_mut().chain(self.killed.iter_mut()) {
            match tokio::time::timeout_at(drained_by.into(), &mut worker.reader).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!(
                    "torture: reading the output of worker {} failed ({e}); its holds may be missing",
                    worker.pid
                ),
                Err(_) => {
                    worker.reader.abort();
                    eprintln!(
                        "torture: the output of worker {} was still open {} after it exited; \
                         its last holds may be missing",
                        worker.pid,
                        duration::format(DRAIN)
                    );
                }
            }
        }
    }
}

/// The faults injected so far.
#[derive(Default)]
struct Injected {
    kills: u32,
    pauses: u32,
    delays: u32,
    silent: u32,
    cuts: u32,
    busy: u32,
    forged: u64,
    /// Standalone: 2 s PUBLISH floods on every subscribed channel, and
    /// `SCRIPT FLUSH`es.
    floods: u32,
    flushes: u32,
    /// Sentinel and Cluster: SIGKILLs and SIGSTOPs of a master.
    master_kills: u32,
    master_pauses: u32,
    /// Sentinel: `SENTINEL FAILOVER`s, sentinels frozen for a while.
    sentinel_failovers: u32,
    sentinel_pauses: u32,
    /// Cluster: `CLUSTER FAILOVER`s, slot migrations of a busy lock.
    cluster_failovers: u32,
    migrations: u32,
    /// Each failover fault (server time, µs, and the locks it hit).
    failovers: Vec<Failover>,
    /// When each fault hit (server time, µs) and whom: a worker's pid, or
    /// 0 for every worker (a fault of the network or the server).
    hits: Vec<(u64, u32)>,
}

impl Injected {
    /// Faults of every kind, forged grants apart.
    fn total(&self) -> u32 {
        self.kills
            + self.pauses
            + self.delays
            + self.silent
            + self.cuts
            + self.busy
            + self.floods
            + self.flushes
            + self.master_kills
            + self.master_pauses
            + self.sentinel_failovers
            + self.sentinel_pauses
            + self.cluster_failovers
            + self.migrations
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

/// The orchestrator's side of the run: it samples the fair queue, forges
/// grants and injects faults.
struct Injector<'a> {
    plan: &'a Plan,
    stage: &'a Stage,
    /// The fair locks, each with its queue's snapshots.
    locks: Vec<(String, FairLock)>,
    conn: MultiplexedConnection,
    rng: Rng,
    /// The wake-up channels of [`FAIR`]'s queue, but for the owner.
    channel_prefix: String,
    queues: HashMap<String, QueueLog>,
    injected: Injected,
    next_forgery: Instant,
    next_fault: Instant,
    /// When the reply delay in force ends.
    undelay_at: Option<Instant>,
    /// Sentinel: the state of failover faults.
    failover: FailoverState,
}

/// Failover faults in progress (Sentinel topology).
struct FailoverState {
    /// The port of a killed master, to start again as a replica once the
    /// sentinels named another master.
    rejoin: Option<u16>,
    /// When a killed master's rejoin last waited long enough to be
    /// reported (every 30 s while the sentinels name no other master).
    rejoin_reported: Option<Instant>,
    /// A SIGSTOPped master's pid, and when to SIGCONT it.
    resume: Option<(u32, Instant)>,
    /// Sentinel: a SIGSTOPped sentinel (its index and pid), and when to
    /// SIGCONT it.
    sentinel_resume: Option<(usize, u32, Instant)>,
    /// When a sentinel was frozen last (see [`SENTINEL_FREEZE_EVERY`]).
    sentinel_frozen_at: Option<Instant>,
    /// Cluster: a killed master's port and the slot of a lock it served,
    /// to start it again once another master serves that slot.
    cluster_rejoin: Option<(u16, u16)>,
    /// Cluster: a slot migration under way.
    migration: Option<Migration>,
    /// No failover fault before this.
    next_allowed: Instant,
}

/// Where a cluster fault hits: the master serving a lock's slot, its
/// replica in sync, the locks it serves, and another master (where a
/// migration would take the slot).
struct ClusterTarget {
    master: u16,
    replica: u16,
    slot: u16,
    locks: Vec<String>,
    to: u16,
}

/// A slot on its way from one master to another, a step at a time.
struct Migration {
    slot: u16,
    from: u16,
    to: u16,
    /// Keys moved already: what is left is `SETSLOT NODE`.
    moved: bool,
    /// When to take the next step.
    next: Instant,
    /// Steps that failed so far (retried after a while).
    failures: u32,
}

impl<'a> Injector<'a> {
    fn new(plan: &'a Plan, stage: &'a Stage, seed: u64) -> Result<Self, Failure> {
        let channel_prefix = match plan.protocol {
            Protocol::Redisson => format!("redisson_lock__channel:{{{FAIR}}}"),
            _ => format!("fairlock:{{{FAIR}}}:wake"),
        };
        let locks = stage
            .fair_locks
            .iter()
            .map(|name| Ok((name.clone(), stage.observer.fair_lock(name)?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(Self {
            plan,
            stage,
            locks,
            conn: stage.conn.clone(),
            rng: Rng(seed | 1),
            channel_prefix,
            queues: stage
                .fair_locks
                .iter()
                .map(|name| (name.clone(), QueueLog::default()))
                .collect(),
            injected: Injected::default(),
            next_forgery: Instant::now(),
            next_fault: Instant::now() + Duration::from_millis(1500),
            undelay_at: None,
            failover: FailoverState {
                rejoin: None,
                resume: None,
                rejoin_reported: None,
                sentinel_resume: None,
                sentinel_frozen_at: None,
                cluster_rejoin: None,
                migration: None,
                next_allowed: Instant::now() + Duration::from_secs(2),
            },
        })
    }

    /// Until the deadline, a stop signal or a failure: show progress,
    /// sample the queue, end reply delays, forge grants, inject faults.
    async fn run(
        &mut self,
        workers: &mut Workers<'_>,
        started: Instant,
        deadline: Instant,
        stop: &StopSignals,
    ) -> End {
        let mut progress = Progress::new(started, self.plan.duration);
        let end = loop {
            if Instant::now() >= deadline {
                break End::Deadline;
            }
            if let Some(signal) = stop.received() {
                break End::Signal(signal);
            }
            progress.tick(workers.reports.holds(), self.injected.total());
            if let Err(failure) = self.step(workers, deadline).await {
                break End::Failed(failure);
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        };
        progress.line.clear();
        // A paused master or sentinel must not stay paused after the run,
        // nor a slot half-way to another master.
        if let Some((pid, _)) = self.failover.resume.take() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        if let Some((_, pid, _)) = self.failover.sentinel_resume.take() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        while self.failover.migration.is_some() {
            if let Err(failure) = self.migrate_step(true).await {
                eprintln!("torture: {}", failure.message);
                break;
            }
        }
        end
    }

    async fn step(&mut self, workers: &mut Workers<'_>, deadline: Instant) -> Result<(), Failure> {
        self.sample_queue().await;
        if self.undelay_at.is_some_and(|at| Instant::now() >= at) {
            if let Some(proxy) = &self.stage.proxy {
                proxy.delay_replies(Duration::ZERO);
            }
            self.undelay_at = None;
        }
        self.tend_failovers().await?;
        // Forged grants go to a standalone server (under Sentinel the
        // connection is the clock's).
        if self.plan.faults && self.stage.proxy.is_some() && Instant::now() >= self.next_forgery {
            self.forge_grants().await?;
        }
        if self.plan.faults
            && Instant::now() >= self.next_fault
            && deadline > Instant::now() + self.plan.pause_for
        {
            self.inject_fault(workers, deadline).await?;
        }
        Ok(())
    }

    /// Record each fair queue if it changed.
    async fn sample_queue(&mut self) {
        for (name, lock) in &self.locks {
            if let Ok(info) = lock.inspect().await {
                let owners: Vec<String> = info.queue.into_iter().map(|w| w.owner).collect();
                let log = self.queues.entry(name.clone()).or_default();
                if log.snapshots.last() != Some(&owners) {
                    log.snapshots.push(owners);
                }
            }
        }
    }

    /// A hostile client with PUBLISH rights forges grants to every queued
    /// waiter (a huge token: any holder with it is a violation).
    async fn forge_grants(&mut self) -> Result<(), Failure> {
        let now_ms = server_time_us(&mut self.conn).await? / 1000;
        let queued = self
            .queues
            .get(FAIR)
            .and_then(|log| log.snapshots.last().cloned());
        for owner in queued.unwrap_or_default() {
            let forgery = format!(
                "grant:9000000000000000000:{now_ms}:60000:{:040x}",
                self.rng.next()
            );
            let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(format!("{}:{owner}", self.channel_prefix))
                .arg(forgery)
                .query_async(&mut self.conn)
                .await;
            self.injected.forged += 1;
        }
        self.next_forgery = Instant::now() + Duration::from_millis(50);
        Ok(())
    }

    /// One fault of a random kind: SIGKILL or SIGSTOP a random worker,
    /// delay replies, kill pub/sub silently, cut every connection, or run
    /// a BUSY script.
    async fn inject_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let victim = self.rng.below(workers.count() as u64) as usize;
        let at = server_time_us(&mut self.conn).await?;
        if self.stage.sentinel.is_some() {
            return self
                .inject_sentinel_fault(workers, deadline, victim, at)
                .await;
        }
        if self.stage.cluster.is_some() {
            return self
                .inject_cluster_fault(workers, deadline, victim, at)
                .await;
        }
        let kind = self.rng.below(8);
        // Network and server faults hit every worker.
        let hit = if kind < 2 { workers.pid(victim) } else { 0 };
        self.injected.hits.push((at, hit));
        match kind {
            0 => {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            }
            1 => self.pause(workers, victim).await,
            2 => {
                let delay = Duration::from_millis(30 + self.rng.below(120));
                if let Some(proxy) = &self.stage.proxy {
                    proxy.delay_replies(delay);
                }
                self.undelay_at = Some(Instant::now() + Duration::from_secs(2));
                self.injected.delays += 1;
            }
            3 => {
                if let Some(proxy) = &self.stage.proxy {
                    proxy.blackhole_pubsub();
                }
                self.injected.silent += 1;
            }
            4 => {
                if let Some(proxy) = &self.stage.proxy {
                    proxy.cut_all();
                }
                self.injected.cuts += 1;
            }
            5 => {
                self.busy_script().await?;
                self.injected.busy += 1;
            }
            6 => {
                self.publish_flood().await?;
                self.injected.floods += 1;
            }
            _ => {
                // Every client's next script call meets NOSCRIPT.
                let _: redis::RedisResult<()> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut self.conn)
                    .await;
                self.injected.flushes += 1;
            }
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        Ok(())
    }

    /// Sentinel: SIGKILL or SIGSTOP a worker, freeze a sentinel for a
    /// few seconds (a silent sentinel: its clients hear nothing, not even
    /// an error), or (when the replica is in sync and no failover is under
    /// way) SIGKILL or SIGSTOP the master or ask the sentinels to fail
    /// over.
    async fn inject_sentinel_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
        victim: usize,
        at: u64,
    ) -> Result<(), Failure> {
        let mut kind = self.rng.below(6);
        if kind == 5 {
            if self.failover.sentinel_resume.is_none()
                && self
                    .failover
                    .sentinel_frozen_at
                    .is_none_or(|at| at.elapsed() >= SENTINEL_FREEZE_EVERY)
            {
                self.freeze_sentinel(at);
                self.next_fault =
                    Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
                return Ok(());
            }
            kind = self.rng.below(5);
        }
        let master = if kind >= 2 {
            self.failover_target().await
        } else {
            None
        };
        if kind >= 2 && master.is_none() {
            kind = self.rng.below(2);
        }
        self.injected
            .hits
            .push((at, if kind < 2 { workers.pid(victim) } else { 0 }));
        match (kind, master) {
            (0, _) => {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            }
            (1, _) => self.pause(workers, victim).await,
            (2, Some(port)) => {
                if let Some(deployment) = &self.stage.sentinel {
                    lock_deployment(deployment).kill_node(port);
                }
                self.failover.rejoin = Some(port);
                self.injected.master_kills += 1;
                self.failed_over(Failover::of_all(at, "SIGKILL of the master"));
            }
            (3, Some(port)) => {
                let pid = self
                    .stage
                    .sentinel
                    .as_ref()
                    .and_then(|d| lock_deployment(d).node_pid(port));
                if let Some(pid) = pid {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
                    // Past the sentinels' down-after: they fail over, and the
                    // old master comes back to find itself demoted.
                    self.failover.resume =
                        Some((pid, Instant::now() + private_sentinel::DOWN_AFTER * 3));
                    self.injected.master_pauses += 1;
                    self.failed_over(Failover::of_all(at, "SIGSTOP of the master"));
                }
            }
            (_, Some(_)) => {
                let asked: Option<String> = query(
                    &self.sentinel_url(),
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(private_sentinel::SERVICE),
                )
                .await;
                if asked.is_some() {
                    self.injected.sentinel_failovers += 1;
                    self.failed_over(Failover::of_all(at, "SENTINEL FAILOVER"));
                }
            }
            _ => {}
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        Ok(())
    }

    fn failed_over(&mut self, failover: Failover) {
        self.injected.failovers.push(failover);
        // Room for the failover, the old master's return and its resync
        // (on a cluster, the next fault waits for the cluster to be ok
        // and the target's replica in sync anyway).
        let room = if self.stage.cluster.is_some() { 3 } else { 10 };
        self.failover.next_allowed = Instant::now() + Duration::from_secs(room);
    }

    /// SIGSTOP a random sentinel for 2 to 5 s (past its peers'
    /// down-after: they see it down; its clients see nothing).
    fn freeze_sentinel(&mut self, at: u64) {
        let index = self.rng.below(private_sentinel::SENTINELS as u64) as usize;
        let pid = self
            .stage
            .sentinel
            .as_ref()
            .and_then(|d| lock_deployment(d).sentinel_pid(index));
        let Some(pid) = pid else { return };
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
        let thaw = Instant::now() + Duration::from_millis(2000 + self.rng.below(3000));
        self.failover.sentinel_resume = Some((index, pid, thaw));
        self.failover.sentinel_frozen_at = Some(Instant::now());
        self.injected.sentinel_pauses += 1;
        self.injected.hits.push((at, 0));
    }

    /// A sentinel that is not frozen, for the orchestrator's questions.
    fn sentinel_url(&self) -> String {
        let frozen = self.failover.sentinel_resume.map(|(index, _, _)| index);
        self.stage
            .sentinel
            .as_ref()
            .map(|d| lock_deployment(d).sentinel_url_except(frozen))
            .unwrap_or_default()
    }

    /// The master's port, when a failover fault may hit now: none under
    /// way, and the replica in sync.
    async fn failover_target(&mut self) -> Option<u16> {
        if self.failover.rejoin.is_some()
            || self.failover.resume.is_some()
            || Instant::now() < self.failover.next_allowed
        {
            return None;
        }
        let port = self.master_port().await?;
        let url = self
            .stage
            .sentinel
            .as_ref()
            .and_then(|d| lock_deployment(d).node_url(port))?;
        let info: String = query(&url, redis::cmd("INFO").arg("replication")).await?;
        let synced = info.contains("role:master")
            && info
                .lines()
                .any(|l| l.starts_with("slave0:") && l.contains("state=online"));
        synced.then_some(port)
    }

    /// The master's port, as the first sentinel names it.
    async fn master_port(&self) -> Option<u16> {
        let named: (String, u16) = query(
            &self.sentinel_url(),
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(private_sentinel::SERVICE),
        )
        .await?;
        Some(named.1)
    }

    /// SIGCONT a paused master when due; start a killed one again, as a
    /// replica, once the sentinels named another master.
    async fn tend_failovers(&mut self) -> Result<(), Failure> {
        if let Some((pid, at)) = self.failover.resume {
            if Instant::now() >= at {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
                self.failover.resume = None;
            }
        }
        if let Some((_, pid, at)) = self.failover.sentinel_resume {
            if Instant::now() >= at {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
                self.failover.sentinel_resume = None;
            }
        }
        if self.stage.cluster.is_some() {
            return self.tend_cluster().await;
        }
        let Some(port) = self.failover.rejoin else {
            return Ok(());
        };
        let Some(master) = self.master_port().await else {
            return Ok(());
        };
        if master == port {
            let since = *self
                .failover
                .rejoin_reported
                .get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(30) {
                self.failover.rejoin_reported = Some(Instant::now());
                self.report_stuck_failover(port).await;
            }
            return Ok(());
        }
        self.failover.rejoin_reported = None;
        if let Some(deployment) = &self.stage.sentinel {
            let deployment = Arc::clone(deployment);
            let _ = tokio::task::spawn_blocking(move || {
                lock_deployment(&deployment).rejoin(port, master)
            })
            .await;
        }
        self.failover.rejoin = None;
        Ok(())
    }

    /// Cluster: start a killed master again (as a replica) once another
    /// master serves its slot, and take the next step of a migration.
    async fn tend_cluster(&mut self) -> Result<(), Failure> {
        if let (Some((port, slot)), Some(cluster)) =
            (self.failover.cluster_rejoin, &self.stage.cluster)
        {
            let served_elsewhere = on_cluster(cluster, move |c| {
                Ok(c.master_of(slot).is_ok_and(|master| master != port))
            })
            .await
            .unwrap_or(false);
            if served_elsewhere {
                on_cluster(cluster, move |c| c.restart(port))
                    .await
                    .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
                self.failover.cluster_rejoin = None;
            }
        }
        if self
            .failover
            .migration
            .as_ref()
            .is_some_and(|m| Instant::now() >= m.next)
        {
            self.migrate_step(false).await?;
        }
        Ok(())
    }

    /// The next step of the migration under way: move the keys, then
    /// `SETSLOT NODE`. A step that fails is tried again half a second
    /// later (`now`: at once); after 20 failures the run stops.
    async fn migrate_step(&mut self, now: bool) -> Result<(), Failure> {
        let (Some(step), Some(cluster)) = (self.failover.migration.as_mut(), &self.stage.cluster)
        else {
            return Ok(());
        };
        let (slot, from, to, moved) = (step.slot, step.from, step.to, step.moved);
        let result = on_cluster(cluster, move |c| {
            if moved {
                c.finish_migration(slot, from, to)
            } else {
                c.move_keys(slot, from, to)
            }
        })
        .await;
        match result {
            Ok(()) if moved => {
                self.failover.migration = None;
                self.failover.next_allowed = Instant::now() + Duration::from_secs(3);
            }
            Ok(()) => {
                step.moved = true;
                step.next = Instant::now() + Duration::from_millis(200 + self.rng.below(400));
            }
            Err(e) => {
                step.failures += 1;
                if step.failures >= 20 {
                    return Err(Failure::new(
                        exit::UNAVAILABLE,
                        format!("migrating slot {slot} from :{from} to :{to}: {e}"),
                    ));
                }
                if !now {
                    step.next = Instant::now() + Duration::from_millis(500);
                }
            }
        }
        Ok(())
    }

    /// Cluster: SIGKILL or SIGSTOP a worker, or (when no failover or
    /// migration is under way, the cluster is ok and the target master's
    /// replica in sync) hit the master serving a random lock: `CLUSTER
    /// FAILOVER` on its replica, SIGKILL it, SIGSTOP it for three node
    /// timeouts, or start migrating the lock's slot to another master
    /// (keys moved and the slot handed over in later steps, while the
    /// workers hold and wait).
    async fn inject_cluster_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
        victim: usize,
        at: u64,
    ) -> Result<(), Failure> {
        // A third of the faults hit a worker; the others the cluster, of
        // a kind drawn among those injected least so far (a short run
        // sees each kind it has time for).
        let mut kind = self.rng.below(6);
        if kind >= 2 {
            let counts = [
                self.injected.cluster_failovers,
                self.injected.master_kills,
                self.injected.master_pauses,
                self.injected.migrations,
            ];
            let least = counts.iter().min().copied().unwrap_or(0);
            let kinds: Vec<u64> = (2..6)
                .filter(|k| counts[*k as usize - 2] == least)
                .collect();
            kind = kinds[self.rng.below(kinds.len() as u64) as usize];
        }
        let target = if kind >= 2 {
            self.cluster_target().await
        } else {
            None
        };
        if kind >= 2 && target.is_none() {
            kind = self.rng.below(2);
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        let Some(cluster) = self.stage.cluster.clone() else {
            return Ok(());
        };
        let Some(target) = target else {
            self.injected.hits.push((at, workers.pid(victim)));
            if kind == 0 {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            } else {
                self.pause(workers, victim).await;
            }
            return Ok(());
        };
        let ClusterTarget {
            master,
            replica,
            slot,
            locks,
            to,
        } = target;
        let failover = |kind: &str| Failover {
            at,
            kind: kind.to_owned(),
            locks: locks.clone(),
        };
        match kind {
            2 => {
                if on_cluster(&cluster, move |c| c.failover(replica))
                    .await
                    .is_ok()
                {
                    self.injected.cluster_failovers += 1;
                    self.failed_over(failover("CLUSTER FAILOVER"));
                }
            }
            3 => {
                on_cluster(&cluster, move |c| {
                    c.kill(master);
                    Ok(())
                })
                .await
                .map_err(|e| Failure::new(exit::SOFTWARE, e))?;
                self.failover.cluster_rejoin = Some((master, slot));
                self.injected.master_kills += 1;
                self.failed_over(failover("SIGKILL of a master"));
            }
            4 => {
                let pid = lock_cluster(&cluster).pid(master);
                if let Some(pid) = pid {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
                    // Past the node timeout: the replica takes over, and the
                    // old master comes back to find itself demoted.
                    self.failover.resume =
                        Some((pid, Instant::now() + private_cluster::NODE_TIMEOUT * 3));
                    self.injected.master_pauses += 1;
                    self.failed_over(failover("SIGSTOP of a master"));
                }
            }
            _ => {
                let begun = on_cluster(&cluster, move |c| c.begin_migration(slot, to)).await;
                if let Ok(from) = begun {
                    self.failover.migration = Some(Migration {
                        slot,
                        from,
                        to,
                        moved: false,
                        next: Instant::now() + Duration::from_millis(200 + self.rng.below(400)),
                        failures: 0,
                    });
                    self.injected.migrations += 1;
                }
            }
        }
        // A fault of the server: every worker may feel it.
        self.injected.hits.push((at, 0));
        Ok(())
    }

    /// The master serving a random lock, when a fault may hit it now: no
    /// failover, rejoin or migration under way, the cluster ok, and the
    /// master's replica in sync.
    async fn cluster_target(&mut self) -> Option<ClusterTarget> {
        if self.failover.cluster_rejoin.is_some()
            || self.failover.resume.is_some()
            || self.failover.migration.is_some()
            || Instant::now() < self.failover.next_allowed
        {
            return None;
        }
        let cluster = self.stage.cluster.as_ref()?;
        let slots = self.stage.slots.clone();
        let (_, slot) = *slots.get(self.rng.below(slots.len() as u64) as usize)?;
        let pick = self.rng.next();
        on_cluster(cluster, move |c| {
            c.healthy()?;
            let master = c.master_of(slot)?;
            let replica = c
                .synced_replica(master)?
                .ok_or_else(|| format!(":{master} has no replica in sync"))?;
            let others: Vec<u16> = c.masters()?.into_iter().filter(|p| *p != master).collect();
            let to = *others
                .get((pick % others.len().max(1) as u64) as usize)
                .ok_or("no other master")?;
            let rows = c.rows()?;
            let served = |s: u16| rows.iter().any(|r| r.port == master && r.serves(s));
            let locks = slots
                .iter()
                .filter(|(_, s)| served(*s))
                .map(|(name, _)| name.clone())
                .collect();
            Ok(ClusterTarget {
                master,
                replica,
                slot,
                locks,
                to,
            })
        })
        .await
        .ok()
    }

    /// On stderr: what each sentinel and data node says, while the
    /// sentinels still name the master killed on `port` (30 s or more).
    async fn report_stuck_failover(&self, port: u16) {
        let Some(deployment) = &self.stage.sentinel else {
            return;
        };
        let (sentinels, nodes) = lock_deployment(deployment).all_urls();
        eprintln!("torture: the sentinels still name the killed master :{port} after 30 s or more");
        let wanted = [
            "flags",
            "num-slaves",
            "num-other-sentinels",
            "failover-state",
            "leader",
            "config-epoch",
        ];
        for url in sentinels {
            let view: Option<Vec<String>> = query(
                &url,
                redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(private_sentinel::SERVICE),
            )
            .await;
            let fields: Vec<String> = view
                .unwrap_or_default()
                .chunks(2)
                .filter(|pair| pair.len() == 2 && wanted.contains(&pair[0].as_str()))
                .map(|pair| format!("{}={}", pair[0], pair[1]))
                .collect();
            let replicas: Option<redis::Value> = query(
                &url,
                redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(private_sentinel::SERVICE),
            )
            .await;
            eprintln!("torture:   sentinel {url}: {fields:?}; replicas {replicas:?}");
        }
        for url in nodes {
            let info: Option<String> = query(&url, redis::cmd("INFO").arg("replication")).await;
            let lines: Vec<&str> = info
                .as_deref()
                .unwrap_or("(no answer)")
                .lines()
                .filter(|l| !l.starts_with("master_repl") && !l.starts_with("repl_backlog"))
                .collect();
            eprintln!("torture:   node {url}: {}", lines.join(" "));
        }
    }

    /// SIGSTOP worker `victim` past its lease, sampling the queue
    /// meanwhile, then SIGCONT it.
    async fn pause(&mut self, workers: &Workers<'_>, victim: usize) {
        workers.signal(victim, Signal::SIGSTOP);
        self.injected.pauses += 1;
        let until = Instant::now() + self.plan.pause_for;
        while Instant::now() < until {
            self.sample_queue().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        workers.signal(victim, Signal::SIGCONT);
    }

    /// A script that keeps Redis busy for 300 ms, in the background.
    /// A hostile client with PUBLISH rights floods every channel anyone
    /// listens on (waiters' wake-up channels, clients' revocation
    /// channels) with junk for 2 s, as fast as one pipelined connection
    /// goes, straight to the server.
    async fn publish_flood(&mut self) -> Result<(), Failure> {
        let mut flood_conn = raw_connection(&self.stage.url).await?;
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut flood_conn)
            .await
            .unwrap_or_default();
        if channels.is_empty() {
            return Ok(());
        }
        tokio::spawn(async move {
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                let mut pipe = redis::pipe();
                for channel in &channels {
                    for _ in 0..8 {
                        pipe.cmd("PUBLISH").arg(channel).arg("flood").ignore();
                    }
                }
                if pipe.query_async::<()>(&mut flood_conn).await.is_err() {
                    return;
                }
            }
        });
        Ok(())
    }

    async fn busy_script(&mut self) -> Result<(), Failure> {
        let mut busy_conn = raw_connection(&self.stage.url).await?;
        tokio::spawn(async move {
            let script = "local t = redis.call('time') local e = t[1] * 1000000 + t[2] + 300000 \
                          while true do local n = redis.call('time') \
                          if n[1] * 1000000 + n[2] > e then return 1 end end";
            let _: redis::RedisResult<i64> = redis::cmd("EVAL")
                .arg(script)
                .arg(0)
                .query_async(&mut busy_conn)
                .await;
        });
        Ok(())
    }
}

/// One command on a fresh connection, at most 2 s; `None` on any error.
async fn query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> Option<T> {
    let client = redis::Client::open(url).ok()?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()?;
    cmd.query_async(&mut conn).await.ok()
}

/// The run's history as the checker takes it.
struct History {
    events: Vec<Event>,
    /// Each fault once per client it hit.
    faults: Vec<history::Fault>,
}

/// Every event the workers reported, and each fault attributed to the
/// clients it hit: a worker's own client (named by its pid), or every
/// client for a fault of the network or the server (pid 0).
fn collect(reports: &Reports, hits: &[(u64, u32)]) -> History {
    let events = reports.events();
    let clients: HashMap<u32, String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Client { pid, id } => Some((*pid, id.clone())),
            _ => None,
        })
        .collect();
    let faults = hits
        .iter()
        .flat_map(|&(at, pid)| {
            let hit: Vec<String> = if pid == 0 {
                clients.values().cloned().collect()
            } else {
                vec![clients.get(&pid).cloned().unwrap_or_default()]
            };
            hit.into_iter()
                .map(move |client| history::Fault { at, client })
        })
        .collect();
    History { events, faults }
}

/// What the checks found.
struct Verdict {
    report: Report,
    /// Holds with the forged token: granted by a message, not the server.
    forged_holds: usize,
    /// How long each failover stopped its locks (µs), by kind.
    recovery: Vec<(String, u64)>,
    /// Holds told they lost the lock: all, and those at a failover.
    lost: (usize, usize),
    /// The longest stretch without a grant (µs), and when it began (µs
    /// into the run).
    stall: (u64, u64),
}

impl Verdict {
    fn violations(&self) -> usize {
        self.report.violations() + self.forged_holds
    }
}

fn check(
    plan: &Plan,
    history: &History,
    queues: HashMap<String, QueueLog>,
    failovers: &Failovers,
) -> Verdict {
    let report = history::check(
        &history.events,
        &queues,
        plan.protocol == Protocol::Native,
        &history.faults,
        plan.bounds(),
        failovers,
    );
    let forged_holds = history
        .events
        .iter()
        .filter(
            |e| matches!(e, Event::Hold(Hold { token: Some(t), .. }) if *t >= 9_000_000_000_000_000_000),
        )
        .count();
    Verdict {
        report,
        forged_holds,
        recovery: failovers.recovery(&history.events),
        lost: failovers.lost(&history.events),
        stall: (0, 0),
    }
}

/// Per kind of failover: how many were measured, the median and the
/// longest recovery.
fn recovery_summary(recovery: &[(String, u64)]) -> String {
    let mut by_kind: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (kind, us) in recovery {
        by_kind.entry(kind.as_str()).or_default().push(*us);
    }
    by_kind
        .into_iter()
        .map(|(kind, mut times)| {
            times.sort_unstable();
            let ms = |us: u64| format!("{:.2}s", us as f64 / 1e6);
            format!(
                "{kind}: {} measured, median {}, max {}",
                times.len(),
                ms(times[times.len() / 2]),
                ms(times[times.len() - 1])
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The summary on stdout; `early`: why and when the run stopped before
/// its end.
fn print_summary(
    plan: &Plan,
    history: &History,
    injected: &Injected,
    verdict: &Verdict,
    elapsed: Duration,
    early: Option<&str>,
) {
    if let Some(early) = early {
        println!("stopped early {early} (the checks cover the run so far)");
    }
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for event in &history.events {
        if let Event::NoGrant { outcome, .. } = event {
            *outcomes.entry(outcome.as_str()).or_default() += 1;
        }
    }
    let report = &verdict.report;
    println!(
        "operations: {} holds, {} timeouts, {} cancellations, {} errors in {:.1}s",
        report.holds,
        outcomes.get("timeout").unwrap_or(&0),
        outcomes.get("cancelled").unwrap_or(&0),
        outcomes.get("error").unwrap_or(&0),
        elapsed.as_secs_f64()
    );
    let Injected {
        kills,
        pauses,
        delays,
        silent,
        cuts,
        busy,
        forged,
        floods,
        flushes,
        master_kills,
        master_pauses,
        sentinel_failovers,
        sentinel_pauses,
        cluster_failovers,
        migrations,
        ..
    } = injected;
    println!(
        "faults injected: {kills} SIGKILL, {pauses} SIGSTOP past the lease, {delays} reply delays, \
         {silent} silent pub/sub deaths, {cuts} connection cuts, {busy} BUSY scripts, {floods} PUBLISH \
         floods, {flushes} SCRIPT FLUSHes, {forged} forged grants"
    );
    let overlaps_at_failovers = format!(
        "overlaps that started at a failover (asynchronous replication, not counted as \
         violations): {}",
        report.failover_overlaps
    );
    match plan.topology {
        Topology::Standalone => {}
        Topology::Sentinel => println!(
            "failovers: {master_kills} SIGKILL of the master, {master_pauses} SIGSTOP of the \
             master, {sentinel_failovers} SENTINEL FAILOVER; {sentinel_pauses} sentinels \
             frozen; {overlaps_at_failovers}"
        ),
        Topology::Cluster => println!(
            "failovers: {cluster_failovers} CLUSTER FAILOVER, {master_kills} SIGKILL of a \
             master, {master_pauses} SIGSTOP of a master; {migrations} slot migrations of a \
             busy lock; {overlaps_at_failovers}"
        ),
    }
    if !verdict.recovery.is_empty() {
        println!(
            "recovery (longest wait for a grant of a lock the failover hit, from the fault): {}",
            recovery_summary(&verdict.recovery)
        );
    }
    let (lost, lost_at_failovers) = verdict.lost;
    println!(
        "checks: overlaps {}, FIFO {} (of {} queue-order pairs), requeued live waiters {}{}, tokens {}, liveness {}",
        report.overlaps,
        report.fifo_violations,
        report.fifo_pairs_checked,
        report.requeued,
        if report.strict_order {
            ""
        } else {
            " (allowed: Redisson drops waiters past their slot)"
        },
        if plan.protocol == Protocol::Native {
            report.token_violations.to_string()
        } else {
            "n/a".to_owned()
        },
        report.liveness_violations
    );
    for example in &report.examples {
        println!("  {example}");
    }
    println!(
        "holds told they lost the lock (is_held() false at their end): {lost}{}",
        if plan.topology == Topology::Standalone {
            String::new()
        } else {
            format!(", {lost_at_failovers} of them at a failover")
        }
    );
    println!(
        "longest stretch without a grant of any lock: {:.1}s, from {:.0}s into the run",
        verdict.stall.0 as f64 / 1e6,
        verdict.stall.1 as f64 / 1e6
    );
    println!("forged tokens held: {}", verdict.forged_holds);
    println!("violations: {}", verdict.violations());
}

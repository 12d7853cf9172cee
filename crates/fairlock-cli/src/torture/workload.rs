//! The workers: each process runs tasks taking the locks and printing one
//! event per line; the orchestrator starts, replaces and winds them down,
//! and reads their output.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{AcquireOptions, ClientConfig, LockClient, LockGuard, Owner, PermitLease};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis::aio::ConnectionManager;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;

use crate::history::{Event, Hold, Permits as HeldPermits, Side, combo};
use crate::{Cli, Failure, LockSettings, duration, exit, failure};

use super::combos::Round;
use super::stage::Stage;
use super::{
    ELECT, FAIR, MAX_HOLD_MS, PLAIN, Plan, RW, Rng, SEM, SEM_PERMITS, StopSignals, server_time_us,
};

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
    /// The combinations to draw besides ordinary rounds (`history::combo`
    /// names; none by default).
    #[arg(long, value_delimiter = ',')]
    combos: Vec<String>,
    /// Replicas that must acknowledge every acquisition and release.
    #[arg(long, default_value_t = 0)]
    min_replicas: u32,
    /// Take the read-write lock [`RW`] too (see [`read_write_round`]).
    #[arg(long)]
    read_write: bool,
    /// Take the semaphore [`SEM`] too (see [`semaphore_round`]).
    #[arg(long)]
    semaphore: bool,
    /// Campaign in the election [`ELECT`] too (see [`election_round`]).
    #[arg(long)]
    election: bool,
    #[command(flatten)]
    settings: LockSettings,
}

/// How often a round draws a combination (percent), when any is enabled.
const COMBINATION_PERCENT: u64 = 40;
/// How often the semaphore's stale meta is drawn when it comes up (in
/// eighths): its round waits out two short leases (about half a second,
/// where other rounds take tens of ms), so it is drawn a quarter as often.
const STALE_META_EIGHTHS: u64 = 2;
/// How often an ordinary round takes the read-write lock (percent), when
/// the protocol has one.
const READ_WRITE_PERCENT: u64 = 20;
/// How often an ordinary round (not a read-write one) takes the semaphore
/// (percent).
const SEMAPHORE_PERCENT: u64 = 20;
/// How often an ordinary round (not a read-write or semaphore one)
/// campaigns in the election (percent), under `native`.
const ELECTION_PERCENT: u64 = 10;
/// How long a worker with `--min-replicas` waits for the replicas.
const REPLICA_TIMEOUT: Duration = Duration::from_millis(500);
/// How long workers get, after the run, to release their locks and exit.
pub(super) const WIND_DOWN: Duration = Duration::from_secs(10);
/// How long the rest of the workers' output may take to be read once they
/// exited (it ends with them: nothing else holds their stdout).
pub(super) const DRAIN: Duration = Duration::from_secs(5);

/// A worker task's connection for reading the server's clock. It goes
/// through the fault proxy, and a cut breaks a multiplexed connection for
/// good (every later call fails): this one connects again.
pub(super) async fn time_connection(url: &str) -> Result<ConnectionManager, Failure> {
    crate::redis_client(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad URL: {e}")))?
        .get_connection_manager()
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot reach Redis: {e}")))
}

/// A worker's stdout, shared by its tasks: one whole line per event.
#[derive(Clone)]
pub(super) struct EventOut(Arc<tokio::sync::Mutex<tokio::io::Stdout>>);

impl EventOut {
    fn stdout() -> Self {
        Self(Arc::new(tokio::sync::Mutex::new(tokio::io::stdout())))
    }

    /// Write `event` and flush it: once this returns, the line is in the
    /// pipe, even if the process is killed next. Errors (the orchestrator
    /// is gone) are ignored.
    pub(super) async fn write(&self, event: &Event) {
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
    let mut config = cli.config(
        &url,
        &cli.settings(&args.settings),
        ClientConfig::DEFAULT_LEASE,
    )?;
    if args.min_replicas > 0 {
        config = config.min_replicas(args.min_replicas, REPLICA_TIMEOUT);
    }
    let client = LockClient::with_config(config)
        .await
        .map_err(failure::connect_failure)?;
    let out = EventOut::stdout();
    out.write(&Event::Client {
        pid: std::process::id(),
        id: client.id().to_owned(),
        min_replicas: args.min_replicas,
    })
    .await;
    let deadline = Instant::now() + args.duration;
    let fair_locks: Arc<[String]> = args.fair_locks.clone().into();
    let combos: Arc<[String]> = args.combos.clone().into();
    let protocol = cli.protocol;
    let (read_write, semaphore, election) = (args.read_write, args.semaphore, args.election);
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let fair_locks = Arc::clone(&fair_locks);
        let combos = Arc::clone(&combos);
        let client = client.clone();
        let out = out.clone();
        let mut conn = time_connection(&clock).await?;
        let mut rng = Rng(args.seed.wrapping_mul(31).wrapping_add(u64::from(t)) | 1);
        // Reused by some non-fair rounds: a new hold of an owner whose
        // earlier hold was lost (a pause) must not be touched by the old guard.
        let owner = client.new_owner();
        // Shared by the tasks a shared-owner round starts.
        let shared = client.new_owner();
        tasks.push(tokio::spawn(async move {
            let mut rounds = 0u64;
            while Instant::now() < deadline {
                rounds += 1;
                let drawn = (!combos.is_empty() && rng.below(100) < COMBINATION_PERCENT)
                    .then(|| draw_combination(&combos, &mut rng));
                if let Some(combo) = &drawn {
                    out.write(&Event::Drawn {
                        combo: combo.clone(),
                    })
                    .await;
                }
                // A round still waiting at the deadline is dropped (the
                // waiter leaves its queue): the run ends on time.
                let round = async {
                    match &drawn {
                        None if read_write && rng.below(100) < READ_WRITE_PERCENT => {
                            read_write_round(&client, &mut conn, &mut rng).await
                        }
                        None if semaphore && rng.below(100) < SEMAPHORE_PERCENT => {
                            semaphore_round(&client, &mut conn, &mut rng).await
                        }
                        None if election && rng.below(100) < ELECTION_PERCENT => {
                            election_round(&client, &mut conn, &mut rng).await
                        }
                        None => one_round(&client, &mut conn, &mut rng, &owner, &fair_locks)
                            .await
                            .map(|event| vec![event]),
                        Some(combo) => {
                            let mut round = Round {
                                client: &client,
                                conn: &mut conn,
                                rng: &mut rng,
                                fair_locks: &fair_locks,
                                protocol,
                                shared: &shared,
                                fresh_name: format!(
                                    "torture-data-{}-{t}-{rounds}",
                                    std::process::id()
                                ),
                                out: &out,
                            };
                            round.run(combo).await
                        }
                    }
                };
                let events = match tokio::time::timeout_at(deadline.into(), round).await {
                    Ok(Ok(events)) => events,
                    Ok(Err(_)) => continue,
                    Err(_) => break,
                };
                for event in &events {
                    out.write(event).await;
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    client.shutdown().await;
    Ok(0)
}

/// One of `combos` at random, the semaphore's stale meta less often (see
/// [`STALE_META_EIGHTHS`]).
fn draw_combination(combos: &[String], rng: &mut Rng) -> String {
    loop {
        let combo = &combos[rng.below(combos.len() as u64) as usize];
        if combo != combo::SEMAPHORE_STALE_META
            || combos.len() == 1
            || rng.below(8) < STALE_META_EIGHTHS
        {
            return combo.clone();
        }
    }
}

pub(super) async fn one_round(
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
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: None,
    });
    let _ = guard.unlock().await;
    Ok(event)
}

/// Run `acquire` of `lock`, cancelled (15 times in 100) at a random moment
/// within 50 ms: what it got, or the [`Event::NoGrant`] saying why not
/// ("cancelled", "timeout", "error").
async fn maybe_cancelled<T>(
    rng: &mut Rng,
    lock: &str,
    acquire: impl std::future::Future<Output = fairlock::Result<Option<T>>>,
) -> Result<T, Event> {
    let cancel = rng.below(100) < 15;
    let limit = Duration::from_millis(rng.below(50));
    let outcome = if cancel {
        tokio::time::timeout(limit, acquire)
            .await
            .unwrap_or(Ok(None))
    } else {
        acquire.await
    };
    let outcome = match outcome {
        Ok(Some(got)) => return Ok(got),
        Ok(None) if cancel => "cancelled",
        Ok(None) => "timeout",
        Err(_) => "error",
    };
    Err(Event::NoGrant {
        lock: lock.into(),
        outcome: outcome.into(),
    })
}

/// A round on the read-write lock [`RW`]: a read hold (6 in 10), a write
/// hold (3 in 10), or a downgrade (1 in 10): a write hold whose owner takes
/// the read side too, releases the write hold and reads on, so that other
/// readers may join it. One event per hold, with its side; a wait that
/// fails or is cancelled (15 in 100, at a random moment) is a
/// [`Event::NoGrant`].
async fn read_write_round(
    client: &LockClient,
    conn: &mut ConnectionManager,
    rng: &mut Rng,
) -> Result<Vec<Event>, Failure> {
    let Ok(rw) = client.read_write_lock(RW) else {
        return Ok(Vec::new());
    };
    let draw = rng.below(10);
    let (handle, side) = if draw < 6 {
        (rw.read(), Side::Read)
    } else {
        (rw.write(), Side::Write)
    };
    let owner = client.new_owner();
    let requested = server_time_us(conn).await?;
    let opts = options(rng).owner(owner.clone());
    let guard = match maybe_cancelled(rng, RW, handle.acquire(opts)).await {
        Ok(guard) => guard,
        Err(no_grant) => return Ok(vec![no_grant]),
    };
    let hold = |guard: &LockGuard, requested: u64, start: u64, end: u64, side: Side| {
        Event::Hold(Hold {
            lock: RW.into(),
            owner: guard.owner().to_string(),
            token: guard.token(),
            requested,
            start,
            end,
            valid: guard.is_held(),
            combo: String::new(),
            reentry: false,
            lease_ms: None,
            mode: Some(side),
            permits: None,
        })
    };
    let start = server_time_us(conn).await?;
    tokio::time::sleep(Duration::from_millis(rng.below(MAX_HOLD_MS))).await;
    let mut events = Vec::new();
    if draw == 9 {
        // The downgrade: the writer reads too, then lets the write hold go.
        let asked = server_time_us(conn).await?;
        let read = rw.read().acquire(AcquireOptions::new().owner(owner)).await;
        let read_start = server_time_us(conn).await?;
        let write_end = server_time_us(conn).await?;
        events.push(hold(&guard, requested, start, write_end, side));
        let _ = guard.unlock().await;
        let Ok(Some(read)) = read else {
            return Ok(events);
        };
        tokio::time::sleep(Duration::from_millis(rng.below(MAX_HOLD_MS))).await;
        let end = server_time_us(conn).await?;
        // A read hold of an owner that held the write side: a re-entry of
        // that owner, not a grant.
        let mut event = hold(&read, asked, read_start, end, Side::Read);
        if let Event::Hold(h) = &mut event {
            h.reentry = true;
        }
        events.push(event);
        let _ = read.unlock().await;
        return Ok(events);
    }
    let end = server_time_us(conn).await?;
    events.push(hold(&guard, requested, start, end, side));
    let _ = guard.unlock().await;
    Ok(events)
}

/// A round on the semaphore [`SEM`] of [`SEM_PERMITS`] permits: 1 to all
/// of them, held a random time (its watchdog's lease), then released. A
/// wait that fails, times out or is cancelled (15 in 100, at a random
/// moment) is a [`Event::NoGrant`]. The event's owner is the first permit
/// id (redisson) or the holder id (native); its token the grant's (native).
async fn semaphore_round(
    client: &LockClient,
    conn: &mut ConnectionManager,
    rng: &mut Rng,
) -> Result<Vec<Event>, Failure> {
    let Ok(semaphore) = client.semaphore(SEM, SEM_PERMITS) else {
        return Ok(Vec::new());
    };
    let n = 1 + rng.below(u64::from(SEM_PERMITS)) as u32;
    let requested = server_time_us(conn).await?;
    let wait = (rng.below(100) < 25).then(|| Duration::from_millis(20 + rng.below(400)));
    let acquire = semaphore.acquire_with(n, wait, PermitLease::Watchdog);
    let permits = match maybe_cancelled(rng, SEM, acquire).await {
        Ok(permits) => permits,
        Err(no_grant) => return Ok(vec![no_grant]),
    };
    let start = server_time_us(conn).await?;
    tokio::time::sleep(Duration::from_millis(rng.below(MAX_HOLD_MS))).await;
    let end = server_time_us(conn).await?;
    let event = Event::Hold(Hold {
        lock: SEM.into(),
        owner: permits.ids().first().cloned().unwrap_or_default(),
        token: permits.token(),
        requested,
        start,
        end,
        valid: permits.is_held(),
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: Some(HeldPermits {
            n,
            total: SEM_PERMITS,
        }),
    });
    let _ = permits.release().await;
    Ok(vec![event])
}

/// A round in the election [`ELECT`] (native): campaign (a wait that
/// fails, times out or is cancelled, 15 in 100 at a random moment, is a
/// [`Event::NoGrant`]), lead a random time with the value proclaimed once,
/// resign. The leadership is a hold of [`ELECT`] whose token is its term:
/// the checker finds two leaders believing at once (an overlap) and terms
/// out of order (its tokens); `valid` is whether it still believed it led
/// at the end.
async fn election_round(
    client: &LockClient,
    conn: &mut ConnectionManager,
    rng: &mut Rng,
) -> Result<Vec<Event>, Failure> {
    let Ok(election) = client.election(ELECT) else {
        return Ok(Vec::new());
    };
    let requested = server_time_us(conn).await?;
    let wait = (rng.below(100) < 25).then(|| Duration::from_millis(20 + rng.below(400)));
    let campaign = async {
        match wait {
            Some(wait) => election.try_campaign_for("candidate", wait).await,
            None => election.campaign("candidate").await.map(Some),
        }
    };
    let leadership = match maybe_cancelled(rng, ELECT, campaign).await {
        Ok(leadership) => leadership,
        Err(no_grant) => return Ok(vec![no_grant]),
    };
    let start = server_time_us(conn).await?;
    tokio::time::sleep(Duration::from_millis(rng.below(MAX_HOLD_MS))).await;
    let _ = leadership.proclaim("leading").await;
    let end = server_time_us(conn).await?;
    let event = Event::Hold(Hold {
        lock: ELECT.into(),
        owner: leadership.owner().to_string(),
        token: Some(leadership.term()),
        requested,
        start,
        end,
        valid: leadership.is_leader(),
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: None,
    });
    let _ = leadership.resign().await;
    Ok(vec![event])
}

pub(super) fn options(rng: &mut Rng) -> AcquireOptions {
    if rng.below(100) < 25 {
        AcquireOptions::new().wait(Duration::from_millis(20 + rng.below(400)))
    } else {
        AcquireOptions::new()
    }
}

/// What the workers reported so far: every event, and how many holds.
#[derive(Default)]
pub(super) struct Reports {
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

    pub(super) fn holds(&self) -> u64 {
        self.holds.load(Ordering::Relaxed)
    }

    pub(super) fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Read a worker's output to its end, every line into `reports`. Bytes
/// that are not UTF-8 are replaced, not a reason to stop: the pipe is
/// drained until the worker closes it, so the worker never blocks on it.
pub(super) async fn read_reports(stdout: ChildStdout, reports: Arc<Reports>) {
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
pub(super) struct Worker {
    pid: u32,
    child: Child,
    reader: JoinHandle<()>,
}

/// The worker processes of a run. Each is killed if dropped (an early
/// return, a panic): none outlives the orchestrator's run.
pub(super) struct Workers<'a> {
    cli: &'a Cli,
    plan: &'a Plan,
    url: &'a str,
    clock: &'a str,
    fair_locks: String,
    pub(super) reports: Arc<Reports>,
    /// The seed of the latest worker; the next one gets the next seed.
    pub(super) seed: u64,
    running: Vec<Worker>,
    /// Workers killed as a fault (reaped): their output may still be read.
    killed: Vec<Worker>,
}

impl<'a> Workers<'a> {
    /// Start `plan.processes` workers for the whole run.
    pub(super) fn start(
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
            .args(["--combos", &self.plan.worker_combos().join(",")])
            .args(self.plan.read_write().then_some("--read-write"))
            .arg("--semaphore")
            .args((self.cli.protocol == fairlock::Protocol::Native).then_some("--election"))
            // Under Sentinel, failovers at handoffs meet clients that wait
            // for a replica after each acquisition and release (half the
            // workers).
            .args([
                "--min-replicas",
                if self.plan.combos.contains(&combo::FAILOVER_AT_HANDOFF) && rng.below(2) == 0 {
                    "1"
                } else {
                    "0"
                },
            ])
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

    pub(super) fn count(&self) -> usize {
        self.running.len()
    }

    pub(super) fn pid(&self, index: usize) -> u32 {
        self.running[index].pid
    }

    pub(super) fn signal(&self, index: usize, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid(index) as i32), signal);
    }

    /// SIGKILL worker `index`, start a fresh one in its place for what is
    /// `left` of the run, and reap the dead one.
    pub(super) async fn replace(&mut self, index: usize, left: Duration) -> Result<(), Failure> {
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
    pub(super) async fn wind_down(mut self, early: bool, stop: &StopSignals) {
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

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
//! a loopback proxy), or run a BUSY script. All along it publishes forged
//! grant messages to every queued waiter. Workers differ in their settings
//! (waiter ttl, lease), and their non-fair rounds sometimes reuse one owner
//! across acquisitions, so a hold lost to a pause is followed by a new one
//! of the same owner.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{AcquireOptions, LockClient, Owner, Protocol};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::history::{self, Bounds, Event, Hold, QueueLog};
use crate::private_redis::PrivateRedis;
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
    #[command(flatten)]
    settings: LockSettings,
}

#[derive(clap::Args, Debug)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    tasks: u16,
    #[arg(long, value_parser = duration::parse)]
    duration: Duration,
    #[arg(long)]
    seed: u64,
    #[command(flatten)]
    settings: LockSettings,
}

/// How often the progress line is written when stderr is not a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// How long workers get, after the run, to release their locks and exit.
const WIND_DOWN: Duration = Duration::from_secs(10);

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
async fn server_time_us(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, Failure> {
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

async fn raw_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, Failure> {
    redis::Client::open(url)
        .map_err(|e| Failure::new(exit::USAGE, format!("bad URL: {e}")))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("cannot reach Redis: {e}")))
}

/// One worker process: tasks taking the locks until the duration is over.
pub(crate) async fn worker(cli: &Cli, args: &WorkerArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &cli.settings(&args.settings)).await?;
    let out = Arc::new(Mutex::new(std::io::stdout()));
    {
        let hello = Event::Client {
            pid: std::process::id(),
            id: client.id().to_owned(),
        };
        let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "{}", hello.to_line());
        let _ = out.flush();
    }
    let deadline = Instant::now() + args.duration;
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let client = client.clone();
        let out = Arc::clone(&out);
        let mut conn = raw_connection(&url).await?;
        let mut rng = Rng(args.seed.wrapping_mul(31).wrapping_add(u64::from(t)) | 1);
        // Reused by some non-fair rounds: a new hold of an owner whose
        // earlier hold was lost (a pause) must not be touched by the old guard.
        let owner = client.new_owner();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                // A round still waiting at the deadline is dropped (the
                // waiter leaves its queue): the run ends on time.
                let round = one_round(&client, &mut conn, &mut rng, &owner);
                let event = match tokio::time::timeout_at(deadline.into(), round).await {
                    Ok(Ok(event)) => event,
                    Ok(Err(_)) => continue,
                    Err(_) => break,
                };
                let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(out, "{}", event.to_line());
                let _ = out.flush();
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
    conn: &mut redis::aio::MultiplexedConnection,
    rng: &mut Rng,
    owner: &Owner,
) -> Result<Event, Failure> {
    let fair = rng.below(10) < 7;
    let name = if fair { FAIR } else { PLAIN };
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

struct Worker {
    child: Child,
    reader: std::thread::JoinHandle<()>,
}

/// What the workers reported so far: every line, and the holds among them.
#[derive(Default)]
struct Reports {
    lines: Mutex<Vec<String>>,
    holds: AtomicU64,
}

fn spawn_worker(
    cli: &Cli,
    settings: &LockSettings,
    url: &str,
    tasks: u16,
    left: Duration,
    seed: u64,
    reports: &Arc<Reports>,
) -> Result<Worker, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot find myself: {e}")))?;
    // Workers differ in their settings, as clients of one lock do.
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9) | 1);
    let lease = lease(settings) * (1 + rng.below(2) as u32);
    let waiter_ttl = [
        settings.waiter_ttl(),
        Duration::from_secs(1),
        Duration::from_secs(2),
    ][rng.below(3) as usize];
    let mut child = Command::new(exe)
        .args(["--redis", url, "--protocol", cli.protocol.as_str()])
        .arg("torture-worker")
        .args(["--lease", &format!("{}ms", lease.as_millis())])
        .args(["--waiter-ttl", &format!("{}ms", waiter_ttl.as_millis())])
        .args([
            "--waiter-slot",
            &format!("{}ms", settings.waiter_slot().as_millis()),
        ])
        .args(["--tasks", &tasks.to_string()])
        .args(["--duration", &format!("{}ms", left.as_millis().max(1))])
        .args(["--seed", &seed.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot start a worker: {e}")))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Failure::new(exit::SOFTWARE, "worker without stdout"))?;
    let reports = Arc::clone(reports);
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if matches!(Event::parse(&line), Some(Event::Hold(_))) {
                reports.holds.fetch_add(1, Ordering::Relaxed);
            }
            reports
                .lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
        }
    });
    Ok(Worker { child, reader })
}

fn signal(worker: &Worker, sig: Signal) {
    let _ = kill(Pid::from_raw(worker.child.id() as i32), sig);
}

/// Workers stop by themselves at the deadline, then release their locks
/// and exit; together they get [`WIND_DOWN`]. One that is still running
/// after that is killed, and the reason is said.
async fn wind_down(workers: Vec<Worker>) {
    let until = Instant::now() + WIND_DOWN;
    let mut said = false;
    for mut worker in workers {
        loop {
            match worker.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < until => {
                    if !said && Instant::now() + WIND_DOWN / 2 > until {
                        eprintln!(
                            "torture: waiting for the workers to release their locks and exit"
                        );
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ => {
                    eprintln!(
                        "torture: worker {} did not exit within {} of the end (stuck releasing \
                         or reporting); killed it, its last holds may be missing",
                        worker.child.id(),
                        duration::format(WIND_DOWN)
                    );
                    let _ = worker.child.kill();
                    let _ = worker.child.wait();
                    break;
                }
            }
        }
        let _ = worker.reader.join();
    }
}

pub(crate) async fn run(cli: &Cli, args: &TortureArgs) -> Result<u8, Failure> {
    let (url, _server) = match cli.explicit_url() {
        Some(url) => (url, None),
        None => {
            let server = PrivateRedis::start().map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
            let url = server.url();
            (url, Some(server))
        }
    };
    let settings = cli.settings(&args.settings);
    let observer = cli
        .connect_with_lease(&url, &settings, lease(&settings))
        .await?;
    let mut conn = raw_connection(&url).await?;
    // A busy script answers BUSY to everyone else after 100 ms.
    let _: redis::RedisResult<()> = redis::cmd("CONFIG")
        .arg("SET")
        .arg("busy-reply-threshold")
        .arg("100")
        .query_async(&mut conn)
        .await;
    // Workers reach Redis through the fault proxy.
    let target = observer.config().address();
    let proxy = FaultProxy::start(target)
        .await
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot start the fault proxy: {e}")))?;
    let worker_url = if args.no_faults {
        url.clone()
    } else {
        proxy.url(&url)
    };
    for key in [FAIR, PLAIN] {
        let _ = observer.fair_lock(key)?.force_unlock().await;
    }
    println!(
        "torture: {} ({} protocol), {} processes x {} tasks, faults {}, lease {}",
        duration::format(args.duration),
        cli.protocol,
        args.processes,
        args.tasks,
        if args.no_faults { "off" } else { "on" },
        duration::format(lease(&settings)),
    );
    let reports = Arc::new(Reports::default());
    let started = Instant::now();
    let deadline = started + args.duration;
    let mut seed = u64::from(std::process::id()) << 16 | 1;
    let mut workers = Vec::new();
    for _ in 0..args.processes {
        seed += 1;
        workers.push(spawn_worker(
            cli,
            &settings,
            &worker_url,
            args.tasks,
            args.duration,
            seed,
            &reports,
        )?);
    }
    let mut rng = Rng(seed | 1);
    let lock = observer.fair_lock(FAIR)?;
    let mut queue = QueueLog::default();
    let mut faults = Vec::new();
    let (mut kills, mut pauses) = (0u32, 0u32);
    let (mut delays, mut silent, mut cuts, mut busy, mut forged) = (0u32, 0u32, 0u32, 0u32, 0u64);
    let mut next_forgery = Instant::now();
    let mut undelay_at: Option<Instant> = None;
    let channel_prefix = match cli.protocol {
        Protocol::Redisson => format!("redisson_lock__channel:{{{FAIR}}}"),
        _ => format!("fairlock:{{{FAIR}}}:wake"),
    };
    let mut next_fault = Instant::now() + Duration::from_millis(1500);
    let pause_for = lease(&settings) + Duration::from_millis(300);
    let mut status = LiveLine::stderr();
    let show_every = if status.in_place() {
        Duration::from_secs(1)
    } else {
        PROGRESS_EVERY
    };
    let mut next_status = started + show_every;
    while Instant::now() < deadline {
        if Instant::now() >= next_status {
            let faults = kills + pauses + delays + silent + cuts + busy;
            status.show(&format!(
                "torture: {} of {}, {} holds, {faults} faults so far",
                duration::format(Duration::from_secs(started.elapsed().as_secs())),
                duration::format(args.duration),
                reports.holds.load(Ordering::Relaxed),
            ));
            next_status += show_every;
        }
        if let Ok(info) = lock.inspect().await {
            let owners: Vec<String> = info.queue.into_iter().map(|w| w.owner).collect();
            if queue.snapshots.last() != Some(&owners) {
                queue.snapshots.push(owners);
            }
        }
        if undelay_at.is_some_and(|at| Instant::now() >= at) {
            proxy.delay_replies(Duration::ZERO);
            undelay_at = None;
        }
        // A hostile client with PUBLISH rights forges grants to every
        // queued waiter (a huge token: any holder with it is a violation).
        if !args.no_faults && Instant::now() >= next_forgery {
            let now_ms = server_time_us(&mut conn).await? / 1000;
            for owner in queue.snapshots.last().cloned().unwrap_or_default() {
                let forgery = format!(
                    "grant:9000000000000000000:{now_ms}:60000:{:040x}",
                    rng.next()
                );
                let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                    .arg(format!("{channel_prefix}:{owner}"))
                    .arg(forgery)
                    .query_async(&mut conn)
                    .await;
                forged += 1;
            }
            next_forgery = Instant::now() + Duration::from_millis(50);
        }
        if !args.no_faults && Instant::now() >= next_fault && deadline > Instant::now() + pause_for
        {
            let victim = rng.below(workers.len() as u64) as usize;
            let at = server_time_us(&mut conn).await?;
            let kind = rng.below(6);
            // Network and server faults hit every worker.
            faults.push((
                at,
                if kind < 2 {
                    workers[victim].child.id()
                } else {
                    0
                },
            ));
            if kind == 2 {
                proxy.delay_replies(Duration::from_millis(30 + rng.below(120)));
                undelay_at = Some(Instant::now() + Duration::from_secs(2));
                delays += 1;
            } else if kind == 3 {
                proxy.blackhole_pubsub();
                silent += 1;
            } else if kind == 4 {
                proxy.cut_all();
                cuts += 1;
            } else if kind == 5 {
                let mut busy_conn = raw_connection(&url).await?;
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
                busy += 1;
            } else if kind == 0 {
                signal(&workers[victim], Signal::SIGKILL);
                kills += 1;
                seed += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                let fresh = spawn_worker(
                    cli,
                    &settings,
                    &worker_url,
                    args.tasks,
                    left,
                    seed,
                    &reports,
                )?;
                let mut dead = std::mem::replace(&mut workers[victim], fresh);
                let _ = dead.child.wait();
            } else {
                signal(&workers[victim], Signal::SIGSTOP);
                pauses += 1;
                let until = Instant::now() + pause_for;
                while Instant::now() < until {
                    if let Ok(info) = lock.inspect().await {
                        let owners: Vec<String> = info.queue.into_iter().map(|w| w.owner).collect();
                        if queue.snapshots.last() != Some(&owners) {
                            queue.snapshots.push(owners);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                signal(&workers[victim], Signal::SIGCONT);
            }
            next_fault = Instant::now() + Duration::from_millis(1500 + rng.below(1500));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    status.clear();
    wind_down(workers).await;
    let lines = reports
        .lines
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let events: Vec<Event> = lines.iter().filter_map(|l| Event::parse(l)).collect();
    let clients: HashMap<u32, String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Client { pid, id } => Some((*pid, id.clone())),
            _ => None,
        })
        .collect();
    // A fault of the network or the server (pid 0) hits every client.
    let faults: Vec<history::Fault> = faults
        .into_iter()
        .flat_map(|(at, pid)| {
            let hit: Vec<String> = if pid == 0 {
                clients.values().cloned().collect()
            } else {
                vec![clients.get(&pid).cloned().unwrap_or_default()]
            };
            hit.into_iter()
                .map(move |client| history::Fault { at, client })
        })
        .collect();
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    for event in &events {
        if let Event::NoGrant { outcome, .. } = event {
            *outcomes.entry(outcome.clone()).or_default() += 1;
        }
    }
    let slot = if cli.protocol == Protocol::Redisson {
        settings.waiter_slot()
    } else {
        settings.waiter_ttl()
    };
    let bounds = Bounds {
        max_hold_us: MAX_HOLD_MS * 1000,
        handoff_us: 300_000,
        // Workers may have twice the lease (their settings differ).
        per_fault_us: (lease(&settings) * 2 + slot + pause_for + Duration::from_secs(1)).as_micros()
            as u64,
        base_us: 3_000_000,
    };
    let queues = HashMap::from([(FAIR.to_owned(), queue)]);
    let report = history::check(
        &events,
        &queues,
        cli.protocol == Protocol::Native,
        &faults,
        bounds,
    );
    println!(
        "operations: {} holds, {} timeouts, {} cancellations, {} errors in {:.1}s",
        report.holds,
        outcomes.get("timeout").unwrap_or(&0),
        outcomes.get("cancelled").unwrap_or(&0),
        outcomes.get("error").unwrap_or(&0),
        started.elapsed().as_secs_f64()
    );
    println!(
        "faults injected: {kills} SIGKILL, {pauses} SIGSTOP past the lease, {delays} reply delays, \
         {silent} silent pub/sub deaths, {cuts} connection cuts, {busy} BUSY scripts, {forged} forged grants"
    );
    // A hold with the forged token came from a message, not the server.
    let forged_holds = events
        .iter()
        .filter(
            |e| matches!(e, Event::Hold(Hold { token: Some(t), .. }) if *t >= 9_000_000_000_000_000_000),
        )
        .count();
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
        if cli.protocol == Protocol::Native {
            report.token_violations.to_string()
        } else {
            "n/a".to_owned()
        },
        report.liveness_violations
    );
    for example in &report.examples {
        println!("  {example}");
    }
    println!("forged tokens held: {forged_holds}");
    let violations = report.violations() + forged_holds;
    println!("violations: {violations}");
    observer.shutdown().await;
    Ok(if violations == 0 { 0 } else { 1 })
}

//! The queue scenario of the other kinds (`bench queue --kind
//! read-write,semaphore`): `--waiters` requests wait in line, on one
//! client, for a read-write lock or a semaphore; each request granted
//! queues a new one like itself at the back (so the line keeps its length
//! and its mix) and releases. Measured per acquisition and per handoff (a
//! release that lets the next holder, or group of holders, in): Redis
//! script time (`INFO commandstats` usec of the scripts), script calls,
//! Redis CPU and server commands; what matters is whether they stay flat
//! as the line grows.
//!
//! The lines:
//! - the native read-write lock, mixed: a writer, then
//!   [`READERS_PER_WRITER`] readers, then a writer...; the handoffs go
//!   writer -> reader group -> writer (the writer's release admits the
//!   group, the group's last release admits the next writer);
//! - the native and the Redisson read-write locks with writers only: each
//!   release hands the lock to one writer. Redisson's has no line: its
//!   waiters listen on one channel that every release wakes, and all try
//!   again; a reader waits only behind a writer and gets in on its first
//!   try after the writer left (with every reader after it, writers
//!   waiting or not), so a line of writers is where its handoffs show;
//! - semaphores of [`PERMITS`] permits, one request in [`TWO_EVERY`] for
//!   two, the others for one: native (a line, direct handoff to its
//!   head), Redisson's expirable and counting semaphores (no line: every
//!   release wakes every waiter, and whichever attempt comes first takes
//!   the permits). Every acquisition of a semaphore counts as a handoff.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol, ReadWriteLock};
use redis::aio::MultiplexedConnection;

use super::kinds::{self, KindSeries, KindSubject};
use super::measure::{self, Cost, Meter, redis_failure};
use super::read_write::WRITE_EVERY;
use super::semaphore::{PERMITS, TWO_EVERY};
use crate::{Failure, exit, failure};

/// Readers queued behind each writer of the mixed line: as the
/// read-write scenario's mix, one acquisition in [`WRITE_EVERY`] writing.
const READERS_PER_WRITER: u64 = WRITE_EVERY - 1;

/// How long the waiters may take to line up.
const SETUP_LIMIT: Duration = Duration::from_secs(600);

/// How long the line may take to grant anybody once the run ended.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// How long a native holder may wait for its replacement to be in line.
const REFILL_LIMIT: Duration = Duration::from_secs(60);

/// One line under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineSubject {
    /// Native read-write lock: a writer, then a group of readers, ...
    NativeRwMixed,
    /// Native read-write lock, writers only.
    NativeRwWriters,
    /// Redisson's read-write lock, writers only.
    RedissonRwWriters,
    NativeSemaphore,
    /// Redisson's `RPermitExpirableSemaphore`.
    RedissonSemaphore,
    /// Redisson's `RSemaphore`.
    CountingSemaphore,
}

impl LineSubject {
    /// The read-write locks' lines, in the order of each round.
    pub(crate) const READ_WRITE: [LineSubject; 3] = [
        LineSubject::NativeRwMixed,
        LineSubject::NativeRwWriters,
        LineSubject::RedissonRwWriters,
    ];

    /// The semaphores' lines, in the order of each round.
    pub(crate) const SEMAPHORE: [LineSubject; 3] = [
        LineSubject::NativeSemaphore,
        LineSubject::RedissonSemaphore,
        LineSubject::CountingSemaphore,
    ];

    fn protocol(self) -> Protocol {
        match self {
            LineSubject::NativeRwMixed
            | LineSubject::NativeRwWriters
            | LineSubject::NativeSemaphore => Protocol::Native,
            _ => Protocol::Redisson,
        }
    }

    fn is_semaphore(self) -> bool {
        LineSubject::SEMAPHORE.contains(&self)
    }

    /// What the `i`-th waiter of the line asks for (its replacements ask
    /// the same). The first holder is a writer, or holds every permit. A
    /// mixed line starts with a writer, so that one waits in it whatever
    /// its length (readers alone would all get in, nobody left in line).
    fn request(self, i: u64) -> Request {
        match self {
            LineSubject::NativeRwMixed => Request {
                write: i.is_multiple_of(READERS_PER_WRITER + 1),
                permits: 1,
            },
            LineSubject::NativeRwWriters | LineSubject::RedissonRwWriters => Request {
                write: true,
                permits: 1,
            },
            _ => Request {
                write: false,
                permits: if i % TWO_EVERY == TWO_EVERY - 1 { 2 } else { 1 },
            },
        }
    }

    /// What the first holder takes: everything.
    fn blocker(self) -> Request {
        Request {
            write: true,
            permits: PERMITS,
        }
    }

    /// The native line's key in Redis (the others have none).
    fn queue_key(self, name: &str) -> Option<String> {
        match self {
            LineSubject::NativeRwMixed | LineSubject::NativeRwWriters => {
                Some(format!("fairlock:{{{name}}}:rw:line"))
            }
            LineSubject::NativeSemaphore => Some(format!("fairlock:{{{name}}}:sem:line")),
            _ => None,
        }
    }
}

impl KindSubject for LineSubject {
    const SCENARIO: &'static str = "queue";
    const SIZE: &'static str = "waiters";
    type Sample = LineSample;

    async fn run(
        self,
        url: &str,
        name: &str,
        waiters: usize,
        duration: Duration,
        admin: &mut MultiplexedConnection,
    ) -> Result<LineSample, Failure> {
        run(self, url, name, waiters as u64, duration, admin).await
    }

    fn key(self) -> &'static str {
        match self {
            LineSubject::NativeRwMixed => "native-rw-mixed",
            LineSubject::NativeRwWriters => "native-rw-writers",
            LineSubject::RedissonRwWriters => "redisson-rw-writers",
            LineSubject::NativeSemaphore => "native-semaphore",
            LineSubject::RedissonSemaphore => "redisson-semaphore",
            LineSubject::CountingSemaphore => "redisson-counting-semaphore",
        }
    }

    fn label(self) -> &'static str {
        match self {
            LineSubject::NativeRwMixed => "native read-write, W + 3 R groups",
            LineSubject::NativeRwWriters => "native read-write, writers",
            LineSubject::RedissonRwWriters => "redisson read-write, writers",
            LineSubject::NativeSemaphore => "native semaphore",
            LineSubject::RedissonSemaphore => "redisson expirable semaphore",
            LineSubject::CountingSemaphore => "redisson counting semaphore",
        }
    }
}

/// One round of one line.
#[derive(Clone, Debug, Default)]
pub(crate) struct LineSample {
    pub(crate) acquisitions: u64,
    pub(crate) writes: u64,
    /// Releases that let the next holder or group in (read-write lock:
    /// each write, and each first read after a write; semaphore: each
    /// acquisition).
    pub(crate) handoffs: u64,
    /// The line's length read by the holders (ZCARD, native lines),
    /// counted in the Redis CPU and taken off the commands.
    pub(crate) polls: u64,
    /// Calls and usec of each command over the run (the scripts' steps
    /// under their own names, the line reads as `zcard`).
    pub(crate) by_command: measure::CommandStats,
    pub(crate) cost: Cost,
}

/// A waiter's request: a side of the read-write lock, or permits.
#[derive(Clone, Copy, Debug)]
struct Request {
    write: bool,
    permits: u32,
}

/// The object the line waits for.
enum Object {
    ReadWrite(ReadWriteLock),
    Expiring(fairlock::Semaphore),
    Counting(fairlock::CountingSemaphore),
}

/// A granted request.
enum Held {
    Guard(fairlock::LockGuard),
    Permits(fairlock::Permits),
    Counted(fairlock::CountedPermits),
}

impl Object {
    async fn take(&self, request: Request) -> Result<Held, Failure> {
        Ok(match self {
            Object::ReadWrite(rw) => {
                let side = if request.write { rw.write() } else { rw.read() };
                Held::Guard(side.lock().await?)
            }
            Object::Expiring(s) => Held::Permits(s.acquire(request.permits).await?),
            Object::Counting(s) => Held::Counted(s.acquire(request.permits).await?),
        })
    }
}

impl Held {
    async fn release(self) -> Result<(), Failure> {
        match self {
            Held::Guard(guard) => guard.unlock().await?,
            Held::Permits(permits) => permits.release().await?,
            Held::Counted(permits) => permits.release().await?,
        }
        Ok(())
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Shared by the waiters of one run.
struct Line {
    object: Object,
    semaphore: bool,
    /// The length the line keeps.
    waiters: u64,
    /// A native line: its key, and the connection that reads its length.
    queue: Option<(String, MultiplexedConnection)>,
    /// Reads of the line's length so far (ZCARD: not the lock's work, taken
    /// off the commands counted).
    polls: AtomicU64,
    stop: AtomicBool,
    acquisitions: AtomicU64,
    writes: AtomicU64,
    handoffs: AtomicU64,
    /// Whether the last grant was a write (the first holder's was).
    last_write: Mutex<bool>,
    /// A waiter was granted after the run ended (it keeps its hold), or
    /// one failed.
    finished: tokio::sync::Notify,
    failure: Mutex<Option<Failure>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The holds granted after the run ended, released at the tear-down
    /// (after the keys are gone, so that they admit nobody).
    parked: Mutex<Vec<Held>>,
}

impl Line {
    fn fail(&self, failure: Failure) {
        locked(&self.failure).get_or_insert(failure);
        self.finished.notify_one();
    }

    /// A native holder waits, before it releases, until the request it
    /// queued in its place is in line: every release then finds the line
    /// `waiters` long. (A replacement subscribes to its channel, then
    /// queues: released at once, the holder would hand over to a line a
    /// few waiters short, and a reader's replacement could get in beside
    /// its group with nobody left in line.) The lines without a queue
    /// (Redisson's) keep `waiters` tasks asking.
    async fn refilled(&self) -> Result<(), Failure> {
        self.line_reaches(self.waiters).await
    }

    /// Wait until a native line is `len` long (read back to back: a
    /// replacement queues within a few round trips), or a waiter failed
    /// (the run reports it). At once for the others.
    async fn line_reaches(&self, len: u64) -> Result<(), Failure> {
        let Some((key, conn)) = &self.queue else {
            return Ok(());
        };
        let mut conn = conn.clone();
        let deadline = Instant::now() + REFILL_LIMIT;
        loop {
            self.polls.fetch_add(1, Ordering::SeqCst);
            let now: u64 = redis::cmd("ZCARD")
                .arg(key)
                .query_async(&mut conn)
                .await
                .map_err(|e| redis_failure("ZCARD", e))?;
            if now >= len || locked(&self.failure).is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Failure::new(
                    exit::SOFTWARE,
                    format!(
                        "the line was {now} long, not {len}, after {REFILL_LIMIT:?}: a waiter \
                         did not queue"
                    ),
                ));
            }
            tokio::task::yield_now().await;
        }
    }

    /// Count a grant, while it is held: a write is a handoff, and so is a
    /// read right after a write (the first of the group its release let in).
    fn count(&self, request: Request) {
        self.acquisitions.fetch_add(1, Ordering::SeqCst);
        if request.write {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        let handoff = self.semaphore || {
            let mut last = locked(&self.last_write);
            let handoff = request.write || *last;
            *last = request.write;
            handoff
        };
        if handoff {
            self.handoffs.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A waiter: once granted, it queues a request like its own at the back
/// and releases.
fn spawn_waiter(line: &Arc<Line>, request: Request) {
    let line2 = Arc::clone(line);
    let task = tokio::spawn(async move {
        let held = match line2.object.take(request).await {
            Ok(held) => held,
            Err(f) => return line2.fail(f),
        };
        if line2.stop.load(Ordering::SeqCst) {
            locked(&line2.parked).push(held);
            line2.finished.notify_one();
            return;
        }
        line2.count(request);
        spawn_waiter(&line2, request);
        if let Err(f) = line2.refilled().await {
            return line2.fail(f);
        }
        if let Err(f) = held.release().await {
            line2.fail(f);
        }
    });
    locked(&line.tasks).push(task);
}

/// One round of `subject`: `waiters` requests in line on one client for
/// `duration`.
async fn run(
    subject: LineSubject,
    url: &str,
    name: &str,
    waiters: u64,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<LineSample, Failure> {
    // Long leases and waiter ttls: nobody refreshes or renews during the
    // run, so the Redis work measured is the handoffs'. Thousands of
    // waiters share one connection: a reply may wait behind thousands of
    // scripts (seconds, on a loaded machine), which is no broken one.
    let long = Duration::from_secs(3600);
    let patient = Duration::from_secs(60);
    let config = ClientConfig::from_url(url)?
        .protocol(subject.protocol())
        .metrics(false)
        .lease(long)
        .waiter_slot(long)
        .waiter_ttl(long)
        .response_timeout(patient)
        .retry_budget(patient);
    let client = LockClient::with_config(config)
        .await
        .map_err(failure::connect_failure)?;
    let object = match subject {
        LineSubject::NativeRwMixed
        | LineSubject::NativeRwWriters
        | LineSubject::RedissonRwWriters => Object::ReadWrite(client.read_write_lock(name)?),
        LineSubject::NativeSemaphore | LineSubject::RedissonSemaphore => {
            Object::Expiring(client.semaphore(name, PERMITS)?)
        }
        LineSubject::CountingSemaphore => {
            Object::Counting(client.counting_semaphore(name, PERMITS)?)
        }
    };
    // Warm up: scripts loaded, connections made, the object initialised.
    object.take(subject.blocker()).await?.release().await?;
    object.take(subject.request(0)).await?.release().await?;
    let first = object.take(subject.blocker()).await?;
    let queue = match subject.queue_key(name) {
        Some(key) => Some((key, measure::connect(url).await?)),
        None => None,
    };
    let line = Arc::new(Line {
        object,
        semaphore: subject.is_semaphore(),
        waiters,
        queue,
        polls: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        acquisitions: AtomicU64::new(0),
        writes: AtomicU64::new(0),
        handoffs: AtomicU64::new(0),
        last_write: Mutex::new(true),
        finished: tokio::sync::Notify::new(),
        failure: Mutex::new(None),
        tasks: Mutex::new(Vec::new()),
        parked: Mutex::new(Vec::new()),
    });
    let result = line_run(&line, first, subject, waiters, duration, admin).await;
    // Tear down without thousands of queue exits: the keys go first.
    measure::delete_keys(admin, name).await?;
    for task in locked(&line.tasks).drain(..) {
        task.abort();
    }
    drop(std::mem::take(&mut *locked(&line.parked)));
    client.flush().await;
    client.shutdown().await;
    result
}

async fn line_run(
    line: &Arc<Line>,
    first: Held,
    subject: LineSubject,
    waiters: u64,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<LineSample, Failure> {
    let before = measure::Server::read(admin).await?;
    // A native line is made one waiter at a time, in the order of
    // `request` (so that a mixed line's groups are what it says); the
    // others have no order.
    for i in 0..waiters {
        spawn_waiter(line, subject.request(i));
        line.line_reaches(i + 1).await?;
        if let Some(f) = locked(&line.failure).take() {
            return Err(f);
        }
    }
    // Without a line: every waiter has tried at least once (and the
    // scripts then stop below).
    let deadline = Instant::now() + SETUP_LIMIT;
    while line.queue.is_none() {
        let now = measure::Server::read(admin).await?;
        if now.script_calls() - before.script_calls() >= waiters {
            break;
        }
        if let Some(f) = locked(&line.failure).take() {
            return Err(f);
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("{waiters} waiters did not line up within {SETUP_LIMIT:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    measure::settle(admin).await?;
    let meter = Meter::start(admin).await?;
    let commands = measure::CommandStats::read(admin).await?;
    let polls = line.polls.load(Ordering::SeqCst);
    let finished = line.finished.notified();
    tokio::pin!(finished);
    finished.as_mut().enable();
    first.release().await?;
    tokio::time::sleep(duration).await;
    line.stop.store(true, Ordering::SeqCst);
    if tokio::time::timeout(DRAIN_LIMIT, finished).await.is_err() {
        return Err(Failure::new(
            exit::SOFTWARE,
            format!(
                "nobody was granted within {DRAIN_LIMIT:?} after the run ended (after {} \
                 acquisitions): a lost wake-up?",
                line.acquisitions.load(Ordering::SeqCst)
            ),
        ));
    }
    let by_command = measure::CommandStats::read(admin).await?.since(&commands);
    let mut cost = meter.stop(admin).await?;
    let polls = line.polls.load(Ordering::SeqCst) - polls;
    cost.commands = cost.commands.saturating_sub(polls);
    if let Some(f) = locked(&line.failure).take() {
        return Err(f);
    }
    Ok(LineSample {
        polls,
        by_command,
        acquisitions: line.acquisitions.load(Ordering::SeqCst),
        writes: line.writes.load(Ordering::SeqCst),
        handoffs: line.handoffs.load(Ordering::SeqCst),
        cost,
    })
}

/// One line with one number of waiters, over its rounds.
struct Summary {
    /// Median of the rounds' acquisitions per second.
    rate: f64,
    spread: f64,
    /// Acquisitions per handoff (a mixed line: the writer and its group).
    per_handoff: f64,
    /// Per acquisition, over every round.
    script_us: f64,
    scripts: f64,
    redis_cpu_us: f64,
    commands: f64,
    /// The holders' reads of the line's length.
    reads: f64,
    /// Per handoff, over every round.
    script_us_hand: f64,
    scripts_hand: f64,
}

fn summarize(samples: &[LineSample]) -> Summary {
    let (rate, spread) =
        kinds::median_rate(samples.iter().map(|s| (s.acquisitions, s.cost.seconds)));
    let sum = |f: &dyn Fn(&LineSample) -> f64| samples.iter().map(f).sum::<f64>();
    let per = |total: f64, n: f64| if n > 0.0 { total / n } else { 0.0 };
    let acquisitions = sum(&|s| s.acquisitions as f64);
    let handoffs = sum(&|s| s.handoffs as f64);
    let script_us = sum(&|s| s.cost.script_usec as f64);
    let scripts = sum(&|s| s.cost.script_calls as f64);
    Summary {
        rate,
        spread,
        per_handoff: per(acquisitions, handoffs),
        script_us: per(script_us, acquisitions),
        scripts: per(scripts, acquisitions),
        redis_cpu_us: per(sum(&|s| s.cost.redis_cpu_seconds) * 1e6, acquisitions),
        commands: per(sum(&|s| s.cost.commands as f64), acquisitions),
        reads: per(sum(&|s| s.polls as f64), acquisitions),
        script_us_hand: per(script_us, handoffs),
        scripts_hand: per(scripts, handoffs),
    }
}

/// The scenario's part of the table.
pub(crate) fn table(series: &[KindSeries<LineSubject>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut sizes: Vec<usize> = series.iter().map(|s| s.workers).collect();
    sizes.dedup();
    for n in sizes {
        let _ = writeln!(
            out,
            "\nqueue of a read-write lock or a semaphore of {PERMITS}, {n} waiters on one client: \
             each holder queues a request like its own and releases; per acquisition and per \
             handoff (a release that lets the next holder or group in; a semaphore's every \
             acquisition): Redis script time (INFO commandstats usec) and calls; per \
             acquisition, server commands, the native holders' reads of the line's length (ZCARD, \
             one round trip each: left out of the commands) and Redis CPU (the reads included)"
        );
        let _ = writeln!(
            out,
            "  {:<34} {:>8} {:>7} {:>8} {:>11} {:>9} {:>12} {:>10} {:>9} {:>6} {:>11}",
            "implementation",
            "acq/s",
            "spread",
            "acq/hand",
            "script/acq",
            "scr/acq",
            "script/hand",
            "scr/hand",
            "commands",
            "reads",
            "Redis CPU"
        );
        for s in series.iter().filter(|s| s.workers == n) {
            let sum = summarize(&s.samples);
            let _ = writeln!(
                out,
                "  {:<34} {:>8.0} {:>6.0}% {:>8.2} {:>8.1} us {:>9.2} {:>9.1} us {:>10.2} {:>9.1} \
                 {:>6.1} {:>8.1} us",
                s.subject.label(),
                sum.rate,
                sum.spread * 100.0,
                sum.per_handoff,
                sum.script_us,
                sum.scripts,
                sum.script_us_hand,
                sum.scripts_hand,
                sum.commands,
                sum.reads,
                sum.redis_cpu_us
            );
        }
    }
    out
}

/// The scenario's part of the JSON.
pub(crate) fn json(series: &[KindSeries<LineSubject>]) -> serde_json::Value {
    serde_json::Value::Array(
        series
            .iter()
            .map(|s| {
                let sum = summarize(&s.samples);
                serde_json::json!({
                    "waiters": s.workers,
                    "implementation": s.subject.key(),
                    "label": s.subject.label(),
                    "per_second_median": sum.rate,
                    "spread": sum.spread,
                    "acquisitions_per_handoff": sum.per_handoff,
                    "script_us_per_acquisition": sum.script_us,
                    "script_calls_per_acquisition": sum.scripts,
                    "script_us_per_handoff": sum.script_us_hand,
                    "script_calls_per_handoff": sum.scripts_hand,
                    "redis_cpu_us_per_acquisition": sum.redis_cpu_us,
                    "commands_per_acquisition": sum.commands,
                    "length_reads_per_acquisition": sum.reads,
                    "rounds": s.samples.iter().map(|r| serde_json::json!({
                        "acquisitions": r.acquisitions,
                        "writes": r.writes,
                        "handoffs": r.handoffs,
                        "length_reads": r.polls,
                        "seconds": r.cost.seconds,
                        "script_calls": r.cost.script_calls,
                        "script_usec": r.cost.script_usec,
                        "commands": r.cost.commands,
                        "redis_cpu_seconds": r.cost.redis_cpu_seconds,
                        "by_command": r.by_command.0.iter().map(|(name, (calls, usec))| {
                            (name.clone(), serde_json::json!({"calls": calls, "usec": usec}))
                        }).collect::<serde_json::Map<_, _>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

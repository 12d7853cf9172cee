//! The measured scenarios: one implementation, one round each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::measure::{self, Cost, Meter, redis_failure};
use super::subject::{Held, Locker, Setup, Subject};
use crate::{Failure, exit};

/// How long the queue scenario waits for its waiters to line up.
const QUEUE_SETUP_LIMIT: Duration = Duration::from_secs(600);

/// How long the workers may take to stop once asked (the holder releases,
/// the next waiter proceeds): longer means a lost wake-up.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

fn stuck(done: &AtomicU64) -> Failure {
    Failure::new(
        exit::SOFTWARE,
        format!(
            "no worker proceeded within {DRAIN_LIMIT:?} after the run ended (after {} \
             acquisitions): a lost wake-up?",
            done.load(Ordering::SeqCst)
        ),
    )
}

/// One round of one implementation in one scenario.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    /// Lock + unlock pairs (uncontended, contended) or handoffs (handoff, queue).
    pub(crate) ops: u64,
    pub(crate) cost: Cost,
    /// Acquisitions per worker (contended, handoff).
    pub(crate) per_worker: Vec<u64>,
    /// Release sent by one worker -> another worker holds the lock.
    pub(crate) handoff_latencies: Vec<Duration>,
    /// `lock` called -> returned, every acquisition (contended, shared,
    /// handoff): how long a worker waited for its turn.
    pub(crate) waits: Vec<Duration>,
    /// The counter incremented under the lock equals the acquisitions
    /// (contended): no update was lost to two holders at once.
    pub(crate) counter_ok: Option<bool>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lock + unlock, one after the other, by one task for `duration`.
pub(crate) async fn uncontended(
    subject: Subject,
    url: &str,
    name: &str,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<Sample, Failure> {
    let locker = Locker::connect(subject, url, name, Setup::Default).await?;
    // Warm up: scripts loaded, connections made.
    for _ in 0..50 {
        locker.lock().await?.unlock().await?;
    }
    let meter = Meter::start(admin).await?;
    let started = Instant::now();
    let mut ops = 0u64;
    while started.elapsed() < duration {
        for _ in 0..20 {
            locker.lock().await?.unlock().await?;
        }
        ops += 20;
    }
    let cost = meter.stop(admin).await?;
    locker.close().await;
    Ok(Sample {
        ops,
        cost,
        ..Sample::default()
    })
}

/// Shared by the workers of one contended run.
struct Contest {
    stop: AtomicBool,
    /// Who released last, and when the release was sent.
    last_release: Mutex<Option<(usize, Instant)>>,
    latencies: Mutex<Vec<Duration>>,
    waits: Mutex<Vec<Duration>>,
    total: AtomicU64,
}

/// What the workers of a contended run do under the lock, and whether they
/// share a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Nothing: release at once (the handoff scenario).
    Nothing,
    /// GET a counter and SET it one higher, each worker with its own lock
    /// client and its own connection for the counter.
    Counter,
    /// The same, all workers sharing one lock client and one connection for
    /// the counter (the tasks of one service).
    SharedCounter,
}

/// `workers` tasks take the lock in turn for `duration`; with a counter
/// workload, each holder GETs a counter and SETs it one higher before
/// releasing.
pub(crate) async fn contended(
    subject: Subject,
    url: &str,
    name: &str,
    workers: usize,
    workload: Workload,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<Sample, Failure> {
    let counter = format!("{name}:counter");
    let critical = workload != Workload::Nothing;
    let mut lockers: Vec<(Arc<Locker>, MultiplexedConnection)> = Vec::with_capacity(workers);
    let mut shared = None;
    for _ in 0..workers {
        let pair = match (&shared, workload) {
            (Some(pair), Workload::SharedCounter) => Clone::clone(pair),
            _ => {
                let locker = Locker::connect(subject, url, name, Setup::Default).await?;
                let conn = measure::connect(url).await?;
                // Warm up this client alone (scripts loaded, connection made).
                locker.lock().await?.unlock().await?;
                (Arc::new(locker), conn)
            }
        };
        if workload == Workload::SharedCounter {
            shared = Some(pair.clone());
        }
        lockers.push(pair);
    }
    drop(shared);
    let contest = Arc::new(Contest {
        stop: AtomicBool::new(false),
        last_release: Mutex::new(None),
        latencies: Mutex::new(Vec::new()),
        waits: Mutex::new(Vec::new()),
        total: AtomicU64::new(0),
    });
    let meter = Meter::start(admin).await?;
    let mut tasks = Vec::with_capacity(workers);
    for (me, (locker, conn)) in lockers.into_iter().enumerate() {
        let contest = Arc::clone(&contest);
        let counter = counter.clone();
        tasks.push(tokio::spawn(async move {
            let result = work(me, &locker, conn, &contest, critical.then_some(&counter)).await;
            // The last worker of a shared client closes it.
            if let Some(locker) = Arc::into_inner(locker) {
                locker.close().await;
            }
            result
        }));
    }
    tokio::time::sleep(duration).await;
    contest.stop.store(true, Ordering::SeqCst);
    let mut per_worker = Vec::with_capacity(workers);
    let mut failure = None;
    let drained = Instant::now() + DRAIN_LIMIT;
    for mut task in tasks {
        let joined = match tokio::time::timeout_at(drained.into(), &mut task).await {
            Ok(joined) => joined,
            Err(_) => {
                task.abort();
                failure.get_or_insert(stuck(&contest.total));
                continue;
            }
        };
        match joined {
            Ok(Ok(n)) => per_worker.push(n),
            Ok(Err(f)) => {
                failure.get_or_insert(f);
            }
            Err(e) => {
                failure.get_or_insert(Failure::new(
                    exit::SOFTWARE,
                    format!("a bench worker failed: {e}"),
                ));
            }
        }
    }
    let cost = meter.stop(admin).await?;
    if let Some(f) = failure {
        return Err(f);
    }
    let ops = contest.total.load(Ordering::SeqCst);
    let counter_ok = if critical {
        let value: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query_async(admin)
            .await
            .map_err(|e| redis_failure("GET", e))?;
        Some(value.unwrap_or(0) == ops)
    } else {
        None
    };
    let handoff_latencies = std::mem::take(&mut *locked(&contest.latencies));
    let waits = std::mem::take(&mut *locked(&contest.waits));
    Ok(Sample {
        ops,
        cost,
        per_worker,
        handoff_latencies,
        waits,
        counter_ok,
    })
}

/// One worker's loop: its acquisitions.
async fn work(
    me: usize,
    locker: &Locker,
    mut conn: MultiplexedConnection,
    contest: &Contest,
    counter: Option<&String>,
) -> Result<u64, Failure> {
    let mut n = 0u64;
    while !contest.stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        let held = locker.lock().await?;
        let now = Instant::now();
        locked(&contest.waits).push(now.saturating_duration_since(asked));
        if let Some((from, at)) = *locked(&contest.last_release) {
            if from != me {
                locked(&contest.latencies).push(now.saturating_duration_since(at));
            }
        }
        if let Some(counter) = counter {
            let value: Option<u64> = redis::cmd("GET")
                .arg(counter)
                .query_async(&mut conn)
                .await
                .map_err(|e| redis_failure("GET", e))?;
            redis::cmd("SET")
                .arg(counter)
                .arg(value.unwrap_or(0) + 1)
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| redis_failure("SET", e))?;
        }
        n += 1;
        contest.total.fetch_add(1, Ordering::SeqCst);
        *locked(&contest.last_release) = Some((me, Instant::now()));
        held.unlock().await?;
    }
    Ok(n)
}

/// Shared by the waiters of one queue run.
struct Chain {
    locker: Locker,
    stop: AtomicBool,
    handoffs: AtomicU64,
    /// The last holder, kept (forgotten) when the run stops.
    finished: tokio::sync::Notify,
    failure: Mutex<Option<Failure>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A waiter of the chain: once granted, it queues a new waiter behind
/// (the line keeps its length) and releases.
fn spawn_waiter(chain: &Arc<Chain>) {
    let chain2 = Arc::clone(chain);
    let task = tokio::spawn(async move {
        let held = match chain2.locker.lock().await {
            Ok(held) => held,
            Err(f) => {
                locked(&chain2.failure).get_or_insert(f);
                chain2.finished.notify_one();
                return;
            }
        };
        if chain2.stop.load(Ordering::SeqCst) {
            held.forget();
            chain2.finished.notify_one();
            return;
        }
        chain2.handoffs.fetch_add(1, Ordering::SeqCst);
        spawn_waiter(&chain2);
        if let Err(f) = held.unlock().await {
            locked(&chain2.failure).get_or_insert(f);
            chain2.finished.notify_one();
        }
    });
    locked(&chain.tasks).push(task);
}

/// The length of the queue in Redis (the protocols' own keys).
async fn queue_len(
    conn: &mut MultiplexedConnection,
    subject: Subject,
    name: &str,
) -> Result<u64, Failure> {
    let cmd = match subject {
        Subject::RedissonFair => redis::cmd("LLEN")
            .arg(format!("redisson_lock_queue:{{{name}}}"))
            .clone(),
        _ => redis::cmd("ZCARD")
            .arg(format!("fairlock:{{{name}}}:line"))
            .clone(),
    };
    cmd.query_async(conn)
        .await
        .map_err(|e| redis_failure("queue length", e))
}

/// `waiters` wait in line on one client; each holder releases as soon as
/// it is granted, for `duration`. Measures Redis time per handoff.
pub(crate) async fn queue(
    subject: Subject,
    url: &str,
    name: &str,
    waiters: usize,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<Sample, Failure> {
    let locker = Locker::connect(subject, url, name, Setup::LongQueue).await?;
    let first = locker.lock().await?;
    let chain = Arc::new(Chain {
        locker,
        stop: AtomicBool::new(false),
        handoffs: AtomicU64::new(0),
        finished: tokio::sync::Notify::new(),
        failure: Mutex::new(None),
        tasks: Mutex::new(Vec::new()),
    });
    let result = queue_run(&chain, first, subject, name, waiters, duration, admin).await;
    // Tear down without thousands of queue exits: the keys go first.
    measure::delete_keys(admin, name).await?;
    for task in locked(&chain.tasks).drain(..) {
        task.abort();
    }
    if let Some(client) = chain.locker.client() {
        client.flush().await;
        client.shutdown().await;
    }
    result
}

async fn queue_run(
    chain: &Arc<Chain>,
    first: Held,
    subject: Subject,
    name: &str,
    waiters: usize,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<Sample, Failure> {
    for _ in 0..waiters {
        spawn_waiter(chain);
    }
    let deadline = Instant::now() + QUEUE_SETUP_LIMIT;
    while queue_len(admin, subject, name).await? < waiters as u64 {
        if let Some(f) = locked(&chain.failure).take() {
            return Err(f);
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("{waiters} waiters did not line up within {QUEUE_SETUP_LIMIT:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    measure::settle(admin).await?;
    let meter = Meter::start(admin).await?;
    let finished = chain.finished.notified();
    tokio::pin!(finished);
    finished.as_mut().enable();
    first.unlock().await?;
    tokio::time::sleep(duration).await;
    chain.stop.store(true, Ordering::SeqCst);
    if tokio::time::timeout(DRAIN_LIMIT, finished).await.is_err() {
        return Err(stuck(&chain.handoffs));
    }
    let cost = meter.stop(admin).await?;
    if let Some(f) = locked(&chain.failure).take() {
        return Err(f);
    }
    Ok(Sample {
        ops: chain.handoffs.load(Ordering::SeqCst),
        cost,
        ..Sample::default()
    })
}

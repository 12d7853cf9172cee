//! The readers/writers scenario of `fairlock bench` (`bench read-write`):
//! `--workers` tasks of one process take a read-write lock, one in four
//! for writing, in turn for the round's duration, sharing one client as
//! the tasks of one service do. Compared: fairlock's read-write lock under
//! both protocols (`native`: fair; `redisson`: Redisson's, not fair) and
//! rds_lock, the Rust crate that offers a read-write lock on Redis (it
//! polls: a refused attempt is tried again after `RDS_RETRY` ms).
//!
//! Under the lock a reader reads a flag that a writer sets while it writes
//! (`SET flag 1 GET` ... `SET flag 0`), and a writer adds one to a counter:
//! a reader that sees the flag, a writer that finds it set, or a counter
//! that ends below the writes would be two parties where one belongs; the
//! run fails then. Figured per acquisition: the Redis CPU and commands; per
//! side: how long the waits took (p50, p99, longest), which is where
//! fairness shows (a writer behind a stream of readers waits, or not).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol, ReadWriteLock};
use redis::aio::MultiplexedConnection;

use super::kinds::{self, Draws, KindSeries, KindSubject};
use super::measure::{self, Cost, Meter, redis_failure};
use crate::{Failure, exit, failure};

/// rds_lock's retry interval (ms): as rslock's in the other scenarios.
const RDS_RETRY: u64 = 10;

/// One in this many acquisitions writes.
pub(crate) const WRITE_EVERY: u64 = 4;

/// One read-write lock under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RwSubject {
    Native,
    Redisson,
    RdsLock,
}

impl RwSubject {
    pub(crate) const ALL: [RwSubject; 3] =
        [RwSubject::Native, RwSubject::Redisson, RwSubject::RdsLock];
}

impl KindSubject for RwSubject {
    const SCENARIO: &'static str = "read-write";
    const SIZE: &'static str = "workers";
    type Sample = RwSample;

    async fn run(
        self,
        url: &str,
        name: &str,
        workers: usize,
        duration: Duration,
        admin: &mut MultiplexedConnection,
    ) -> Result<RwSample, Failure> {
        run(self, url, name, workers, duration, admin).await
    }

    fn key(self) -> &'static str {
        match self {
            RwSubject::Native => "native-rw",
            RwSubject::Redisson => "redisson-rw",
            RwSubject::RdsLock => "rds_lock",
        }
    }

    fn label(self) -> &'static str {
        match self {
            RwSubject::Native => "fairlock native read-write (fair)",
            RwSubject::Redisson => "fairlock redisson read-write",
            RwSubject::RdsLock => "rds_lock 1.0",
        }
    }
}

/// One round of one read-write lock.
#[derive(Clone, Debug, Default)]
pub(crate) struct RwSample {
    pub(crate) reads: u64,
    pub(crate) writes: u64,
    pub(crate) cost: Cost,
    /// From asking to holding, per side.
    pub(crate) read_waits: Vec<Duration>,
    pub(crate) write_waits: Vec<Duration>,
    /// Acquisitions per worker.
    pub(crate) per_worker: Vec<u64>,
}

/// The lock as each worker sees it.
#[derive(Clone)]
enum Side {
    Fairlock(ReadWriteLock),
    RdsLock(redis_rds::aio::ConnectionManager),
}

/// A held lock.
enum Held {
    Fairlock(fairlock::LockGuard),
    RdsLock(std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>>),
}

impl Side {
    async fn lock(&self, name: &str, write: bool) -> Result<Held, Failure> {
        match self {
            Side::Fairlock(rw) => {
                let handle = if write { rw.write() } else { rw.read() };
                Ok(Held::Fairlock(handle.lock().await?))
            }
            Side::RdsLock(conn) => {
                let mode = if write {
                    rds_lock::Mode::W
                } else {
                    rds_lock::Mode::R
                };
                let unlock = rds_lock::Locker::new(conn.clone())
                    .mode(&mode)
                    .rty_int(RDS_RETRY)
                    .rty_to(60_000)
                    .lock(name.to_owned())
                    .await
                    .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("rds_lock: {e}")))?;
                Ok(Held::RdsLock(Box::pin(async move {
                    unlock.await.map_err(|e| e.to_string())
                })))
            }
        }
    }
}

impl Held {
    async fn unlock(self) -> Result<(), Failure> {
        match self {
            Held::Fairlock(guard) => Ok(guard.unlock().await?),
            Held::RdsLock(unlock) => unlock
                .await
                .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("rds_lock unlock: {e}"))),
        }
    }
}

/// `workers` tasks sharing one client of `subject` take the read-write
/// lock `name` for `duration`, one acquisition in [`WRITE_EVERY`] writing.
async fn run(
    subject: RwSubject,
    url: &str,
    name: &str,
    workers: usize,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<RwSample, Failure> {
    let (side, client) = match subject {
        RwSubject::Native | RwSubject::Redisson => {
            let protocol = if subject == RwSubject::Native {
                Protocol::Native
            } else {
                Protocol::Redisson
            };
            let client = LockClient::with_config(ClientConfig::from_url(url)?.protocol(protocol))
                .await
                .map_err(failure::connect_failure)?;
            (Side::Fairlock(client.read_write_lock(name)?), Some(client))
        }
        RwSubject::RdsLock => {
            let client = redis_rds::Client::open(url).map_err(|e| {
                Failure::new(exit::USAGE, format!("rds_lock cannot use {url:?}: {e}"))
            })?;
            let conn = redis_rds::aio::ConnectionManager::new(client)
                .await
                .map_err(|e| Failure::new(exit::UNAVAILABLE, format!("rds_lock: {e}")))?;
            (Side::RdsLock(conn), None)
        }
    };
    // Warm up: scripts loaded, connections made.
    side.lock(name, true).await?.unlock().await?;
    side.lock(name, false).await?.unlock().await?;
    let data = measure::connect(url).await?;
    let (flag, counter) = (format!("{name}:writing"), format!("{name}:counter"));
    let stop = Arc::new(AtomicBool::new(false));
    let meter = Meter::start(admin).await?;
    let mut tasks = Vec::with_capacity(workers);
    for me in 0..workers {
        let (side, mut data, stop) = (side.clone(), data.clone(), Arc::clone(&stop));
        let (name, flag, counter) = (name.to_owned(), flag.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = RwSample::default();
            let mut draws = Draws::new(me);
            while !stop.load(Ordering::SeqCst) {
                let write = draws.one_in(WRITE_EVERY);
                let asked = Instant::now();
                let held = side.lock(&name, write).await?;
                let waited = asked.elapsed();
                if write {
                    let before: Option<String> = redis::cmd("SET")
                        .arg(&flag)
                        .arg(1)
                        .arg("GET")
                        .query_async(&mut data)
                        .await
                        .map_err(|e| redis_failure("SET", e))?;
                    let _: u64 = redis::cmd("INCR")
                        .arg(&counter)
                        .query_async(&mut data)
                        .await
                        .map_err(|e| redis_failure("INCR", e))?;
                    let _: () = redis::cmd("SET")
                        .arg(&flag)
                        .arg(0)
                        .query_async(&mut data)
                        .await
                        .map_err(|e| redis_failure("SET", e))?;
                    if before.as_deref() == Some("1") {
                        return Err(two_parties(&name, "a writer found another writing"));
                    }
                    done.writes += 1;
                    done.write_waits.push(waited);
                } else {
                    let now: Option<String> = redis::cmd("GET")
                        .arg(&flag)
                        .query_async(&mut data)
                        .await
                        .map_err(|e| redis_failure("GET", e))?;
                    if now.as_deref() == Some("1") {
                        return Err(two_parties(&name, "a reader saw a writer inside"));
                    }
                    done.reads += 1;
                    done.read_waits.push(waited);
                }
                held.unlock().await?;
            }
            done.per_worker.push(done.reads + done.writes);
            Ok::<_, Failure>(done)
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::SeqCst);
    let done = kinds::drain(tasks, name).await;
    let cost = meter.stop(admin).await?;
    if let Some(client) = client {
        client.shutdown().await;
    }
    let mut sample = RwSample {
        cost,
        ..RwSample::default()
    };
    for one in done? {
        sample.reads += one.reads;
        sample.writes += one.writes;
        sample.read_waits.extend(one.read_waits);
        sample.write_waits.extend(one.write_waits);
        sample.per_worker.extend(one.per_worker);
    }
    let counted: Option<u64> = redis::cmd("GET")
        .arg(&counter)
        .query_async(admin)
        .await
        .map_err(|e| redis_failure("GET", e))?;
    // The warm-up's write counted nothing: it ran before the counter.
    if counted.unwrap_or(0) != sample.writes {
        return Err(two_parties(
            name,
            &format!(
                "the counter reads {} after {} writes",
                counted.unwrap_or(0),
                sample.writes
            ),
        ));
    }
    Ok(sample)
}

fn two_parties(name: &str, what: &str) -> Failure {
    Failure::new(
        exit::SOFTWARE,
        format!("{name}: {what}: two parties held the lock where one belongs"),
    )
}

/// One read-write lock with one number of workers, summed up over its rounds.
pub(crate) struct RwSummary {
    /// Median of the rounds' acquisitions (both sides) per second.
    pub(crate) rate: f64,
    /// (slowest - fastest round) / median.
    pub(crate) spread: f64,
    /// Writes among the acquisitions.
    pub(crate) write_share: f64,
    pub(crate) redis_cpu_us: f64,
    pub(crate) commands: f64,
    /// Waits per side over every round: p50, p99 and the longest.
    pub(crate) read_wait: [Duration; 3],
    pub(crate) write_wait: [Duration; 3],
    /// The largest difference between two workers' acquisitions in a round.
    pub(crate) worker_gap: u64,
}

pub(crate) fn summarize(samples: &[RwSample]) -> RwSummary {
    let (rate, spread) =
        kinds::median_rate(samples.iter().map(|s| (s.reads + s.writes, s.cost.seconds)));
    let ops: u64 = samples.iter().map(|s| s.reads + s.writes).sum();
    let writes: u64 = samples.iter().map(|s| s.writes).sum();
    let per_op = |total: f64| if ops > 0 { total / ops as f64 } else { 0.0 };
    RwSummary {
        rate,
        spread,
        write_share: per_op(writes as f64),
        redis_cpu_us: per_op(
            samples
                .iter()
                .map(|s| s.cost.redis_cpu_seconds)
                .sum::<f64>()
                * 1e6,
        ),
        commands: per_op(samples.iter().map(|s| s.cost.commands as f64).sum()),
        read_wait: kinds::waits(samples.iter().flat_map(|s| s.read_waits.clone()).collect()),
        write_wait: kinds::waits(samples.iter().flat_map(|s| s.write_waits.clone()).collect()),
        worker_gap: kinds::worker_gap(samples.iter().map(|s| &s.per_worker[..])),
    }
}

/// The scenario's part of the table.
pub(crate) fn table(series: &[KindSeries<RwSubject>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut workers: Vec<usize> = series.iter().map(|s| s.workers).collect();
    workers.dedup();
    for n in workers {
        let _ = writeln!(
            out,
            "\nread-write, {n} workers sharing one client, one acquisition in {WRITE_EVERY} \
             writing (acq/s: both sides; waits in ms, p50 / p99 / longest; per acquisition: \
             Redis CPU, server commands, the flag and counter checks included)"
        );
        let _ = writeln!(
            out,
            "  {:<36} {:>8} {:>7} {:>7} {:>22} {:>22} {:>10} {:>9} {:>11}",
            "implementation",
            "acq/s",
            "spread",
            "writes",
            "read wait",
            "write wait",
            "Redis CPU",
            "commands",
            "worker gap"
        );
        for s in series.iter().filter(|s| s.workers == n) {
            let sum = summarize(&s.samples);
            let _ = writeln!(
                out,
                "  {:<36} {:>8.0} {:>6.0}% {:>6.0}% {:>22} {:>22} {:>7.1} us {:>9.1} {:>11}",
                s.subject.label(),
                sum.rate,
                sum.spread * 100.0,
                sum.write_share * 100.0,
                kinds::triple(sum.read_wait),
                kinds::triple(sum.write_wait),
                sum.redis_cpu_us,
                sum.commands,
                sum.worker_gap
            );
        }
    }
    out
}

/// The scenario's part of the JSON.
pub(crate) fn json(series: &[KindSeries<RwSubject>]) -> serde_json::Value {
    serde_json::Value::Array(
        series
            .iter()
            .map(|s| {
                let sum = summarize(&s.samples);
                serde_json::json!({
                    "workers": s.workers,
                    "implementation": s.subject.key(),
                    "label": s.subject.label(),
                    "per_second_median": sum.rate,
                    "spread": sum.spread,
                    "write_share": sum.write_share,
                    "read_wait": kinds::triple_json(sum.read_wait),
                    "write_wait": kinds::triple_json(sum.write_wait),
                    "redis_cpu_us_per_acquisition": sum.redis_cpu_us,
                    "commands_per_acquisition": sum.commands,
                    "worker_gap_max": sum.worker_gap,
                    "rounds": s.samples.iter().map(|r| serde_json::json!({
                        "reads": r.reads,
                        "writes": r.writes,
                        "seconds": r.cost.seconds,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

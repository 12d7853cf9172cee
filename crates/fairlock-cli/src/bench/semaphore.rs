//! The semaphore scenario of `fairlock bench` (`bench semaphore`):
//! `--workers` tasks of one process share one client and a semaphore of
//! [`PERMITS`] permits; each takes one permit, or two (one time in
//! [`TWO_EVERY`]), in turn for the round's duration. Compared: fairlock's
//! semaphore under `native` (fair, a fencing token per acquisition) and
//! under `redisson` (Redisson's `RPermitExpirableSemaphore`: permit ids with
//! leases), and the plain counter semaphore (Redisson's `RSemaphore`: no
//! owner, no lease), the cheapest design there is.
//!
//! Under the permits a worker adds them to a counter (`INCRBY`) and takes
//! them off again (`DECRBY`): a count above the total means more permits
//! out than there are, and fails the run. Figured per acquisition: Redis CPU
//! and commands; per request size: the waits (p50, p99, longest), which is
//! where a large request's fate shows (fair: never overtaken by small ones).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol};
use redis::aio::MultiplexedConnection;

use super::measure::{self, Cost, Meter, redis_failure};
use crate::{Failure, exit, failure};

/// The semaphore's total.
const PERMITS: u32 = 4;

/// One request in this many asks for two permits.
const TWO_EVERY: u64 = 4;

/// How long the workers may take to stop once asked.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// One semaphore under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SemSubject {
    Native,
    Redisson,
    Counting,
}

impl SemSubject {
    pub(crate) const ALL: [SemSubject; 3] = [
        SemSubject::Native,
        SemSubject::Redisson,
        SemSubject::Counting,
    ];

    pub(crate) fn key(self) -> &'static str {
        match self {
            SemSubject::Native => "native-semaphore",
            SemSubject::Redisson => "redisson-semaphore",
            SemSubject::Counting => "redisson-counting-semaphore",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            SemSubject::Native => "fairlock native semaphore (fair)",
            SemSubject::Redisson => "fairlock redisson expirable semaphore",
            SemSubject::Counting => "fairlock redisson counting semaphore",
        }
    }
}

/// One round of one semaphore.
#[derive(Clone, Debug, Default)]
pub(crate) struct SemSample {
    pub(crate) acquisitions: u64,
    pub(crate) cost: Cost,
    /// From asking to holding, per request size (one permit, two).
    pub(crate) waits: [Vec<Duration>; 2],
    pub(crate) per_worker: Vec<u64>,
}

/// The semaphore as the workers share it.
#[derive(Clone)]
enum Shared {
    Expiring(fairlock::Semaphore),
    Counting(fairlock::CountingSemaphore),
}

impl Shared {
    async fn hold(&self, n: u32) -> Result<Held, Failure> {
        Ok(match self {
            Shared::Expiring(s) => Held::Expiring(s.acquire(n).await?),
            Shared::Counting(s) => Held::Counting(s.acquire(n).await?),
        })
    }
}

enum Held {
    Expiring(fairlock::Permits),
    Counting(fairlock::CountedPermits),
}

impl Held {
    async fn release(self) -> Result<(), Failure> {
        match self {
            Held::Expiring(p) => p.release().await?,
            Held::Counting(p) => p.release().await?,
        }
        Ok(())
    }
}

/// `workers` tasks sharing one client of `subject` take permits of the
/// semaphore `name` for `duration`.
pub(crate) async fn run(
    subject: SemSubject,
    url: &str,
    name: &str,
    workers: usize,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<SemSample, Failure> {
    let protocol = match subject {
        SemSubject::Native => Protocol::Native,
        SemSubject::Redisson | SemSubject::Counting => Protocol::Redisson,
    };
    let client = LockClient::with_config(ClientConfig::from_url(url)?.protocol(protocol))
        .await
        .map_err(failure::connect_failure)?;
    let shared = match subject {
        SemSubject::Counting => Shared::Counting(client.counting_semaphore(name, PERMITS)?),
        _ => Shared::Expiring(client.semaphore(name, PERMITS)?),
    };
    // Warm up: scripts loaded, connections made, the object initialised.
    shared.hold(1).await?.release().await?;
    let data = measure::connect(url).await?;
    let out = format!("{name}:out");
    let stop = Arc::new(AtomicBool::new(false));
    let meter = Meter::start(admin).await?;
    let mut tasks = Vec::with_capacity(workers);
    for me in 0..workers {
        let (shared, mut data, stop, out) =
            (shared.clone(), data.clone(), Arc::clone(&stop), out.clone());
        tasks.push(tokio::spawn(async move {
            let mut done = SemSample::default();
            let mut draw = (me as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            while !stop.load(Ordering::SeqCst) {
                draw ^= draw << 13;
                draw ^= draw >> 7;
                draw ^= draw << 17;
                let n: u32 = if draw.is_multiple_of(TWO_EVERY) { 2 } else { 1 };
                let asked = Instant::now();
                let held = shared.hold(n).await?;
                let waited = asked.elapsed();
                let now: u32 = redis::cmd("INCRBY")
                    .arg(&out)
                    .arg(n)
                    .query_async(&mut data)
                    .await
                    .map_err(|e| redis_failure("INCRBY", e))?;
                let _: i64 = redis::cmd("DECRBY")
                    .arg(&out)
                    .arg(n)
                    .query_async(&mut data)
                    .await
                    .map_err(|e| redis_failure("DECRBY", e))?;
                if now > PERMITS {
                    return Err(Failure::new(
                        exit::SOFTWARE,
                        format!("{now} permits of {PERMITS} were out at once"),
                    ));
                }
                held.release().await?;
                done.acquisitions += 1;
                done.waits[n as usize - 1].push(waited);
            }
            done.per_worker.push(done.acquisitions);
            Ok::<_, Failure>(done)
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::SeqCst);
    let mut sample = SemSample::default();
    let drained = Instant::now() + DRAIN_LIMIT;
    let mut failure = None;
    for mut task in tasks {
        match tokio::time::timeout_at(drained.into(), &mut task).await {
            Ok(Ok(Ok(done))) => {
                sample.acquisitions += done.acquisitions;
                let [one, two] = done.waits;
                sample.waits[0].extend(one);
                sample.waits[1].extend(two);
                sample.per_worker.extend(done.per_worker);
            }
            Ok(Ok(Err(f))) => {
                failure.get_or_insert(f);
            }
            Ok(Err(e)) => {
                failure.get_or_insert(Failure::new(
                    exit::SOFTWARE,
                    format!("a bench worker failed: {e}"),
                ));
            }
            Err(_) => {
                task.abort();
                failure.get_or_insert(Failure::new(
                    exit::SOFTWARE,
                    format!("no worker of {name} stopped within {DRAIN_LIMIT:?}: a lost wake-up?"),
                ));
            }
        }
    }
    sample.cost = meter.stop(admin).await?;
    client.shutdown().await;
    match failure {
        Some(f) => Err(f),
        None => Ok(sample),
    }
}

fn waits(mut all: Vec<Duration>) -> [Duration; 3] {
    all.sort();
    let at = |p: f64| {
        all.get(((all.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    [at(0.5), at(0.99), all.last().copied().unwrap_or_default()]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One semaphore with one number of workers, over its rounds.
struct Summary {
    rate: f64,
    spread: f64,
    redis_cpu_us: f64,
    commands: f64,
    waits: [[Duration; 3]; 2],
    worker_gap: u64,
}

fn summarize(samples: &[SemSample]) -> Summary {
    let mut rates: Vec<f64> = samples
        .iter()
        .map(|s| {
            if s.cost.seconds > 0.0 {
                s.acquisitions as f64 / s.cost.seconds
            } else {
                0.0
            }
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    let rate = rates.get(rates.len() / 2).copied().unwrap_or(0.0);
    let spread = match (rates.first(), rates.last()) {
        (Some(first), Some(last)) if rate > 0.0 => (last - first) / rate,
        _ => 0.0,
    };
    let ops: u64 = samples.iter().map(|s| s.acquisitions).sum();
    let per_op = |total: f64| if ops > 0 { total / ops as f64 } else { 0.0 };
    let pooled = |i: usize| waits(samples.iter().flat_map(|s| s.waits[i].clone()).collect());
    Summary {
        rate,
        spread,
        redis_cpu_us: per_op(
            samples
                .iter()
                .map(|s| s.cost.redis_cpu_seconds)
                .sum::<f64>()
                * 1e6,
        ),
        commands: per_op(samples.iter().map(|s| s.cost.commands as f64).sum()),
        waits: [pooled(0), pooled(1)],
        worker_gap: samples
            .iter()
            .map(|s| {
                let max = s.per_worker.iter().max().copied().unwrap_or(0);
                let min = s.per_worker.iter().min().copied().unwrap_or(0);
                max - min
            })
            .max()
            .unwrap_or(0),
    }
}

/// The scenario's part of the table.
pub(crate) fn table(series: &[super::SemSeries]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut workers: Vec<usize> = series.iter().map(|s| s.workers).collect();
    workers.dedup();
    for n in workers {
        let _ = writeln!(
            out,
            "\nsemaphore of {PERMITS} permits, {n} workers sharing one client, one request in \
             {TWO_EVERY} for two (acq/s; waits in ms, p50 / p99 / longest; per acquisition: Redis \
             CPU, server commands, the counter check included)"
        );
        let _ = writeln!(
            out,
            "  {:<38} {:>8} {:>7} {:>22} {:>22} {:>10} {:>9} {:>11}",
            "implementation",
            "acq/s",
            "spread",
            "wait for one",
            "wait for two",
            "Redis CPU",
            "commands",
            "worker gap"
        );
        for s in series.iter().filter(|s| s.workers == n) {
            let sum = summarize(&s.samples);
            let triple =
                |w: [Duration; 3]| format!("{:.1} / {:.1} / {:.0}", ms(w[0]), ms(w[1]), ms(w[2]));
            let _ = writeln!(
                out,
                "  {:<38} {:>8.0} {:>6.0}% {:>22} {:>22} {:>7.1} us {:>9.1} {:>11}",
                s.subject.label(),
                sum.rate,
                sum.spread * 100.0,
                triple(sum.waits[0]),
                triple(sum.waits[1]),
                sum.redis_cpu_us,
                sum.commands,
                sum.worker_gap
            );
        }
    }
    out
}

/// The scenario's part of the JSON.
pub(crate) fn json(series: &[super::SemSeries]) -> serde_json::Value {
    let wait = |w: [Duration; 3]| serde_json::json!({"p50_ms": ms(w[0]), "p99_ms": ms(w[1]), "max_ms": ms(w[2])});
    serde_json::Value::Array(
        series
            .iter()
            .map(|s| {
                let sum = summarize(&s.samples);
                serde_json::json!({
                    "workers": s.workers,
                    "permits": PERMITS,
                    "implementation": s.subject.key(),
                    "label": s.subject.label(),
                    "per_second_median": sum.rate,
                    "spread": sum.spread,
                    "wait_for_one": wait(sum.waits[0]),
                    "wait_for_two": wait(sum.waits[1]),
                    "redis_cpu_us_per_acquisition": sum.redis_cpu_us,
                    "commands_per_acquisition": sum.commands,
                    "worker_gap_max": sum.worker_gap,
                    "rounds": s.samples.iter().map(|r| serde_json::json!({
                        "acquisitions": r.acquisitions,
                        "seconds": r.cost.seconds,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect(),
    )
}

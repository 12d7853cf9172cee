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

use super::kinds::{self, Draws, KindSeries, KindSubject};
use super::measure::{self, Cost, Meter, redis_failure};
use crate::{Failure, exit, failure};

/// The semaphore's total.
pub(crate) const PERMITS: u32 = 4;

/// One request in this many asks for two permits.
pub(crate) const TWO_EVERY: u64 = 4;

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
}

impl KindSubject for SemSubject {
    const SCENARIO: &'static str = "semaphore";
    const SIZE: &'static str = "workers";
    type Sample = SemSample;

    async fn run(
        self,
        url: &str,
        name: &str,
        workers: usize,
        duration: Duration,
        admin: &mut MultiplexedConnection,
    ) -> Result<SemSample, Failure> {
        run(self, url, name, workers, duration, admin).await
    }

    fn key(self) -> &'static str {
        match self {
            SemSubject::Native => "native-semaphore",
            SemSubject::Redisson => "redisson-semaphore",
            SemSubject::Counting => "redisson-counting-semaphore",
        }
    }

    fn label(self) -> &'static str {
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
async fn run(
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
            let mut draws = Draws::new(me);
            while !stop.load(Ordering::SeqCst) {
                let n: u32 = if draws.one_in(TWO_EVERY) { 2 } else { 1 };
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
    let done = kinds::drain(tasks, name).await;
    let cost = meter.stop(admin).await?;
    client.shutdown().await;
    let mut sample = SemSample {
        cost,
        ..SemSample::default()
    };
    for one in done? {
        sample.acquisitions += one.acquisitions;
        let [first, second] = one.waits;
        sample.waits[0].extend(first);
        sample.waits[1].extend(second);
        sample.per_worker.extend(one.per_worker);
    }
    Ok(sample)
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
    let (rate, spread) =
        kinds::median_rate(samples.iter().map(|s| (s.acquisitions, s.cost.seconds)));
    let ops: u64 = samples.iter().map(|s| s.acquisitions).sum();
    let per_op = |total: f64| if ops > 0 { total / ops as f64 } else { 0.0 };
    let pooled = |i: usize| kinds::waits(samples.iter().flat_map(|s| s.waits[i].clone()).collect());
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
        worker_gap: kinds::worker_gap(samples.iter().map(|s| &s.per_worker[..])),
    }
}

/// The scenario's part of the table.
pub(crate) fn table(series: &[KindSeries<SemSubject>]) -> String {
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
            let _ = writeln!(
                out,
                "  {:<38} {:>8.0} {:>6.0}% {:>22} {:>22} {:>7.1} us {:>9.1} {:>11}",
                s.subject.label(),
                sum.rate,
                sum.spread * 100.0,
                kinds::triple(sum.waits[0]),
                kinds::triple(sum.waits[1]),
                sum.redis_cpu_us,
                sum.commands,
                sum.worker_gap
            );
        }
    }
    out
}

/// The scenario's part of the JSON.
pub(crate) fn json(series: &[KindSeries<SemSubject>]) -> serde_json::Value {
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
                    "wait_for_one": kinds::triple_json(sum.waits[0]),
                    "wait_for_two": kinds::triple_json(sum.waits[1]),
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

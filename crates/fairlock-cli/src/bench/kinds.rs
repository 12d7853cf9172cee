//! What the scenarios of the other kinds (`read-write`, `semaphore`) share:
//! a subject of one of them ([`KindSubject`]), its rounds
//! ([`KindSeries`]), running one round of each in turn, the workers'
//! draws, their drain, and the wait and rate figures of the table.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use tokio::task::JoinHandle;

use super::measure;
use crate::{Failure, exit};

/// How long the workers may take to stop once asked.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// One implementation of a kind under test.
pub(crate) trait KindSubject: Copy {
    /// The scenario, in lock names and messages: `read-write`.
    const SCENARIO: &'static str;
    /// What a series' size counts, in messages: `workers`.
    const SIZE: &'static str;
    /// One round's figures.
    type Sample;
    /// The name in the JSON output.
    fn key(self) -> &'static str;
    /// The name in the table.
    fn label(self) -> &'static str;
    /// One round: `workers` tasks (or waiters, as `SIZE` says) on the
    /// object `name` for `duration`.
    async fn run(
        self,
        url: &str,
        name: &str,
        workers: usize,
        duration: Duration,
        admin: &mut MultiplexedConnection,
    ) -> Result<Self::Sample, Failure>;
}

/// Every round of one implementation with one number of workers (or
/// waiters, as `S::SIZE` says).
pub(crate) struct KindSeries<S: KindSubject> {
    pub(crate) workers: usize,
    pub(crate) subject: S,
    pub(crate) samples: Vec<S::Sample>,
}

impl<S: KindSubject> KindSeries<S> {
    /// Each of `subjects` with each number of `workers`.
    pub(crate) fn each(subjects: &[S], workers: &[usize]) -> Vec<Self> {
        workers
            .iter()
            .flat_map(|&n| {
                subjects.iter().map(move |&subject| KindSeries {
                    workers: n,
                    subject,
                    samples: Vec::new(),
                })
            })
            .collect()
    }
}

/// Round `round` of every series in turn, on fresh names of the run
/// `run_id` (their keys deleted after each).
pub(crate) async fn run_round<S: KindSubject>(
    series: &mut [KindSeries<S>],
    round: u32,
    args: &super::BenchArgs,
    url: &str,
    run_id: &str,
    admin: &mut MultiplexedConnection,
) -> Result<(), Failure> {
    for series in series {
        let name = format!(
            "{run_id}-{}-{}-{}-{round}",
            S::SCENARIO,
            series.workers,
            series.subject.key()
        );
        if !args.json {
            eprintln!(
                "round {round}/{}: {}, {} {}: {}",
                args.rounds,
                S::SCENARIO,
                series.workers,
                S::SIZE,
                series.subject.label()
            );
        }
        let sample = series
            .subject
            .run(url, &name, series.workers, args.duration, admin)
            .await
            .map_err(|f| {
                Failure::new(
                    f.code,
                    format!(
                        "{} ({}): {}",
                        series.subject.label(),
                        S::SCENARIO,
                        f.message
                    ),
                )
            })?;
        measure::delete_keys(admin, &name).await?;
        series.samples.push(sample);
    }
    Ok(())
}

/// A worker's draws: xorshift, seeded by its number.
pub(crate) struct Draws(u64);

impl Draws {
    pub(crate) fn new(worker: usize) -> Self {
        Self((worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// `true` one time in `n`.
    pub(crate) fn one_in(&mut self, n: u64) -> bool {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.is_multiple_of(n)
    }
}

/// Wait for every worker (at most [`DRAIN_LIMIT`] in all: longer means a
/// lost wake-up): what each did, or the first failure.
pub(crate) async fn drain<T>(
    tasks: Vec<JoinHandle<Result<T, Failure>>>,
    name: &str,
) -> Result<Vec<T>, Failure> {
    let drained = Instant::now() + DRAIN_LIMIT;
    let mut done = Vec::with_capacity(tasks.len());
    let mut failure = None;
    for mut task in tasks {
        match tokio::time::timeout_at(drained.into(), &mut task).await {
            Ok(Ok(Ok(one))) => done.push(one),
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
    match failure {
        Some(f) => Err(f),
        None => Ok(done),
    }
}

/// p50, p99 and the longest of `all`.
pub(crate) fn waits(mut all: Vec<Duration>) -> [Duration; 3] {
    all.sort();
    let at = |p: f64| {
        all.get(((all.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or_default()
    };
    [at(0.5), at(0.99), all.last().copied().unwrap_or_default()]
}

/// Milliseconds.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `p50 / p99 / longest` in milliseconds, for the table.
pub(crate) fn triple(w: [Duration; 3]) -> String {
    format!("{:.1} / {:.1} / {:.0}", ms(w[0]), ms(w[1]), ms(w[2]))
}

/// The same for the JSON.
pub(crate) fn triple_json(w: [Duration; 3]) -> serde_json::Value {
    serde_json::json!({"p50_ms": ms(w[0]), "p99_ms": ms(w[1]), "max_ms": ms(w[2])})
}

/// The median of the rounds' rates (`ops` over `seconds` each) and the
/// spread, (fastest - slowest) / median.
pub(crate) fn median_rate(rounds: impl Iterator<Item = (u64, f64)>) -> (f64, f64) {
    let mut rates: Vec<f64> = rounds
        .map(|(ops, seconds)| {
            if seconds > 0.0 {
                ops as f64 / seconds
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
    (rate, spread)
}

/// The largest difference between two workers' acquisitions in a round.
pub(crate) fn worker_gap<'a>(rounds: impl Iterator<Item = &'a [u64]>) -> u64 {
    rounds
        .map(|per_worker| {
            let max = per_worker.iter().max().copied().unwrap_or(0);
            let min = per_worker.iter().min().copied().unwrap_or(0);
            max - min
        })
        .max()
        .unwrap_or(0)
}

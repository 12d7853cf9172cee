//! The latch scenario of `fairlock bench` (`bench latch`): `--waiters`
//! tasks of one process share one client and wait on a count-down latch
//! set to 1; once every waiter is waiting (each read the count twice: before
//! and after subscribing), one count-down opens it, and the time from the
//! count-down's sending to the last waiter's return is one sample. Repeated
//! for the round's duration. Compared: the latch under `native` and under
//! `redisson` (Redisson's `RCountDownLatch`); under both the message wakes
//! every waiter, which reads the count once more (a message alone proves
//! nothing: anyone can publish). Figured per opening: the wake time (p50,
//! p99, longest) and the script calls from the count-down to the last
//! return.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol};
use redis::aio::MultiplexedConnection;

use super::kinds::{self, KindSeries, KindSubject};
use super::measure;
use crate::{Failure, exit, failure};

/// How long the waiters may take to be all waiting, or all woken.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// One latch under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LatchSubject {
    Native,
    Redisson,
}

impl LatchSubject {
    pub(crate) const ALL: [LatchSubject; 2] = [LatchSubject::Native, LatchSubject::Redisson];
}

impl KindSubject for LatchSubject {
    const SCENARIO: &'static str = "latch";
    const SIZE: &'static str = "waiters";
    type Sample = LatchSample;

    async fn run(
        self,
        url: &str,
        name: &str,
        waiters: usize,
        duration: Duration,
        admin: &mut MultiplexedConnection,
    ) -> Result<LatchSample, Failure> {
        run(self, url, name, waiters, duration, admin).await
    }

    fn key(self) -> &'static str {
        match self {
            LatchSubject::Native => "native-latch",
            LatchSubject::Redisson => "redisson-latch",
        }
    }

    fn label(self) -> &'static str {
        match self {
            LatchSubject::Native => "fairlock native latch",
            LatchSubject::Redisson => "fairlock redisson latch (RCountDownLatch)",
        }
    }
}

/// One round of one latch.
#[derive(Clone, Debug, Default)]
pub(crate) struct LatchSample {
    /// From the count-down sent to the last waiter returned, per opening.
    pub(crate) wakes: Vec<Duration>,
    /// Script calls from the count-down to the last return, summed.
    pub(crate) script_calls: u64,
}

/// Wait until the server ran `calls` more scripts than `before`.
async fn until_scripts(
    admin: &mut MultiplexedConnection,
    before: u64,
    calls: u64,
    what: &str,
) -> Result<u64, Failure> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let now = measure::Server::read(admin).await?.script_calls();
        if now >= before + calls {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("{what}: not within {SETTLE_LIMIT:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `waiters` tasks sharing one client of `subject` wait on the latch
/// `name`, opened again and again for `duration`.
async fn run(
    subject: LatchSubject,
    url: &str,
    name: &str,
    waiters: usize,
    duration: Duration,
    admin: &mut MultiplexedConnection,
) -> Result<LatchSample, Failure> {
    let protocol = match subject {
        LatchSubject::Native => Protocol::Native,
        LatchSubject::Redisson => Protocol::Redisson,
    };
    // Waiters that no message wakes read again only every 100 s: a wake
    // within the round is the message's.
    let config = ClientConfig::from_url(url)?
        .protocol(protocol)
        .waiter_ttl(Duration::from_secs(300));
    let client = LockClient::with_config(config)
        .await
        .map_err(failure::connect_failure)?;
    let latch = client.count_down_latch(name)?;
    // Warm up: scripts loaded, connections made.
    latch.try_set_count(1).await?;
    latch.count_down().await?;
    let mut sample = LatchSample::default();
    let end = Instant::now() + duration;
    while sample.wakes.is_empty() || Instant::now() < end {
        if !latch.try_set_count(1).await? {
            return Err(Failure::new(exit::SOFTWARE, "the latch was not open"));
        }
        let before = measure::Server::read(admin).await?.script_calls();
        let woken = Arc::new(std::sync::Mutex::new(Vec::with_capacity(waiters)));
        let tasks: Vec<_> = (0..waiters)
            .map(|_| {
                let (latch, woken) = (latch.clone(), Arc::clone(&woken));
                tokio::spawn(async move {
                    latch.wait().await?;
                    woken
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Instant::now());
                    Ok::<_, Failure>(())
                })
            })
            .collect();
        let waiting =
            until_scripts(admin, before, 2 * waiters as u64, "every waiter waiting").await?;
        if !woken.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
            return Err(Failure::new(
                exit::SOFTWARE,
                "a waiter returned before the count reached 0",
            ));
        }
        let opened = Instant::now();
        latch.count_down().await?;
        kinds::drain(tasks, name).await?;
        let after = measure::Server::read(admin).await?.script_calls();
        let last = woken
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .max()
            .copied();
        let Some(last) = last else {
            return Err(Failure::new(exit::SOFTWARE, "no waiter returned"));
        };
        sample.wakes.push(last.saturating_duration_since(opened));
        sample.script_calls += after.saturating_sub(waiting);
    }
    client.shutdown().await;
    Ok(sample)
}

/// One latch with one number of waiters, over its rounds.
struct Summary {
    openings: usize,
    wakes: [Duration; 3],
    scripts_per_opening: f64,
}

fn summarize(samples: &[LatchSample]) -> Summary {
    let openings: usize = samples.iter().map(|s| s.wakes.len()).sum();
    let scripts: u64 = samples.iter().map(|s| s.script_calls).sum();
    Summary {
        openings,
        wakes: kinds::waits(samples.iter().flat_map(|s| s.wakes.clone()).collect()),
        scripts_per_opening: if openings > 0 {
            scripts as f64 / openings as f64
        } else {
            0.0
        },
    }
}

/// The scenario's part of the table.
pub(crate) fn table(series: &[KindSeries<LatchSubject>]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut sizes: Vec<usize> = series.iter().map(|s| s.workers).collect();
    sizes.dedup();
    for n in sizes {
        let _ = writeln!(
            out,
            "\ncount-down latch, {n} waiters sharing one client (from the last count-down to the \
             last waiter woken, ms: p50 / p99 / longest; script calls per opening, the \
             count-down's included)"
        );
        let _ = writeln!(
            out,
            "  {:<42} {:>9} {:>22} {:>16}",
            "implementation", "openings", "wake", "scripts/opening"
        );
        for s in series.iter().filter(|s| s.workers == n) {
            let sum = summarize(&s.samples);
            let _ = writeln!(
                out,
                "  {:<42} {:>9} {:>22} {:>16.1}",
                s.subject.label(),
                sum.openings,
                kinds::triple(sum.wakes),
                sum.scripts_per_opening
            );
        }
    }
    out
}

/// The scenario's part of the JSON.
pub(crate) fn json(series: &[KindSeries<LatchSubject>]) -> serde_json::Value {
    serde_json::Value::Array(
        series
            .iter()
            .map(|s| {
                let sum = summarize(&s.samples);
                serde_json::json!({
                    "waiters": s.workers,
                    "implementation": s.subject.key(),
                    "label": s.subject.label(),
                    "openings": sum.openings,
                    "wake": kinds::triple_json(sum.wakes),
                    "script_calls_per_opening": sum.scripts_per_opening,
                })
            })
            .collect(),
    )
}

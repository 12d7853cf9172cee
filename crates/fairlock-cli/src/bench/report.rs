//! The results of a run: summaries, the table on stdout and the JSON.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};

use super::scenario::Sample;
use super::subject::{RSLOCK_RETRY_DELAY, Subject};
use super::{Case, Results, Series};
use crate::duration;

/// Operations per second of one sample.
fn rate(sample: &Sample) -> f64 {
    if sample.cost.seconds > 0.0 {
        sample.ops as f64 / sample.cost.seconds
    } else {
        0.0
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One implementation in one case, summed up over its rounds.
pub(crate) struct Summary {
    /// Median of the rounds' operations per second.
    pub(crate) rate: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// (max - min) / median of the rounds' rates.
    pub(crate) spread: f64,
    /// Per operation, over all rounds.
    pub(crate) redis_cpu_us: f64,
    pub(crate) commands: f64,
    pub(crate) script_calls: f64,
    pub(crate) script_us: f64,
    pub(crate) client_cpu_us: f64,
    pub(crate) handoff_p50_us: Option<f64>,
    pub(crate) handoff_p99_us: Option<f64>,
    pub(crate) handoffs: usize,
    /// `lock` called -> returned, over all rounds (contended, shared).
    pub(crate) wait_p50_us: Option<f64>,
    pub(crate) wait_p99_us: Option<f64>,
    /// The largest difference between two workers' acquisitions in a round.
    pub(crate) worker_spread: Option<u64>,
    /// Every round's counter matched its acquisitions.
    pub(crate) counter_ok: Option<bool>,
}

pub(crate) fn summarize(samples: &[Sample]) -> Summary {
    let rates: Vec<f64> = samples.iter().map(rate).collect();
    let med = median(&rates);
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    let ops: u64 = samples.iter().map(|s| s.ops).sum();
    let per_op = |total: f64| if ops > 0 { total / ops as f64 } else { 0.0 };
    let mut latencies: Vec<Duration> = samples
        .iter()
        .flat_map(|s| s.handoff_latencies.iter().copied())
        .collect();
    latencies.sort();
    let mut waits: Vec<Duration> = samples
        .iter()
        .flat_map(|s| s.waits.iter().copied())
        .collect();
    waits.sort();
    let worker_spread = samples
        .iter()
        .filter(|s| !s.per_worker.is_empty())
        .map(|s| {
            let max = s.per_worker.iter().max().copied().unwrap_or(0);
            let min = s.per_worker.iter().min().copied().unwrap_or(0);
            max - min
        })
        .max();
    let counter_ok = samples
        .iter()
        .filter_map(|s| s.counter_ok)
        .reduce(|a, b| a && b);
    Summary {
        rate: med,
        min: if min.is_finite() { min } else { 0.0 },
        max,
        spread: if med > 0.0 { (max - min) / med } else { 0.0 },
        redis_cpu_us: per_op(
            samples
                .iter()
                .map(|s| s.cost.redis_cpu_seconds)
                .sum::<f64>()
                * 1e6,
        ),
        commands: per_op(samples.iter().map(|s| s.cost.commands as f64).sum()),
        script_calls: per_op(samples.iter().map(|s| s.cost.script_calls as f64).sum()),
        script_us: per_op(samples.iter().map(|s| s.cost.script_usec as f64).sum()),
        client_cpu_us: per_op(
            samples
                .iter()
                .map(|s| s.cost.client_cpu_seconds)
                .sum::<f64>()
                * 1e6,
        ),
        handoff_p50_us: percentile(&latencies, 0.5).map(micros),
        handoff_p99_us: percentile(&latencies, 0.99).map(micros),
        handoffs: latencies.len(),
        wait_p50_us: percentile(&waits, 0.5).map(micros),
        wait_p99_us: percentile(&waits, 0.99).map(micros),
        worker_spread,
        counter_ok,
    }
}

impl Results {
    /// The median PING rate (round trips per second).
    pub(crate) fn ping_rate(&self) -> f64 {
        summarize(&self.ping).rate
    }

    /// rslock's summary in `case`, if it ran there.
    pub(crate) fn rslock(&self, case: Case) -> Option<Summary> {
        self.series
            .iter()
            .find(|s| s.case == case && s.subject == Subject::Rslock)
            .map(|s| summarize(&s.samples))
    }

    /// The cases, in their order.
    pub(crate) fn cases(&self) -> Vec<Case> {
        let mut cases: Vec<Case> = Vec::new();
        for series in &self.series {
            if !cases.contains(&series.case) {
                cases.push(series.case);
            }
        }
        cases
    }

    fn series_of(&self, case: Case) -> impl Iterator<Item = &Series> {
        self.series.iter().filter(move |s| s.case == case)
    }
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0 && a > 0.0).then(|| a / b)
}

fn fmt_opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn machine_line(results: &Results) -> String {
    let load = |l: Option<f64>| l.map_or_else(|| "?".into(), |l| format!("{l:.1}"));
    format!(
        "{} cores, load average {} before and {} after the run; {} ({})",
        results.cores,
        load(results.load_before),
        load(results.load_after),
        results.server_version,
        if results.private_server {
            "a private redis-server"
        } else {
            "the server given"
        }
    )
}

/// The table on stdout.
pub(crate) fn table(results: &Results) -> String {
    let mut out = String::new();
    let ping = summarize(&results.ping);
    let ping_rate = ping.rate;
    let _ = writeln!(
        out,
        "{}; {} round(s) of {} per implementation, interleaved; medians of the rounds",
        machine_line(results),
        results.rounds,
        duration::format(results.duration)
    );
    let _ = writeln!(
        out,
        "PING round trips: {:.0}/s (rounds {:.0}..{:.0}, spread {:.0}%), {:.1} us each",
        ping_rate,
        ping.min,
        ping.max,
        ping.spread * 100.0,
        if ping_rate > 0.0 {
            1e6 / ping_rate
        } else {
            0.0
        }
    );
    let _ = writeln!(
        out,
        "spread = (slowest - fastest round) / median: the noise; x rslock = ops/s ratio to \
         rslock (higher is faster); x PING = time per op in PING round trips; per op: Redis CPU \
         (INFO used_cpu_*), server commands (INFO commandstats, script commands included), \
         client CPU (getrusage of this process)"
    );
    for case in results.cases() {
        let rslock = results.rslock(case);
        let _ = writeln!(out);
        let _ = writeln!(out, "{}: {}", case.title(), describe(case));
        let unit = match case {
            Case::Uncontended | Case::Contended(_) | Case::Shared(_) => "ops/s",
            Case::Handoff(_) | Case::Queue(_) => "acq/s",
        };
        let _ = write!(
            out,
            "  {:<27} {:>9} {:>7} {:>8} {:>7} {:>10} {:>9} {:>10}",
            "implementation",
            unit,
            "spread",
            "x rslock",
            "x PING",
            "Redis CPU",
            "commands",
            "client CPU"
        );
        match case {
            Case::Contended(_) | Case::Shared(_) => {
                let _ = write!(
                    out,
                    " {:>11} {:>9} {:>9} {:>9}",
                    "worker gap", "hand p50", "wait p99", "counter"
                );
            }
            Case::Handoff(_) => {
                let _ = write!(
                    out,
                    " {:>9} {:>9} {:>9} {:>9}",
                    "p50", "p99", "p50/PING", "handoffs"
                );
            }
            Case::Queue(_) => {
                let _ = write!(out, " {:>12} {:>8}", "script/hand", "scripts");
            }
            Case::Uncontended => {}
        }
        let _ = writeln!(out);
        for series in results.series_of(case) {
            let s = summarize(&series.samples);
            let vs_rslock = rslock.as_ref().and_then(|r| ratio(s.rate, r.rate));
            let _ = write!(
                out,
                "  {:<27} {:>9.0} {:>6.0}% {:>8} {:>7} {:>7.1} us {:>9.1} {:>7.1} us",
                series.subject.label(),
                s.rate,
                s.spread * 100.0,
                fmt_opt(vs_rslock, 2),
                fmt_opt(ratio(ping_rate, s.rate), 2),
                s.redis_cpu_us,
                s.commands,
                s.client_cpu_us
            );
            match case {
                Case::Contended(_) | Case::Shared(_) => {
                    let _ = write!(
                        out,
                        " {:>11} {:>6} us {:>6} us {:>9}",
                        s.worker_spread
                            .map_or_else(|| "-".into(), |g| g.to_string()),
                        fmt_opt(s.handoff_p50_us, 0),
                        fmt_opt(s.wait_p99_us, 0),
                        match s.counter_ok {
                            Some(true) => "ok",
                            Some(false) => "LOST",
                            None => "-",
                        }
                    );
                }
                Case::Handoff(_) => {
                    let ping_us = if ping_rate > 0.0 {
                        1e6 / ping_rate
                    } else {
                        0.0
                    };
                    let _ = write!(
                        out,
                        " {:>6} us {:>6} us {:>9} {:>9}",
                        fmt_opt(s.handoff_p50_us, 0),
                        fmt_opt(s.handoff_p99_us, 0),
                        fmt_opt(s.handoff_p50_us.and_then(|p| ratio(p, ping_us)), 2),
                        s.handoffs
                    );
                }
                Case::Queue(_) => {
                    let _ = write!(out, " {:>9.1} us {:>8.1}", s.script_us, s.script_calls);
                }
                Case::Uncontended => {}
            }
            let _ = writeln!(out);
        }
        if let Case::Contended(_) | Case::Shared(_) = case {
            let _ = writeln!(out, "  acquisitions per worker, round 1:");
            for series in results.series_of(case) {
                if let Some(first) = series.samples.first() {
                    let counts: Vec<String> =
                        first.per_worker.iter().map(|n| n.to_string()).collect();
                    let _ = writeln!(
                        out,
                        "    {:<27} {}",
                        series.subject.label(),
                        counts.join(" ")
                    );
                }
            }
        }
    }
    let costs = metrics_costs(results);
    if !costs.is_empty() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "metrics cost: the same lock with metrics written (a Prometheus recorder, lock names \
             as labels) / without, run side by side in each round, the order swapped every round; \
             time per op: median of the rounds' ratios (their range: the noise); client CPU per \
             op: over all rounds"
        );
        let _ = writeln!(
            out,
            "  {:<27} {:<27} {:>11} {:>15} {:>10}",
            "scenario", "implementation", "time/op", "rounds", "client CPU"
        );
        for cost in &costs {
            let _ = writeln!(
                out,
                "  {:<27} {:<27} {:>11} {:>15} {:>10}",
                cost.case.title(),
                cost.subject.label(),
                fmt_opt(cost.time_ratio, 3),
                match (cost.time_min, cost.time_max) {
                    (Some(min), Some(max)) => format!("{min:.2}..{max:.2}"),
                    _ => "-".into(),
                },
                fmt_opt(cost.client_cpu_ratio, 3),
            );
        }
    }
    out.push_str(&super::read_write::table(&results.read_write));
    out.push_str(&super::semaphore::table(&results.semaphore));
    out.push_str(&super::line::table(&results.lines));
    out.push_str(&super::latch::table(&results.latch));
    out
}

/// What metrics cost one lock in one case (`--metrics-cost`).
struct MetricsCost {
    case: Case,
    /// The lock without metrics.
    subject: Subject,
    /// Time per op with / without: the median of the rounds' ratios.
    time_ratio: Option<f64>,
    time_min: Option<f64>,
    time_max: Option<f64>,
    /// Client CPU per op with / without, over all rounds.
    client_cpu_ratio: Option<f64>,
}

fn metrics_costs(results: &Results) -> Vec<MetricsCost> {
    let mut costs = Vec::new();
    for with in &results.series {
        let Some(base) = with.subject.without_metrics() else {
            continue;
        };
        let Some(without) = results
            .series
            .iter()
            .find(|s| s.case == with.case && s.subject == base)
        else {
            continue;
        };
        // Time per op is 1 / rate: with / without = rate without / rate with.
        let ratios: Vec<f64> = with
            .samples
            .iter()
            .zip(&without.samples)
            .filter_map(|(w, wo)| ratio(rate(wo), rate(w)))
            .collect();
        let cpu = |samples: &[Sample]| {
            let ops: u64 = samples.iter().map(|s| s.ops).sum();
            let cpu: f64 = samples.iter().map(|s| s.cost.client_cpu_seconds).sum();
            (ops > 0).then(|| cpu / ops as f64)
        };
        let client_cpu_ratio = match (cpu(&with.samples), cpu(&without.samples)) {
            (Some(w), Some(wo)) => ratio(w, wo),
            _ => None,
        };
        costs.push(MetricsCost {
            case: with.case,
            subject: base,
            time_ratio: (!ratios.is_empty()).then(|| median(&ratios)),
            time_min: ratios.iter().copied().reduce(f64::min),
            time_max: ratios.iter().copied().reduce(f64::max),
            client_cpu_ratio,
        });
    }
    costs
}

fn describe(case: Case) -> String {
    match case {
        Case::Uncontended => "lock + unlock by one task, nobody else".into(),
        Case::Contended(n) => format!(
            "{n} workers (own connections) GET and SET a counter under the lock; worker gap = \
             most minus fewest acquisitions of a worker in a round (fair: 1 or less); hand p50 = \
             release sent -> another worker proceeds; wait p99 = lock called -> returned, 99th \
             percentile; counter ok = no update lost; rslock retries \
             after a random delay below {}",
            duration::format(RSLOCK_RETRY_DELAY)
        ),
        Case::Shared(n) => format!(
            "{n} tasks sharing one client (one fairlock LockClient, one rslock LockManager) and \
             one connection for the counter GET and SET it under the lock, as the tasks of a \
             service do; columns as in contended"
        ),
        Case::Handoff(n) => format!(
            "{n} workers take the lock in turn with nothing under it; latency from a release \
             sent to another worker proceeding (pooled over the rounds)"
        ),
        Case::Queue(n) => format!(
            "{n} waiters in line; each holder queues a new waiter and releases; Redis script time \
             (INFO commandstats usec) and calls per handoff"
        ),
    }
}

fn sample_json(sample: &Sample) -> Value {
    let mut latencies = sample.handoff_latencies.clone();
    latencies.sort();
    let mut waits = sample.waits.clone();
    waits.sort();
    json!({
        "ops": sample.ops,
        "seconds": sample.cost.seconds,
        "per_second": rate(sample),
        "redis_cpu_seconds": sample.cost.redis_cpu_seconds,
        "commands": sample.cost.commands,
        "script_calls": sample.cost.script_calls,
        "script_usec": sample.cost.script_usec,
        "client_cpu_seconds": sample.cost.client_cpu_seconds,
        "per_worker": sample.per_worker,
        "handoffs": latencies.len(),
        "handoff_p50_us": percentile(&latencies, 0.5).map(micros),
        "handoff_p99_us": percentile(&latencies, 0.99).map(micros),
        "wait_p50_us": percentile(&waits, 0.5).map(micros),
        "wait_p99_us": percentile(&waits, 0.99).map(micros),
        "counter_ok": sample.counter_ok,
    })
}

/// The whole run as one JSON object.
pub(crate) fn json(results: &Results) -> Value {
    let ping = summarize(&results.ping);
    let ping_rate = ping.rate;
    let results_json: Vec<Value> = results
        .series
        .iter()
        .map(|series| {
            let s = summarize(&series.samples);
            let rslock = results.rslock(series.case);
            let (workers, waiters) = match series.case {
                Case::Contended(n) | Case::Shared(n) | Case::Handoff(n) => (Some(n), None),
                Case::Queue(n) => (None, Some(n)),
                Case::Uncontended => (None, None),
            };
            json!({
                "scenario": series.case.key(),
                "workers": workers,
                "waiters": waiters,
                "implementation": series.subject.key(),
                "label": series.subject.label(),
                "summary": {
                    "per_second_median": s.rate,
                    "per_second_min": s.min,
                    "per_second_max": s.max,
                    "spread": s.spread,
                    "vs_rslock": rslock.and_then(|r| ratio(s.rate, r.rate)),
                    "ping_round_trips_per_op": ratio(ping_rate, s.rate),
                    "redis_cpu_us_per_op": s.redis_cpu_us,
                    "commands_per_op": s.commands,
                    "script_calls_per_op": s.script_calls,
                    "script_us_per_op": s.script_us,
                    "client_cpu_us_per_op": s.client_cpu_us,
                    "handoffs": s.handoffs,
                    "handoff_p50_us": s.handoff_p50_us,
                    "handoff_p99_us": s.handoff_p99_us,
                    "wait_p50_us": s.wait_p50_us,
                    "wait_p99_us": s.wait_p99_us,
                    "worker_gap_max": s.worker_spread,
                    "counter_ok": s.counter_ok,
                },
                "rounds": series.samples.iter().map(sample_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "machine": {
            "cores": results.cores,
            "load_average_before": results.load_before,
            "load_average_after": results.load_after,
        },
        "redis": {
            "server": results.server_version.name.to_ascii_lowercase(),
            "version": results.server_version.version,
            "private_server": results.private_server,
        },
        "rounds": results.rounds,
        "round_seconds": results.duration.as_secs_f64(),
        "rslock_retry_delay_ms": RSLOCK_RETRY_DELAY.as_secs_f64() * 1e3,
        "ping": {
            "per_second_median": ping_rate,
            "per_second_min": ping.min,
            "per_second_max": ping.max,
            "spread": ping.spread,
            "rounds": results.ping.iter().map(sample_json).collect::<Vec<_>>(),
        },
        "results": results_json,
        "read_write": super::read_write::json(&results.read_write),
        "semaphore": super::semaphore::json(&results.semaphore),
        "queue_kinds": super::line::json(&results.lines),
        "latch": super::latch::json(&results.latch),
        "metrics_cost": metrics_costs(results)
            .iter()
            .map(|cost| json!({
                "scenario": cost.case.key(),
                "implementation": cost.subject.key(),
                "time_per_op_ratio_median": cost.time_ratio,
                "time_per_op_ratio_min": cost.time_min,
                "time_per_op_ratio_max": cost.time_max,
                "client_cpu_per_op_ratio": cost.client_cpu_ratio,
            }))
            .collect::<Vec<_>>(),
    })
}

//! Handoffs under a queue, native vs redisson, in one run:
//!
//! - Redis time per handoff (from `INFO commandstats` of a private server)
//!   with 10, 1,000 and 10,000 waiters queued;
//! - handoff latency (release -> the next owner proceeds) with 8 waiters.
//!
//! Each holder releases as soon as it is granted and, to keep the queue at
//! the same length, starts a new waiter first.
//!
//! Kept for `scripts/bench-metrics`, which builds the library with and
//! without its `metrics` feature; `fairlock bench queue` and `fairlock
//! bench handoff` measure the same beside rslock (`docs/performance.md`).
//!
//! ```text
//! cargo bench -p fairlock --bench handoff            # full run
//! cargo bench -p fairlock --bench handoff -- --quick # 10 and 1,000 waiters only
//! ```

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, FairLock, LockClient, Protocol};
use fairlock_test_support as support;
use support::RedisServer;

const NAME: &str = "bench-queue";

/// With the `metrics` feature: the most a user can turn on, a Prometheus
/// recorder and lock names as a label. Compare runs with and without the
/// feature with `scripts/bench-metrics`.
fn observe(config: fairlock::ClientConfig) -> fairlock::ClientConfig {
    #[cfg(feature = "metrics")]
    let config = config.metrics_lock_label(fairlock::LockLabel::Name);
    config
}

/// Install the Prometheus recorder (with the `metrics` feature) and say
/// which variant runs.
fn install_metrics() {
    #[cfg(feature = "metrics")]
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map(std::mem::forget)
        .expect("recorder");
    println!(
        "metrics: {}",
        if cfg!(feature = "metrics") {
            "on (Prometheus recorder, lock names as labels)"
        } else {
            "off"
        }
    );
}

/// Shared by the waiters of one run.
struct Chain {
    lock: FairLock,
    /// When the current holder called unlock.
    released_at: Mutex<Option<Instant>>,
    latencies: Mutex<Vec<Duration>>,
    handoffs: AtomicUsize,
    target: usize,
    done: AtomicBool,
    finished: tokio::sync::Notify,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn spawn_waiter(chain: &Arc<Chain>) {
    let chain2 = Arc::clone(chain);
    let task = tokio::spawn(async move {
        let guard = chain2.lock.lock().await.expect("lock");
        let now = Instant::now();
        if chain2.done.load(Ordering::SeqCst) {
            return;
        }
        if let Some(released) = *chain2.released_at.lock().unwrap() {
            chain2.latencies.lock().unwrap().push(now - released);
        }
        let n = chain2.handoffs.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= chain2.target {
            chain2.done.store(true, Ordering::SeqCst);
            chain2.finished.notify_one();
            std::mem::forget(guard);
            return;
        }
        // Keep the queue length: a new waiter joins the tail first.
        spawn_waiter(&chain2);
        *chain2.released_at.lock().unwrap() = Some(Instant::now());
        guard.unlock().await.expect("unlock");
    });
    chain.tasks.lock().unwrap().push(task);
}

/// `(calls, usec)` of EVALSHA and EVAL so far.
fn script_stats(server: &RedisServer) -> (u64, u64) {
    let info: String = server.cmd(&["INFO", "commandstats"]);
    let mut total = (0, 0);
    for line in info.lines() {
        if line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:") {
            for field in line.split(':').nth(1).unwrap_or("").split(',') {
                match field.split_once('=') {
                    Some(("calls", v)) => total.0 += v.parse::<u64>().unwrap_or(0),
                    Some(("usec", v)) => total.1 += v.parse::<u64>().unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    total
}

fn queue_len(server: &RedisServer, protocol: Protocol) -> usize {
    match protocol {
        Protocol::Redisson => server.cmd(&["LLEN", "redisson_lock_queue:{bench-queue}"]),
        _ => server.cmd(&["ZCARD", "fairlock:{bench-queue}:queue"]),
    }
}

struct Outcome {
    usec_per_handoff: f64,
    calls_per_handoff: f64,
    latencies: Vec<Duration>,
}

async fn run(protocol: Protocol, waiters: usize, handoffs: usize) -> Outcome {
    let server = RedisServer::start();
    // Long slots and leases: queued waiters never poll during the run, so
    // the script time measured is the handoffs'.
    let config = ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(protocol)
        .lease(Duration::from_secs(3600))
        .waiter_slot(Duration::from_secs(3600))
        .waiter_ttl(Duration::from_secs(3600))
        .retry_budget(Duration::from_millis(50));
    let client = LockClient::with_config(observe(config))
        .await
        .expect("connect");
    let chain = Arc::new(Chain {
        lock: client.fair_lock(NAME).expect("name"),
        released_at: Mutex::new(None),
        latencies: Mutex::new(Vec::new()),
        handoffs: AtomicUsize::new(0),
        target: handoffs,
        done: AtomicBool::new(false),
        finished: tokio::sync::Notify::new(),
        tasks: Mutex::new(Vec::new()),
    });
    let first = chain.lock.lock().await.expect("lock");
    for _ in 0..waiters {
        spawn_waiter(&chain);
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while queue_len(&server, protocol) < waiters {
        assert!(Instant::now() < deadline, "waiters did not queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the enqueue traffic (each waiter's second attempt) settle: measure
    // only once no script ran for 300 ms.
    let mut before = script_stats(&server);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = script_stats(&server);
        if now.0 == before.0 {
            break;
        }
        before = now;
    }
    let finished = chain.finished.notified();
    *chain.released_at.lock().unwrap() = Some(Instant::now());
    first.unlock().await.expect("unlock");
    finished.await;
    let after = script_stats(&server);
    let latencies = chain.latencies.lock().unwrap().clone();

    // Tear down without paying for thousands of queue exits.
    let _: () = server.cmd(&["FLUSHALL"]);
    for task in chain.tasks.lock().unwrap().drain(..) {
        task.abort();
    }
    client.flush().await;
    Outcome {
        usec_per_handoff: (after.1 - before.1) as f64 / handoffs as f64,
        calls_per_handoff: (after.0 - before.0) as f64 / handoffs as f64,
        latencies,
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

// One runtime thread: the machine has two cores and redis-server needs one.
#[tokio::main(flavor = "current_thread")]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    install_metrics();
    let sizes: &[usize] = if quick {
        &[10, 1_000]
    } else {
        &[10, 1_000, 10_000]
    };

    println!("Redis time per handoff (script usec from INFO commandstats / handoffs):");
    println!(
        "{:>10} {:>12} {:>12} {:>16}",
        "waiters", "native", "redisson", "redisson/native"
    );
    let mut native_at = Vec::new();
    for &n in sizes {
        let handoffs = 200;
        let native_run = run(Protocol::Native, n, handoffs).await;
        let redisson_run = run(Protocol::Redisson, n, handoffs).await;
        let (native, redisson) = (native_run.usec_per_handoff, redisson_run.usec_per_handoff);
        eprintln!(
            "  (script calls per handoff: native {:.1}, redisson {:.1})",
            native_run.calls_per_handoff, redisson_run.calls_per_handoff
        );
        native_at.push((n, native));
        println!(
            "{n:>10} {native:>10.1}us {redisson:>10.1}us {:>15.1}x",
            redisson / native
        );
    }
    if let (Some((small, a)), Some((large, b))) = (native_at.first(), native_at.last()) {
        println!(
            "native at {large} waiters / native at {small}: {:.2}x (target <= 2x)",
            b / a
        );
    }

    println!();
    println!(
        "Handoff latency, 8 waiters, release -> next owner proceeds (500 handoffs, interleaved x3):"
    );
    let (mut native, mut redisson) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        native.extend(run(Protocol::Native, 8, 500).await.latencies);
        redisson.extend(run(Protocol::Redisson, 8, 500).await.latencies);
    }
    native.sort();
    redisson.sort();
    let (n50, r50) = (percentile(&native, 0.5), percentile(&redisson, 0.5));
    let (n99, r99) = (percentile(&native, 0.99), percentile(&redisson, 0.99));
    println!(
        "  native    p50 {:>8.1}us  p99 {:>8.1}us",
        n50.as_secs_f64() * 1e6,
        n99.as_secs_f64() * 1e6
    );
    println!(
        "  redisson  p50 {:>8.1}us  p99 {:>8.1}us",
        r50.as_secs_f64() * 1e6,
        r99.as_secs_f64() * 1e6
    );
    println!(
        "  native p50 / redisson p50: {:.2}x (target <= 0.7x)",
        n50.as_secs_f64() / r50.as_secs_f64()
    );
}

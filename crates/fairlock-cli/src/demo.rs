//! `fairlock demo`: N clients contend for one fair lock, with a live view and
//! a summary that checks order and exclusion.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fairlock::LockClient;

use crate::private_redis::PrivateRedis;
use crate::{Cli, Failure, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Number of clients (separate connections), 1 to 64.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=64))]
    clients: u16,
    /// Acquisitions per client, 1 to 10000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rounds: u32,
    /// How long each holder keeps the lock.
    #[arg(long, value_name = "DUR", default_value = "10ms", value_parser = duration::parse)]
    hold: Duration,
}

#[derive(Default)]
struct Shared {
    /// Holders inside the critical section right now (must never exceed 1).
    inside: AtomicUsize,
    overlaps: AtomicU64,
    /// Grant order: owner -> sequence number.
    grants: Mutex<HashMap<String, u64>>,
    next_seq: AtomicU64,
    last_release: Mutex<Option<Instant>>,
    handoffs: Mutex<Vec<Duration>>,
    per_client: Mutex<Vec<u32>>,
    /// Queue order seen by the observer: (earlier, later) pairs of owners.
    queue_pairs: Mutex<HashSet<(String, String)>>,
    done: AtomicBool,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn format_latency(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1000.0)
}

pub(crate) async fn run(cli: &Cli, args: &DemoArgs) -> Result<u8, Failure> {
    let (url, _server) = match cli.explicit_url() {
        Some(url) => (url, None),
        None => {
            let server = PrivateRedis::start().map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
            let url = server.url();
            println!("started a private redis-server at {url}");
            (url, Some(server))
        }
    };
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(cli.connect(&url).await?);
    }
    let name = format!("fairlock-demo-{}", std::process::id());
    println!(
        "{} clients x {} rounds on fair lock {name:?} ({} protocol), holding {} each",
        args.clients,
        args.rounds,
        cli.protocol,
        duration::format(args.hold)
    );
    let shared = Arc::new(Shared {
        per_client: Mutex::new(vec![0; clients.len()]),
        ..Shared::default()
    });
    let started = Instant::now();
    let observer = tokio::spawn(observe(
        clients[0].clone(),
        name.clone(),
        Arc::clone(&shared),
        ids(&clients),
    ));
    let mut workers = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let lock = client.fair_lock(&name)?;
        let shared = Arc::clone(&shared);
        let (rounds, hold) = (args.rounds, args.hold);
        workers.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lock.lock().await?;
                let acquired = Instant::now();
                if shared.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    shared.overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let seq = shared.next_seq.fetch_add(1, Ordering::SeqCst);
                locked(&shared.grants).insert(guard.owner().to_string(), seq);
                if let Some(released) = *locked(&shared.last_release) {
                    locked(&shared.handoffs).push(acquired.saturating_duration_since(released));
                }
                locked(&shared.per_client)[index] += 1;
                tokio::time::sleep(hold).await;
                shared.inside.fetch_sub(1, Ordering::SeqCst);
                *locked(&shared.last_release) = Some(Instant::now());
                guard.unlock().await?;
            }
            Ok::<(), fairlock::Error>(())
        }));
    }
    let mut failure = None;
    for worker in workers {
        match worker.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failure = Some(Failure::from(err)),
            Err(err) => {
                failure = Some(Failure::new(
                    exit::SOFTWARE,
                    format!("worker failed: {err}"),
                ))
            }
        }
    }
    shared.done.store(true, Ordering::SeqCst);
    let _ = observer.await;
    // Release whatever is still held, leave every queue, finish background work.
    for client in &clients {
        client.shutdown().await;
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(summary(&shared, started.elapsed(), args))
}

fn ids(clients: &[LockClient]) -> Vec<String> {
    clients.iter().map(|c| c.id().to_owned()).collect()
}

/// Sample the queue often (to learn the order waiters queued in) and draw
/// the live view.
async fn observe(client: LockClient, name: String, shared: Arc<Shared>, ids: Vec<String>) {
    let Ok(lock) = client.fair_lock(&name) else {
        return;
    };
    let terminal = std::io::stdout().is_terminal();
    let label = |owner: &str| {
        ids.iter()
            .position(|id| owner.starts_with(id.as_str()))
            .map(|i| format!("c{i}"))
            .unwrap_or_else(|| "?".to_owned())
    };
    let mut last_draw = Instant::now();
    while !shared.done.load(Ordering::SeqCst) {
        if let Ok(info) = lock.inspect().await {
            {
                let mut pairs = locked(&shared.queue_pairs);
                for pair in info.queue.windows(2) {
                    pairs.insert((pair[0].owner.clone(), pair[1].owner.clone()));
                }
            }
            let every = if terminal {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            if last_draw.elapsed() >= every {
                last_draw = Instant::now();
                let holder = info
                    .holders
                    .first()
                    .map(|h| label(&h.owner))
                    .unwrap_or_else(|| "-".into());
                let queue: Vec<String> = info.queue.iter().map(|w| label(&w.owner)).collect();
                let line = format!("holder {holder:>4} | queue [{}]", queue.join(" "));
                let mut out = std::io::stdout().lock();
                if terminal {
                    let _ = write!(out, "\r\x1b[2K{line}");
                } else {
                    let _ = writeln!(out, "{line}");
                }
                let _ = out.flush();
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    if terminal {
        println!();
    }
}

fn summary(shared: &Shared, elapsed: Duration, args: &DemoArgs) -> u8 {
    let grants = locked(&shared.grants);
    let pairs = locked(&shared.queue_pairs);
    let mut checked = 0;
    let mut order_violations = 0;
    for (earlier, later) in pairs.iter() {
        if let (Some(a), Some(b)) = (grants.get(earlier), grants.get(later)) {
            checked += 1;
            if a > b {
                order_violations += 1;
            }
        }
    }
    let overlaps = shared.overlaps.load(Ordering::SeqCst);
    let mut handoffs = locked(&shared.handoffs).clone();
    handoffs.sort();
    let per_client = locked(&shared.per_client);
    println!(
        "summary: {} acquisitions in {:.2}s",
        grants.len(),
        elapsed.as_secs_f64()
    );
    let counts: Vec<String> = per_client
        .iter()
        .enumerate()
        .map(|(i, n)| format!("c{i} {n}"))
        .collect();
    println!("  acquisitions per client: {}", counts.join(", "));
    println!("  order violations:   {order_violations} (checked {checked} queue-order pairs)");
    println!("  overlap violations: {overlaps}");
    println!(
        "  handoff latency:    p50 {}  p99 {}  (release -> next holder proceeds, {} handoffs)",
        format_latency(percentile(&handoffs, 0.50)),
        format_latency(percentile(&handoffs, 0.99)),
        handoffs.len()
    );
    let expected = u64::from(args.clients) * u64::from(args.rounds);
    if order_violations > 0 || overlaps > 0 || grants.len() as u64 != expected {
        println!("FAILED");
        1
    } else {
        println!("ok: FIFO order and mutual exclusion held");
        0
    }
}

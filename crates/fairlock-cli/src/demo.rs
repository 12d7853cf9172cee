//! `fairlock demo`: N clients contend for one fair lock. It prints a
//! timeline of the first handoffs (who got the lock, its fencing token, and
//! the line behind it, so that each grant can be seen going to the head of
//! the line shown just before), then a summary that checks order and
//! exclusion over the whole run.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fairlock::LockClient;

use crate::private_redis::PrivateRedis;
use crate::progress::LiveLine;
use crate::{Cli, Failure, LockSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct DemoArgs {
    /// Number of clients (separate connections), 1 to 64.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=64))]
    clients: u16,
    /// Acquisitions per client, 1 to 10000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    rounds: u32,
    /// How long each holder keeps the lock (0s to 1m).
    #[arg(long, value_name = "DUR", default_value = "10ms", value_parser = duration::hold, allow_hyphen_values = true)]
    hold: Duration,
    /// How many handoffs the timeline shows, 0 to 1000.
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u32).range(0..=1000))]
    timeline: u32,
    #[command(flatten)]
    settings: LockSettings,
}

/// One line of the timeline: a grant and the line behind the new holder.
struct Step {
    holder: String,
    queue: Vec<String>,
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
    timeline: Mutex<Vec<Step>>,
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

/// Client labels: `c0`, `c1`, ... by the client id that starts each owner.
#[derive(Clone)]
struct Labels(Arc<Vec<String>>);

impl Labels {
    fn of(&self, owner: &str) -> String {
        self.0
            .iter()
            .position(|id| owner.starts_with(id.as_str()))
            .map(|i| format!("c{i}"))
            .unwrap_or_else(|| "?".to_owned())
    }
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
    let settings = cli.settings(&args.settings);
    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(cli.connect(&url, &settings).await?);
    }
    let name = format!("fairlock-demo-{}", std::process::id());
    println!(
        "{} clients (c0..c{}) x {} rounds on fair lock {name:?} ({} protocol), holding {} each",
        args.clients,
        args.clients - 1,
        args.rounds,
        cli.protocol,
        duration::format(args.hold)
    );
    let labels = Labels(Arc::new(ids(&clients)));
    let shared = Arc::new(Shared {
        per_client: Mutex::new(vec![0; clients.len()]),
        ..Shared::default()
    });
    let shown = u64::from(args.timeline);
    if shown > 0 {
        println!(
            "Each client queues again as soon as it released. Watch the line: every grant goes \
             to the waiter at its head,\nand whoever released joins its tail. The first {shown} \
             handoffs:"
        );
        println!(
            "  {:>9}  {:<6}  {:<18}  line behind the holder (head first)",
            "time", "holder", "token"
        );
    }
    let started = Instant::now();
    let observer = tokio::spawn(observe(
        clients[0].clone(),
        name.clone(),
        Arc::clone(&shared),
    ));
    let total = u64::from(args.clients) * u64::from(args.rounds);
    let progress = tokio::spawn(show_progress(Arc::clone(&shared), total, shown));
    let mut workers = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        let lock = client.fair_lock(&name)?;
        let shared = Arc::clone(&shared);
        let labels = labels.clone();
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
                if seq < shown {
                    // The line behind us, read while we hold the lock.
                    if let Ok(info) = lock.inspect().await {
                        let queue: Vec<String> =
                            info.queue.iter().map(|w| labels.of(&w.owner)).collect();
                        let token = guard
                            .token()
                            .map(|t| t.to_string())
                            .unwrap_or_else(|| "-".to_owned());
                        let at = acquired.saturating_duration_since(started);
                        println!(
                            "  {:>9}  {:<6}  {:<18}  {}",
                            format_latency(at),
                            labels.of(guard.owner().as_str()),
                            token,
                            if queue.is_empty() {
                                "(nobody waits)".to_owned()
                            } else {
                                queue.join(" ")
                            }
                        );
                        locked(&shared.timeline).push(Step {
                            holder: labels.of(guard.owner().as_str()),
                            queue,
                        });
                    }
                }
                let left = hold.saturating_sub(acquired.elapsed());
                tokio::time::sleep(left).await;
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
    let elapsed = started.elapsed();
    shared.done.store(true, Ordering::SeqCst);
    let _ = observer.await;
    progress.abort();
    let _ = progress.await;
    LiveLine::stderr().clear_any();
    // Release whatever is still held, leave every queue, finish background work.
    for client in &clients {
        client.shutdown().await;
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    Ok(summary(&shared, elapsed, args))
}

fn ids(clients: &[LockClient]) -> Vec<String> {
    clients.iter().map(|c| c.id().to_owned()).collect()
}

/// Sample the queue often, to learn the order waiters queued in.
async fn observe(client: LockClient, name: String, shared: Arc<Shared>) {
    let Ok(lock) = client.fair_lock(&name) else {
        return;
    };
    while !shared.done.load(Ordering::SeqCst) {
        if let Ok(info) = lock.inspect().await {
            let mut pairs = locked(&shared.queue_pairs);
            for pair in info.queue.windows(2) {
                pairs.insert((pair[0].owner.clone(), pair[1].owner.clone()));
            }
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

/// After the timeline: acquisitions so far, live on a terminal (stderr),
/// every 10 s otherwise.
async fn show_progress(shared: Arc<Shared>, total: u64, timeline: u64) {
    let mut line = LiveLine::stderr();
    let every = if line.in_place() {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(10)
    };
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // Aborted once the clients are done (the caller then clears the line).
    loop {
        tick.tick().await;
        let done = shared.next_seq.load(Ordering::SeqCst);
        if done > timeline {
            line.show(&format!("  ... {done} of {total} acquisitions"));
        }
    }
}

/// Of the timeline's consecutive steps whose line was not empty, how many
/// gave the lock to the head of that line: (to the head, checked).
fn heads_served(timeline: &[Step]) -> (usize, usize) {
    let mut checked = 0;
    let mut to_head = 0;
    for pair in timeline.windows(2) {
        if let Some(head) = pair[0].queue.first() {
            checked += 1;
            if *head == pair[1].holder {
                to_head += 1;
            }
        }
    }
    (to_head, checked)
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
    let timeline = locked(&shared.timeline);
    let (to_head, heads_checked) = heads_served(&timeline);
    if (timeline.len() as u64) < grants.len() as u64 && !timeline.is_empty() {
        println!("  ... {} more handoffs", grants.len() - timeline.len());
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
    if heads_checked > 0 {
        println!(
            "  timeline:           {to_head} of {heads_checked} grants went to the head of the \
             line shown before them"
        );
    }
    println!("  order violations:   {order_violations} (checked {checked} queue-order pairs)");
    println!("  overlap violations: {overlaps}");
    println!(
        "  handoff latency:    p50 {}  p99 {}  (release -> next holder proceeds, {} handoffs)",
        format_latency(percentile(&handoffs, 0.50)),
        format_latency(percentile(&handoffs, 0.99)),
        handoffs.len()
    );
    let expected = u64::from(args.clients) * u64::from(args.rounds);
    if order_violations > 0
        || overlaps > 0
        || to_head != heads_checked
        || grants.len() as u64 != expected
    {
        println!("FAILED");
        exit::DECLINED_OR_FAILED
    } else {
        println!("ok: FIFO order and mutual exclusion held");
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(holder: &str, queue: &[&str]) -> Step {
        Step {
            holder: holder.to_owned(),
            queue: queue.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn heads_are_counted_where_a_line_was_seen() {
        let timeline = [
            step("c0", &[]),
            step("c2", &["c1"]),
            step("c1", &["c0"]),
            step("c3", &[]),
        ];
        // c0 -> c2: no line shown; c2 -> c1 (head c1): yes; c1 -> c3 (head c0): no.
        assert_eq!(heads_served(&timeline), (1, 2));
    }
}

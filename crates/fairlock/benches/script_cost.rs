//! Redis work per operation, counted on a private redis-server: commands
//! (from `INFO commandstats`, script-internal calls included) and server CPU
//! (`used_cpu_user` + `used_cpu_sys`) per uncontended lock + unlock pair,
//! for every lock kind and an rslock-equivalent (SET NX PX, then a
//! compare-and-delete EVALSHA), interleaved; then the native non-fair lock
//! under contention (commands per operation and wait p99).
//!
//! Counts are deterministic; CPU per pair is what the server spent, not a
//! wall-clock time, so a loaded machine disturbs it far less.
//!
//! ```text
//! cargo bench -p fairlock --bench script_cost                  # 20,000 pairs, 3 rounds
//! cargo bench -p fairlock --bench script_cost -- --pairs 2000  # quicker
//! cargo bench -p fairlock --bench script_cost -- --contended-only --workers 32 --ops 3000
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fairlock_test_support as support;

/// What the server did between two readings.
#[derive(Debug, Clone, Default)]
struct Stats {
    calls: BTreeMap<String, u64>,
    usec: u64,
    cpu: f64,
}

impl Stats {
    fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Calls made from inside scripts: every call but EVAL/EVALSHA themselves.
    fn inner_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(name, _)| !name.starts_with("eval"))
            .map(|(_, n)| *n)
            .sum()
    }
}

async fn reset(conn: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await
        .expect("resetstat");
}

/// Read commandstats and CPU; the INFO and CONFIG calls of the reading
/// itself are left out.
async fn read(conn: &mut redis::aio::MultiplexedConnection) -> Stats {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .arg("cpu")
        .query_async(conn)
        .await
        .expect("info");
    let mut stats = Stats::default();
    for line in info.lines() {
        if let Some(rest) = line.strip_prefix("cmdstat_") {
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            if name == "info" || name.starts_with("config") {
                continue;
            }
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            stats.calls.insert(name.to_owned(), field("calls="));
            stats.usec += field("usec=");
        } else if let Some(v) = line
            .strip_prefix("used_cpu_user:")
            .or_else(|| line.strip_prefix("used_cpu_sys:"))
        {
            stats.cpu += v.trim().parse::<f64>().unwrap_or(0.0);
        }
    }
    stats
}

/// With `--callgrind-dir DIR --callgrind-pid PID` (a redis-server run under
/// `valgrind --tool=callgrind --callgrind-out-file=DIR/cg.%p`): zero the
/// server's instruction counters before a measurement.
fn callgrind_zero() {
    if let Some(pid) = arg("--callgrind-pid") {
        let _ = std::process::Command::new("callgrind_control")
            .args(["-z", &pid])
            .output();
    }
}

/// Dump the counters and read the instructions the server ran since the
/// last zero (the `totals:` line of the newest dump).
fn callgrind_read() -> Option<u64> {
    let pid = arg("--callgrind-pid")?;
    let dir = arg("--callgrind-dir")?;
    std::process::Command::new("callgrind_control")
        .args(["-d", &pid])
        .output()
        .ok()?;
    let newest = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()?
        .1;
    let text = std::fs::read_to_string(newest).ok()?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn arg(name: &str) -> Option<String> {
    let mut args = std::env::args().skip_while(|a| a != name);
    args.next()?;
    args.next()
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

enum Subject {
    Handle(fairlock::LockHandle),
    RslockLike(redis::aio::MultiplexedConnection, redis::Script),
}

impl Subject {
    async fn pair(&mut self, i: usize) {
        match self {
            Subject::Handle(lock) => lock
                .lock()
                .await
                .expect("lock")
                .unlock()
                .await
                .expect("unlock"),
            Subject::RslockLike(conn, unlock) => {
                let value = format!("owner-{i}");
                let set: Option<String> = redis::cmd("SET")
                    .arg("bench-rslock")
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(conn)
                    .await
                    .expect("set");
                assert!(set.is_some(), "uncontended");
                let deleted: i64 = unlock
                    .key("bench-rslock")
                    .arg(&value)
                    .invoke_async(conn)
                    .await
                    .expect("unlock");
                assert_eq!(deleted, 1);
            }
        }
    }
}

async fn uncontended(url: &str, pairs: usize, rounds: usize) {
    let native = fairlock::LockClient::connect(url).await.expect("connect");
    let redisson = fairlock::LockClient::with_config(
        fairlock::ClientConfig::from_url(url)
            .expect("url")
            .protocol(fairlock::Protocol::Redisson),
    )
    .await
    .expect("connect");
    let redis = redis::Client::open(url).expect("client");
    let mut stats_conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let bench_conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let unlock = redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
    );
    let mut subjects: Vec<(&str, Subject)> = vec![
        (
            "native fair",
            Subject::Handle(native.fair_lock("bench-fair").expect("name").into()),
        ),
        (
            "native non-fair",
            Subject::Handle(native.lock("bench-plain").expect("name").into()),
        ),
        (
            "redisson fair",
            Subject::Handle(redisson.fair_lock("bench-r-fair").expect("name").into()),
        ),
        (
            "redisson non-fair",
            Subject::Handle(redisson.lock("bench-r-plain").expect("name").into()),
        ),
        ("rslock-equivalent", Subject::RslockLike(bench_conn, unlock)),
    ];
    let mut results: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); subjects.len()];
    let mut instructions: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
    for _ in 0..rounds {
        for (((_, subject), results), instr) in
            subjects.iter_mut().zip(&mut results).zip(&mut instructions)
        {
            for i in 0..200 {
                subject.pair(i).await;
            }
            reset(&mut stats_conn).await;
            let before = read(&mut stats_conn).await;
            callgrind_zero();
            for i in 0..pairs {
                subject.pair(i).await;
            }
            let instructions = callgrind_read();
            let after = read(&mut stats_conn).await;
            let n = pairs as f64;
            if let Some(ir) = instructions {
                instr.push(ir as f64 / n);
            }
            let total = after.total_calls() as f64 / n;
            let inner = after.inner_calls() as f64 / n;
            let usec = after.usec as f64 / n;
            let cpu = (after.cpu - before.cpu) * 1e6 / n;
            results.push((total, inner, usec, cpu));
        }
    }
    let base_cpu = median(results[results.len() - 1].iter().map(|r| r.3).collect());
    println!("uncontended lock + unlock, {pairs} pairs x {rounds} rounds (median), per pair:");
    println!(
        "  {:<20} {:>9} {:>15} {:>16} {:>15} {:>9}",
        "", "commands", "inside scripts", "commandstats µs", "server CPU µs", "CPU ratio"
    );
    for (((label, _), results), instr) in subjects.iter().zip(&results).zip(&instructions) {
        let m = |f: fn(&(f64, f64, f64, f64)) -> f64| median(results.iter().map(f).collect());
        let cpu = m(|r| r.3);
        if !instr.is_empty() {
            let base = median(instructions[instructions.len() - 1].clone());
            let ir = median(instr.clone());
            println!(
                "  {label:<20} server instructions per pair (callgrind) {ir:>10.0} = {:.2} x rslock-equivalent",
                ir / base
            );
        }
        println!(
            "  {label:<20} {:>9.2} {:>15.2} {:>16.1} {:>15.1} {:>9.2}",
            m(|r| r.0),
            m(|r| r.1),
            m(|r| r.2),
            cpu,
            cpu / base_cpu
        );
    }
    if flag("--detail") {
        // One more pair each with the per-command breakdown.
        for (label, subject) in &mut subjects {
            reset(&mut stats_conn).await;
            for i in 0..100 {
                subject.pair(i).await;
            }
            let after = read(&mut stats_conn).await;
            let per: Vec<String> = after
                .calls
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(c, n)| format!("{c} {:.2}", *n as f64 / 100.0))
                .collect();
            println!("  {label}: {}", per.join(", "));
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `workers` tasks, each with its own client, take the non-fair native
/// lock in turn (GET + SET under it) until `ops` acquisitions in all.
async fn contended(url: &str, workers: usize, ops: usize) {
    let redis = redis::Client::open(url).expect("client");
    let mut stats_conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut clients = Vec::new();
    for _ in 0..workers {
        clients.push(fairlock::LockClient::connect(url).await.expect("connect"));
    }
    let done = Arc::new(AtomicUsize::new(0));
    reset(&mut stats_conn).await;
    let before = read(&mut stats_conn).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in clients.clone() {
        let done = Arc::clone(&done);
        let mut data = redis
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        tasks.push(tokio::spawn(async move {
            let lock = client.lock("bench-contended").expect("name");
            let mut waits = Vec::new();
            while done.load(Ordering::SeqCst) < ops {
                let asked = Instant::now();
                let guard = lock.lock().await.expect("lock");
                waits.push(asked.elapsed());
                let v: Option<i64> = redis::cmd("GET")
                    .arg("bench-counter")
                    .query_async(&mut data)
                    .await
                    .expect("get");
                redis::cmd("SET")
                    .arg("bench-counter")
                    .arg(v.unwrap_or(0) + 1)
                    .query_async::<()>(&mut data)
                    .await
                    .expect("set");
                guard.unlock().await.expect("unlock");
                done.fetch_add(1, Ordering::SeqCst);
            }
            waits
        }));
    }
    let mut waits: Vec<Duration> = Vec::new();
    let mut per_worker = Vec::new();
    for task in tasks {
        let w = task.await.expect("worker");
        per_worker.push(w.len());
        waits.extend(w);
    }
    let elapsed = started.elapsed();
    let after = read(&mut stats_conn).await;
    let n = done.load(Ordering::SeqCst) as f64;
    waits.sort();
    let p = |q: f64| waits[((waits.len() as f64 * q) as usize).min(waits.len() - 1)];
    // The worker's own GET + SET are not the lock's.
    let data = (after.calls.get("get").copied().unwrap_or(0)
        + after.calls.get("set").copied().unwrap_or(0)) as f64
        / n;
    println!("native non-fair, {workers} workers, {n} acquisitions in {elapsed:.1?}:");
    println!(
        "  server commands per op {:.1} (of which the workers' GET/SET {data:.1}; inside scripts {:.1}), server CPU per op {:.0} µs",
        after.total_calls() as f64 / n,
        after.inner_calls() as f64 / n,
        (after.cpu - before.cpu) * 1e6 / n
    );
    println!(
        "  wait p50 {:?} p99 {:?} max {:?}; ops per worker min {} max {}",
        p(0.5),
        p(0.99),
        p(1.0),
        per_worker.iter().min().unwrap_or(&0),
        per_worker.iter().max().unwrap_or(&0)
    );
    let per: Vec<String> = after
        .calls
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(c, k)| format!("{c} {:.2}", *k as f64 / n))
        .collect();
    println!("  per op: {}", per.join(", "));
    for client in clients {
        client.shutdown().await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `--redis URL`: an external server (e.g. one run under callgrind).
    let server = arg("--redis").is_none().then(support::RedisServer::start);
    let url =
        arg("--redis").unwrap_or_else(|| server.as_ref().map(|s| s.url()).unwrap_or_default());
    let pairs = arg("--pairs")
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rounds = arg("--rounds").and_then(|v| v.parse().ok()).unwrap_or(3);
    let workers = arg("--workers").and_then(|v| v.parse().ok()).unwrap_or(32);
    let ops = arg("--ops").and_then(|v| v.parse().ok()).unwrap_or(3_000);
    if !flag("--contended-only") {
        uncontended(&url, pairs, rounds).await;
    }
    if !flag("--uncontended-only") {
        contended(&url, workers, ops).await;
    }
}

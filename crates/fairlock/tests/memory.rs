//! Every test that measures this process's memory (and floods it with
//! messages), in one binary of their own: under `cargo test` the tests of
//! a binary share a process, and another test's allocations would show in
//! the measurement. Each holds `support::flood::EXCLUSIVE`, so they also
//! run one at a time here. (From adversarial reviews 2 and 3.)

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::RedisServer;
use support::eventually;
use support::flood::{Flood, rss_kb};
use tokio::time::Instant;

fn config(url: &str) -> ClientConfig {
    support::init_tracing();
    ClientConfig::from_url(url)
        .unwrap()
        .protocol(Protocol::Native)
}

async fn connect(config: ClientConfig) -> LockClient {
    LockClient::with_config(config).await.expect("connect")
}

/// A holder and a waiter (two clients) on lock `name`, once the waiter is
/// subscribed: `channels` are every channel subscribed on the server.
struct Contended {
    holder: LockClient,
    waiter: LockClient,
    held: LockGuard,
    waiting: tokio::task::JoinHandle<fairlock::Result<LockGuard>>,
    channels: Vec<String>,
}

async fn contended(server: &RedisServer, name: &str) -> Contended {
    let holder = connect(config(&server.url())).await;
    let waiter = connect(config(&server.url())).await;
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let waiting = {
        let lock = waiter.fair_lock(name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let mut channels: Vec<String> = Vec::new();
    eventually(Duration::from_secs(10), "subscribed", || {
        channels = server.cmd(&["PUBSUB", "CHANNELS"]);
        channels.len() >= 3
    })
    .await;
    Contended {
        holder,
        waiter,
        held,
        waiting,
        channels,
    }
}

/// Adversary 2: a flood of forged revocation messages naming a lock the
/// client holds (anyone may PUBLISH on `fairlock:revoked:CLIENT_ID`) costs
/// at most one check per 50 ms, never makes the held lock be reported
/// lost, and a real force-unlock after it is still found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv2_forged_revocations_cost_one_check_per_gap_and_lose_nothing() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    let server = RedisServer::start();
    let client = connect(config(&server.url())).await;
    let lock = client.fair_lock("adv2-revoked").unwrap();
    let guard = lock.lock().await.unwrap();
    let channel = format!("fairlock:revoked:{}", client.id());
    let key = "fairlock:{adv2-revoked}:lock";
    let mut worst = 0;
    let rss_before = rss_kb();
    println!("rss before: {rss_before} kB");
    for payload in [key, "fairlock:{other}:lock", "", "\u{0}\u{ff}garbage"] {
        let before = server.evalsha_calls();
        let sent = tokio::task::block_in_place(|| {
            support::flood::publish_for(&server, &channel, payload, Duration::from_secs(1))
        });
        let calls = server.evalsha_calls() - before;
        println!("{payload:?}: {sent} forged revocations in 1 s -> {calls} scripts");
        worst = worst.max(calls);
        assert!(
            guard.is_held(),
            "{payload:?}: a forged revocation lost the hold"
        );
    }
    println!("rss after floods: {} kB", rss_kb());
    // 1 s / 50 ms = 20 checks, plus one at each edge.
    assert!(worst <= 23, "scripts in 1 s of forged revocations: {worst}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(guard.is_held());
    assert!(lock.is_locked().await.unwrap());
    // A real force-unlock after the flood is still found promptly.
    let other = connect(config(&server.url())).await;
    assert!(
        other
            .fair_lock("adv2-revoked")
            .unwrap()
            .force_unlock()
            .await
            .unwrap()
    );
    let started = Instant::now();
    let noticed = tokio::time::timeout(Duration::from_secs(15), guard.lost()).await;
    println!(
        "force-unlock noticed after {:?} ({noticed:?}); rss {} kB",
        started.elapsed(),
        rss_kb()
    );
    let grown = rss_kb().saturating_sub(rss_before);
    assert!(
        grown < 20_000,
        "client memory grew by {grown} kB under forged revocations"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "force-unlock after a flood noticed late"
    );
    assert!(!guard.is_held());
    client.shutdown().await;
}

/// A flood of PUBLISHes on every channel a waiting client listens on (its
/// lock channel and its revocation channel: anyone may publish on them)
/// neither grows the client's memory without bound nor delays a real
/// release by more than the pub/sub health check's bound (1 s interval +
/// 100 ms PING lag, then every waiter checks): the waiter is granted the
/// lock within 2 s of the release while the flood goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_flood_delays_no_release_and_costs_bounded_memory() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    for protocol in [Protocol::Native, Protocol::Redisson] {
        let server = RedisServer::start();
        let holder = connect(config(&server.url()).protocol(protocol)).await;
        let waiter = connect(config(&server.url()).protocol(protocol)).await;
        let name = "flooded";
        let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
        let waiting = {
            let lock = waiter.fair_lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await })
        };
        // Every channel anyone listens on, once the waiter is subscribed.
        let mut conn = server.conn();
        let mut channels: Vec<String> = Vec::new();
        eventually(Duration::from_secs(10), "the waiter subscribed", || {
            channels = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .query(&mut conn)
                .unwrap();
            channels.len() >= 3
        })
        .await;
        let rss_before = rss_kb();
        let flood = Flood::start(&server.url(), &channels, 64);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let released = Instant::now();
        held.unlock().await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(10), waiting).await;
        let waited = released.elapsed();
        let sent = flood.stop();
        let grown = rss_kb().saturating_sub(rss_before);
        let stats = waiter.statistics();
        println!(
            "{protocol}: {} channels, {sent} messages; granted {waited:?} after the release; \
             rss +{grown} kB; {} wake-ups for falling behind",
            channels.len(),
            stats.pubsub_behind
        );
        let guard = granted
            .expect("the waiter was never granted")
            .unwrap()
            .unwrap();
        assert!(
            waited < Duration::from_secs(2),
            "{protocol}: granted {waited:?} after the release"
        );
        assert!(grown < 20_000, "{protocol}: memory grew by {grown} kB");
        // Whether the client fell behind (`pubsub_behind`) depends on how
        // fast the flooders run on this machine: not asserted (the queue's
        // own tests cover dropping); the bounds above are what matter.
        guard.unlock().await.unwrap();
        holder.shutdown().await;
        waiter.shutdown().await;
    }
}

/// Promise 5 with the RESP2 fallback (a server that refuses HELLO): the
/// same flood as `a_publish_flood_delays_no_release_and_costs_bounded_memory`.
/// redis-rs queues RESP2 messages without bound; a task moves them into the
/// bounded queue as they come, and the socket is not read while more than
/// 1 MiB read off it waits to be moved (`transport/resp2.rs`): memory stops
/// growing once the flood is under way, however little CPU the machine
/// gives the client (before, it grew with the flood's length: 41 MB after
/// 3 s, about 14 MB a second; with the task alone, it still grew whenever
/// the machine starved that task, one run in four at load 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp2_fallback_flood_costs_bounded_memory_and_delays_no_release() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    let server = RedisServer::start_with(&["--rename-command", "HELLO", ""]);
    let name = "flooded-resp2";
    let Contended {
        holder,
        waiter,
        held,
        waiting,
        channels,
    } = contended(&server, name).await;
    let rss_before = rss_kb();
    let flood = Flood::start(&server.url(), &channels, 512);
    let mut samples = Vec::new();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        samples.push(rss_kb().saturating_sub(rss_before));
    }
    println!("RESP2: rss growth every 0.5 s of flood: {samples:?} kB");
    let released = Instant::now();
    held.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(20), waiting).await;
    let waited = released.elapsed();
    let grown = rss_kb().saturating_sub(rss_before);
    let sent = flood.stop();
    println!("RESP2: {sent} messages; granted {waited:?} after release; rss +{grown} kB");
    let guard = granted.expect("never granted").unwrap().unwrap();
    guard.unlock().await.unwrap();
    assert!(
        waited < Duration::from_secs(2),
        "granted {waited:?} after release"
    );
    // The second half of the flood adds little: no growth with its length
    // (unbounded, it added about 28 MB in 2 s). What waits in the queues
    // (at most 1 MiB read and unmoved, a few MB once parsed, and the
    // bounded queue's 1 MiB) varies by a few MB from sample to sample: 5-7
    // MB in all, measured at load 11-14 on 2 cores, against 12-50 MB when
    // the throttle let the backlog through (the same bound as the RESP3
    // flood's, 20 MB, tells the two apart).
    let first_half = samples[..4].iter().max().copied().unwrap_or(0);
    let second_half = samples[4..].iter().max().copied().unwrap_or(0);
    assert!(
        second_half < first_half + 8_000 && grown < 20_000,
        "memory kept growing with the flood: {samples:?} kB, then {grown} kB"
    );
    holder.shutdown().await;
    waiter.shutdown().await;
}

/// Held (promise 5): payloads far over the queue's byte bound (32 MB each,
/// just under Redis's default pub/sub output limit, and 40 MB which makes
/// Redis cut the subscriber off) cost the client transient memory only, and
/// a release right after them still reaches the waiter quickly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_payloads_cost_no_lasting_memory_and_delay_no_release() {
    let _exclusive = support::flood::EXCLUSIVE.lock().await;
    let server = RedisServer::start();
    let name = "huge";
    let Contended {
        holder,
        waiter,
        held,
        waiting,
        channels,
    } = contended(&server, name).await;
    let wake: String = channels.iter().find(|c| c.contains(name)).cloned().unwrap();
    let mut conn = server.conn();
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let before = rss_kb();
        for size in [30usize << 20, 40 << 20, 30 << 20] {
            let body = vec![b'y'; size];
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&wake)
                .arg(&body)
                .query(&mut conn)
                .unwrap();
            drop(body);
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        rounds.push(rss_kb().saturating_sub(before));
    }
    let rss_before = rss_kb();
    let released = Instant::now();
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let waited = released.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let grown = rss_kb().saturating_sub(rss_before);
    let stats = waiter.statistics();
    println!(
        "granted {waited:?} after release; rss +{grown} kB; reconnects {}, behind {}",
        stats.pubsub_reconnects, stats.pubsub_behind
    );
    println!("rss growth per round of huge messages: {rounds:?} kB");
    assert!(
        waited < Duration::from_millis(1500),
        "granted {waited:?} after release"
    );
    // Whatever the first round keeps (allocator, read buffers), later
    // rounds add no more: bounded.
    assert!(
        rounds[1] + rounds[2] < 40_000,
        "memory keeps growing: {rounds:?} kB"
    );
    guard.unlock().await.unwrap();
    holder.shutdown().await;
    waiter.shutdown().await;
}

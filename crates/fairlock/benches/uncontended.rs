//! Uncontended lock+unlock rate next to the PING round-trip rate, on a
//! private redis-server, in the same run. Prints rates and ratios.
//!
//! Kept for `scripts/bench-metrics`, which builds the library with and
//! without its `metrics` feature; the comparison with other locks (and
//! Redis and client CPU per operation) is `fairlock bench uncontended`
//! (`docs/performance.md`).
//!
//! ```text
//! cargo bench -p fairlock --bench uncontended
//! ```

use std::time::{Duration, Instant};

use fairlock_test_support as support;

const ROUNDS: usize = 3;
const PER_ROUND: Duration = Duration::from_secs(2);

/// Run `op` repeatedly for `PER_ROUND`; operations per second.
async fn rate<F, Fut>(mut op: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // Warm up (script loading, connection setup).
    for _ in 0..200 {
        op().await;
    }
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < PER_ROUND {
        for _ in 0..100 {
            op().await;
        }
        n += 100;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    install_metrics();
    let server = support::RedisServer::start();
    let client = fairlock::LockClient::with_config(observe(
        fairlock::ClientConfig::from_url(&server.url()).expect("url"),
    ))
    .await
    .expect("connect");
    let redis = redis::Client::open(server.url()).expect("client");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let redisson = fairlock::LockClient::with_config(observe(
        fairlock::ClientConfig::from_url(&server.url())
            .expect("url")
            .protocol(fairlock::Protocol::Redisson),
    ))
    .await
    .expect("connect");
    // Every lock kind under both protocols, measured by one closure.
    let locks: Vec<(&str, fairlock::LockHandle)> = vec![
        (
            "native fair lock + unlock",
            client.fair_lock("bench-fair").expect("name").into(),
        ),
        (
            "native non-fair lock + unlock",
            client.lock("bench-plain").expect("name").into(),
        ),
        (
            "redisson fair lock + unlock",
            redisson.fair_lock("bench-r-fair").expect("name").into(),
        ),
        (
            "redisson non-fair lock + unlock",
            redisson.lock("bench-r-plain").expect("name").into(),
        ),
    ];

    let trivial = redis::Script::new("return redis.call('exists', KEYS[1])");
    let (mut ping, mut two_scripts) = (Vec::new(), Vec::new());
    let mut lock_rates = vec![Vec::new(); locks.len()];
    // Interleave the measurements so that machine noise hits all alike.
    for _ in 0..ROUNDS {
        ping.push(
            rate(|| {
                let mut conn = conn.clone();
                async move {
                    redis::cmd("PING")
                        .query_async::<()>(&mut conn)
                        .await
                        .expect("ping");
                }
            })
            .await,
        );
        two_scripts.push(
            rate(|| {
                let mut conn = conn.clone();
                let trivial = &trivial;
                async move {
                    for _ in 0..2 {
                        trivial
                            .key("bench-trivial")
                            .invoke_async::<i64>(&mut conn)
                            .await
                            .expect("evalsha");
                    }
                }
            })
            .await,
        );
        for ((_, lock), rates) in locks.iter().zip(&mut lock_rates) {
            rates.push(
                rate(|| async {
                    lock.lock()
                        .await
                        .expect("lock")
                        .unlock()
                        .await
                        .expect("unlock");
                })
                .await,
            );
        }
    }
    let _ = &mut conn;
    let ping = median(ping);
    println!("uncontended, sequential, one task, medians of {ROUNDS} x {PER_ROUND:?}:");
    println!("  {:<32} {ping:>9.0}/s", "PING round trips");
    let two = median(two_scripts);
    println!(
        "  {:<32} {two:>9.0}/s   = {:.2} x PING time per op",
        "2 x trivial EVALSHA",
        ping / two
    );
    for ((label, _), rates) in locks.iter().zip(lock_rates) {
        let r = median(rates);
        println!(
            "  {label:<32} {r:>9.0}/s   = {:.2} x PING time per op",
            ping / r
        );
    }
    println!("  (a lock + unlock pair is two round trips: 2.00 is the floor)");
}

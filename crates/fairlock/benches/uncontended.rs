//! Uncontended lock+unlock rate next to the PING round-trip rate, on a
//! private redis-server, in the same run. Prints rates and ratios.
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = support::RedisServer::start();
    let client = fairlock::LockClient::connect(&server.url())
        .await
        .expect("connect");
    let redis = redis::Client::open(server.url()).expect("client");
    let mut conn = redis
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let redisson = fairlock::LockClient::with_config(
        fairlock::ClientConfig::from_url(&server.url())
            .expect("url")
            .protocol(fairlock::Protocol::Redisson),
    )
    .await
    .expect("connect");
    let fair = client.fair_lock("bench-fair").expect("name");
    let plain = client.lock("bench-plain").expect("name");
    let r_fair = redisson.fair_lock("bench-r-fair").expect("name");
    let r_plain = redisson.lock("bench-r-plain").expect("name");

    let trivial = redis::Script::new("return redis.call('exists', KEYS[1])");
    let (mut ping, mut fair_rates, mut plain_rates) = (Vec::new(), Vec::new(), Vec::new());
    let (mut r_fair_rates, mut r_plain_rates) = (Vec::new(), Vec::new());
    let mut two_scripts = Vec::new();
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
        fair_rates.push(
            rate(|| async {
                fair.lock()
                    .await
                    .expect("lock")
                    .unlock()
                    .await
                    .expect("unlock");
            })
            .await,
        );
        plain_rates.push(
            rate(|| async {
                plain
                    .lock()
                    .await
                    .expect("lock")
                    .unlock()
                    .await
                    .expect("unlock");
            })
            .await,
        );
        r_fair_rates.push(
            rate(|| async {
                r_fair
                    .lock()
                    .await
                    .expect("lock")
                    .unlock()
                    .await
                    .expect("unlock");
            })
            .await,
        );
        r_plain_rates.push(
            rate(|| async {
                r_plain
                    .lock()
                    .await
                    .expect("lock")
                    .unlock()
                    .await
                    .expect("unlock");
            })
            .await,
        );
    }
    let _ = &mut conn;
    let (ping, fair_rate, plain_rate) = (median(ping), median(fair_rates), median(plain_rates));
    println!("uncontended, sequential, one task, medians of {ROUNDS} x {PER_ROUND:?}:");
    println!("  {:<32} {ping:>9.0}/s", "PING round trips");
    let two = median(two_scripts);
    println!(
        "  {:<32} {two:>9.0}/s   = {:.2} x PING time per op",
        "2 x trivial EVALSHA",
        ping / two
    );
    let rows = [
        ("native fair lock + unlock", fair_rate),
        ("native non-fair lock + unlock", plain_rate),
        ("redisson fair lock + unlock", median(r_fair_rates)),
        ("redisson non-fair lock + unlock", median(r_plain_rates)),
    ];
    for (label, r) in rows {
        println!(
            "  {label:<32} {r:>9.0}/s   = {:.2} x PING time per op",
            ping / r
        );
    }
    println!("  (a lock + unlock pair is two round trips: 2.00 is the floor)");
}

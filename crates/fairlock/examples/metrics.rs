//! Metrics under contention, exported in the Prometheus text format.
//!
//! Eight tasks take turns on one fair lock (and two other locks, to show
//! how `LockLabel::group` folds names), while the main task prints a few
//! numbers every half second, then the whole scrape.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6380 cargo run -p fairlock --example metrics --features metrics
//! ```
//!
//! A service would serve `handle.render()` on its `/metrics` endpoint (or
//! use the exporter's own HTTP listener); `fairlock exec --metrics-addr`
//! and `fairlock watch --metrics-addr` do that.

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, LockLabel};
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: metrics recorded before it is installed are lost.
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])?
        .install_recorder()?;

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    // Lock names as a label, grouped by their prefix: "report:1" and
    // "report:2" count as lock="report".
    let config = ClientConfig::from_url(&url)?.metrics_lock_label(LockLabel::group(|name| {
        name.split(':').next().unwrap_or(name).to_owned()
    }));
    let client = LockClient::with_config(config).await?;

    let started = std::time::Instant::now();
    let mut workers = Vec::new();
    for worker in 0..8u64 {
        let client = client.clone();
        workers.push(tokio::spawn(async move {
            let orders = client.fair_lock("orders")?;
            for _ in 0..10 {
                let guard = orders.lock().await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.unlock().await?;
            }
            // A bounded wait that may run out while another worker holds it.
            let report = client.fair_lock(&format!("report:{}", worker % 2))?;
            if let Some(guard) = report.try_lock_for(Duration::from_millis(30)).await? {
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.unlock().await?;
            }
            Ok::<(), fairlock::Error>(())
        }));
    }

    let interesting = [
        "fairlock_acquisitions_total",
        "fairlock_waiting_tasks",
        "fairlock_held_locks",
    ];
    while !workers.iter().all(|w| w.is_finished()) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("--- after {:.1?}", started.elapsed());
        for line in handle.render().lines() {
            if interesting.iter().any(|m| line.starts_with(m)) {
                println!("{line}");
            }
        }
    }
    for worker in workers {
        worker.await??;
    }
    client.shutdown().await;

    println!("--- statistics()\n{:#?}", client.statistics());
    println!("--- the whole scrape");
    for line in handle.render().lines() {
        if line.contains("fairlock_") {
            println!("{line}");
        }
    }
    Ok(())
}

//! A profiling harness: N sequential lock + unlock pairs of one
//! implementation on one Redis, nothing else (no measurement threads).
//! Run it under `valgrind --tool=callgrind` with two values of N: the
//! difference of the counts, divided by the difference of N, is the cost
//! of one pair, free of start-up and connection set-up.
//!
//! ```sh
//! cargo build --release -p fairlock-cli --example pairs
//! valgrind --tool=callgrind target/release/examples/pairs redis://127.0.0.1:PORT native-fair 200
//! ```
//!
//! Implementations: native-fair, native-non-fair, redisson-fair,
//! redisson-non-fair, rslock. `scripts/client-cost` runs it for each.
//!
//! One thread runs everything (a current-thread runtime): with several
//! worker threads, how often they spin, park and steal varies from run to
//! run by a few thousand instructions per pair, more than the differences
//! this harness is for. Every implementation runs the same way.

use std::time::Duration;

use fairlock::{ClientConfig, LockClient, LockKind, Protocol};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: pairs REDIS_URL IMPLEMENTATION N";
    let url = args.next().ok_or(usage)?;
    let which = args.next().ok_or(usage)?;
    let n: u32 = args.next().ok_or(usage)?.parse()?;
    let name = format!("pairs-{}", std::process::id());
    if which == "rslock" {
        let client = redis::Client::open(url.as_str())?;
        let manager = rslock::LockManager::from_clients(vec![client]);
        for _ in 0..n {
            let guard = manager
                .acquire(name.as_bytes(), Duration::from_secs(30))
                .await?;
            guard.release().await;
        }
        return Ok(());
    }
    let (protocol, kind) = match which.as_str() {
        "native-fair" => (Protocol::Native, LockKind::Fair),
        "native-non-fair" => (Protocol::Native, LockKind::NonFair),
        "redisson-fair" => (Protocol::Redisson, LockKind::Fair),
        "redisson-non-fair" => (Protocol::Redisson, LockKind::NonFair),
        other => return Err(format!("unknown implementation {other:?}").into()),
    };
    let config = ClientConfig::from_url(&url)?.protocol(protocol);
    let client = LockClient::with_config(config).await?;
    let handle = client.handle(&name, kind)?;
    for _ in 0..n {
        handle.lock().await?.unlock().await?;
    }
    client.shutdown().await;
    Ok(())
}

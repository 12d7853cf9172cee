//! A hostile client with PUBLISH rights: threads that flood channels with
//! pipelined PUBLISHes until stopped, and the process's resident memory to
//! see what the flood cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Held by every test that floods or measures the process's memory
/// (`rss_kb`): tests of one binary share a process under `cargo test`, and
/// one test's flood must not show in another's measurement.
pub static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Flooding threads, one per channel, each on its own connection.
pub struct Flood {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<u64>>,
}

impl Flood {
    /// Flood each of `channels` on the server at `url` with messages of
    /// `payload` bytes, 50 per pipeline, as fast as one connection goes.
    pub fn start(url: &str, channels: &[String], payload: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = channels
            .iter()
            .map(|channel| {
                let (url, channel, stop) = (url.to_owned(), channel.clone(), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut conn = redis::Client::open(url)
                        .expect("url")
                        .get_connection()
                        .expect("flood connection");
                    let body = "x".repeat(payload);
                    let mut sent = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let mut pipe = redis::pipe();
                        for _ in 0..50 {
                            pipe.cmd("PUBLISH").arg(&channel).arg(&body).ignore();
                        }
                        if pipe.query::<()>(&mut conn).is_err() {
                            break;
                        }
                        sent += 50;
                    }
                    sent
                })
            })
            .collect();
        Self { stop, threads }
    }

    /// Stop every thread; the messages they sent.
    pub fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap_or(0))
            .sum()
    }
}

/// Publish `payload` on `channel` of `server` as fast as one connection
/// can, for `span`; the messages sent.
pub fn publish_for(
    server: &crate::RedisServer,
    channel: &str,
    payload: &str,
    span: std::time::Duration,
) -> u64 {
    let mut conn = server.conn();
    let until = std::time::Instant::now() + span;
    let mut sent = 0;
    while std::time::Instant::now() < until {
        let mut pipe = redis::pipe();
        for _ in 0..50 {
            pipe.cmd("PUBLISH").arg(channel).arg(payload).ignore();
        }
        pipe.query::<()>(&mut conn).expect("PUBLISH");
        sent += 50;
    }
    sent
}

/// This process's resident memory (`VmRSS`), in kB (0 where unknown).
pub fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

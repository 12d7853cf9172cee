//! How long the machine keeps this process from running: a thread that
//! sleeps 5 ms at a time and records how late it wakes up, at worst.
//!
//! A test whose claim is about time (a lease kept, a waiter's place kept)
//! only holds while the client gets to run: on a loaded machine a process
//! can wait for a CPU longer than the margin the test leaves. Such a test
//! runs a monitor beside the scenario and, when the scenario fails, asks
//! whether the machine starved the process by at least that margin: then
//! the run proves nothing either way and is repeated.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running monitor; [`stop`](Self::stop) it for the worst delay seen.
pub struct StarvationMonitor {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Duration>,
}

impl StarvationMonitor {
    /// Start measuring.
    pub fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut worst = Duration::ZERO;
            while !flag.load(Ordering::Relaxed) {
                let before = Instant::now();
                std::thread::sleep(Duration::from_millis(5));
                worst = worst.max(before.elapsed().saturating_sub(Duration::from_millis(5)));
            }
            worst
        });
        Self { stop, thread }
    }

    /// Stop measuring: the longest this thread waited past its wake-up time.
    pub fn stop(self) -> Duration {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(Duration::MAX)
    }
}

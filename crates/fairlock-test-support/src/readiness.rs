//! Waiting for processes to be ready, shared by the topologies.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::RedisServer;

/// How long a deployment may take to become ready before its start fails
/// (sentinels find one another through hello messages sent every 2 s).
const READY_WITHIN: Duration = Duration::from_secs(30);

/// Poll `ready` every 50 ms until it returns `Ok`; after 30 s, fail with
/// `what` and its last complaint.
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        match ready() {
            Ok(()) => return,
            Err(last) => assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {last}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One `INFO` section of `server`, as field -> value.
pub(crate) fn info(server: &RedisServer, section: &str) -> HashMap<String, String> {
    fields(&server.cmd::<String>(&["INFO", section]))
}

/// `field:value` lines as field -> value (INFO, CLUSTER INFO).
pub(crate) fn fields(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

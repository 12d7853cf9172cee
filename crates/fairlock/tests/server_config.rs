//! What fairlock needs from the server (`docs/deployment.md`): the
//! eviction-policy check at connect.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use fairlock::LockClient;
use support::RedisServer;

// ---------------------------------------------------------------------------
// Log capture

/// What was logged on this test's thread, as plain text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Capture every event (DEBUG and up) emitted on this thread until the
    /// guard is dropped. `#[tokio::test]` runs its tasks on this thread too.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines logged at WARN.
    fn warnings(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| line.contains(" WARN "))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// maxmemory-policy

#[tokio::test]
async fn evicting_policies_are_reported_and_warned_about() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "volatile-ttl",
        "allkeys-random",
    ] {
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let logs = Logs::default();
        let client = {
            let _capture = logs.capture();
            LockClient::connect(&server.url()).await.expect("connect")
        };
        assert_eq!(client.maxmemory_policy(), Some(policy));
        let warnings = logs.warnings();
        assert_eq!(warnings.len(), 1, "one warning per connect: {warnings:#?}");
        let warning = &warnings[0];
        for needle in [
            server.addr().as_str(),
            policy,
            "set maxmemory-policy noeviction on servers that hold locks",
        ] {
            assert!(warning.contains(needle), "{needle:?} missing in {warning}");
        }
    }
}

#[tokio::test]
async fn noeviction_is_reported_without_a_warning() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let logs = Logs::default();
    let client = {
        let _capture = logs.capture();
        LockClient::connect(&server.url()).await.expect("connect")
    };
    assert_eq!(client.maxmemory_policy(), Some("noeviction"));
    assert!(logs.warnings().is_empty(), "{}", logs.text());
}

#[tokio::test]
async fn a_disabled_config_command_is_skipped() {
    // Managed services rename or disable CONFIG; the server then answers
    // "unknown command".
    let server = RedisServer::start_with(&[
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let logs = Logs::default();
    let client = {
        let _capture = logs.capture();
        LockClient::connect(&server.url()).await.expect("connect")
    };
    assert_eq!(client.maxmemory_policy(), None);
    assert!(logs.warnings().is_empty(), "{}", logs.text());
    assert!(
        logs.text().contains("cannot read maxmemory-policy"),
        "{}",
        logs.text()
    );
    // The client works as usual.
    let guard = client
        .fair_lock("after-config")
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.unlock().await.unwrap();
}

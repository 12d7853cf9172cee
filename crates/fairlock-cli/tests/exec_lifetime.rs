//! `fairlock exec`: waiting is shown without reading the whole queue.

#[path = "../../fairlock/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::RedisServer;

fn fairlock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis").arg(server.url()).env_remove("REDIS_URL");
    cmd
}

/// A running `fairlock exec`; killed if a test fails while it runs.
struct Exec(Child);

impl Exec {
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fairlock did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of a child's stderr as they come.
fn lines(stderr: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn expect_line(rx: &std::sync::mpsc::Receiver<String>, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line == wanted => return,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line {wanted:?} on stderr; saw {seen:?}");
}

/// Script calls (EVAL, EVALSHA, FCALL and their read-only forms) the server
/// has served so far.
fn script_calls(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if !(name.starts_with("eval") || name.starts_with("fcall")) {
                return None;
            }
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            calls.parse::<u64>().ok()
        })
        .sum()
}

/// A queued exec shows its place in line, asking Redis about once a second
/// (not ten times); a non-fair waiter says once that it waits.
#[test]
fn waiting_is_shown_cheaply() {
    let server = RedisServer::start();
    let client = fairlock::blocking::LockClient::with_config(
        fairlock::ClientConfig::from_url(&server.url()).unwrap(),
    )
    .unwrap();

    let guard = client.fair_lock("line").unwrap().lock().unwrap();
    let mut exec = fairlock(&server)
        .args(["exec", "line", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(exec.stderr.take().unwrap());
    expect_line(&rx, "waiting for line: position 1 of 1");
    let before = script_calls(&server);
    // Time passing is what is measured: three seconds of waiting.
    std::thread::sleep(Duration::from_secs(3));
    let calls = script_calls(&server) - before;
    guard.unlock().unwrap();
    let mut exec = Exec(exec);
    assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(0));
    // About 3 position reads and 1-2 waiter refreshes (every waiter_ttl/3).
    assert!(calls <= 10, "{calls} script calls in 3 s of waiting");

    let guard = client.lock("plain").unwrap().lock().unwrap();
    let mut exec = fairlock(&server)
        .args(["exec", "plain", "--nonfair", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(exec.stderr.take().unwrap());
    expect_line(&rx, "waiting for plain (non-fair lock: no queue position)");
    guard.unlock().unwrap();
    let mut exec = Exec(exec);
    assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(0));
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        rest.iter().all(|line| !line.starts_with("waiting")),
        "said once: {rest:?}"
    );
}

//! `fairlock elect` runs its command only while leading, and `fairlock
//! leader` shows who leads and its changes.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fairlock_test_support::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

fn fairlock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis").arg(server.url()).env_remove("REDIS_URL");
    cmd
}

/// A running `fairlock`; killed if a test fails while it runs.
struct Running(Child);

impl Running {
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
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

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `fairlock --lease 1s elect NAME --value VALUE -- sh -c SCRIPT`, in a
/// process group of its own.
fn elect(server: &RedisServer, name: &str, value: &str, script: &str) -> Running {
    Running(
        fairlock(server)
            .args(["--lease", "1s", "elect", name, "--value", value])
            .args(["--grace", "2s", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    )
}

fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `TERM PID` line the command wrote to `path`.
fn term_and_pid(path: &Path) -> (u64, i32) {
    let mut found = None;
    wait_until(Duration::from_secs(15), "the command started", || {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let mut parts = text.split_whitespace();
        if let (Some(term), Some(pid), true) = (parts.next(), parts.next(), text.ends_with('\n')) {
            found = Some((term.parse().unwrap(), pid.parse().unwrap()));
        }
        found.is_some()
    });
    found.unwrap()
}

fn leader_json(server: &RedisServer, name: &str) -> Value {
    let out = fairlock(server)
        .args(["leader", name, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => kill(Pid::from_raw(pid), None).is_ok(),
    }
}

/// Two candidates: only the first runs its command; killed (SIGKILL, no
/// resignation), its command stops and the second takes over within the
/// lease, with a greater term in FAIRLOCK_TERM.
#[test]
fn only_the_leader_runs_and_a_killed_leader_is_succeeded() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let script = |file: &Path| {
        format!(
            "echo \"$FAIRLOCK_TERM $$\" > {}; exec sleep 30",
            file.display()
        )
    };
    let mut a = elect(&server, "jobs", "a", &script(&a_file));
    let (a_term, a_pid) = term_and_pid(&a_file);
    let b = elect(&server, "jobs", "b", &script(&b_file));
    wait_until(Duration::from_secs(10), "b queued", || {
        server.cmd::<i64>(&["ZCARD", "fairlock:{jobs}:line"]) == 1
    });
    assert_eq!(
        leader_json(&server, "jobs")["leader"],
        serde_json::json!({"value": "a", "label": leader_json(&server, "jobs")["leader"]["label"], "term": a_term})
    );
    assert!(!b_file.exists(), "the second candidate ran without leading");

    let killed = Instant::now();
    a.0.kill().unwrap();
    a.wait(Duration::from_secs(5));
    wait_until(Duration::from_secs(5), "a's command stopped", || {
        !running(a_pid)
    });
    let (b_term, _) = term_and_pid(&b_file);
    // Within the lease (1 s) and a waiter's refresh, on a loaded machine.
    assert!(
        killed.elapsed() < Duration::from_secs(6),
        "{:?}",
        killed.elapsed()
    );
    assert!(b_term > a_term);
    let now = leader_json(&server, "jobs");
    assert_eq!(now["leader"]["value"], "b");
    assert_eq!(now["leader"]["term"], b_term);
    drop(b);
}

/// A leadership taken away (force-unlock) stops the command: exit 71.
#[test]
fn a_lost_leadership_stops_the_command() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a");
    let mut a = elect(
        &server,
        "lost",
        "a",
        &format!(
            "echo \"$FAIRLOCK_TERM $$\" > {}; exec sleep 30",
            file.display()
        ),
    );
    let (_, pid) = term_and_pid(&file);
    let out = fairlock(&server)
        .args(["force-unlock", "lost", "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(a.wait(Duration::from_secs(20)).code(), Some(71));
    wait_until(Duration::from_secs(5), "the command stopped", || {
        !running(pid)
    });
    assert_eq!(leader_json(&server, "lost")["leader"], Value::Null);
}

/// `leader --watch --json` prints each change: nobody, the leader, its
/// new value... and nobody once the command exited (it resigned). A
/// command's exit code is elect's.
#[test]
fn leader_watch_prints_every_change() {
    let server = RedisServer::start();
    let mut watch = Running(
        fairlock(&server)
            .args(["leader", "w", "--watch", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = watch.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let next = || {
        let line = rx.recv_timeout(Duration::from_secs(10)).expect("a line");
        let value: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(value["name"], "w");
        value["leader"]["value"].as_str().map(str::to_owned)
    };
    assert_eq!(next(), None);
    let mut run = elect(&server, "w", "first", "exit 3");
    assert_eq!(run.wait(Duration::from_secs(15)).code(), Some(3));
    assert_eq!(next().as_deref(), Some("first"));
    assert_eq!(next(), None);
    let out = fairlock(&server).args(["leader", "w"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "w: no leader\n");
    kill(Pid::from_raw(watch.0.id() as i32), Signal::SIGTERM).unwrap();
    assert!(watch.wait(Duration::from_secs(5)).success());
}

/// Exit codes of `elect`: 75 when not leading within --wait, 127 for a
/// command not found (and the leadership given back), 64 under redisson.
#[test]
fn elect_exit_codes() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a");
    let _leader = elect(
        &server,
        "codes",
        "a",
        &format!(
            "echo \"$FAIRLOCK_TERM $$\" > {}; exec sleep 30",
            file.display()
        ),
    );
    term_and_pid(&file);
    let out = fairlock(&server)
        .args(["elect", "codes", "--wait", "200ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    assert_eq!(server.cmd::<i64>(&["ZCARD", "fairlock:{codes}:line"]), 0);
    let out = fairlock(&server)
        .args(["elect", "other", "--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert_eq!(leader_json(&server, "other")["leader"], Value::Null);
    let out = fairlock(&server)
        .args(["--protocol", "redisson", "elect", "other", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
}

/// A paused leader (SIGSTOP past its lease) is succeeded; once continued it
/// learns it lost the leadership at once, stops its command and exits 71.
#[test]
fn a_paused_leader_is_succeeded_and_stops_when_continued() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (a_file, b_file) = (dir.path().join("a"), dir.path().join("b"));
    let script = |file: &Path| {
        format!(
            "echo \"$FAIRLOCK_TERM $$\" > {}; exec sleep 30",
            file.display()
        )
    };
    let mut a = elect(&server, "paused", "a", &script(&a_file));
    let (a_term, a_pid) = term_and_pid(&a_file);
    let _b = elect(&server, "paused", "b", &script(&b_file));
    wait_until(Duration::from_secs(10), "b queued", || {
        server.cmd::<i64>(&["ZCARD", "fairlock:{paused}:line"]) == 1
    });
    let fairlock_a = Pid::from_raw(a.0.id() as i32);
    kill(fairlock_a, Signal::SIGSTOP).unwrap();
    let (b_term, _) = term_and_pid(&b_file);
    assert!(b_term > a_term);
    kill(fairlock_a, Signal::SIGCONT).unwrap();
    let continued = Instant::now();
    assert_eq!(a.wait(Duration::from_secs(20)).code(), Some(71));
    wait_until(Duration::from_secs(5), "a's command stopped", || {
        !running(a_pid)
    });
    // SIGTERM, and the command (sleep) ends at once: well within --grace.
    assert!(
        continued.elapsed() < Duration::from_secs(5),
        "{:?}",
        continued.elapsed()
    );
    assert_eq!(leader_json(&server, "paused")["leader"]["term"], b_term);
}

/// `fairlock bench election`: a dead leader's successor within the lease
/// (1 s) and a loaded machine's slack; a resignation's within a second.
#[test]
fn bench_election_measures_both_successions() {
    let server = RedisServer::start();
    let out = fairlock(&server)
        .args(["bench", "election", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["scenario"], "election");
    let death = report["death_to_next_leader_ms"][0].as_f64().unwrap();
    let resignation = report["resignation_to_next_leader_ms"][0].as_f64().unwrap();
    assert!(death > 0.0 && death < 4000.0, "{report}");
    assert!(resignation > 0.0 && resignation < 1000.0, "{report}");
}

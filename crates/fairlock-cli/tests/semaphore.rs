//! Semaphores from the command line: `exec NAME --semaphore --permits N
//! [--take K]` runs CMD with K permits of NAME, gives up with 75 when they
//! do not come in time, gives them back when CMD ends, and refuses bad
//! counts; under native CMD gets the acquisition's fencing token too.

use std::process::{Command, Output};
use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use support::RedisServer;

fn fairlock(server: &RedisServer, protocol: Protocol) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis")
        .arg(server.url())
        .args(["--protocol", protocol.as_str()])
        .env_remove("REDIS_URL");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run fairlock")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn library(server: &RedisServer) -> fairlock::blocking::LockClient {
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Redisson);
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

/// CMD runs with its permits (their ids in FAIRLOCK_PERMITS, taken in
/// Redis while it runs); with none free it gives up with 75; afterwards
/// every permit is back.
#[test]
fn exec_runs_the_command_with_permits() {
    let server = RedisServer::start();
    let client = library(&server);
    let sem = client.semaphore("jobs", 3).unwrap();
    let held = sem.acquire(2).unwrap();

    // Two asked for, one free: not within the wait.
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "exec",
        "jobs",
        "--semaphore",
        "--permits",
        "3",
        "--take",
        "2",
        "--wait",
        "300ms",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    held.release().unwrap();

    // Two taken while CMD runs: CMD sees them, and the count in Redis.
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "exec",
        "jobs",
        "--semaphore",
        "--permits",
        "3",
        "--take",
        "2",
        "--",
        "sh",
        "-c",
        "echo \"$FAIRLOCK_PERMITS\"; echo \"owner=$FAIRLOCK_OWNER\"",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let ids: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(ids.len(), 2, "{stdout}");
    assert!(
        ids.iter()
            .all(|id| id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit()))
    );
    assert_eq!(lines.next(), Some("owner="), "no lock owner for permits");
    assert_eq!(sem.available().unwrap(), 3, "given back when CMD ended");
    assert_eq!(server.cmd::<i64>(&["ZCARD", "{jobs}:timeout"]), 0);

    // CMD's exit code is exec's; the permits come back either way.
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "exec",
        "jobs",
        "--semaphore",
        "--permits",
        "3",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(sem.available().unwrap(), 3);

    // While CMD runs, its permit is out.
    let mut child = fairlock(&server, Protocol::Redisson)
        .args([
            "exec",
            "jobs",
            "--semaphore",
            "--permits",
            "3",
            "--take",
            "3",
            "--",
            "sleep",
            "30",
        ])
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.cmd::<i64>(&["ZCARD", "{jobs}:timeout"]) != 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "CMD never held its permits"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(sem.try_acquire(1).unwrap().is_none(), "all three out");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_eq!(sem.available().unwrap(), 3, "given back after a signal");
}

/// Bad counts: usage errors (64), nothing taken.
#[test]
fn exec_refuses_bad_counts() {
    let server = RedisServer::start();
    for take in ["0", "4"] {
        let out = run(fairlock(&server, Protocol::Redisson).args([
            "exec",
            "jobs",
            "--semaphore",
            "--permits",
            "3",
            "--take",
            take,
            "--",
            "true",
        ]));
        assert_eq!(
            out.status.code(),
            Some(64),
            "--take {take}: {}",
            stderr(&out)
        );
    }
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "exec",
        "jobs",
        "--semaphore",
        "--",
        "true",
    ]));
    assert_eq!(
        out.status.code(),
        Some(64),
        "--permits is required: {}",
        stderr(&out)
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", "{jobs}:timeout"]), 0);
}

/// Under native: the fair semaphore, with the acquisition's owner id in
/// FAIRLOCK_PERMITS and its fencing token in FAIRLOCK_TOKEN; a take above
/// the total is a usage error.
#[test]
fn exec_under_native_takes_the_fair_semaphore() {
    let server = RedisServer::start();
    let out = run(fairlock(&server, Protocol::Native).args([
        "exec",
        "jobs",
        "--semaphore",
        "--permits",
        "3",
        "--take",
        "2",
        "--",
        "sh",
        "-c",
        "echo \"$FAIRLOCK_PERMITS $FAIRLOCK_TOKEN\"",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let [owner, token] = stdout.split_whitespace().collect::<Vec<_>>()[..] else {
        panic!("{stdout:?}");
    };
    assert!(owner.contains(':'), "{owner}");
    assert!(token.parse::<u64>().is_ok(), "{token}");
    let out = run(fairlock(&server, Protocol::Native).args([
        "exec",
        "jobs",
        "--semaphore",
        "--permits",
        "3",
        "--take",
        "4",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", "fairlock:{jobs}:sem:holders"]),
        0
    );
}

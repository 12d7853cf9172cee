//! The read-write lock from the command line: `exec --read` / `--write`,
//! `inspect` of a read-write lock, `force-unlock --read` / `--write`
//! (redisson protocol), and the native protocol's fair read-write lock.

use std::process::{Command, Output};
use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use serde_json::Value;
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
        .protocol(Protocol::Redisson)
        .label("library:1");
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

fn inspect(server: &RedisServer, name: &str) -> Value {
    let out = run(fairlock(server, Protocol::Redisson).args(["inspect", name, "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// A reader runs beside another reader; a writer waits for them (and gives
/// up with 75 when its wait ends first); inspect shows each with its mode,
/// from outside and from inside a writer's command.
#[test]
fn exec_takes_either_side() {
    let server = RedisServer::start();
    let client = library(&server);
    let rw = client.read_write_lock("report").unwrap();
    let read = rw.read().lock().unwrap();

    let out = run(fairlock(&server, Protocol::Redisson)
        .args(["exec", "report", "--read", "--wait", "10s", "--", "true"]));
    assert!(
        out.status.success(),
        "a reader runs beside a reader: {}",
        stderr(&out)
    );
    let out = run(fairlock(&server, Protocol::Redisson)
        .args(["exec", "report", "--write", "--wait", "300ms", "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));

    let state = inspect(&server, "report");
    assert_eq!(state["locked"], Value::Bool(true));
    let holders = state["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{state}");
    assert_eq!(holders[0]["mode"], "read");
    assert_eq!(holders[0]["label"], "library:1");
    let text = run(fairlock(&server, Protocol::Redisson).args(["inspect", "report"]));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("  reader   "),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    read.unlock().unwrap();

    // Inside a writer's command, the lock shows one writer.
    let inner = format!(
        "{} --redis {} --protocol redisson inspect report --json",
        env!("CARGO_BIN_EXE_fairlock"),
        server.url()
    );
    let out = run(fairlock(&server, Protocol::Redisson)
        .args(["exec", "report", "--write", "--", "sh", "-c", &inner]));
    assert!(out.status.success(), "{}", stderr(&out));
    let state: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let holders = state["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{state}");
    assert_eq!(holders[0]["mode"], "write");
    assert!(
        holders[0]["owner"].as_str().unwrap().ends_with(":write"),
        "{state}"
    );
    assert_eq!(inspect(&server, "report")["locked"], Value::Bool(false));
}

/// `force-unlock --write` releases a writer (its library guard hears it);
/// `--read` finds no reader then; plain `force-unlock` refuses the
/// read-write lock's hash as not a lock, and changes nothing.
#[test]
fn force_unlock_takes_a_side() {
    let server = RedisServer::start();
    let client = library(&server);
    let rw = client.read_write_lock("job").unwrap();
    let write = rw.write().lock().unwrap();

    let out = run(fairlock(&server, Protocol::Redisson).args(["force-unlock", "job", "--yes"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(write.is_held());
    let out =
        run(fairlock(&server, Protocol::Redisson).args(["force-unlock", "job", "--read", "--yes"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("job was not locked"));
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "force-unlock",
        "job",
        "--write",
        "--yes",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("job unlocked"));
    assert!(
        write.wait_lost(Duration::from_secs(5)).unwrap(),
        "the writer hears it"
    );
}

/// The flags exclude each other: a usage error.
#[test]
fn bad_combinations_are_usage_errors() {
    let server = RedisServer::start();
    let out = run(fairlock(&server, Protocol::Redisson)
        .args(["exec", "x", "--read", "--write", "--", "true"]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    let out = run(fairlock(&server, Protocol::Redisson).args([
        "exec",
        "x",
        "--read",
        "--nonfair",
        "--",
        "true",
    ]));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
}

/// Under native, `exec --read` and `--write` take the fair read-write
/// lock, and `inspect` shows it while it is held.
#[test]
fn native_exec_takes_the_fair_read_write_lock() {
    let server = RedisServer::start();
    for side in ["--read", "--write"] {
        let out = run(fairlock(&server, Protocol::Native)
            .args(["exec", "n", side, "--", "sh", "-c", "exit 3"]));
        assert_eq!(out.status.code(), Some(3), "{side}: {}", stderr(&out));
    }
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Native);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let rw = client.read_write_lock("n").unwrap();
    let read = rw.read().lock().unwrap();
    let out = run(fairlock(&server, Protocol::Native).args(["inspect", "n", "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("\"mode\":\"read\""), "{text}");
    drop(read);
}

/// `watch` shows every holder of a read-write lock with its mode.
#[test]
fn watch_shows_every_reader() {
    let server = RedisServer::start();
    let client = library(&server);
    let rw = client.read_write_lock("shared").unwrap();
    let first = rw.read().lock().unwrap();
    let second = std::thread::spawn({
        let rw = rw.clone();
        move || rw.read().lock().unwrap()
    })
    .join()
    .unwrap();

    let out =
        run(fairlock(&server, Protocol::Redisson)
            .args(["watch", "shared", "--count", "1", "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let view: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let holders = view["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 2, "{view}");
    assert!(
        holders
            .iter()
            .all(|h| h["mode"] == "read" && h["label"] == "library:1"),
        "{view}"
    );
    let out = run(fairlock(&server, Protocol::Redisson).args(["watch", "shared", "--count", "1"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches(" (read)").count(), 2, "{text}");
    first.unlock().unwrap();
    second.unlock().unwrap();
}

/// Under native one line holds readers and writers: `inspect` and `watch`
/// show each waiter's side (text and JSON), in line order.
#[test]
fn native_inspect_and_watch_show_each_waiters_side() {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Native)
        .label("library:1");
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let reading = client
        .read_write_lock("sides")
        .unwrap()
        .read()
        .lock()
        .unwrap();
    let queued = |n: i64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while server.cmd::<i64>(&["ZCARD", "fairlock:{sides}:rw:line"]) != n {
            assert!(std::time::Instant::now() < deadline, "{n} never queued");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut waiters = Vec::new();
    for (side, label, n) in [("--write", "w:1", 1), ("--read", "r:2", 2)] {
        waiters.push(
            fairlock(&server, Protocol::Native)
                .args(["--label", label, "exec", "sides", side, "--", "true"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        queued(n);
    }
    let out = run(fairlock(&server, Protocol::Native).args(["inspect", "sides", "--json"]));
    let state: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let queue: Vec<(&str, &str)> = state["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["label"].as_str().unwrap(), w["mode"].as_str().unwrap()))
        .collect();
    assert_eq!(queue, [("w:1", "write"), ("r:2", "read")], "{state}");
    let out = run(fairlock(&server, Protocol::Native).args(["inspect", "sides"]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(". ")).collect();
    assert!(
        lines[0].contains(":write on w:1  (writer, entry expires in ")
            && lines[1].contains(" on r:2  (reader, entry expires in "),
        "{text}"
    );

    let out =
        run(fairlock(&server, Protocol::Native).args(["watch", "sides", "--count", "1", "--json"]));
    let view: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let modes: Vec<&str> = view["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["mode"].as_str().unwrap())
        .collect();
    assert_eq!(modes, ["write", "read"], "{view}");
    let out = run(fairlock(&server, Protocol::Native).args(["watch", "sides", "--count", "1"]));
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.trim_end().ends_with(": w:1 (write), r:2 (read)"),
        "{line}"
    );

    reading.unlock().unwrap();
    for mut waiter in waiters {
        assert!(waiter.wait().unwrap().success());
    }
}

/// The lines of `stderr`, as they come.
fn lines(stderr: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (at most 10 s) for the line `wanted`; panics with what came.
fn expect_line(rx: &std::sync::mpsc::Receiver<String>, wanted: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line == wanted => return,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line {wanted:?} on stderr; saw {seen:?}");
}

/// Under native, a waiting `exec --read` or `--write` shows its place in
/// the read-write lock's one line for both sides, as a fair lock's does.
/// Before: "non-fair lock: no queue position", though the line exists.
/// Under redisson (no line) it says once that it waits.
#[test]
fn exec_shows_its_place_in_the_native_line() {
    use std::process::Stdio;
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Native);
    let client = fairlock::blocking::LockClient::with_config(config).unwrap();
    let writing = client
        .read_write_lock("line")
        .unwrap()
        .write()
        .lock()
        .unwrap();
    let spawn = |side: &str| {
        fairlock(&server, Protocol::Native)
            .args(["exec", "line", side, "--", "true"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut reader = spawn("--read");
    let read_lines = lines(reader.stderr.take().unwrap());
    expect_line(&read_lines, "waiting for line: position 1 of 1");
    let mut writer = spawn("--write");
    let write_lines = lines(writer.stderr.take().unwrap());
    expect_line(&write_lines, "waiting for line: position 2 of 2");
    writing.unlock().unwrap();
    for (child, side) in [(&mut reader, "reader"), (&mut writer, "writer")] {
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "{side}");
    }

    let redisson = library(&server);
    let writing = redisson
        .read_write_lock("nonfair")
        .unwrap()
        .write()
        .lock()
        .unwrap();
    let mut reader = fairlock(&server, Protocol::Redisson)
        .args(["exec", "nonfair", "--read", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(reader.stderr.take().unwrap());
    expect_line(
        &rx,
        "waiting for nonfair (non-fair lock: no queue position)",
    );
    writing.unlock().unwrap();
    assert_eq!(reader.wait().unwrap().code(), Some(0));
}

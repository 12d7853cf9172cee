//! `fairlock watch` (periodic lines and `--json`, outside a terminal) and
//! `--metrics-addr` on `watch` and `exec`, scraped over plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fairlock_test_support::RedisServer;
use serde_json::Value;

fn fairlock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis").arg(server.url()).env_remove("REDIS_URL");
    cmd
}

fn library_client(server: &RedisServer) -> fairlock::blocking::LockClient {
    fairlock::blocking::LockClient::connect(&server.url()).unwrap()
}

/// Poll `condition` every 20 ms for at most `limit` (state in other processes).
fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_child(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("fairlock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `fairlock exec NAME -- sleep SECS` waiting in line (or holding).
fn exec_waiter(server: &RedisServer, name: &str, secs: &str) -> Child {
    fairlock(server)
        .args(["exec", name, "--", "sleep", secs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn queue_length(client: &fairlock::blocking::LockClient, name: &str) -> usize {
    client
        .fair_lock(name)
        .unwrap()
        .inspect()
        .unwrap()
        .queue
        .len()
}

#[test]
fn watch_prints_a_line_per_lock_and_refresh() {
    let server = RedisServer::start();
    let client = library_client(&server);
    let guard = client.fair_lock("w1").unwrap().lock().unwrap();
    let owner = guard.owner().to_string();
    let token = guard.token().unwrap();
    let mut waiter = exec_waiter(&server, "w1", "0");
    wait_until(Duration::from_secs(10), "exec queued", || {
        queue_length(&client, "w1") == 1
    });

    let out = fairlock(&server)
        .args(["watch", "w1", "w2", "--interval", "200ms", "--count", "3"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    for pair in lines.chunks(2) {
        // "<RFC 3339 time> w1: held by OWNER on HOST:PID for >=0s, token T,
        // lease 29.8s left, 1 waiting (longest >=0s): HOST:PID"
        let (time, w1) = pair[0].split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.contains('T'), "{time}");
        // The library client's label: this process's HOST:PID.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let label = format!("{}:{}", host.trim(), std::process::id());
        let held = format!("w1: held by {owner} on {label} for >=");
        assert!(w1.starts_with(&held), "{w1}");
        assert!(w1.contains(&format!(", token {token}, lease ")), "{w1}");
        assert!(w1.contains(" left, 1 waiting (longest >="), "{w1}");
        // The waiter, by the exec's label: its HOST:PID.
        let waiter_label = format!("{}:{}", host.trim(), waiter.id());
        assert!(w1.ends_with(&format!("): {waiter_label}")), "{w1}");
        assert!(pair[1].ends_with(" w2: free, 0 waiting"), "{}", pair[1]);
    }
    // No escape codes outside a terminal.
    assert!(!text.contains('\x1b'));
    guard.unlock().unwrap();
    assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
}

#[test]
fn watch_json_follows_holders_and_waiters() {
    let server = RedisServer::start();
    let client = library_client(&server);
    let guard = client.fair_lock("j1").unwrap().lock().unwrap();
    let first_owner = guard.owner().to_string();
    let mut waiter = exec_waiter(&server, "j1", "2");
    wait_until(Duration::from_secs(10), "exec queued", || {
        queue_length(&client, "j1") == 1
    });

    let mut watch = fairlock(&server)
        .args([
            "watch",
            "j1",
            "--json",
            "--interval",
            "200ms",
            "--count",
            "12",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let mut next = || -> Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };

    // Held by the library client, the exec waiting: both already there at
    // the first read, so their times are lower bounds.
    let first = next();
    assert_eq!(first["name"], "j1");
    assert_eq!(first["protocol"], "native");
    assert_eq!(first["locked"], true);
    assert_eq!(first["holder"], first_owner.as_str());
    assert_eq!(first["token"], guard.token().unwrap());
    assert_eq!(first["queue_length"], 1);
    assert_eq!(first["held_for_exact"], false);
    assert_eq!(first["longest_wait_exact"], false);
    assert!(first["lease_ms"].as_u64().unwrap() > 20_000, "{first}");
    let second = next();
    assert!(second["held_for_ms"].as_u64() >= first["held_for_ms"].as_u64());
    assert!(second["longest_wait_ms"].as_u64() >= first["longest_wait_ms"].as_u64());

    // The exec takes over: a new holder, seen since it came, exactly timed.
    guard.unlock().unwrap();
    let taken = loop {
        let line = next();
        if line["holder"] != first_owner.as_str() && line["locked"] == true {
            break line;
        }
    };
    assert_eq!(taken["held_for_exact"], true, "{taken}");
    assert_eq!(taken["queue_length"], 0);
    assert_eq!(taken["longest_wait_ms"], Value::Null);
    assert!(taken["token"].as_u64().unwrap() > first["token"].as_u64().unwrap());
    assert!(wait_child(&mut watch, Duration::from_secs(20)).success());
    assert!(wait_child(&mut waiter, Duration::from_secs(20)).success());
}

/// The address a `--metrics-addr 127.0.0.1:0` process serves on, from its
/// stderr; the rest of stderr is drained in the background.
fn metrics_address(stderr: ChildStderr) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if let Some(rest) = line.strip_prefix("fairlock: serving metrics on http://") {
                let _ = tx.send(rest.trim_end_matches("/metrics").to_owned());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the metrics address on stderr")
}

/// GET `path` with a plain TCP connection: (status line, body).
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("a response head");
    let status = head.lines().next().unwrap().to_owned();
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    (status, body.to_owned())
}

/// The value of the sample of `name` whose labels include all of `labels`.
fn sample(body: &str, name: &str, labels: &[&str]) -> Option<f64> {
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                && labels.iter().all(|label| line.contains(label))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

#[test]
fn watch_serves_the_watched_locks_to_prometheus() {
    let server = RedisServer::start();
    let client = library_client(&server);
    let guard = client.fair_lock("m1").unwrap().lock().unwrap();
    let mut waiter = exec_waiter(&server, "m1", "0");
    wait_until(Duration::from_secs(10), "exec queued", || {
        queue_length(&client, "m1") == 1
    });
    let mut watch = fairlock(&server)
        .args(["watch", "m1", "--interval", "100ms"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_address(watch.stderr.take().unwrap());
    let mut body = String::new();
    wait_until(Duration::from_secs(10), "a refresh exported", || {
        let (status, text) = get(&addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        body = text;
        sample(&body, "fairlock_watch_queue_length", &["lock=\"m1\""]) == Some(1.0)
    });
    assert_eq!(
        sample(&body, "fairlock_watch_locked", &["lock=\"m1\""]),
        Some(1.0)
    );
    let lease = sample(&body, "fairlock_watch_lease_seconds", &["lock=\"m1\""]).unwrap();
    assert!(lease > 20.0 && lease <= 30.0, "{lease}");
    assert!(
        body.contains("# TYPE fairlock_watch_held_seconds gauge"),
        "{body}"
    );
    assert_eq!(get(&addr, "/other").0, "HTTP/1.1 404 Not Found");

    // SIGTERM ends the watch normally.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_child(&mut watch, Duration::from_secs(10)).success());
    guard.unlock().unwrap();
    assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
}

#[test]
fn exec_serves_its_lock_metrics_while_the_command_runs() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let script = format!("while [ ! -e '{}' ]; do sleep 0.05; done", done.display());
    let mut exec = fairlock(&server)
        .args(["exec", "e1", "--metrics-addr", "127.0.0.1:0"])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_address(exec.stderr.take().unwrap());
    let mut body = String::new();
    wait_until(Duration::from_secs(10), "the lock held", || {
        body = get(&addr, "/metrics").1;
        sample(&body, "fairlock_held_locks", &[]) == Some(1.0)
    });
    let acquired = [
        "protocol=\"native\"",
        "kind=\"fair\"",
        "outcome=\"immediate\"",
        "lock=\"e1\"",
    ];
    assert_eq!(
        sample(&body, "fairlock_acquisitions_total", &acquired),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "fairlock_wait_seconds_count", &acquired),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        sample(&body, "fairlock_waiting_tasks", &[]),
        Some(0.0),
        "{body}"
    );
    assert!(
        body.contains("# TYPE fairlock_wait_seconds histogram"),
        "{body}"
    );
    std::fs::write(&done, "").unwrap();
    assert!(wait_child(&mut exec, Duration::from_secs(20)).success());
}

/// `watch --semaphore --metrics-addr`: a semaphore is locked while a permit
/// is taken, with its queue and the permits available (no lease or hold
/// time: its holders come and go on their own).
#[test]
fn watch_serves_the_watched_semaphores_to_prometheus() {
    let server = RedisServer::start();
    let client = library_client(&server);
    let held = client.semaphore("s1", 3).unwrap().acquire(2).unwrap();
    let mut waiter = fairlock(&server)
        .args(["exec", "s1", "--semaphore", "--permits", "3", "--take", "2"])
        .args(["--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "exec queued", || {
        server.cmd::<i64>(&["ZCARD", "fairlock:{s1}:sem:line"]) == 1
    });
    let mut watch = fairlock(&server)
        .args(["watch", "s1", "--semaphore", "--interval", "100ms"])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = metrics_address(watch.stderr.take().unwrap());
    let mut body = String::new();
    wait_until(Duration::from_secs(10), "a refresh exported", || {
        body = get(&addr, "/metrics").1;
        sample(&body, "fairlock_watch_queue_length", &["lock=\"s1\""]) == Some(1.0)
    });
    let gauge = |name: &str| sample(&body, name, &["lock=\"s1\""]);
    assert_eq!(gauge("fairlock_watch_locked"), Some(1.0), "{body}");
    assert_eq!(
        gauge("fairlock_watch_permits_available"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(gauge("fairlock_watch_lease_seconds"), None, "{body}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watch.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_child(&mut watch, Duration::from_secs(10)).success());
    held.release().unwrap();
    assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
}

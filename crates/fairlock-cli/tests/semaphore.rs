//! Semaphores from the command line: `exec NAME --semaphore --permits N
//! [--take K]` runs CMD with K permits of NAME, gives up with 75 when they
//! do not come in time, gives them back when CMD ends, and refuses bad
//! counts; under native CMD gets the acquisition's fencing token too.
//! `inspect --semaphore` and `watch --semaphore` show the permits, who
//! holds them and the line; `force-unlock --semaphore` gives every permit
//! back (asking first on a terminal).

use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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
        .protocol(Protocol::Redisson);
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

/// A library client of `protocol` labelled `library:1`; under redisson
/// its watchdog lease is 3 s (renewed every second: a holder finds its
/// permits gone within that), under native the default 30 s (a holder is
/// told at once).
fn labelled(server: &RedisServer, protocol: Protocol) -> fairlock::blocking::LockClient {
    let mut config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(protocol)
        .label("library:1");
    if protocol == Protocol::Redisson {
        config = config.lease(Duration::from_secs(3));
    }
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

/// `fairlock ARGS` under `protocol`: its stdout, which must be a success.
fn stdout(server: &RedisServer, protocol: Protocol, args: &[&str]) -> String {
    let out = run(fairlock(server, protocol).args(args));
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

fn json(server: &RedisServer, protocol: Protocol, args: &[&str]) -> Value {
    serde_json::from_str(&stdout(server, protocol, args)).expect("JSON")
}

/// Poll `condition` every 20 ms for at most 10 s (state in other processes).
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_child(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("fairlock did not exit within 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `fairlock exec NAME --semaphore` (labelled `waiter:9`) taking `take`
/// of 3 permits, then running `true`.
fn exec_waiter(server: &RedisServer, protocol: Protocol, name: &str, take: &str) -> Child {
    fairlock(server, protocol)
        .args(["--label", "waiter:9", "exec", name, "--semaphore"])
        .args(["--permits", "3", "--take", take, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
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

/// Under native, `inspect --semaphore` and `watch --semaphore` show the
/// total, what is available, each holder (owner id, label, permits, token,
/// lease left) and the line (who waits, for how many permits), in text and
/// JSON.
#[test]
fn inspect_and_watch_show_the_holders_and_the_line() {
    let server = RedisServer::start();
    let client = labelled(&server, Protocol::Native);
    let held = client.semaphore("jobs", 3).unwrap().acquire(2).unwrap();
    let (owner, token) = (held.ids()[0].clone(), held.token().unwrap());
    let mut waiter = exec_waiter(&server, Protocol::Native, "jobs", "2");
    wait_until("the exec queued", || {
        server.cmd::<i64>(&["ZCARD", "fairlock:{jobs}:sem:line"]) == 1
    });
    let queued: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{jobs}:sem:line", "0", "-1"]);

    let state = json(
        &server,
        Protocol::Native,
        &["inspect", "jobs", "--semaphore", "--json"],
    );
    assert_eq!(state["protocol"], "native");
    assert_eq!(state["exists"], true);
    assert_eq!(
        (&state["total"], &state["available"]),
        (&3.into(), &1.into())
    );
    let taken = state["taken"].as_array().unwrap();
    assert_eq!(taken.len(), 1, "{state}");
    assert_eq!(taken[0]["id"], owner.as_str());
    assert_eq!(taken[0]["owner"], owner.as_str());
    assert_eq!(taken[0]["label"], "library:1");
    assert_eq!(taken[0]["permits"], 2);
    assert_eq!(taken[0]["token"], token);
    let lease = taken[0]["lease_ms"].as_u64().unwrap();
    assert!(lease > 20_000 && lease <= 30_000, "{state}");
    let queue = state["queue"].as_array().unwrap();
    assert_eq!(queue.len(), 1, "{state}");
    assert_eq!(queue[0]["position"], 1);
    assert_eq!(queue[0]["owner"], queued[0].as_str());
    assert_eq!(queue[0]["label"], "waiter:9");
    assert_eq!(queue[0]["permits"], 2);
    assert!(queue[0]["expires_in_ms"].as_u64().unwrap() > 0);
    assert_eq!(state["other_protocol"], Value::Null);

    let text = stdout(
        &server,
        Protocol::Native,
        &["inspect", "jobs", "--semaphore"],
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0], "jobs (native semaphore): 2 of 3 permits taken, 1 available",
        "{text}"
    );
    let holder = format!("  holder   {owner} on library:1  (2 permits, token {token}, lease ");
    assert!(lines[1].starts_with(&holder), "{text}");
    assert_eq!(lines[2], "  queue    1 waiting", "{text}");
    let waiting = format!(
        "      1. {} on waiter:9  (asks 2 permits, entry expires in ",
        queued[0]
    );
    assert!(lines[3].starts_with(&waiting), "{text}");

    let view = json(
        &server,
        Protocol::Native,
        &["watch", "jobs", "--semaphore", "--count", "1", "--json"],
    );
    assert_eq!((&view["total"], &view["available"]), (&3.into(), &1.into()));
    assert_eq!(view["taken"][0]["owner"], owner.as_str());
    assert_eq!(view["taken"][0]["permits"], 2);
    assert_eq!(view["queue_length"], 1);
    assert_eq!(view["waiters"][0]["label"], "waiter:9");
    assert_eq!(view["waiters"][0]["permits"], 2);
    let line = stdout(
        &server,
        Protocol::Native,
        &["watch", "jobs", "--semaphore", "--count", "1"],
    );
    let shown = format!(
        " jobs: 2 of 3 permits taken (1 available) by {owner} on library:1 (2 permits, lease "
    );
    assert!(line.contains(&shown), "{line}");
    assert!(
        line.trim_end()
            .ends_with(", 1 waiting (longest >=0s): waiter:9 (2 permits)"),
        "{line}"
    );

    held.release().unwrap();
    assert!(wait_child(&mut waiter).success());
}

/// Under redisson each taken permit is a line of its own, its id with no
/// owner (Redisson records none), and there is no line of waiters; the
/// native protocol's `inspect --semaphore` says the name is a semaphore
/// under redisson. A semaphore nobody set up is shown as none, and looking
/// creates nothing.
#[test]
fn inspect_under_redisson_shows_each_permit_id() {
    let server = RedisServer::start();
    let client = labelled(&server, Protocol::Redisson);
    let held = client.semaphore("jobs", 3).unwrap().acquire(2).unwrap();
    let state = json(
        &server,
        Protocol::Redisson,
        &["inspect", "jobs", "--semaphore", "--json"],
    );
    assert_eq!(
        (&state["total"], &state["available"]),
        (&3.into(), &1.into())
    );
    let mut ids: Vec<&str> = state["taken"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            assert_eq!(t["owner"], Value::Null, "{state}");
            assert_eq!(t["label"], Value::Null, "{state}");
            assert_eq!(t["token"], Value::Null, "{state}");
            assert_eq!(t["permits"], 1, "{state}");
            t["id"].as_str().unwrap()
        })
        .collect();
    ids.sort_unstable();
    let mut held_ids: Vec<&str> = held.ids().iter().map(String::as_str).collect();
    held_ids.sort_unstable();
    assert_eq!(ids, held_ids);
    assert_eq!(state["queue"], Value::Array(vec![]));
    let text = stdout(
        &server,
        Protocol::Redisson,
        &["inspect", "jobs", "--semaphore"],
    );
    for id in &held_ids {
        assert!(
            text.contains(&format!("\n  permit   {id}  (lease ")),
            "{text}"
        );
    }
    assert!(
        text.contains("\n  queue    none (Redisson's semaphore has no line)\n"),
        "{text}"
    );

    // Under native: none of its own, but the redisson one is pointed at.
    let native = json(
        &server,
        Protocol::Native,
        &["inspect", "jobs", "--semaphore", "--json"],
    );
    assert_eq!(native["exists"], false);
    assert_eq!(
        native["other_protocol"],
        serde_json::json!({"protocol": "redisson", "taken": true, "queue_length": 0,
            "flag": "--protocol redisson"})
    );
    let text = stdout(
        &server,
        Protocol::Native,
        &["inspect", "jobs", "--semaphore"],
    );
    assert!(
        text.starts_with("jobs (native semaphore): no semaphore (no total stored)\n"),
        "{text}"
    );
    assert!(
        text.contains("note: jobs is also a semaphore under the redisson protocol (permits taken)"),
        "{text}"
    );
    held.release().unwrap();

    for protocol in [Protocol::Native, Protocol::Redisson] {
        let state = json(
            &server,
            protocol,
            &["inspect", "none", "--semaphore", "--json"],
        );
        assert_eq!(state["exists"], false, "{protocol}: {state}");
        assert_eq!(state["total"], 0, "{protocol}: {state}");
    }
    let created: Vec<String> = server.cmd(&["KEYS", "*none*"]);
    assert!(created.is_empty(), "looking created {created:?}");
}

/// `force-unlock --semaphore` gives back every permit under both
/// protocols and says how many; the holder hears it (native: at once;
/// redisson: at its next renewal); with nothing taken it says so.
#[test]
fn force_unlock_gives_back_every_permit() {
    for protocol in [Protocol::Native, Protocol::Redisson] {
        let server = RedisServer::start();
        let client = labelled(&server, protocol);
        let sem = client.semaphore("jobs", 3).unwrap();
        let held = sem.acquire(2).unwrap();
        let other = sem.acquire(1).unwrap();
        let said = stdout(
            &server,
            protocol,
            &["force-unlock", "jobs", "--semaphore", "--yes"],
        );
        assert_eq!(said, "jobs: 3 permits released\n", "{protocol}");
        for guard in [&held, &other] {
            assert!(
                guard.wait_lost(Duration::from_secs(5)).unwrap(),
                "{protocol}: the holder hears it"
            );
        }
        assert_eq!(sem.available().unwrap(), 3, "{protocol}");
        let said = stdout(
            &server,
            protocol,
            &["force-unlock", "jobs", "--semaphore", "--yes"],
        );
        assert_eq!(said, "no permit of jobs was taken\n", "{protocol}");
    }
}

/// On a terminal `force-unlock --semaphore` asks first, naming the
/// holders: "n" changes nothing and exits 1, "y" gives the permits back.
#[test]
fn force_unlock_of_a_semaphore_asks_on_a_terminal() {
    let server = RedisServer::start();
    let client = labelled(&server, Protocol::Native);
    let sem = client.semaphore("asked", 3).unwrap();
    let held = sem.acquire(2).unwrap();
    for (answer, code) in [("n\n", 1), ("y\n", 0)] {
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut master = std::fs::File::from(pty.master);
        let child = fairlock(&server, Protocol::Native)
            .args(["force-unlock", "asked", "--semaphore"])
            .stdin(Stdio::from(pty.slave))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        master.write_all(answer.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        let question = format!(
            "force-release every permit of asked (2 of 3 taken, by {})? A `fairlock exec` \
             holder stops its command (exit 71)",
            held.ids()[0]
        );
        assert!(said.contains(&question), "{said}");
        assert_eq!(out.status.code(), Some(code), "{said}");
        if code == 1 {
            assert!(
                said.contains("not released: the permits of asked are still taken"),
                "{said}"
            );
            assert_eq!(sem.available().unwrap(), 1);
            assert!(held.is_held());
        } else {
            let printed = String::from_utf8_lossy(&out.stdout);
            assert_eq!(printed, "asked: 2 permits released\n");
            assert!(held.wait_lost(Duration::from_secs(5)).unwrap());
        }
    }
}

/// `--semaphore` excludes the lock kinds' flags: a usage error.
#[test]
fn force_unlock_semaphore_excludes_the_lock_flags() {
    let server = RedisServer::start();
    for flag in ["--read", "--write", "--nonfair"] {
        let out = run(fairlock(&server, Protocol::Native).args([
            "force-unlock",
            "x",
            "--semaphore",
            flag,
            "--yes",
        ]));
        assert_eq!(out.status.code(), Some(64), "{flag}: {}", stderr(&out));
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

/// Under native, a waiting `exec --semaphore` shows its place in the
/// semaphore's line. Before: "(no queue position)", though the native
/// semaphore has a line. Under redisson (no line) it says once that it
/// waits.
#[test]
fn exec_shows_its_place_in_the_native_semaphores_line() {
    let server = RedisServer::start();
    for protocol in [Protocol::Native, Protocol::Redisson] {
        let client = labelled(&server, protocol);
        let name = format!("line-{protocol}");
        let held = client.semaphore(&name, 3).unwrap().acquire(3).unwrap();
        let spawn = |take: &str| {
            fairlock(&server, protocol)
                .args([
                    "exec",
                    &name,
                    "--semaphore",
                    "--permits",
                    "3",
                    "--take",
                    take,
                ])
                .args(["--", "true"])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut first = spawn("2");
        let first_lines = lines(first.stderr.take().unwrap());
        if protocol == Protocol::Native {
            expect_line(
                &first_lines,
                &format!("waiting for 2 permit(s) of {name}: position 1 of 1"),
            );
            let mut second = spawn("1");
            let second_lines = lines(second.stderr.take().unwrap());
            expect_line(
                &second_lines,
                &format!("waiting for 1 permit(s) of {name}: position 2 of 2"),
            );
            held.release().unwrap();
            assert_eq!(wait_child(&mut second).code(), Some(0));
        } else {
            expect_line(
                &first_lines,
                &format!("waiting for 2 permit(s) of {name} (no queue position)"),
            );
            held.release().unwrap();
        }
        assert_eq!(wait_child(&mut first).code(), Some(0), "{protocol}");
    }
}

/// `inspect --semaphore` under redisson tells the two kinds Redisson keeps
/// under a name apart where Redis does: permit ids taken (an
/// `RPermitExpirableSemaphore`, shown whole) or only a count. A count alone
/// is a plain `RSemaphore` (which records neither its total nor who holds
/// what) or an expirable one with every permit free: inspect says so, and
/// the JSON's `total` is null. Before: a plain semaphore of 3 of which
/// Java holds 2 read as "0 of 1 permit taken, 1 available".
#[test]
fn inspect_tells_a_plain_semaphore_it_cannot_show() {
    let server = RedisServer::start();
    let client = library(&server);
    // Java's RSemaphore: trySetPermits(3), acquire(2) (fairlock's counting
    // semaphore writes the same bytes).
    let plain = client.counting_semaphore("plain", 3).unwrap();
    let two = plain.acquire(2).unwrap();
    assert_eq!(server.cmd::<String>(&["GET", "plain"]), "1");
    let text = stdout(
        &server,
        Protocol::Redisson,
        &["inspect", "plain", "--semaphore"],
    );
    assert!(
        !text.contains("of 1 permit taken"),
        "a plain semaphore read as an expirable one: {text}"
    );
    assert!(
        text.starts_with(
            "plain (redisson semaphore): 1 available, no permit id taken: a plain RSemaphore \
             (counting_semaphore; it records neither its total nor its holders) or an \
             RPermitExpirableSemaphore of 1 permit, none taken\n"
        ),
        "{text}"
    );
    let state = json(
        &server,
        Protocol::Redisson,
        &["inspect", "plain", "--semaphore", "--json"],
    );
    assert_eq!(state["kind"], "count_only", "{state}");
    assert_eq!(state["total"], Value::Null, "{state}");
    assert_eq!(state["available"], 1, "{state}");
    assert_eq!(state["taken"], Value::Array(vec![]), "{state}");
    // Under native, the note on the other protocol says what it found.
    let text = stdout(
        &server,
        Protocol::Native,
        &["inspect", "plain", "--semaphore"],
    );
    assert!(
        text.contains(
            "note: plain is also a semaphore under the redisson protocol (a count of 1 available, \
             no permit id taken)"
        ),
        "{text}"
    );
    two.release().unwrap();

    // An expirable one with permits taken: its own state, kind said.
    let sem = client.semaphore("expirable", 3).unwrap();
    let held = sem.acquire(2).unwrap();
    let state = json(
        &server,
        Protocol::Redisson,
        &["inspect", "expirable", "--semaphore", "--json"],
    );
    assert_eq!(state["kind"], "permit_expirable", "{state}");
    assert_eq!(
        (&state["total"], &state["available"]),
        (&3.into(), &1.into())
    );
    let text = stdout(
        &server,
        Protocol::Redisson,
        &["inspect", "expirable", "--semaphore"],
    );
    assert!(
        text.starts_with("expirable (redisson semaphore): 2 of 3 permits taken, 1 available\n"),
        "{text}"
    );
    held.release().unwrap();
    let state = json(
        &server,
        Protocol::Native,
        &["inspect", "expirable", "--semaphore", "--json"],
    );
    assert_eq!(state["kind"], "native", "{state}");
}

//! The `fairlock` binary against harness-started Redis servers.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use fairlock_test_support as support;
use serde_json::Value;
use support::{PROTOCOLS, RedisServer};

fn fairlock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis").arg(server.url()).env_remove("REDIS_URL");
    cmd
}

/// `fairlock --protocol PROTOCOL` against `server`.
fn fairlock_with(server: &RedisServer, protocol: Protocol) -> Command {
    let mut cmd = fairlock(server);
    cmd.args(["--protocol", protocol.as_str()]);
    cmd
}

/// A blocking library client speaking `protocol`.
fn library_client(server: &RedisServer, protocol: Protocol) -> fairlock::blocking::LockClient {
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(protocol);
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run fairlock")
}

fn inspect(server: &RedisServer, name: &str) -> Value {
    inspect_with(server, Protocol::Native, name)
}

fn inspect_with(server: &RedisServer, protocol: Protocol, name: &str) -> Value {
    let out = run(fairlock_with(server, protocol).args(["inspect", name, "--json"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
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

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn five_execs_run_in_queue_order_without_overlap() {
    for protocol in PROTOCOLS {
        five_execs(protocol);
    }
}

fn five_execs(protocol: Protocol) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let holder = library_client(&server, protocol);
    let lock = holder.fair_lock("deploy").unwrap();
    let guard = lock.lock().unwrap();
    let mut children = Vec::new();
    for i in 0..5 {
        let script = format!(
            "echo start {i} >> {m}; sleep 0.05; echo end {i} >> {m}",
            m = marks.display()
        );
        children.push(
            fairlock_with(&server, protocol)
                .args(["exec", "deploy", "--", "sh", "-c", &script])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        // The next one starts only once this one is visibly queued.
        wait_until(Duration::from_secs(10), "queued", || {
            inspect_with(&server, protocol, "deploy")["queue"]
                .as_array()
                .map(Vec::len)
                == Some(i + 1)
        });
    }
    let queue = inspect_with(&server, protocol, "deploy");
    assert_eq!(queue["locked"], true);
    guard.unlock().unwrap();
    for child in &mut children {
        assert!(wait_child(child, Duration::from_secs(20)).success());
    }
    let expected: String = (0..5).map(|i| format!("start {i}\nend {i}\n")).collect();
    assert_eq!(read(&marks), expected, "in queue order, never overlapping");
    let after = inspect_with(&server, protocol, "deploy");
    assert_eq!(after["locked"], false);
    assert_eq!(after["queue"], Value::Array(vec![]));
}

#[test]
fn wait_timeout_exits_75_and_leaves_no_queue_entry() {
    for protocol in PROTOCOLS {
        wait_timeout(protocol);
    }
}

fn wait_timeout(protocol: Protocol) {
    let server = RedisServer::start();
    let holder = library_client(&server, protocol);
    let guard = holder.fair_lock("cron").unwrap().lock().unwrap();
    let started = Instant::now();
    let out =
        run(fairlock_with(&server, protocol)
            .args(["exec", "cron", "--wait", "300ms", "--", "true"]));
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not acquired within"));
    let state = inspect_with(&server, protocol, "cron");
    assert_eq!(state["queue"], Value::Array(vec![]));
    assert_eq!(state["holders"].as_array().unwrap().len(), 1);
    assert_eq!(support::queue_len(&server, protocol, "cron"), 0);
    guard.unlock().unwrap();
}

#[test]
fn lost_lock_stops_the_command_and_exits_71() {
    let server = RedisServer::start();
    let mut exec = fairlock(&server)
        .args([
            "--lease", "900ms", "exec", "busy", "--grace", "2s", "--", "sleep", "30",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "exec holds the lock", || {
        inspect(&server, "busy")["locked"] == true
    });
    let out = run(fairlock(&server).args(["force-unlock", "busy", "--yes"]));
    assert!(out.status.success());
    let started = Instant::now();
    let status = wait_child(&mut exec, Duration::from_secs(20));
    assert_eq!(status.code(), Some(71));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let mut stderr = String::new();
    std::io::Read::read_to_string(exec.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lost the lock"), "{stderr}");
}

#[test]
fn sigterm_reaches_the_child_and_the_lock_is_released() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let script = format!(
        "trap 'echo got-term >> {m}; exit 3' TERM; echo ready >> {m}; while true; do sleep 0.02; done",
        m = marks.display()
    );
    let mut exec = fairlock(&server)
        .args(["exec", "sig", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "child ready", || {
        read(&marks).contains("ready")
    });
    let pid = nix::unistd::Pid::from_raw(exec.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_child(&mut exec, Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "the child's own exit code");
    assert!(read(&marks).contains("got-term"));
    assert_eq!(inspect(&server, "sig")["locked"], false);
}

#[test]
fn exit_codes_of_the_command_pass_through() {
    let server = RedisServer::start();
    let out = run(fairlock(&server).args(["exec", "codes", "--", "sh", "-c", "exit 7"]));
    assert_eq!(out.status.code(), Some(7));
    let out = run(fairlock(&server).args(["exec", "codes", "--", "sh", "-c", "kill -KILL $$"]));
    assert_eq!(out.status.code(), Some(128 + 9));
    for (protocol, token_test) in [
        (Protocol::Native, "test \"$FAIRLOCK_TOKEN\" -gt 0"),
        (Protocol::Redisson, "test -z \"$FAIRLOCK_TOKEN\""),
    ] {
        let script = format!(
            "test -n \"$FAIRLOCK_OWNER\" && test \"$FAIRLOCK_NAME\" = codes && {token_test}"
        );
        let out = run(
            fairlock_with(&server, protocol).args(["exec", "codes", "--", "sh", "-c", &script])
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "environment for the child ({protocol})"
        );
    }
    let out = run(fairlock(&server).args(["exec", "codes", "--", "/nonexistent/cmd"]));
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(inspect(&server, "codes")["locked"], false);
}

#[test]
fn redis_down_exits_69_and_bad_usage_64() {
    let mut server = RedisServer::start();
    let addr = server.addr();
    server.stop();
    let out = run(fairlock(&server).args(["exec", "x", "--", "true"]));
    assert_eq!(out.status.code(), Some(69));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&addr));
    let out = run(fairlock(&server).args(["inspect", "x"]));
    assert_eq!(out.status.code(), Some(69));

    let live = RedisServer::start();
    for args in [
        vec!["exec", "x", "--bogus", "--", "true"],
        vec!["exec", "x", "--wait", "5", "--", "true"],
        vec!["exec", "x"],
        vec!["--protocol", "zookeeper", "inspect", "x"],
        vec!["--lease", "0ms", "inspect", "x"],
        vec!["inspect", "a}b"],
        vec!["nonsense"],
    ] {
        let out = run(fairlock(&live).args(&args));
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = run(fairlock(&live).arg("--help"));
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit codes") && help.contains("75"));
}

#[test]
fn inspect_json_matches_the_state() {
    for protocol in PROTOCOLS {
        inspect_json(protocol);
    }
}

fn inspect_json(protocol: Protocol) {
    let server = RedisServer::start();
    let client = library_client(&server, protocol);
    let lock = client.fair_lock("shown").unwrap();
    let inspect = |server: &RedisServer, name: &str| inspect_with(server, protocol, name);
    let free = inspect(&server, "shown");
    assert_eq!(free["name"], "shown");
    assert_eq!(free["protocol"], protocol.as_str());
    assert_eq!(free["locked"], false);
    assert_eq!(free["lease_ms"], Value::Null);
    assert_eq!(free["token"], Value::Null);

    let guard = lock.lock().unwrap();
    let again = lock.lock().unwrap();
    let mut waiter = fairlock_with(&server, protocol)
        .args(["exec", "shown", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Collect the waiter's stderr as it comes.
    let progress = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    {
        let progress = std::sync::Arc::clone(&progress);
        let stderr = waiter.stderr.take().unwrap();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                progress.lock().unwrap().push_str(&(line + "\n"));
            }
        });
    }
    wait_until(Duration::from_secs(10), "queued", || {
        inspect(&server, "shown")["queue"].as_array().map(Vec::len) == Some(1)
    });
    // Not a terminal: one line per change of position.
    wait_until(Duration::from_secs(10), "progress line", || {
        progress
            .lock()
            .unwrap()
            .contains("waiting for shown: position 1 of 1")
    });
    let held = inspect(&server, "shown");
    assert_eq!(held["locked"], true);
    let holders = held["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0]["owner"], guard.owner().as_str());
    assert_eq!(holders[0]["count"], 2);
    let lease = held["lease_ms"].as_u64().unwrap();
    assert!(lease > 20_000 && lease <= 30_000, "{lease}");
    let queue = held["queue"].as_array().unwrap();
    assert_eq!(queue[0]["position"], 1);
    assert_eq!(queue[0]["mode"], "exclusive");
    let expires = queue[0]["expires_in_ms"].as_u64().unwrap();
    match protocol {
        Protocol::Redisson => {
            let raw: Vec<String> =
                server.cmd(&["LRANGE", "redisson_lock_queue:{shown}", "0", "-1"]);
            assert_eq!(queue[0]["owner"], raw[0].as_str());
            // Redisson: the lock's remaining lease + the 300 s waiter slot.
            assert!(expires > 300_000 && expires < 331_000, "{expires}");
            assert_eq!(held["token"], Value::Null);
        }
        _ => {
            let raw: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{shown}:line", "0", "-1"]);
            assert_eq!(queue[0]["owner"], raw[0].as_str());
            // Native: the waiter ttl (6 s), refreshed every 2 s.
            assert!(expires > 3_000 && expires <= 6_000, "{expires}");
            // The lock's value (layout version 2): `TOKEN:COUNT:...`.
            let value: String = server.cmd(&["GET", "fairlock:{shown}:lock"]);
            let token: u64 = value.split(':').next().unwrap().parse().unwrap();
            assert_eq!(held["token"], token);
            assert_eq!(guard.token(), Some(token));
        }
    }

    again.unlock().unwrap();
    guard.unlock().unwrap();
    assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
    assert_eq!(
        progress.lock().unwrap().matches("position 1 of 1").count(),
        1
    );
}

#[test]
fn redisson_keys_are_written() {
    let server = RedisServer::start();
    let holder = library_client(&server, Protocol::Redisson);
    let guard = holder.fair_lock("java-shared").unwrap().lock().unwrap();
    let mut waiter = fairlock(&server)
        .args([
            "--protocol",
            "redisson",
            "exec",
            "java-shared",
            "--",
            "true",
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "queued", || {
        server.cmd::<usize>(&["LLEN", "redisson_lock_queue:{java-shared}"]) == 1
    });
    // Exactly Redisson's keys: the lock hash, the queue, the deadline set,
    // and the waiter's channel; and fairlock's own labels key, which
    // Redisson never reads.
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.sort();
    assert_eq!(
        keys,
        [
            "fairlock:labels:{java-shared}",
            "java-shared",
            "redisson_lock_queue:{java-shared}",
            "redisson_lock_timeout:{java-shared}"
        ]
    );
    let owner: Vec<String> =
        server.cmd(&["LRANGE", "redisson_lock_queue:{java-shared}", "0", "-1"]);
    let (uuid, thread) = owner[0].rsplit_once(':').unwrap();
    assert_eq!(uuid.len(), 36);
    assert!(thread.parse::<u64>().is_ok());
    // The waiter subscribes to its channel after its first attempt
    // queued it (that attempt's reply says it waits): seen a moment later.
    wait_until(Duration::from_secs(10), "subscribed", || {
        !server.wait_channels().is_empty()
    });
    let channels: Vec<String> = server.wait_channels();
    assert_eq!(
        channels,
        [format!(
            "redisson_lock__channel:{{java-shared}}:{}",
            owner[0]
        )]
    );
    guard.unlock().unwrap();
    assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
}

/// The demo's timeline: (holder, token, line behind it) per handoff.
fn timeline(stdout: &str) -> Vec<(String, u64, Vec<String>)> {
    stdout
        .lines()
        .skip_while(|line| !line.contains("line behind the holder"))
        .skip(1)
        .take_while(|line| !line.trim_start().starts_with("..."))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let line = if words[3] == "(nobody" {
                Vec::new()
            } else {
                words[3..].iter().map(|w| (*w).to_owned()).collect()
            };
            (words[1].to_owned(), words[2].parse().unwrap(), line)
        })
        .collect()
}

#[test]
fn demo_finishes_without_violations() {
    let server = RedisServer::start();
    let out =
        run(fairlock(&server).args(["demo", "--clients", "4", "--rounds", "10", "--hold", "2ms"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("order violations:   0"), "{stdout}");
    assert!(stdout.contains("overlap violations: 0"), "{stdout}");
    assert!(stdout.contains("summary: 40 acquisitions"), "{stdout}");
    // The timeline: 12 handoffs, each to the head of the line shown before
    // it, with increasing fencing tokens.
    let steps = timeline(&stdout);
    assert_eq!(steps.len(), 12, "{stdout}");
    for pair in steps.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if let Some(head) = before.2.first() {
            assert_eq!(&after.0, head, "{stdout}");
        }
        assert!(after.1 > before.1, "tokens increase: {stdout}");
    }
    assert!(stdout.contains("  ... 28 more handoffs"), "{stdout}");
    assert!(
        stdout.contains("grants went to the head of the line shown before them"),
        "{stdout}"
    );
    // A private server when no URL is given.
    let out = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["demo", "--clients", "2", "--rounds", "3", "--hold", "1ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("started a private redis-server"),
        "{stdout}"
    );
}

/// A lock held (or waited for) under one protocol, inspected under the
/// other: the view says where the lock is and which flag shows it.
#[test]
fn inspect_names_the_other_protocol() {
    let server = RedisServer::start();
    for (held_under, looked_under, name) in [
        (Protocol::Redisson, Protocol::Native, "java-side"),
        (Protocol::Native, Protocol::Redisson, "rust-side"),
        (Protocol::Redisson, Protocol::Native, "tagged{t}"),
    ] {
        let holder = library_client(&server, held_under);
        let guard = holder.fair_lock(name).unwrap().lock().unwrap();
        let mut waiter = fairlock_with(&server, held_under)
            .args(["exec", name, "--", "true"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(10), "queued", || {
            support::queue_len(&server, held_under, name) == 1
        });
        let flag = format!("--protocol {held_under}");
        let json = inspect_with(&server, looked_under, name);
        assert_eq!(json["locked"], false, "{json}");
        assert_eq!(json["other_protocol"]["protocol"], held_under.as_str());
        assert_eq!(json["other_protocol"]["locked"], true);
        assert_eq!(json["other_protocol"]["queue_length"], 1);
        assert_eq!(json["other_protocol"]["flag"], flag.as_str());
        let out = run(fairlock_with(&server, looked_under).args(["inspect", name]));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!(
                "note: {name} is also a lock under the {held_under} protocol (locked, 1 waiting): \
                 pass {flag}"
            )),
            "{text}"
        );
        // Under the right protocol there is nothing to add.
        assert_eq!(
            inspect_with(&server, held_under, name)["other_protocol"],
            Value::Null
        );
        // force-unlock under the wrong protocol finds nothing, and says why.
        let out = run(fairlock_with(&server, looked_under).args(["force-unlock", name, "--yes"]));
        assert_eq!(out.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&out.stdout).contains("was not locked"));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!("pass {flag}")),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard.unlock().unwrap();
        assert!(wait_child(&mut waiter, Duration::from_secs(10)).success());
    }
    // An application's own key of another type under the bare name is not
    // taken for a Redisson lock.
    let () = server.cmd(&["SET", "plain-key", "data"]);
    assert_eq!(inspect(&server, "plain-key")["other_protocol"], Value::Null);
}

/// What a warning looks like: the connect-time eviction warning of a server
/// whose maxmemory-policy evicts.
fn evicting_server() -> RedisServer {
    RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"])
}

/// Logs: plain text off a terminal; --log-level and RUST_LOG choose what
/// is shown.
#[test]
fn logs_off_a_terminal_are_plain_and_filtered() {
    let evicting = evicting_server();
    let plain = RedisServer::start();
    let logged_at = |server: &RedisServer, args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = fairlock(server);
        cmd.env_remove("RUST_LOG").env_remove("NO_COLOR");
        for (key, value) in env {
            cmd.env(key, value);
        }
        let out = run(cmd.args(args).args(["inspect", "x"]));
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let logged = |args: &[&str], env: &[(&str, &str)]| logged_at(&evicting, args, env);
    let warned = logged(&[], &[]);
    assert!(
        warned.contains("WARN") && warned.contains("maxmemory-policy"),
        "{warned}"
    );
    assert!(
        !warned.contains('\x1b'),
        "escape codes in a pipe: {warned:?}"
    );
    assert_eq!(logged(&["--log-level", "error"], &[]), "");
    // RUST_LOG: per-target levels, and a bare level when --log-level is absent.
    let debug = logged_at(&plain, &[], &[("RUST_LOG", "fairlock=debug")]);
    assert!(
        debug.contains("DEBUG") && debug.contains("maxmemory-policy is noeviction"),
        "{debug}"
    );
    // Other targets keep the default level (warn).
    let warned = logged(&[], &[("RUST_LOG", "redis=debug")]);
    assert!(warned.contains("WARN"), "{warned}");
    assert_eq!(logged(&[], &[("RUST_LOG", "error")]), "");
    // --log-level wins over RUST_LOG's bare level.
    let both = logged(&["--log-level", "info"], &[("RUST_LOG", "error")]);
    assert!(both.contains("INFO"), "{both}");
}

/// On a terminal, logs are coloured unless NO_COLOR is set.
#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color() {
    let server = evicting_server();
    for (no_color, coloured) in [(None, true), (Some("1"), false)] {
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut child = {
            // The command (and with it this side's copy of the terminal's
            // slave end) is gone once the child runs.
            let mut cmd = fairlock(&server);
            cmd.env_remove("RUST_LOG").env_remove("NO_COLOR");
            if let Some(value) = no_color {
                cmd.env("NO_COLOR", value);
            }
            cmd.args(["inspect", "x"])
                .stdout(Stdio::null())
                .stderr(Stdio::from(pty.slave))
                .spawn()
                .unwrap()
        };
        assert!(wait_child(&mut child, Duration::from_secs(10)).success());
        // Everything written is buffered in the terminal; with no slave end
        // left open, reading past it fails (EIO) instead of blocking.
        let mut master = std::fs::File::from(pty.master);
        let mut shown = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = std::io::Read::read(&mut master, &mut chunk) {
            shown.extend_from_slice(&chunk[..n]);
        }
        let shown = String::from_utf8_lossy(&shown).into_owned();
        assert!(shown.contains("maxmemory-policy"), "{shown:?}");
        assert_eq!(
            shown.contains('\x1b'),
            coloured,
            "NO_COLOR={no_color:?}: {shown:?}"
        );
    }
}

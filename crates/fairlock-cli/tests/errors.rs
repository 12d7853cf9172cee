//! Every error a user can cause, and every exit code: the code and the
//! message (which names what went wrong in the user's terms and what to do).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use fairlock_test_support as support;
use support::RedisServer;

fn fairlock() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.env_remove("REDIS_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    cmd
}

fn at(url: &str) -> Command {
    let mut cmd = fairlock();
    cmd.args(["--redis", url]);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run fairlock")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The exit code is `code` and stderr says each of `says`.
#[track_caller]
fn expect(out: &Output, code: i32, says: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    for words in says {
        assert!(err.contains(words), "{words:?} not in: {err}");
    }
    for internal in ["MAX_", "InvalidClientConfig", "Incompatible type", "359999"] {
        assert!(!err.contains(internal), "{internal:?} leaked: {err}");
    }
}

/// A loopback listener that treats each connection with `serve` (on a
/// thread of its own), for the first `connections` connections.
fn listener(connections: usize, serve: fn(std::net::TcpStream)) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections).flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

#[test]
fn an_http_server_is_not_a_redis_server() {
    let port = listener(4, |mut stream| {
        let mut request = [0u8; 64];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
    });
    let out = run(at(&format!("redis://127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[
            &format!("127.0.0.1:{port} did not answer as a Redis server"),
            "--redis",
        ],
    );
}

#[test]
fn a_server_that_hangs_up_or_never_answers() {
    // Hangs up at once (a TLS-only server reached without TLS does too).
    let port = listener(4, drop);
    let out = run(at(&format!("redis://127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[
            &format!("127.0.0.1:{port} closed the connection before answering"),
            "rediss://",
        ],
    );
    // Never answers: given up after the response timeout (3 s).
    let port = listener(4, |stream| {
        std::thread::sleep(Duration::from_secs(10));
        drop(stream);
    });
    let started = Instant::now();
    let out = run(at(&format!("redis://127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[&format!("Redis at 127.0.0.1:{port} did not answer in time")],
    );
    assert!(started.elapsed() < Duration::from_secs(9));
}

#[test]
fn a_plain_url_to_a_tls_server() {
    // The Valkey builds of scripts/test's Valkey runs have no TLS.
    let Some(server) = RedisServer::start_tls_if_supported() else {
        return;
    };
    let port = server.tls().unwrap().port;
    let out = run(at(&format!("redis://127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(&out, 69, &[&format!("127.0.0.1:{port}"), "rediss://"]);
}

#[test]
fn nothing_listening() {
    let mut server = RedisServer::start();
    let url = server.url();
    server.stop();
    let out = run(at(&url).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[
            &format!("cannot reach Redis at {}", server.addr()),
            "is a Redis server running there?",
        ],
    );
    let out = run(at("redis+unix:///nonexistent/redis.sock").args(["inspect", "x"]));
    expect(&out, 69, &["/nonexistent/redis.sock"]);
}

#[test]
fn a_database_the_server_lacks_is_bad_usage() {
    let server = RedisServer::start();
    let out = run(at(&format!("{}/99", server.url())).args(["inspect", "x"]));
    expect(
        &out,
        64,
        &[
            &format!("Redis at {} has no database 99", server.addr()),
            "0 to 15 by default",
        ],
    );
    let out = run(at(&format!("{}/2", server.url())).args(["exec", "x", "--", "true"]));
    expect(&out, 0, &[]);
}

#[test]
fn bad_urls_name_the_accepted_forms() {
    for (url, why) in [
        ("http://127.0.0.1:6379", "unknown scheme \"http\""),
        ("127.0.0.1:6379", "no scheme such as redis://"),
        ("redis:/x", "missing hostname"),
        (
            "redis://:hunter2@127.0.0.1:99999",
            "does not parse as a URL",
        ),
        ("redis://127.0.0.1:6379/abc", "invalid database number"),
    ] {
        let out = run(at(url).args(["inspect", "x"]));
        expect(
            &out,
            64,
            &[
                why,
                "redis://[USER[:PASSWORD]@]HOST[:PORT][/DB]",
                "rediss://",
                "redis+unix:///",
            ],
        );
        assert!(!stderr(&out).contains("hunter2"), "{}", stderr(&out));
    }
    // $REDIS_URL is read the same way.
    let out = run(fairlock()
        .env("REDIS_URL", "http://x")
        .args(["inspect", "x"]));
    expect(&out, 64, &["unknown scheme \"http\""]);
}

#[test]
fn passwords_and_permissions() {
    let server = RedisServer::start_with(&["--requirepass", "sekret"]);
    let port = server.port();
    let out = run(at(&format!("redis://127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[
            &format!("Redis at 127.0.0.1:{port} requires a password"),
            "redis://:PASSWORD@HOST:PORT",
        ],
    );
    let out = run(at(&format!("redis://:wrong@127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[&format!(
            "Redis at 127.0.0.1:{port} refused the user or password"
        )],
    );
    assert!(!stderr(&out).contains("wrong"));

    // A password given to a server that has none is not a wrong password.
    let open = RedisServer::start();
    let port = open.port();
    let out = run(at(&format!("redis://:secret@127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[&format!(
            "Redis at 127.0.0.1:{port} has no password set, but the URL gives one: remove the \
             password from the URL"
        )],
    );
    assert!(!stderr(&out).contains("secret") && !stderr(&out).contains("refused"));

    // A user that may connect but not run scripts.
    let open = RedisServer::start();
    let () = open.cmd(&[
        "ACL",
        "SETUSER",
        "viewer",
        "on",
        ">pw",
        "~*",
        "&*",
        "+ping",
        "+config|get",
    ]);
    let port = open.port();
    let out = run(at(&format!("redis://viewer:pw@127.0.0.1:{port}")).args(["inspect", "x"]));
    expect(
        &out,
        69,
        &[
            "the Redis user may not do what fairlock needs",
            "docs/deployment.md",
        ],
    );
}

#[test]
fn a_name_taken_by_another_kind_of_key_is_bad_usage() {
    let server = RedisServer::start();
    // Under redisson the lock key is the bare name.
    let () = server.cmd(&["SET", "orders", "some application data"]);
    let out = run(at(&server.url()).args(["--protocol", "redisson", "inspect", "orders"]));
    expect(
        &out,
        64,
        &[
            "\"orders\"",
            "taken by something else",
            "use another lock name",
        ],
    );
    let out =
        run(at(&server.url()).args(["--protocol", "redisson", "exec", "orders", "--", "true"]));
    expect(&out, 64, &["taken by something else"]);
}

/// A hash's fields and values (sorted) and its TTL: the application's data,
/// byte for byte.
fn hash_state(server: &RedisServer, key: &str) -> (Vec<Vec<u8>>, i64) {
    let mut fields: Vec<Vec<u8>> = server.cmd(&["HGETALL", key]);
    fields.sort();
    (fields, server.cmd(&["PTTL", key]))
}

// Finding 7 (issue 21): the CLI deleted application data under a lock's name.
#[test]
fn data_that_is_not_a_lock_is_bad_usage_and_left_alone() {
    let server = RedisServer::start();
    for (protocol, key) in [
        ("redisson", "user:1".to_owned()),
        ("native", "fairlock:{user:1}:lock".to_owned()),
    ] {
        server.cmd::<i64>(&["HSET", &key, "name", "bob", "bytes", "\u{0}\u{ff}x"]);
        let before = hash_state(&server, &key);
        // The native lock's key is a string (layout version 2): a hash there
        // is data of another kind.
        let says = match protocol {
            "native" => {
                ["\"fairlock:{user:1}:lock\" of lock \"user:1\" holds another kind of data"]
            }
            _ => ["user:1 holds data that is not a fairlock/Redisson lock"],
        };
        let url = server.url();
        let runs: [&[&str]; 5] = [
            &["force-unlock", "user:1", "--yes"],
            &["force-unlock", "user:1", "--yes", "--nonfair"],
            &["inspect", "user:1"],
            &["exec", "user:1", "--wait", "2s", "--", "true"],
            &["exec", "user:1", "--nonfair", "--", "true"],
        ];
        for args in runs {
            let out = run(at(&url).args(["--protocol", protocol]).args(args));
            expect(&out, 64, &says);
            assert!(
                !String::from_utf8_lossy(&out.stdout).contains("unlocked"),
                "{protocol} {args:?}"
            );
            assert_eq!(hash_state(&server, &key), before, "{protocol} {args:?}");
        }
        // `watch` prints the same on its line, and goes on watching.
        let out = run(at(&url).args(["--protocol", protocol]).args([
            "watch",
            "user:1",
            "--interval",
            "100ms",
            "--count",
            "1",
        ]));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(says[0]), "{protocol}: {stdout}");
        assert_eq!(hash_state(&server, &key), before);
        // An application hash with a TTL is not a lock either.
        server.cmd::<i64>(&["PEXPIRE", &key, "600000"]);
        let out = run(at(&url).args(["--protocol", protocol, "force-unlock", "user:1", "--yes"]));
        expect(&out, 64, &says);
        assert_eq!(server.cmd::<i64>(&["HLEN", &key]), 2);
    }
}

#[test]
fn durations_speak_the_users_terms() {
    let server = RedisServer::start();
    let url = server.url();
    for (args, says) in [
        (
            vec!["exec", "x", "--lease", "1ms", "--", "true"],
            vec!["'1ms'", "--lease", "3ms to 365days", "renewed every third"],
        ),
        (
            vec!["--lease", "1ms", "exec", "x", "--", "true"],
            vec!["'1ms'", "--lease", "3ms to 365days"],
        ),
        (
            vec!["exec", "x", "--wait", "5", "--", "true"],
            vec!["'5'", "--wait", "time unit needed"],
        ),
        (
            vec!["exec", "x", "--wait", "99999999999h", "--", "true"],
            vec!["--wait", "1ms to 365days"],
        ),
        (
            vec!["exec", "x", "--waiter-ttl", "10ms", "--", "true"],
            vec!["--waiter-ttl", "30ms to 365days"],
        ),
        (
            vec!["exec", "x", "--grace", "soon", "--", "true"],
            vec!["--grace", "500ms, 30s, 5m, 1h30m"],
        ),
        (vec!["demo", "--hold", "2m"], vec!["--hold", "0s to 1m"]),
        (
            vec!["torture", "--duration", "100ms"],
            vec!["--duration", "1s to 30days"],
        ),
        // A negative duration is refused as such, not taken for a flag
        // (clap's tip to pass it after `--` would make it the command).
        (
            vec!["exec", "x", "--wait", "-5s", "--", "true"],
            vec![
                "'-5s'",
                "--wait",
                "durations cannot be negative; allowed: 1ms to 365days",
            ],
        ),
        (
            vec!["--lease", "-1s", "exec", "x", "--", "true"],
            vec!["--lease", "durations cannot be negative", "3ms to 365days"],
        ),
        (
            vec!["watch", "x", "--interval", "-1s"],
            vec![
                "--interval",
                "durations cannot be negative; allowed: 100ms to 1h",
            ],
        ),
        (
            vec!["exec", "x", "--grace", "--json", "--", "true"],
            vec!["--grace", "\"--json\" is not a duration", "0s to 365days"],
        ),
    ] {
        let out = run(at(&url).args(&args));
        expect(&out, 64, &says);
        assert!(!stderr(&out).contains("tip:"), "{}", stderr(&out));
    }
    // humantime's forms are accepted.
    let out = run(at(&url).args([
        "exec", "x", "--wait", "1h30m", "--lease", "1m 30s", "--", "true",
    ]));
    expect(&out, 0, &[]);
}

#[test]
fn other_bad_usage() {
    let server = RedisServer::start();
    let url = server.url();
    let long = "n".repeat(1025);
    for (args, says) in [
        (
            vec!["inspect", long.as_str()],
            vec!["longer than 1024 bytes"],
        ),
        (vec!["inspect", "a}b"], vec!["invalid lock name \"a}b\""]),
        (
            vec!["--lease", "1s", "inspect", "x"],
            vec!["--lease applies to exec, demo and torture, not to inspect"],
        ),
        (
            vec!["--waiter-slot", "1s", "force-unlock", "x"],
            vec!["--waiter-slot applies to exec, demo and torture, not to force-unlock"],
        ),
        (
            vec!["inspect", "x", "--lease", "1s"],
            vec!["--lease applies to exec, demo and torture, not to inspect"],
        ),
        (
            vec!["force-unlock", "x", "--waiter-ttl=-1s"],
            vec!["--waiter-ttl applies to exec, demo and torture, not to force-unlock"],
        ),
        (
            vec!["watch", "x", "--waiter-slot", "1s"],
            vec!["--waiter-slot applies to exec, demo and torture, not to watch"],
        ),
        (
            vec!["exec", "j1", "echo", "hi"],
            vec![
                "unexpected argument 'echo'",
                "the command to run goes after `--`: `fairlock --redis",
                "exec j1 -- echo hi`",
            ],
        ),
        (
            vec!["exec", "j1", "--wait", "--", "true"],
            vec!["--wait needs a value before `--`, a duration such as 30s"],
        ),
        (
            vec!["exec", "j1", "--wait", "1s", "echo"],
            vec!["`fairlock --redis", "exec j1 --wait 1s -- echo`"],
        ),
        (
            vec!["--protocol", "zookeeper", "inspect", "x"],
            vec!["'zookeeper'", "use native or redisson"],
        ),
        (vec!["exec", "x"], vec!["<CMD>"]),
        (vec!["nonsense"], vec!["unrecognized subcommand"]),
    ] {
        let out = run(at(&url).args(&args));
        expect(&out, 64, &says);
    }
}

#[test]
fn exec_cannot_run_the_command() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let out = run(at(&server.url()).args(["exec", "x", "--"]).arg(&script));
    expect(&out, 126, &["cannot run"]);
    let out = run(at(&server.url()).args(["exec", "x", "--", "/nonexistent/cmd"]));
    expect(&out, 127, &["cannot run \"/nonexistent/cmd\""]);
    assert_eq!(support::queue_len(&server, Protocol::Native, "x"), 0);
    assert!(!support::is_held(&server, Protocol::Native, "x"));
}

#[test]
fn a_signal_while_waiting_exits_128_plus_n_and_leaves_the_queue() {
    let server = RedisServer::start();
    let holder = fairlock::blocking::LockClient::connect(&server.url()).unwrap();
    let guard = holder.fair_lock("busy").unwrap().lock().unwrap();
    let waiter = at(&server.url())
        .args(["exec", "busy", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while support::queue_len(&server, Protocol::Native, "busy") != 1 {
        assert!(Instant::now() < deadline, "never queued");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(waiter.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = waiter.wait_with_output().unwrap();
    expect(
        &out,
        128 + 15,
        &["SIGTERM while waiting for busy; leaving the queue"],
    );
    assert_eq!(support::queue_len(&server, Protocol::Native, "busy"), 0);
    guard.unlock().unwrap();
}

#[test]
fn without_redis_server_demo_torture_and_bench_exit_69() {
    let empty = tempfile::tempdir().unwrap();
    for args in [
        vec!["demo"],
        vec!["torture", "--duration", "1s"],
        vec!["bench"],
    ] {
        let out = run(fairlock().env("PATH", empty.path()).args(&args));
        expect(&out, 69, &["cannot start redis-server", "--redis"]);
    }
}

/// force-unlock asks on a terminal; "n" changes nothing and exits 1, "y"
/// unlocks and exits 0.
#[test]
fn a_declined_force_unlock_exits_1() {
    let server = RedisServer::start();
    let holder = fairlock::blocking::LockClient::connect(&server.url()).unwrap();
    let guard = holder.fair_lock("held").unwrap().lock().unwrap();
    for (answer, code) in [("n\n", 1), ("y\n", 0)] {
        let pty = nix::pty::openpty(None, None).unwrap();
        let mut master = std::fs::File::from(pty.master);
        let child = at(&server.url())
            .args(["force-unlock", "held"])
            .stdin(Stdio::from(pty.slave))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        master.write_all(answer.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        let said = stderr(&out);
        assert!(said.contains("force-unlock held held by"), "{said}");
        assert!(
            said.contains("A `fairlock exec` holder stops its command (exit 71)")
                && said.contains("lost() resolves")
                && !said.contains("The holder keeps running without the lock"),
            "{said}"
        );
        if code == 1 {
            expect(&out, 1, &["not unlocked: held is still held"]);
            assert!(support::is_held(&server, Protocol::Native, "held"));
        } else {
            expect(&out, 0, &[]);
            assert!(String::from_utf8_lossy(&out.stdout).contains("held unlocked"));
            assert!(!support::is_held(&server, Protocol::Native, "held"));
        }
    }
    drop(guard);
}

/// The exit code table of `--help` is the README's, row for row.
#[test]
fn the_readme_lists_every_exit_code_of_the_help() {
    let out = run(fairlock().arg("--help"));
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let from_help: Vec<(String, String)> = help
        .split("Exit codes:\n")
        .nth(1)
        .expect("an exit code table in --help")
        .lines()
        .map(|line| {
            let line = line.trim();
            let (code, meaning) = line.split_once(' ').unwrap();
            (code.to_owned(), meaning.trim().to_owned())
        })
        .collect();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let table = readme
        .split("| exit code | meaning |\n| --- | --- |\n")
        .nth(1)
        .expect("an exit code table in the README");
    let from_readme: Vec<(String, String)> = table
        .lines()
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").collect();
            let plain = |s: &str| s.trim().replace('`', "");
            (plain(cells[0]), plain(cells[1]))
        })
        .collect();
    assert_eq!(from_readme, from_help);
}

/// Each subcommand's help shows its own options (not the lock settings of
/// others), one example, and its exit codes.
#[test]
fn each_help_shows_what_applies() {
    let help = |sub: &str| {
        let out = run(fairlock().args([sub, "--help"]));
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for sub in ["inspect", "force-unlock"] {
        let text = help(sub);
        for flag in ["--lease", "--waiter-ttl", "--waiter-slot"] {
            assert!(!text.contains(flag), "{sub} --help shows {flag}:\n{text}");
        }
        assert!(!text.contains("\n  75 "), "{sub}: {text}");
    }
    for sub in ["exec", "demo", "torture"] {
        let text = help(sub);
        for flag in ["--lease", "--waiter-ttl", "--waiter-slot", "--redis"] {
            assert!(text.contains(flag), "{sub} --help lacks {flag}:\n{text}");
        }
    }
    for sub in ["exec", "inspect", "force-unlock", "demo", "torture"] {
        let text = help(sub);
        let example = text
            .split("Example:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{sub}: no example:\n{text}"));
        let first = example.lines().next().unwrap();
        assert!(
            first.starts_with(&format!("  fairlock {sub}")),
            "{sub}: {first}"
        );
        assert!(
            example.contains("\nExit codes:\n") && example.contains("\n  0      success\n"),
            "{sub}: {text}"
        );
    }
    // Paragraphs stay apart: no sentence runs into a command line.
    assert!(help("torture").contains("\nExample:\n  fairlock torture --duration 20m\n"));
}

//! Lock settings from the URL's query parameters and the `FAIRLOCK_*`
//! environment, in the CLI: `--redis URL?protocol=..&lease=..`,
//! `$FAIRLOCK_URL`, `$FAIRLOCK_PROTOCOL`, `$FAIRLOCK_LEASE`; a flag wins
//! over a variable, a variable over the URL; bad values are bad usage (64)
//! naming the parameter or variable.

use std::process::{Command, Output, Stdio};

use fairlock::Protocol;
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

/// `fairlock` with no URL or lock setting from the test's own environment.
fn fairlock() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    for var in [
        "REDIS_URL",
        "FAIRLOCK_URL",
        "FAIRLOCK_PROTOCOL",
        "FAIRLOCK_LEASE",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run fairlock");
    eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The protocol `inspect` reads the lock with, from its first line.
fn inspected_protocol(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(0));
    let shown = stdout(out);
    let start = shown.find('(').expect("protocol in parentheses") + 1;
    let end = shown[start..].find(')').unwrap() + start;
    shown[start..end].to_owned()
}

#[test]
fn the_protocol_comes_from_the_flag_the_environment_or_the_url() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        let other = match protocol {
            Protocol::Native => "redisson",
            _ => "native",
        };
        let with_param = format!("{}/0?protocol={protocol}", server.url());
        let out = run(fairlock().args(["--redis", &with_param, "inspect", "x"]));
        assert_eq!(inspected_protocol(&out), protocol.as_str(), "URL parameter");

        let out = run(fairlock()
            .env("FAIRLOCK_URL", &with_param)
            .args(["inspect", "x"]));
        assert_eq!(inspected_protocol(&out), protocol.as_str(), "$FAIRLOCK_URL");

        let out = run(fairlock()
            .env("FAIRLOCK_PROTOCOL", protocol.as_str())
            .args(["--redis", &server.url(), "inspect", "x"]));
        assert_eq!(
            inspected_protocol(&out),
            protocol.as_str(),
            "$FAIRLOCK_PROTOCOL"
        );

        let out = run(fairlock().env("FAIRLOCK_PROTOCOL", other).args([
            "--redis",
            &with_param,
            "inspect",
            "x",
        ]));
        assert_eq!(inspected_protocol(&out), other, "the variable over the URL");

        let out = run(fairlock().env("FAIRLOCK_PROTOCOL", other).args([
            "--redis",
            &with_param,
            "--protocol",
            protocol.as_str(),
            "inspect",
            "x",
        ]));
        assert_eq!(
            inspected_protocol(&out),
            protocol.as_str(),
            "the flag over both"
        );
    }
}

/// The lease the server gives the lock `exec` holds, read by the command
/// itself (`redis-cli PTTL` of the lock key), in milliseconds.
fn lease_seen_by_exec(server: &RedisServer, protocol: Protocol, cmd: &mut Command) -> i64 {
    let key = support::lock_keys(protocol, "leased").0;
    let port = server.port().to_string();
    let out = run(cmd.args([
        "exec",
        "leased",
        "--",
        "redis-cli",
        "-p",
        &port,
        "PTTL",
        &key,
    ]));
    assert_eq!(out.status.code(), Some(0), "{protocol}");
    stdout(&out).trim().parse().expect("a PTTL")
}

#[test]
fn the_lease_comes_from_the_flag_the_environment_or_the_url() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        let url = format!("{}/0?protocol={protocol}&lease=7s", server.url());
        let pttl = lease_seen_by_exec(&server, protocol, fairlock().args(["--redis", &url]));
        assert!(
            (4_000..=7_000).contains(&pttl),
            "{protocol}: URL lease, {pttl} ms"
        );

        let pttl = lease_seen_by_exec(
            &server,
            protocol,
            fairlock()
                .env("FAIRLOCK_LEASE", "20s")
                .args(["--redis", &url]),
        );
        assert!(
            (17_000..=20_000).contains(&pttl),
            "{protocol}: $FAIRLOCK_LEASE, {pttl} ms"
        );

        let pttl = lease_seen_by_exec(
            &server,
            protocol,
            fairlock()
                .env("FAIRLOCK_LEASE", "20s")
                .args(["--redis", &url, "--lease", "40s"]),
        );
        assert!(
            (37_000..=40_000).contains(&pttl),
            "{protocol}: --lease, {pttl} ms"
        );
    }
}

#[test]
fn bad_settings_are_bad_usage_naming_them() {
    let expect = |cmd: &mut Command, says: &[&str]| {
        let out = run(cmd);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(64), "{err}");
        for words in says {
            assert!(err.contains(words), "{words:?} missing in: {err}");
        }
        assert!(!err.contains("hunter2"), "{err}");
    };
    let url = "redis://:hunter2@127.0.0.1:1/0";
    expect(
        fairlock().args(["--redis", &format!("{url}?leese=1s"), "inspect", "x"]),
        &["unknown URL parameter \"leese\""],
    );
    expect(
        fairlock().args([
            "--redis",
            &format!("{url}?lease=1"),
            "exec",
            "x",
            "--",
            "true",
        ]),
        &["lease", "\"1\"", "1ms to 365days"],
    );
    expect(
        fairlock()
            .env("FAIRLOCK_LEASE", "forever")
            .args(["--redis", url, "inspect", "x"]),
        &["FAIRLOCK_LEASE", "\"forever\""],
    );
    expect(
        fairlock()
            .env("FAIRLOCK_URL", format!("{url}?protocol=java"))
            .args(["inspect", "x"]),
        &["protocol", "\"java\"", "native or redisson"],
    );
}

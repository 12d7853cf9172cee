//! Client labels on the command line: `--label`, `$FAIRLOCK_LABEL` and the
//! URL's `label=` name a `fairlock` process; `inspect` (text and `--json`)
//! and `watch` (text and `--json`) show the holder's and each waiter's
//! label, under both protocols; bad labels are refused as bad usage.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use fairlock_test_support::{PROTOCOLS, RedisServer};
use serde_json::Value;

fn fairlock(server: &RedisServer, protocol: Protocol) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.args(["--redis", &server.url(), "--protocol", protocol.as_str()])
        .env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_URL")
        .env_remove("FAIRLOCK_LABEL");
    cmd
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

fn output(mut cmd: Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A `fairlock exec NAME -- true` waiting in line, its label given by `how`.
fn waiter(server: &RedisServer, protocol: Protocol, name: &str, how: &str) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_URL")
        .env_remove("FAIRLOCK_LABEL")
        .args(["--protocol", protocol.as_str()]);
    match how {
        "flag" => cmd.args(["--redis", &server.url(), "--label", "flag-waiter"]),
        "env" => cmd
            .args(["--redis", &server.url()])
            .env("FAIRLOCK_LABEL", "env waiter"),
        "url" => cmd.args(["--redis", &format!("{}?label=url-waiter", server.url())]),
        _ => cmd.args(["--redis", &server.url()]),
    };
    cmd.args(["exec", name, "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn inspect_and_watch_show_who_holds_and_who_waits() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let name = "nightly-report";
        let config = fairlock::ClientConfig::from_url(&server.url())
            .unwrap()
            .protocol(protocol)
            .label("report@build-7");
        let holder = fairlock::blocking::LockClient::with_config(config).unwrap();
        let guard = holder.fair_lock(name).unwrap().lock().unwrap();
        let queued = |n: usize| {
            holder
                .fair_lock(name)
                .unwrap()
                .inspect()
                .unwrap()
                .queue
                .len()
                == n
        };
        let mut waiters = Vec::new();
        for (i, how) in ["flag", "env", "url", "default"].into_iter().enumerate() {
            waiters.push(waiter(&server, protocol, name, how));
            wait_until(&format!("{protocol}: waiter {how} queued"), || {
                queued(i + 1)
            });
        }
        let default = format!("{}:{}", host_name(), waiters[3].id());
        let labels = ["flag-waiter", "env waiter", "url-waiter", default.as_str()];

        // inspect: `on LABEL` after each owner id.
        let mut cmd = fairlock(&server, protocol);
        cmd.args(["inspect", name]);
        let text = output(cmd);
        let holder_line = text.lines().find(|l| l.contains("holder")).unwrap();
        assert!(
            holder_line.contains(&format!(
                "{} on report@build-7  (hold count 1)",
                guard.owner()
            )),
            "{protocol}:\n{text}"
        );
        for (i, label) in labels.iter().enumerate() {
            let line = text
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("{}. ", i + 1)))
                .unwrap_or_else(|| panic!("{protocol}: no waiter {}:\n{text}", i + 1));
            assert!(
                line.contains(&format!(" on {label}  (")),
                "{protocol}: {line}"
            );
        }

        // inspect --json: "label" in each holder and queue entry.
        let mut cmd = fairlock(&server, protocol);
        cmd.args(["inspect", name, "--json"]);
        let json: Value = serde_json::from_str(&output(cmd)).unwrap();
        assert_eq!(json["holders"][0]["label"], "report@build-7", "{json}");
        let shown: Vec<&str> = json["queue"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["label"].as_str().unwrap())
            .collect();
        assert_eq!(shown, labels, "{protocol}: {json}");

        // watch: the holder's label, then the waiters' in line.
        let mut cmd = fairlock(&server, protocol);
        cmd.args(["watch", name, "--count", "1"]);
        let line = output(cmd);
        assert!(
            line.contains(&format!("held by {} on report@build-7 for", guard.owner())),
            "{protocol}: {line}"
        );
        assert!(
            line.trim_end()
                .ends_with(&format!(": {}", labels.join(", "))),
            "{protocol}: {line}"
        );
        let mut cmd = fairlock(&server, protocol);
        cmd.args(["watch", name, "--count", "1", "--json"]);
        let json: Value = serde_json::from_str(output(cmd).trim()).unwrap();
        assert_eq!(json["holder_label"], "report@build-7", "{json}");
        let shown: Vec<&str> = json["waiters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["label"].as_str().unwrap())
            .collect();
        assert_eq!(shown, labels, "{protocol}: {json}");

        guard.unlock().unwrap();
        for mut child in waiters {
            assert!(child.wait().unwrap().success());
        }
    }
}

/// A Java Redisson holder (its hash as Redisson writes it) shows no label:
/// `inspect` prints the owner alone, `--json` a null label; a fairlock
/// waiter behind it shows its own.
#[test]
fn a_java_holder_shows_no_label_and_its_fairlock_waiter_does() {
    let server = RedisServer::start();
    let java = "5f0e8a52-7c1b-4d3e-9a56-0b1c2d3e4f50:77";
    let _: () = server.cmd(&["HSET", "java-held", java, "1"]);
    let _: () = server.cmd(&["PEXPIRE", "java-held", "30000"]);
    let mut waiting = fairlock(&server, Protocol::Redisson)
        .args(["--label", "rust-waiter", "exec", "java-held", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the waiter queued", || {
        server.cmd::<usize>(&["LLEN", "redisson_lock_queue:{java-held}"]) == 1
    });
    let mut cmd = fairlock(&server, Protocol::Redisson);
    cmd.args(["inspect", "java-held"]);
    let text = output(cmd);
    assert!(
        text.contains(&format!("  holder   {java}  (hold count 1)")),
        "{text}"
    );
    assert!(
        text.contains(":1 on rust-waiter  (entry expires in"),
        "{text}"
    );
    let mut cmd = fairlock(&server, Protocol::Redisson);
    cmd.args(["inspect", "java-held", "--json"]);
    let json: Value = serde_json::from_str(&output(cmd)).unwrap();
    let holder = json["holders"][0].as_object().unwrap();
    assert_eq!(holder.get("label"), Some(&Value::Null), "{json}");
    assert_eq!(json["queue"][0]["label"], "rust-waiter", "{json}");
    // The Java holder lets go (as Redisson's unlock does): the waiter runs.
    let _: () = server.cmd(&["DEL", "java-held"]);
    let waiter_owner = json["queue"][0]["owner"].as_str().unwrap().to_owned();
    let _: () = server.cmd(&[
        "PUBLISH",
        &format!("redisson_lock__channel:{{java-held}}:{waiter_owner}"),
        "0",
    ]);
    assert!(waiting.wait().unwrap().success());
}

#[test]
fn bad_labels_are_bad_usage() {
    let server = RedisServer::start();
    let too_long = "x".repeat(fairlock::MAX_LABEL_LEN + 1);
    for (bad, why) in [
        ("", "the label is empty"),
        ("two\nlines", "the label contains a control character"),
        ("\u{1b}[31mred", "the label contains a control character"),
        (too_long.as_str(), "the label is longer than 128 bytes"),
    ] {
        let mut cmd = fairlock(&server, Protocol::Native);
        let out = cmd
            .args(["--label", bad, "exec", "never", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{bad:?}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains(why), "{bad:?}: {said}");
    }
    for bad in ["two\nlines", too_long.as_str()] {
        let mut cmd = fairlock(&server, Protocol::Native);
        let out = cmd
            .env("FAIRLOCK_LABEL", bad)
            .args(["exec", "never", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{bad:?}: {out:?}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("FAIRLOCK_LABEL"), "{bad:?}: {said}");
    }
    // Nothing was taken.
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    assert!(keys.is_empty(), "{keys:?}");
}

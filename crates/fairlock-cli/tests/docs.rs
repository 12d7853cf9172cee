//! The README against what fairlock does: its key tables against what each
//! protocol writes to Redis, its `inspect` examples against `inspect`'s
//! output.

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

const NAME: &str = "docs";

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn waiter(server: &RedisServer, protocol: Protocol, extra: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url(), "--protocol", protocol.as_str()])
        .args(["exec", NAME])
        .args(extra)
        .args(["--", "true"])
        .env_remove("REDIS_URL")
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A key or channel name with the lock name, owners, client ids and
/// request ids replaced by the README's placeholders.
fn pattern(raw: &str) -> String {
    let named = raw.replace(&format!("{{{NAME}}}"), "{NAME}");
    if named == NAME {
        return "NAME".to_owned();
    }
    // What follows these prefixes is an id, not part of the layout.
    for (prefix, placeholder) in [
        ("fairlock:revoked:", "CLIENT_UUID"),
        ("fairlock:{NAME}:wake:", "OWNER"),
        ("fairlock:{NAME}:release:", "REQUEST"),
        ("redisson_lock__channel:{NAME}:", "OWNER"),
        ("redisson_unlock_latch:{NAME}:", "REQUEST"),
    ] {
        if named.starts_with(prefix) {
            return format!("{prefix}{placeholder}");
        }
    }
    named
}

/// Every key and channel name that `protocol` uses for a fair lock with a
/// waiter, a non-fair lock with a waiter, and the releases of both.
fn names_used(protocol: Protocol) -> BTreeSet<String> {
    let server = RedisServer::start();
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(protocol);
    let holder = fairlock::blocking::LockClient::with_config(config).unwrap();
    let mut seen = BTreeSet::new();
    // Keys written and deleted between two looks (a release's cached
    // answer, deleted once read) are seen in the key events.
    let mut events = support::KeyEvents::start(&server);
    let mut look = |server: &RedisServer| {
        let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "*"]);
        let written: Vec<String> = events
            .drain(server)
            .into_iter()
            .map(|(_, key)| key)
            .collect();
        seen.extend(
            keys.iter()
                .chain(&channels)
                .chain(&written)
                .map(|k| pattern(k)),
        );
    };
    for nonfair in [false, true] {
        let extra: &[&str] = if nonfair { &["--nonfair"] } else { &[] };
        let guard = if nonfair {
            holder.lock(NAME).unwrap().lock().unwrap()
        } else {
            holder.fair_lock(NAME).unwrap().lock().unwrap()
        };
        let mut child = waiter(&server, protocol, extra);
        wait_until("the waiter subscribed", || {
            let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "*"]);
            channels
                .iter()
                .any(|c| c.contains("channel") || c.contains(":wake"))
        });
        look(&server);
        guard.unlock().unwrap();
        assert!(child.wait().unwrap().success());
        look(&server);
    }
    seen
}

#[test]
fn the_readme_lists_every_key_and_channel() {
    let readme = readme();
    for protocol in PROTOCOLS {
        let used = names_used(protocol);
        // Enough was seen to mean something: the lock, its queue, a
        // waiter's channel, a release cache (Redisson's: every release; the
        // native lock caches only a partial release's answer), the
        // revocation channel.
        let expected: &[&str] = match protocol {
            Protocol::Redisson => &[
                "NAME",
                "redisson_lock_queue:{NAME}",
                "redisson_lock__channel:{NAME}:OWNER",
                "redisson_lock__channel:{NAME}",
                "redisson_unlock_latch:{NAME}:REQUEST",
            ],
            _ => &[
                "fairlock:{NAME}:lock",
                "fairlock:{NAME}:line",
                "fairlock:{NAME}:waiters",
                "fairlock:{NAME}:wake:OWNER",
            ],
        };
        for name in expected.iter().chain(&["fairlock:revoked:CLIENT_UUID"]) {
            assert!(used.contains(*name), "{protocol}: {name} not in {used:?}");
        }
        for name in &used {
            assert!(
                readme.contains(&format!("`{name}`")),
                "{protocol} uses {name}, which the README does not list"
            );
        }
    }
}

/// The lines of the README's example output that follows `$ COMMAND`, up to
/// the next command or the end of the block.
fn readme_output(readme: &str, command: &str) -> Vec<String> {
    let start = readme
        .find(&format!("$ {command}\n"))
        .unwrap_or_else(|| panic!("the README shows no `$ {command}`"));
    readme[start..]
        .lines()
        .skip(1)
        .take_while(|line| !line.starts_with("$ ") && !line.starts_with("```"))
        .map(str::to_owned)
        .collect()
}

/// What a line of `inspect`'s text says, without the values: a top line up
/// to its first colon (name, protocol), an indented line's first word (its
/// label), with digits replaced (a queue position).
fn label(line: &str) -> String {
    let label = if line.starts_with(' ') {
        line.split_whitespace().next().unwrap_or("")
    } else {
        line.split_once(':').map_or(line, |(head, _)| head)
    };
    label
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect()
}

fn inspect(server: &RedisServer, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url(), "inspect"])
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_URL")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The fields of a JSON object, sorted.
fn fields(json: &str) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    let mut fields: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    fields
}

#[test]
fn the_readme_shows_what_inspect_prints() {
    let readme = readme();
    let server = RedisServer::start();
    let client = fairlock::blocking::LockClient::connect(&server.url()).unwrap();
    // As in the README: a holder and one waiter on nightly-report.
    let guard = client.fair_lock("nightly-report").unwrap().lock().unwrap();
    let mut waiter = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args([
            "--redis",
            &server.url(),
            "exec",
            "nightly-report",
            "--",
            "true",
        ])
        .env_remove("REDIS_URL")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the waiter queued", || {
        inspect(&server, &["nightly-report"]).contains("1 waiting")
    });
    let text = inspect(&server, &["nightly-report"]);
    let json = inspect(&server, &["nightly-report", "--json"]);
    // And orders, held under the redisson protocol only.
    let config = fairlock::ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(Protocol::Redisson);
    let redisson = fairlock::blocking::LockClient::with_config(config).unwrap();
    let orders = redisson.fair_lock("orders").unwrap().lock().unwrap();
    let free = inspect(&server, &["orders"]);

    for (command, printed) in [
        ("fairlock inspect nightly-report", &text),
        ("fairlock inspect orders", &free),
    ] {
        let shown: Vec<String> = readme_output(&readme, command)
            .iter()
            .map(|l| label(l))
            .collect();
        let real: Vec<String> = printed.lines().map(label).collect();
        assert_eq!(
            shown, real,
            "`{command}`: the README shows other lines than:\n{printed}"
        );
    }
    let shown = readme_output(&readme, "fairlock inspect nightly-report --json");
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(fields(&shown[0]), fields(&json), "{json}");

    orders.unlock().unwrap();
    guard.unlock().unwrap();
    assert!(waiter.wait().unwrap().success());
}

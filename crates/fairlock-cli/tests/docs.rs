//! The README's key tables against what each protocol writes to Redis.

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
    let mut look = |server: &RedisServer| {
        let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
        let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "*"]);
        seen.extend(keys.iter().chain(&channels).map(|k| pattern(k)));
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
        // waiter's channel, a release cache, the revocation channel.
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
                "fairlock:{NAME}:queue",
                "fairlock:{NAME}:wake:OWNER",
                "fairlock:{NAME}:release:REQUEST",
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

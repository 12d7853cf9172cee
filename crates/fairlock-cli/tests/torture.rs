//! Quick mode of `fairlock torture`: a randomized 3-process workload with
//! SIGKILL and SIGSTOP faults, checked by the history checker, under both
//! protocols. The long soak is `fairlock torture --duration 20m`.

#[path = "../../fairlock/tests/support/mod.rs"]
mod support;

use std::process::Command;

use support::RedisServer;

fn torture(protocol: &str, extra: &[&str]) -> String {
    let server = RedisServer::start();
    let out = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url(), "--protocol", protocol])
        .args(extra)
        .args([
            "torture",
            "--duration",
            "15s",
            "--processes",
            "3",
            "--tasks",
            "3",
        ])
        .env_remove("REDIS_URL")
        .output()
        .expect("run fairlock torture");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn number_after(text: &str, label: &str) -> u64 {
    let rest = &text[text
        .find(label)
        .unwrap_or_else(|| panic!("{label:?} in {text}"))
        + label.len()..];
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a number after {label:?} in {text}"))
}

#[test]
fn torture_quick_native() {
    let summary = torture("native", &[]);
    assert_eq!(number_after(&summary, "violations:"), 0, "{summary}");
    assert!(number_after(&summary, "operations:") > 100, "{summary}");
    let faults = number_after(&summary, "faults injected:") + number_after(&summary, "SIGKILL,");
    assert!(faults > 0, "{summary}");
    assert!(
        number_after(&summary, "of ") > 0,
        "FIFO pairs were checked: {summary}"
    );
}

#[test]
fn torture_quick_redisson() {
    let summary = torture("redisson", &["--waiter-slot", "2s"]);
    assert_eq!(number_after(&summary, "violations:"), 0, "{summary}");
    assert!(number_after(&summary, "operations:") > 100, "{summary}");
}

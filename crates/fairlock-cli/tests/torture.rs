//! Quick mode of `fairlock torture`: a randomized 3-process workload with
//! SIGKILL and SIGSTOP faults, checked by the history checker, under both
//! protocols. The long soak is `fairlock torture --duration 20m`.

use std::process::Command;
use std::time::{Duration, Instant};

use fairlock_test_support as support;
use support::RedisServer;

fn torture(protocol: &str, extra: &[&str]) -> String {
    let server = RedisServer::start();
    let started = Instant::now();
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
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Progress off a terminal: a line every 10 s, with holds and faults.
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("torture: "))
        .collect();
    assert!(
        progress
            .first()
            .is_some_and(|l| l.starts_with("torture: 10s of 15s, ") && l.contains(" holds, ")),
        "{stderr}"
    );
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
    // On time: the run, the workers' wind-down (at most 10 s) and the check.
    assert!(
        took < Duration::from_secs(15 + 12),
        "took {took:?}:\n{stdout}\n{stderr}"
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
    // Faults of any kind (which kinds is random), forged grants apart.
    let faults: u64 = summary
        .lines()
        .find_map(|l| l.strip_prefix("faults injected:"))
        .expect("a faults line")
        .split(',')
        .filter(|part| !part.contains("forged"))
        .filter_map(|part| part.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
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
    // Only that the workload ran: under Redisson every killed or paused
    // waiter blocks the fair queue for its slot (2 s here), so 15 s give
    // 60 to 130 holds depending on when the faults fall.
    assert!(number_after(&summary, "operations:") > 30, "{summary}");
}

/// Redisson's default slot (300 s): a killed waiter blocks the line for
/// minutes, and rounds still waiting at the end are dropped, so the run
/// ends on time all the same.
#[test]
fn torture_redisson_default_slot_ends_on_time() {
    let summary = torture("redisson", &[]);
    assert_eq!(number_after(&summary, "violations:"), 0, "{summary}");
}

//! A smoke run of `fairlock bench`: every implementation in every scenario
//! does work, the JSON says so, and the chart is written. No timing is
//! checked (the figures are noise on a loaded machine).

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;

const IMPLEMENTATIONS: [&str; 5] = [
    "native-fair",
    "native-non-fair",
    "redisson-fair",
    "redisson-non-fair",
    "rslock",
];

/// The lines of the queue scenario for the other kinds.
const ALL_LINES: [&str; 6] = [
    "native-rw-mixed",
    "native-rw-writers",
    "redisson-rw-writers",
    "native-semaphore",
    "redisson-semaphore",
    "redisson-counting-semaphore",
];

/// `queue_kinds` holds exactly `expected`, each granted and measured.
fn assert_lines(report: &Value, expected: &[&str]) {
    let lines = report["queue_kinds"].as_array().unwrap();
    let names: BTreeSet<&str> = lines
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(names, expected.iter().copied().collect());
    for line in lines {
        let round = &line["rounds"][0];
        let acquisitions = round["acquisitions"].as_u64().unwrap();
        let handoffs = round["handoffs"].as_u64().unwrap();
        assert!(acquisitions > 0, "{line}");
        assert!(handoffs > 0 && handoffs <= acquisitions, "{line}");
        assert!(round["script_calls"].as_u64().unwrap() > 0, "{line}");
        // Each command's calls over the run: the scripts' steps by name.
        let by_command = round["by_command"].as_object().unwrap();
        assert!(
            by_command["evalsha"]["calls"].as_u64().unwrap() > 0,
            "{line}"
        );
        assert!(!by_command.contains_key("info"), "{line}");
        assert!(
            line["script_us_per_handoff"].as_f64().unwrap() > 0.0,
            "{line}"
        );
        let name = line["implementation"].as_str().unwrap();
        let writes = round["writes"].as_u64().unwrap();
        if name.contains("writers") {
            // Every acquisition a write, every one a handoff.
            assert_eq!(writes, acquisitions, "{line}");
            assert_eq!(handoffs, acquisitions, "{line}");
        } else if name == "native-rw-mixed" {
            // Writers and readers, one in four writing: once the whole
            // first line was through, readers were among it, two of them
            // let in by one handoff.
            assert!(writes <= acquisitions, "{line}");
            if acquisitions > line["waiters"].as_u64().unwrap() {
                assert!(writes < acquisitions && handoffs < acquisitions, "{line}");
            }
        } else {
            assert_eq!(writes, 0, "{line}");
            assert_eq!(handoffs, acquisitions, "{line}");
        }
    }
}

#[test]
fn a_short_run_measures_every_implementation_in_every_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("bench.svg");
    // Without --redis: a private redis-server of its own.
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "--duration", "200ms", "--rounds", "1"])
        .args(["--workers", "4", "--waiters", "10", "--json", "--svg"])
        .arg(&svg)
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");

    assert!(report["ping"]["per_second_median"].as_f64().unwrap() > 0.0);
    assert!(report["redis"]["version"].as_str().is_some());
    // "redis" or "valkey" (told by server_name, not redis_version).
    let server = report["redis"]["server"].as_str().unwrap();
    assert!(server == "redis" || server == "valkey", "{server}");
    let results = report["results"].as_array().unwrap();
    let mut seen = BTreeSet::new();
    for result in results {
        let scenario = result["scenario"].as_str().unwrap();
        let implementation = result["implementation"].as_str().unwrap();
        let rounds = result["rounds"].as_array().unwrap();
        assert_eq!(rounds.len(), 1, "{scenario} {implementation}");
        for round in rounds {
            assert!(
                round["ops"].as_u64().unwrap() > 0,
                "{scenario} {implementation}: no operations"
            );
            assert!(round["commands"].as_u64().unwrap() > 0);
        }
        if scenario == "contended" || scenario == "shared" {
            assert_eq!(result["summary"]["counter_ok"], Value::Bool(true));
            assert_eq!(rounds[0]["per_worker"].as_array().unwrap().len(), 4);
            // Every acquisition's wait was timed: p99 at least p50, both set.
            let (p50, p99) = (
                result["summary"]["wait_p50_us"].as_f64(),
                result["summary"]["wait_p99_us"].as_f64(),
            );
            assert!(
                p50.zip(p99)
                    .is_some_and(|(p50, p99)| p50 > 0.0 && p99 >= p50),
                "{scenario} {implementation}: waits {p50:?} {p99:?}"
            );
        }
        seen.insert((scenario.to_owned(), implementation.to_owned()));
    }
    for scenario in ["uncontended", "contended", "shared", "handoff"] {
        for implementation in IMPLEMENTATIONS {
            assert!(
                seen.contains(&(scenario.to_owned(), implementation.to_owned())),
                "{scenario} {implementation} missing"
            );
        }
    }
    // The queue applies to the locks whose waiters queue.
    for implementation in ["native-fair", "redisson-fair"] {
        assert!(seen.contains(&("queue".to_owned(), implementation.to_owned())));
    }
    // The read-write scenario: each lock did reads and writes, and its
    // flag and counter checks passed (else the run would have failed).
    let read_write = report["read_write"].as_array().unwrap();
    let names: BTreeSet<&str> = read_write
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["native-rw", "redisson-rw", "rds_lock"])
    );
    for result in read_write {
        let round = &result["rounds"][0];
        assert!(round["reads"].as_u64().unwrap() > 0, "{result}");
        assert!(round["writes"].as_u64().unwrap() > 0, "{result}");
        assert!(result["write_wait"]["p99_ms"].as_f64().is_some());
    }
    // The semaphore scenario: each semaphore did work, within its total
    // (else the run would have failed).
    let semaphore = report["semaphore"].as_array().unwrap();
    let names: BTreeSet<&str> = semaphore
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "native-semaphore",
            "redisson-semaphore",
            "redisson-counting-semaphore"
        ])
    );
    for result in semaphore {
        assert!(
            result["rounds"][0]["acquisitions"].as_u64().unwrap() > 0,
            "{result}"
        );
    }
    // The lines of the other kinds (queue scenario): each was granted,
    // with handoffs counted, and its scripts measured.
    assert_lines(&report, &ALL_LINES);
    let chart = std::fs::read_to_string(&svg).expect("the chart");
    assert!(
        chart.contains("<svg"),
        "not an SVG: {}",
        &chart[..chart.len().min(200)]
    );
    assert!(chart.contains("rslock"));
}

/// `--metrics-cost`: each fairlock lock also runs with metrics, and the
/// report pairs them: one ratio per lock, both rounds counted.
#[test]
fn metrics_cost_pairs_every_lock_with_and_without_metrics() {
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "uncontended", "--metrics-cost", "--json"])
        .args(["--duration", "100ms", "--rounds", "2"])
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let implementations: BTreeSet<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    for implementation in &IMPLEMENTATIONS[..4] {
        assert!(implementations.contains(implementation));
        assert!(implementations.contains(format!("{implementation}+metrics").as_str()));
    }
    let costs = report["metrics_cost"].as_array().unwrap();
    let paired: BTreeSet<&str> = costs
        .iter()
        .map(|c| c["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(paired, IMPLEMENTATIONS[..4].iter().copied().collect());
    for cost in costs {
        for field in ["time_per_op_ratio_median", "client_cpu_per_op_ratio"] {
            let ratio = cost[field].as_f64().unwrap();
            assert!(ratio > 0.0 && ratio.is_finite(), "{cost}");
        }
    }
}

#[test]
fn a_chart_that_cannot_be_written_is_refused_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "--svg"])
        .arg(dir.path().join("no-such-dir").join("chart.svg"))
        .output()
        .expect("run fairlock bench");
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--svg: cannot write"), "{stderr}");
    assert!(!stderr.contains("round 1"), "{stderr}");
}

/// `--before FILE`: an earlier run's JSON is drawn beside this run, a
/// lighter bar per implementation it has; a file that is not such a run is
/// refused before anything runs.
#[test]
fn an_earlier_run_is_drawn_beside_this_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&std::ffi::OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_fairlock"))
            .env_remove("REDIS_URL")
            .args(["bench", "uncontended", "--only", "rslock,native-fair"])
            .args(["--duration", "100ms", "--rounds", "1"])
            .args(extra)
            .output()
            .expect("run fairlock bench")
    };
    let earlier = run(&["--json".as_ref()]);
    assert!(
        earlier.status.success(),
        "{}",
        String::from_utf8_lossy(&earlier.stderr)
    );
    let before = dir.path().join("before.json");
    std::fs::write(&before, &earlier.stdout).unwrap();
    let svg = dir.path().join("chart.svg");
    let now = run(&[
        "--svg".as_ref(),
        svg.as_os_str(),
        "--before".as_ref(),
        before.as_os_str(),
    ]);
    assert!(
        now.status.success(),
        "{}",
        String::from_utf8_lossy(&now.stderr)
    );
    let chart = std::fs::read_to_string(&svg).unwrap();
    for label in ["fairlock native fair (before)", "rslock 0.10 (before)"] {
        assert!(chart.contains(label), "no {label:?} in the chart");
    }
    let without = run(&["--svg".as_ref(), svg.as_os_str()]);
    assert!(without.status.success());
    assert!(!std::fs::read_to_string(&svg).unwrap().contains("(before)"));

    let not_a_run = dir.path().join("other.json");
    std::fs::write(&not_a_run, "{\"results\": []}").unwrap();
    let refused = run(&[
        "--svg".as_ref(),
        svg.as_os_str(),
        "--before".as_ref(),
        not_a_run.as_os_str(),
    ]);
    assert_eq!(refused.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("--before: cannot read"), "{stderr}");
    assert!(!stderr.contains("round 1"), "{stderr}");
}

#[test]
fn a_round_too_short_is_refused() {
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "--duration", "1ms"])
        .output()
        .expect("run fairlock bench");
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("10ms"), "{stderr}");
}

/// `--only` runs the named implementations and no other; an unknown name
/// is refused before anything runs, with the known ones listed.
#[test]
fn only_runs_the_named_implementations() {
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args([
            "bench",
            "uncontended",
            "--only",
            "rslock,native-fair",
            "--json",
        ])
        .args(["--duration", "100ms", "--rounds", "1"])
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let ran: BTreeSet<&str> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(ran, BTreeSet::from(["native-fair", "rslock"]));

    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "--only", "spinlock"])
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}"); // EX_USAGE
    assert!(
        stderr.contains("unknown implementation \"spinlock\"") && stderr.contains("rslock"),
        "{stderr}"
    );
}

/// `queue --kind`: only the lines of the kinds named; the locks' queue
/// runs only with `lock` among them.
#[test]
fn queue_kind_measures_the_lines_of_the_kinds_named() {
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "queue", "--kind", "read-write,semaphore"])
        .args([
            "--waiters",
            "12",
            "--duration",
            "300ms",
            "--rounds",
            "1",
            "--json",
        ])
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    assert!(report["results"].as_array().unwrap().is_empty(), "{report}");
    assert_lines(&report, &ALL_LINES);
    for line in report["queue_kinds"].as_array().unwrap() {
        assert_eq!(line["waiters"].as_u64(), Some(12), "{line}");
    }

    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "queue", "--kind", "semaphore", "--waiters", "3"])
        .args(["--duration", "200ms", "--rounds", "1"])
        .output()
        .expect("run fairlock bench");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("3 waiters on one client"), "{table}");
    assert!(table.contains("native semaphore"), "{table}");
    assert!(!table.contains("read-write,"), "{table}");
    assert!(!table.contains("fairlock native fair"), "{table}");
}

/// `bench latch`: both latches opened at least once per round with every
/// waiter woken, each waiter reading the count once more after the
/// count-down (at least 51 script calls per opening of 50 waiters).
#[test]
fn latch_times_the_wake_of_every_waiter() {
    let output = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .env_remove("REDIS_URL")
        .args(["bench", "latch", "--duration", "200ms", "--rounds", "1"])
        .args(["--waiters", "50", "--json"])
        .output()
        .expect("run fairlock bench latch");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "bench failed: {stderr}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON on stdout");
    let latch = report["latch"].as_array().unwrap();
    let names: BTreeSet<&str> = latch
        .iter()
        .map(|r| r["implementation"].as_str().unwrap())
        .collect();
    assert_eq!(names, BTreeSet::from(["native-latch", "redisson-latch"]));
    let mut scripts = std::collections::BTreeMap::new();
    for result in latch {
        assert_eq!(result["waiters"], 50, "{result}");
        assert!(result["openings"].as_u64().unwrap() > 0, "{result}");
        assert!(result["wake"]["max_ms"].as_f64().is_some(), "{result}");
        let per_opening = result["script_calls_per_opening"].as_f64().unwrap();
        scripts.insert(result["implementation"].as_str().unwrap(), per_opening);
    }
    for per_opening in scripts.values() {
        assert!(*per_opening >= 51.0, "{scripts:?}");
    }
}

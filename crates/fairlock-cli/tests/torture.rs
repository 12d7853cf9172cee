//! Quick mode of `fairlock torture`: a randomized 3-process workload with
//! SIGKILL and SIGSTOP faults, checked by the history checker, under both
//! protocols. The long soak is `fairlock torture --duration 20m`. The
//! quick runs draw no feature combinations (`--combinations none`): those
//! have tests of their own below, with the verdicts (inconclusive) and the
//! server faults refused on a server the torture did not start.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairlock_test_support as support;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
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
            "--combinations",
            "none",
        ])
        .env_remove("REDIS_URL")
        .output()
        .expect("run fairlock torture");
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // Progress off a terminal: a line every 10 s, with holds and faults.
    // The line gives the time elapsed when it is printed: 10 s, or a
    // little later when the orchestrator was busy injecting a fault (a
    // BUSY script, a pause) as the 10 s passed.
    let progress: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("torture: ") && l.contains(" of 15s, "))
        .collect();
    let first_at = progress.first().and_then(|l| {
        l.strip_prefix("torture: ")?
            .split_once("s of 15s, ")
            .filter(|(_, rest)| rest.contains(" holds, "))?
            .0
            .parse::<u64>()
            .ok()
    });
    assert!(
        first_at.is_some_and(|secs| (10..15).contains(&secs)),
        "{stderr}"
    );
    assert_eq!(progress.len(), 1, "one line in 15 s: {stderr}");
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
    assert!(number_after(&summary, "election:") > 0, "{summary}");
}

#[test]
fn torture_quick_redisson() {
    let summary = torture("redisson", &["--waiter-slot", "2s"]);
    assert_eq!(number_after(&summary, "violations:"), 0, "{summary}");
    // Only that the workload ran: under Redisson every killed or paused
    // waiter blocks the fair queue for its slot (2 s here), so 15 s give
    // 60 to 130 holds depending on when the faults fall.
    assert!(number_after(&summary, "operations:") > 30, "{summary}");
    // The read-write lock ran beside the locks, both sides (else the
    // verdict would be inconclusive, exit 2).
    assert!(number_after(&summary, "read-write lock:") > 0, "{summary}");
    assert!(
        number_after(&summary, "beside another reader's),") > 0,
        "write holds: {summary}"
    );
}

/// Redisson's default slot (300 s): a killed waiter blocks the line for
/// minutes, and rounds still waiting at the end are dropped, so the run
/// ends on time all the same.
#[test]
fn torture_redisson_default_slot_ends_on_time() {
    let summary = torture("redisson", &[]);
    assert_eq!(number_after(&summary, "violations:"), 0, "{summary}");
}

/// A torture of 60 s in the background, stdout and stderr piped (without
/// combinations, as the quick runs).
fn torture_in_background(server: &RedisServer) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url()])
        .args([
            "torture",
            "--duration",
            "60s",
            "--processes",
            "2",
            "--tasks",
            "2",
            "--combinations",
            "none",
        ])
        .env_remove("REDIS_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fairlock torture")
}

/// How many scripts the server ran by EVALSHA so far (the workers'
/// acquisitions and releases).
fn script_calls(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// The processes whose parent is `parent` (from /proc).
fn children_of(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // pid (comm) state ppid ...: comm may hold spaces, not ')'.
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// SIGTERM in the middle of a run: the workers are killed, the summary of
/// the run so far is printed with the reason, and the exit code is 128+15.
#[test]
fn a_stop_signal_ends_the_run_with_its_summary() {
    let server = RedisServer::start();
    let child = torture_in_background(&server);
    // Stop it once the workers are at work (not after a fixed time: on a
    // loaded machine a debug build may not have finished a hold in 5 s).
    let at_work = Instant::now() + Duration::from_secs(60);
    while script_calls(&server) < 100 {
        assert!(Instant::now() < at_work, "the workers never got going");
        std::thread::sleep(Duration::from_millis(50));
    }
    let workers = children_of(child.id());
    assert_eq!(workers.len(), 2, "{workers:?}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = signalled.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(128 + 15), "{stdout}\n{stderr}");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    assert!(
        stderr.contains("torture: stopping early after ") && stderr.contains(": SIGTERM\n"),
        "{stderr}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("stopped early after ")
            && l.ends_with(": SIGTERM (the checks cover the run so far)")),
        "{stdout}"
    );
    assert_eq!(number_after(&stdout, "violations:"), 0, "{stdout}");
    assert!(number_after(&stdout, "operations:") > 0, "{stdout}");
    for pid in workers {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} outlived the run"
        );
    }
}

/// Redis gone for good in the middle of a run: the orchestrator cannot
/// read the server time and stops, with the summary of the run so far,
/// then the error and its exit code (69).
#[test]
fn a_failure_mid_run_ends_with_the_summary_and_the_error() {
    let mut server = RedisServer::start();
    let child = torture_in_background(&server);
    std::thread::sleep(Duration::from_secs(5));
    let workers = children_of(child.id());
    server.stop();
    let stopped = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = stopped.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(69), "{stdout}\n{stderr}");
    // 10 s of retries, then the workers are killed at once.
    assert!(took < Duration::from_secs(25), "took {took:?}");
    assert!(
        stderr.contains("torture: stopping early after "),
        "{stderr}"
    );
    assert!(stderr.contains("\nfairlock: "), "{stderr}");
    assert!(stdout.contains("\nstopped early after "), "{stdout}");
    assert!(stdout.contains("\nviolations: "), "{stdout}");
    for pid in workers {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} outlived the run"
        );
    }
}

/// A run of `fairlock torture` against `server` with `args` after the
/// subcommand: exit code, stdout, stderr.
fn run_torture(
    server: &RedisServer,
    global: &[&str],
    args: &[&str],
) -> (Option<i32>, String, String) {
    run_torture_keeping(server, global, args, None)
}

/// [`run_torture`], writing the run's history to `history` (see
/// `$FAIRLOCK_TORTURE_HISTORY`), to recheck a failure after the test.
fn run_torture_keeping(
    server: &RedisServer,
    global: &[&str],
    args: &[&str],
    history: Option<&std::path::Path>,
) -> (Option<i32>, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    command
        .args(["--redis", &server.url()])
        .args(global)
        .arg("torture")
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_TORTURE_HISTORY");
    if let Some(path) = history {
        command.env("FAIRLOCK_TORTURE_HISTORY", path);
    }
    let out = command.output().expect("run fairlock torture");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One worker task cannot queue behind another: no queue-order pair can
/// be checked, and the run says it proves nothing (exit 2), never "0
/// violations" alone.
#[test]
fn a_run_that_checks_no_queue_order_is_inconclusive() {
    let server = RedisServer::start();
    let (code, stdout, stderr) = run_torture(
        &server,
        &[],
        &[
            "--duration",
            "2s",
            "--processes",
            "1",
            "--tasks",
            "1",
            "--no-faults",
            "--combinations",
            "none",
        ],
    );
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("\nverdict: inconclusive: ")
            && stdout.contains("no queue-order pair was checked"),
        "{stdout}"
    );
    assert_eq!(number_after(&stdout, "violations:"), 0, "{stdout}");
}

/// `busy-reply-threshold` of `server`.
fn busy_threshold(server: &RedisServer) -> String {
    let pair: Vec<String> = server.cmd(&["CONFIG", "GET", "busy-reply-threshold"]);
    pair[1].clone()
}

/// The number before `label` on the faults line.
fn faults_of(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|l| l.strip_prefix("faults injected:"))
        .expect("a faults line")
        .split(',')
        .find(|part| part.contains(label))
        .and_then(|part| part.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{label:?} in {summary}"))
}

/// Against a server it did not start, the torture changes nothing on it
/// unless asked: no BUSY scripts, floods or SCRIPT FLUSH, and
/// `busy-reply-threshold` as it was; with --server-faults it changes the
/// setting for the run and sets it back at the end. --help says so.
#[test]
fn server_faults_only_on_request_against_a_server_it_did_not_start() {
    let help = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["torture", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--server-faults") && help.contains("it did not start"),
        "{help}"
    );
    let server = RedisServer::start();
    let _: () = server.cmd(&["CONFIG", "SET", "busy-reply-threshold", "4321"]);
    let short = [
        "--duration",
        "10s",
        "--processes",
        "2",
        "--tasks",
        "2",
        "--combinations",
        "none",
    ];
    let (code, stdout, stderr) = run_torture(&server, &[], &short);
    // Exit 0 or inconclusive (2): a short run on a loaded machine may
    // check no queue order; never a failure.
    assert!(matches!(code, Some(0 | 2)), "{code:?}\n{stdout}\n{stderr}");
    assert!(stdout.contains("\nserver faults off: "), "{stdout}");
    for fault in ["BUSY scripts", "PUBLISH", "SCRIPT FLUSHes"] {
        assert_eq!(faults_of(&stdout, fault), 0, "{stdout}");
    }
    assert_eq!(busy_threshold(&server), "4321");

    let with_flag: Vec<&str> = short.iter().copied().chain(["--server-faults"]).collect();
    let (code, stdout, stderr) = run_torture(&server, &[], &with_flag);
    assert!(matches!(code, Some(0 | 2)), "{code:?}\n{stdout}\n{stderr}");
    assert!(!stdout.contains("server faults off"), "{stdout}");
    assert_eq!(busy_threshold(&server), "4321", "restored after the run");
}

/// The combinations of `protocol` in a short run: each drawn and
/// checked, the summary saying how often.
fn combinations_run(protocol: &str) -> String {
    let server = RedisServer::start();
    // Kept under the target directory: a failed run's history can be
    // checked again (`recheck_a_saved_history` in src/history/recheck.rs).
    let history = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("torture-combinations-{protocol}.history"));
    let (code, stdout, stderr) = run_torture_keeping(
        &server,
        &["--protocol", protocol, "--waiter-slot", "2s"],
        &[
            "--duration",
            "20s",
            "--processes",
            "2",
            "--tasks",
            "3",
            "--no-faults",
        ],
        Some(&history),
    );
    let stdout = format!("{stdout}(history kept in {})\n", history.display());
    assert!(code.is_some(), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("combinations: "))
        .unwrap_or_else(|| panic!("a combinations line: {stdout}"));
    let native_only = ["semaphore_stale_meta"];
    let every = [
        "reentry_lease",
        "shared_owner",
        "force_unlock_at_handoff",
        "name_probe",
        "foreign_data",
        "latch",
    ];
    let drawn = every
        .iter()
        .chain(native_only.iter().filter(|_| protocol == "native"));
    for combo in drawn {
        let part = line
            .split("; ")
            .find(|p| p.starts_with(combo))
            .unwrap_or_else(|| panic!("{combo} in {line}"));
        let numbers: Vec<u64> = part
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(
            numbers.len() == 2 && numbers.iter().all(|n| *n > 0),
            "{combo} drawn and checked: {stdout}"
        );
    }
    // The combinations hold: no violation, no finding, nothing inconclusive.
    assert_eq!(number_after(&stdout, "violations:"), 0, "{stdout}");
    assert_eq!(number_after(&stdout, "findings:"), 0, "{stdout}");
    assert!(stdout.contains("\nverdict: passed"), "{stdout}");
    stdout
}

/// Every combination is drawn and checked in a short run, and the data
/// under lock names is compared after the calls.
#[test]
fn torture_draws_every_combination_native() {
    let summary = combinations_run("native");
    assert!(
        summary.contains("\napplication data changed by lock calls: "),
        "{summary}"
    );
}

#[test]
fn torture_draws_every_combination_redisson() {
    combinations_run("redisson");
}

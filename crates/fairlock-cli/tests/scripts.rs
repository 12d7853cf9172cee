//! Every tool under `scripts/` runs here in a short mode (seconds, on the
//! debug build), so that a change that breaks one fails the suite: a
//! measuring tool that nothing runs breaks silently (`scripts/script-cost`
//! once failed on every native pair, unnoticed). Each test runs
//! `bash scripts/NAME ...` from the repository root and checks the shape of
//! what the tool reports (a figure per implementation, a verdict per
//! variant, the report line), not its figures: they are meaningless on a
//! debug build and a loaded machine.
//!
//! `scripts/test`, `scripts/test-valkey` and `scripts/valkey-env` run the
//! suite itself and are not run from it.
//!
//! The tools that run under valgrind (client-cost, queue-cost, script-cost,
//! script-floor) are skipped with a message where valgrind is missing,
//! unless `$CI` is set: there they fail. So are those that need python3.
//! The scripts that build something run the debug profile
//! (`FAIRLOCK_PROFILE=dev`) of this test's own target directory, as the
//! suite built it (`FAIRLOCK_NO_BUILD=1`, see `built`). Every script runs in a
//! process group of its own: whatever it leaves running (a redis-server, a
//! busy loop) fails its test, and is killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The repository's root: the scripts `cd` there themselves.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Longer than any short mode takes on a loaded machine; a script still
/// running then is stopped and fails.
const DEADLINE: Duration = Duration::from_secs(300);

/// How long a script's processes may outlive it (a server under valgrind
/// writes its last dump after the script's SIGTERM).
const GRACE: Duration = Duration::from_secs(30);

struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// The script's process id (its process group's too).
    pid: i32,
}

impl Ran {
    /// Panics with the script's output unless it exited 0.
    fn success(self, name: &str) -> Ran {
        assert!(
            self.status.success(),
            "scripts/{name} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    fn both(&self) -> String {
        format!("--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// The target directory this test was built in (`CARGO_BIN_EXE_fairlock`
/// is `TARGET/debug/fairlock`): the scripts build there, where the suite's
/// build left what they need.
fn target_dir() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_fairlock"));
    exe.parent()
        .and_then(Path::parent)
        .expect("the CLI under TARGET/PROFILE/")
        .to_path_buf()
}

/// Whether cargo set `name` for this test's run (the package's manifest
/// dir, name, version, ...): none may reach a cargo build. Build scripts
/// watch some of them (ring's: CARGO_MANIFEST_DIR, CARGO_PKG_NAME, OUT_DIR,
/// ...) in cargo's own environment, so a build with them set here and the
/// suite's without would each find the other's ring stale and rebuild it
/// and everything above it (a minute or more, every time).
fn set_by_cargo(name: &str) -> bool {
    [
        "CARGO_MANIFEST_",
        "CARGO_PKG_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_CFG_",
        "CARGO_FEATURE_",
        "CARGO_TARGET_TMPDIR",
        "CARGO_RUSTC_CURRENT_DIR",
        "OUT_DIR",
    ]
    .iter()
    .any(|prefix| name.starts_with(prefix))
}

/// The live processes of process group `group` ("pid command line" each;
/// zombies, which an init that does not reap may leave, are not counted).
/// From /proc; where there is none, whether `killpg` finds a member.
fn group_members(group: i32) -> Vec<String> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return match killpg(Pid::from_raw(group), None) {
            Ok(()) => vec![format!("a process of group {group}")],
            Err(_) => Vec::new(),
        };
    };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(stat) = fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold anything, so the
        // fields are read after its last parenthesis.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == group.to_string() {
            let args = fs::read(path.join("cmdline")).unwrap_or_default();
            let args = String::from_utf8_lossy(&args).replace('\0', " ");
            members.push(format!("{} {args}", entry.file_name().to_string_lossy()));
        }
    }
    members
}

/// Whether the debug binaries the scripts run are built already: the CLI,
/// and the examples `pairs` (client-cost) and `check` (model), which
/// `cargo test --workspace` and the suite's nextest build make. Then the
/// scripts run them as they are (`FAIRLOCK_NO_BUILD=1`): a `cargo build`
/// of one package here would wait for cargo's lock while the suite builds
/// its docs and packages beside the tests, and would build the
/// dependencies again with that package's features. A test binary built
/// alone (`-p fairlock-cli --test scripts`) lets the scripts build.
fn built() -> bool {
    let debug = target_dir().join("debug");
    ["fairlock", "examples/pairs", "examples/check"]
        .iter()
        .all(|file| debug.join(file).is_file())
}

/// Runs `bash scripts/NAME ARGS...` from the root with `envs` added, in a
/// process group of its own; stops it after [`DEADLINE`], and fails when
/// anything of its group is still running [`GRACE`] after it exits.
fn run(name: &str, args: &[&str], envs: &[(&str, &str)]) -> Ran {
    use std::os::unix::process::CommandExt;
    let logs = tempfile::tempdir().unwrap();
    let (out, err) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let started = Instant::now();
    let mut command = Command::new("bash");
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(set_by_cargo) {
            command.env_remove(key);
        }
    }
    let mut child = command
        .arg(format!("scripts/{name}"))
        .args(args)
        .current_dir(ROOT)
        .env("CARGO_TARGET_DIR", target_dir())
        // Everything is downloaded when the suite runs.
        .env("CARGO_NET_OFFLINE", "true")
        .env("FAIRLOCK_NO_BUILD", if built() { "1" } else { "0" })
        .env_remove("REDIS_URL")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .expect("bash");
    let pid = child.id() as i32;
    let group = Pid::from_raw(pid);
    let read = |path: &Path| fs::read_to_string(path).unwrap_or_default();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > DEADLINE {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = child.wait();
            panic!(
                "scripts/{name} still ran after {DEADLINE:?}:\n--- stdout\n{}\n--- stderr\n{}",
                read(&out),
                read(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "scripts/{name} {args:?}: {status} after {:.1?}",
        started.elapsed()
    );
    let exited = Instant::now();
    loop {
        let left = group_members(pid);
        if left.is_empty() {
            break;
        }
        if exited.elapsed() > GRACE {
            let _ = killpg(group, Signal::SIGKILL);
            panic!(
                "scripts/{name} left processes running {GRACE:?} after it exited:\n{}\n--- stdout\n{}\n--- stderr\n{}",
                left.join("\n"),
                read(&out),
                read(&err)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let lingered = exited.elapsed();
    if lingered > Duration::from_millis(200) {
        eprintln!("scripts/{name}: its processes ended {lingered:.1?} after it");
    }
    Ran {
        status,
        stdout: read(&out),
        stderr: read(&err),
        pid,
    }
}

/// Whether `tool` runs here. Where it does not: a skip with a message
/// (false), but a failure in CI (`$CI` set), where every tool must run.
fn have(tool: &str, script: &str) -> bool {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v.is_empty()),
            "scripts/{script} needs {tool}, which is not installed (required in CI)"
        );
        eprintln!("SKIPPED: scripts/{script} needs {tool}, which is not installed");
    }
    found
}

/// The figure on the line that starts with `label` and ends with `unit`:
/// the last word before the unit, a whole number.
fn figure(output: &str, label: &str, unit: &str) -> i64 {
    let line = output
        .lines()
        .find(|l| l.starts_with(label) && l.ends_with(unit))
        .unwrap_or_else(|| panic!("no line {label:?} ... {unit:?} in:\n{output}"));
    let before = line[label.len()..line.len() - unit.len()].trim_end();
    let word = before.rsplit(' ').next().unwrap_or_default();
    word.parse()
        .unwrap_or_else(|_| panic!("no number before {unit:?} in {line:?}"))
}

#[test]
fn bench_runs_in_its_short_mode() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().unwrap();
    let ran = run(
        "bench",
        &[
            "uncontended",
            "--only",
            "native-fair",
            "--rounds",
            "1",
            "--duration",
            "10ms",
        ],
        &[("FAIRLOCK_PROFILE", "dev"), ("BENCH_OUT", dir)],
    )
    .success("bench");
    // The table, shown and written to BENCH_OUT, not to docs/.
    let table = fs::read_to_string(out.path().join("performance.txt")).unwrap();
    assert_eq!(table, ran.stdout);
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("fairlock native fair"))
        .unwrap_or_else(|| panic!("no row for native fair:\n{table}"));
    let ops: u64 = row["  fairlock native fair".len()..]
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no ops/s in {row:?}"));
    assert!(ops > 0, "{row}");
    // One row under the header: --only ran no other.
    let rows = table
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("implementation "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .count();
    assert_eq!(rows, 1, "{table}");
    let chart = fs::read_to_string(out.path().join("performance.svg")).unwrap();
    assert!(chart.starts_with("<svg") && chart.contains("</svg>"));
}

#[test]
fn client_cost_runs_in_its_short_mode() {
    if !have("valgrind", "client-cost") || !have("python3", "client-cost") {
        return;
    }
    let ran = run(
        "client-cost",
        &["rslock", "native-fair"],
        &[
            ("FAIRLOCK_PROFILE", "dev"),
            ("N1", "2"),
            ("N2", "22"),
            ("ROUNDS", "1"),
        ],
    )
    .success("client-cost");
    // implementation, instructions per pair, ratio to rslock, range.
    for (implementation, ratio) in [("rslock", Some("1.00")), ("native-fair", None)] {
        let row: Vec<&str> = ran
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&implementation))
            .unwrap_or_else(|| panic!("no row for {implementation}:\n{}", ran.both()));
        let per: i64 = row[1].parse().expect("instructions per pair");
        assert!(per > 0, "{row:?}");
        let times: f64 = row[2].parse().expect("x rslock");
        assert!(times > 0.0, "{row:?}");
        if let Some(ratio) = ratio {
            assert_eq!(row[2], ratio);
        }
    }
}

#[test]
fn model_runs_in_its_short_mode() {
    let envs = [("FAIRLOCK_PROFILE", "dev"), ("EXTRA_TIME", "0")];
    let listed = run("model", &["--list"], &envs).success("model");
    let variants: Vec<&str> = listed.stdout.lines().collect();
    for v in ["correct", "fast_path_takes_held", "weighted:correct"] {
        assert!(variants.contains(&v), "{v} not listed:\n{}", listed.stdout);
    }
    assert!(variants.len() >= 20, "{}", listed.stdout);
    let ran = run(
        "model",
        &["fast_path_takes_held", "weighted:correct"],
        &envs,
    )
    .success("model");
    let row = |variant: &str| -> Vec<&str> {
        ran.stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&variant))
            .unwrap_or_else(|| panic!("no row for {variant}:\n{}", ran.both()))
    };
    let found = row("fast_path_takes_held");
    assert_eq!(found[1..4], ["found", "violation", "of"], "{found:?}");
    let holds = row("weighted:correct");
    assert_eq!(holds[1..3], ["holds", "holds"], "{holds:?}");
}

#[test]
fn mutants_runs_in_its_short_mode() {
    // A mutant's real run edits the tracked sources, which the suite's other
    // tests may be building from: only the listing and the dry check here.
    if !have("python3", "mutants") {
        return;
    }
    let listed = run("mutants", &["--list"], &[]).success("mutants");
    let mutants = listed
        .stdout
        .lines()
        .filter(|l| !l.starts_with(' '))
        .count();
    let details = listed
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("model: ") && l.contains("; suite: "))
        .count();
    assert!(mutants >= 20, "{}", listed.stdout);
    assert_eq!(details, mutants, "{}", listed.stdout);
    let checked = run("mutants", &["--check"], &[]).success("mutants");
    assert!(
        checked
            .stdout
            .contains(&format!("mutants: {mutants} mutants fit the code")),
        "{}",
        checked.both()
    );
}

#[test]
fn queue_cost_runs_in_its_short_mode() {
    if !have("valgrind", "queue-cost") || !have("python3", "queue-cost") {
        return;
    }
    let ran = run("queue-cost", &["5", "4"], &[]).success("queue-cost");
    for line in [
        "lock (fair)",
        "read-write, writers",
        "read-write, W + 3 R groups",
        "semaphore of 4, requests for 1",
    ] {
        let per = figure(&ran.stdout, line, " instructions per acquisition");
        assert!(per > 0, "{line}: {per}\n{}", ran.stdout);
        assert!(
            ran.stdout
                .lines()
                .any(|l| l.starts_with(line) && l.contains(" 4 waiters ")),
            "{}",
            ran.stdout
        );
    }
}

#[test]
fn script_cost_runs_in_its_short_mode() {
    if !have("valgrind", "script-cost") || !have("python3", "script-cost") {
        return;
    }
    // The scripts at HEAD against the work tree's (the work tree's twice
    // where there is no git history).
    let git = Command::new("git")
        .args(["rev-parse", "--verify", "-q", "HEAD"])
        .current_dir(ROOT)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let old = if git { "HEAD" } else { "WORKTREE" };
    let ran = run("script-cost", &[old], &[("PAIRS", "5")]).success("script-cost");
    assert!(
        ran.stdout
            .starts_with(&format!("old = {old}, new = WORKTREE\n"))
    );
    let unit = " instructions per pair";
    assert!(figure(&ran.stdout, "rslock-equivalent", unit) > 0);
    for version in ["old", "new"] {
        for kind in [
            "native-fair",
            "native-nonfair",
            "redisson-fair",
            "redisson-nonfair",
        ] {
            let label = format!("{version}:{kind} ");
            assert!(figure(&ran.stdout, &label, unit) > 0, "{label}");
        }
    }
    let ratios = ran
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("= ") && l.ends_with(" x rslock-equivalent"))
        .count();
    assert_eq!(ratios, 8, "{}", ran.stdout);
}

#[test]
fn script_floor_runs_in_its_short_mode() {
    if !have("valgrind", "script-floor") || !have("python3", "script-floor") {
        return;
    }
    let ran = run("script-floor", &[], &[("PAIRS", "5")]).success("script-floor");
    let unit = " instructions per pair";
    for label in [
        "rslock-equivalent pair",
        "floor pair, answer cache",
        "floor pair, no answer cache",
        "floor pair as functions (FCALL)",
        "non-fair plain take + release script",
        "PING",
        "EVALSHA return 1",
        "  the native prelude defined first",
        "FCALL return 1, prelude in the library",
    ] {
        assert!(figure(&ran.stdout, label, unit) > 0, "{label}");
    }
}

#[test]
fn test_under_load_runs_in_its_short_mode() {
    // The command lists every process with its parent and state: the busy
    // loops are the script's children, running.
    let ran = run(
        "test-under-load",
        &["--command", "ps", "-A", "-o", "pid=,ppid=,stat="],
        &[("LOAD_LOOPS", "1")],
    )
    .success("test-under-load");
    let started = ran
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("== started 1 busy loops (pids "))
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("no start line:\n{}", ran.both()));
    let loop_pid: i32 = started.parse().expect("one pid");
    let running = ran.stdout.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() == 3
            && w[0] == loop_pid.to_string()
            && w[1] == ran.pid.to_string()
            && w[2].starts_with('R')
    });
    assert!(running, "busy loop {loop_pid} not running:\n{}", ran.both());
    let report = ran
        .stderr
        .lines()
        .find(|l| l.starts_with("== under load (1 busy loops): exit status 0 after "))
        .unwrap_or_else(|| panic!("no report line:\n{}", ran.both()));
    assert!(
        report.contains("; load average (1, 5, 15 min) "),
        "{report}"
    );
    // Gone: run() found the script's process group empty, the loop in it
    // (a zombie at most, reaped by the script's wait).
    let stat = fs::read_to_string(format!("/proc/{loop_pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || !stat.contains(&format!(" {} ", ran.pid)),
        "busy loop {loop_pid} still there: {stat}"
    );
}

//! `fairlock exec` never leaves processes running without the lock: the
//! command and everything it started in its process group stop when the lock
//! is lost, when the command exits and when fairlock itself is killed.
//! Signals reach the command exactly once; a command still reads the
//! terminal; waiting is shown without reading the whole queue.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use fairlock::Protocol;
use fairlock_test_support as support;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use support::RedisServer;

fn fairlock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis").arg(server.url()).env_remove("REDIS_URL");
    cmd
}

/// `fairlock [GLOBAL] exec NAME [EXEC_ARGS] -- sh -c SCRIPT`, started in a
/// process group of its own, as a shell starts a job (and so that a
/// terminal the tests may run on is never involved). Output goes nowhere:
/// a command that outlives a broken exec must not hold the test runner's
/// pipes open.
fn exec_sh(
    server: &RedisServer,
    global: &[&str],
    name: &str,
    exec_args: &[&str],
    script: &str,
) -> Exec {
    let child = fairlock(server)
        .args(global)
        .args(["exec", name])
        .args(exec_args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn fairlock");
    Exec(child)
}

/// A running `fairlock exec`; killed if a test fails while it runs.
struct Exec(Child);

impl Exec {
    fn pid(&self) -> Pid {
        Pid::from_raw(self.0.id() as i32)
    }

    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "fairlock did not exit within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Poll `condition` every 10 ms for at most `limit` (state in other processes).
fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The pids written one per line to `path`, once `count` complete lines are there.
fn pids(path: &Path, count: usize) -> Vec<i32> {
    let mut found = Vec::new();
    wait_until(
        Duration::from_secs(10),
        "the command wrote its pids",
        || {
            let text = read(path);
            found = text
                .lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect();
            text.ends_with('\n') && found.len() == count
        },
    );
    found
}

/// Whether `pid` is a live process (a zombie is not: it stopped running; in
/// a container, nobody may ever reap it).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => kill(Pid::from_raw(pid), None).is_ok(),
    }
}

/// `pid`'s process group and the foreground process group of its terminal
/// (`/proc/PID/stat`: after the name, state ppid pgrp session tty_nr tpgid).
fn groups(pid: i32) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let (_, rest) = stat.rsplit_once(") ").expect("a stat line");
    let fields: Vec<&str> = rest.split(' ').collect();
    (fields[2].parse().unwrap(), fields[5].parse().unwrap())
}

fn assert_all_gone(pids: &[i32], what: &str) {
    wait_until(Duration::from_secs(5), what, || {
        pids.iter().all(|&pid| !running(pid))
    });
}

/// Force-unlocked while the command's background process (which ignores
/// SIGTERM) runs: exec exits 71 and nothing of the command is left.
#[test]
fn lost_lock_stops_the_whole_process_group() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!(
        "(trap '' TERM; exec sleep 30) & echo $! > {}; wait",
        file.display()
    );
    let mut exec = exec_sh(
        &server,
        &["--lease", "900ms"],
        "busy",
        &["--grace", "5s"],
        &script,
    );
    let background = pids(&file, 1);
    assert!(running(background[0]));
    let out = fairlock(&server)
        .args(["force-unlock", "busy", "--yes"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(exec.wait(Duration::from_secs(20)).code(), Some(71));
    assert_all_gone(&background, "the background sleep is stopped");
}

/// The command exits and leaves a background process behind: it is killed
/// before the lock is released; the command's exit code is exec's.
#[test]
fn normal_exit_stops_what_the_command_left_running() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!("sleep 30 & echo $! > {}; exit 5", file.display());
    let mut exec = exec_sh(&server, &[], "left", &[], &script);
    assert_eq!(exec.wait(Duration::from_secs(20)).code(), Some(5));
    assert_all_gone(&pids(&file, 1), "the left-over sleep is stopped");
    assert!(!support::is_held(&server, Protocol::Native, "left"));

    let out = fairlock(&server)
        .args(["exec", "left", "--", "/nonexistent/cmd"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(!support::is_held(&server, Protocol::Native, "left"));
}

/// fairlock killed with SIGKILL: its command and the command's background
/// process stop within moments.
#[test]
fn killed_exec_leaves_nothing_running() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let script = format!(
        "sleep 30 & echo $! >> {f}; echo $$ >> {f}; wait",
        f = file.display()
    );
    let mut exec = exec_sh(&server, &[], "doomed", &[], &script);
    let pids = pids(&file, 2);
    assert!(pids.iter().all(|&pid| running(pid)));
    kill(exec.pid(), Signal::SIGKILL).unwrap();
    exec.wait(Duration::from_secs(5));
    assert_all_gone(&pids, "the command and its background sleep are stopped");
}

/// A signal sent to exec's whole process group (as a terminal or
/// `kill -SIG -PGID` does) reaches the command once: exec passes it on, and
/// the command is not in exec's group to get it a second time. (The shell
/// waits with `wait`, which a trapped signal interrupts at once: a shell
/// waiting for a foreground command runs the trap only after it, and would
/// count two deliveries in that time as one. Two deliveries can still merge
/// into one when both come before the shell runs, on a busy machine: the
/// process groups are checked too.)
#[test]
fn a_signal_to_execs_group_reaches_the_command_once() {
    let server = RedisServer::start();
    for (sig, end) in [
        (Signal::SIGINT, Signal::SIGTERM),
        (Signal::SIGTERM, Signal::SIGINT),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let marks = dir.path().join("marks");
        let pid_file = dir.path().join("pid");
        let short = |s: Signal| s.as_str().trim_start_matches("SIG").to_owned();
        let script = format!(
            "trap 'echo got >> {m}' {sig}; trap 'echo end >> {m}; exit 3' {end}; \
             echo $$ > {p}; echo ready >> {m}; while :; do sleep 1 & wait $!; done",
            m = marks.display(),
            p = pid_file.display(),
            sig = short(sig),
            end = short(end),
        );
        let mut exec = exec_sh(&server, &[], "sig", &[], &script);
        wait_until(Duration::from_secs(10), "command ready", || {
            read(&marks) == "ready\n"
        });
        let (group, _) = groups(pids(&pid_file, 1)[0]);
        assert_ne!(
            group,
            exec.pid().as_raw(),
            "the command is not in exec's process group"
        );
        killpg(exec.pid(), sig).unwrap();
        wait_until(Duration::from_secs(10), "signal delivered", || {
            read(&marks).contains("got")
        });
        // Ends the command; exec passes on what it got before this first.
        kill(exec.pid(), end).unwrap();
        assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(3));
        assert_eq!(read(&marks), "ready\ngot\nend\n", "{sig} delivered once");
        assert!(!support::is_held(&server, Protocol::Native, "sig"));
    }
}

/// Run on a terminal (a pty, made exec's controlling terminal by
/// `setsid --ctty`): the command reads what is typed, Ctrl-Z does not hang
/// it, and Ctrl-C reaches it once.
#[test]
fn on_a_terminal_the_command_reads_it_and_gets_ctrl_c_once() {
    if Command::new("setsid").arg("--version").output().is_err() {
        eprintln!("skipped: no setsid(1) to give fairlock a controlling terminal");
        return;
    }
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let pid_file = dir.path().join("pid");
    let script = format!(
        "trap 'echo got >> {m}' INT; trap 'echo end >> {m}; exit 3' TERM; \
         echo $$ > {p}; echo ready >> {m}; read line; echo \"read $line\" >> {m}; \
         read line; echo \"read $line\" >> {m}; while :; do sleep 1 & wait $!; done",
        m = marks.display(),
        p = pid_file.display()
    );
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let slave = std::fs::File::from(pty.slave);
    let child = Command::new("setsid")
        .arg("--ctty")
        .arg(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url(), "exec", "tty", "--", "sh", "-c"])
        .arg(&script)
        .env_remove("REDIS_URL")
        .stdin(slave.try_clone().unwrap())
        .stdout(slave.try_clone().unwrap())
        .stderr(slave)
        .spawn()
        .expect("spawn setsid fairlock");
    let mut exec = Exec(child);
    let mut master = std::fs::File::from(pty.master);
    // Whatever appears on the terminal, for failure messages.
    let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    std::thread::spawn({
        let screen = screen.clone();
        let mut master = master.try_clone().unwrap();
        move || {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = master.read(&mut buf) {
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        }
    });
    let shown = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    wait_until(Duration::from_secs(10), "command ready", || {
        read(&marks) == "ready\n"
    });
    master.write_all(b"hello\n").unwrap();
    wait_until(Duration::from_secs(10), "typed line read", || {
        read(&marks).contains("read hello")
    });
    // The terminal's foreground group is the command's, not exec's: Ctrl-C
    // goes to the command only (counting alone could miss a second
    // delivery merged with the first).
    let (group, foreground) = groups(pids(&pid_file, 1)[0]);
    assert_eq!(foreground, group, "the command's group has the terminal");
    assert_ne!(
        group,
        exec.pid().as_raw(),
        "exec's group is not the command's"
    );
    // Ctrl-Z: exec's group is orphaned here (its parent is in another
    // session), so the kernel drops the stop; the command must not hang.
    master.write_all(b"\x1aagain\n").unwrap();
    wait_until(
        Duration::from_secs(10),
        "typed line read after Ctrl-Z",
        || read(&marks).contains("read again"),
    );
    master.write_all(b"\x03").unwrap();
    wait_until(Duration::from_secs(10), "Ctrl-C delivered", || {
        read(&marks).contains("got")
    });
    kill(exec.pid(), Signal::SIGTERM).unwrap();
    let status = exec.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(3), "terminal: {}", shown());
    assert_eq!(
        read(&marks),
        "ready\nread hello\nread again\ngot\nend\n",
        "terminal: {}",
        shown()
    );
}

/// Lines of a child's stderr as they come.
fn lines(stderr: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn expect_line(rx: &std::sync::mpsc::Receiver<String>, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line == wanted => return,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line {wanted:?} on stderr; saw {seen:?}");
}

/// Script calls (EVAL, EVALSHA, FCALL and their read-only forms) the server
/// has served so far.
fn script_calls(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]);
    stats
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            if !(name.starts_with("eval") || name.starts_with("fcall")) {
                return None;
            }
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            calls.parse::<u64>().ok()
        })
        .sum()
}

/// A queued exec shows its place in line, asking Redis about once a second
/// (not ten times); a non-fair waiter says once that it waits.
#[test]
fn waiting_is_shown_cheaply() {
    let server = RedisServer::start();
    let client = fairlock::blocking::LockClient::with_config(
        fairlock::ClientConfig::from_url(&server.url()).unwrap(),
    )
    .unwrap();

    let guard = client.fair_lock("line").unwrap().lock().unwrap();
    let mut exec = fairlock(&server)
        .args(["exec", "line", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(exec.stderr.take().unwrap());
    expect_line(&rx, "waiting for line: position 1 of 1");
    let before = script_calls(&server);
    // Time passing is what is measured: three seconds of waiting.
    std::thread::sleep(Duration::from_secs(3));
    let calls = script_calls(&server) - before;
    guard.unlock().unwrap();
    let mut exec = Exec(exec);
    assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(0));
    // About 3 position reads and 1-2 waiter refreshes (every waiter_ttl/3).
    assert!(calls <= 10, "{calls} script calls in 3 s of waiting");

    let guard = client.lock("plain").unwrap().lock().unwrap();
    let mut exec = fairlock(&server)
        .args(["exec", "plain", "--nonfair", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(exec.stderr.take().unwrap());
    expect_line(&rx, "waiting for plain (non-fair lock: no queue position)");
    guard.unlock().unwrap();
    let mut exec = Exec(exec);
    assert_eq!(exec.wait(Duration::from_secs(10)).code(), Some(0));
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(
        rest.iter().all(|line| !line.starts_with("waiting")),
        "said once: {rest:?}"
    );
}

/// Issue 21, finding 8: Redis killed while `exec --lease 3s` runs a long
/// command. The command was stopped when the lease ran out, but exec then
/// retried the release of a lock it knew was lost for the whole retry
/// budget (exit 71 ~10 s later), and logged the loss as `expired` though
/// renewals had failed. Now it exits within one response timeout of
/// stopping the command, and the log names the true cause.
#[test]
fn a_lock_lost_with_its_server_ends_exec_promptly_with_the_true_cause() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pids");
    let child = fairlock(&server)
        .args(["--lease", "3s", "--log-level", "warn", "exec", "gone", "--"])
        .args([
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 30", file.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawn fairlock");
    let mut exec = Exec(child);
    let stderr = lines(exec.0.stderr.take().unwrap());
    let command = pids(&file, 1);
    server.stop();
    wait_until(Duration::from_secs(20), "the command is stopped", || {
        !running(command[0])
    });
    let stopped = Instant::now();
    assert_eq!(exec.wait(Duration::from_secs(30)).code(), Some(71));
    let after = stopped.elapsed();
    // One response timeout (3 s by default), with room for a loaded machine.
    assert!(
        after < Duration::from_secs(5),
        "exec exited {after:?} after stopping the command"
    );
    let mut log = Vec::new();
    while let Ok(line) = stderr.recv_timeout(Duration::from_secs(5)) {
        log.push(line);
    }
    assert!(
        log.iter()
            .any(|line| line.contains("lock lost") && line.contains("renewals failed")),
        "the loss is put down to the failed renewals: {log:#?}"
    );
}

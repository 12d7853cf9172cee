//! `fairlock exec`: run a command while holding a lock.
//!
//! # Nothing of the command runs without the lock
//!
//! The command (CMD) runs in a process group of its own, G, so that it and
//! everything it starts can be signalled at once (`killpg`). Three processes
//! take part:
//!
//! - exec (this process) holds the lock and is CMD's parent: it learns of
//!   CMD stopping and exiting from `waitpid`, passes signals on to G, and
//!   kills G (SIGKILL) before it lets go of the lock, on every way out: CMD
//!   exited (what CMD left running in G must not outlive the lock), the lock
//!   was lost, an error (`Group`'s `Drop`).
//! - the sentinel (`fairlock exec-sentinel`, hidden), started before CMD,
//!   leads G (G's id is its pid) and reads a pipe whose only writer is exec.
//!   However exec dies (SIGKILL, the OOM killer, a crash: nothing exec could
//!   catch), the kernel closes exec's end; the sentinel reads end-of-file and
//!   kills G with SIGKILL, itself included.
//! - CMD joins G as it starts.
//!
//! Why a sentinel rather than `prctl(PR_SET_PDEATHSIG)`: that must run in
//! the child between fork and exec (`pre_exec`, which is unsafe, and this
//! crate forbids unsafe code); it reaches the direct child only, not what
//! the child started; it fires when the *thread* that forked exits, not the
//! process; and it is Linux-only. A pipe closing is an event for the whole
//! group, on every Unix. The sentinel lives in G because a process group
//! exists as long as one member does: while anyone may still signal G, its
//! id cannot have been reused by an unrelated group. Being in G, it gets
//! what is sent to G (Ctrl-C from the terminal, signals exec passes on, a
//! command's `kill -TERM 0`); it catches and drops all of these.
//!
//! # Signals and the terminal
//!
//! Each signal must reach CMD once. CMD is not in exec's process group, so
//! what is sent to exec's group (by a terminal, or `kill -INT -PGID`) does
//! not reach CMD directly; exec passes SIGINT, SIGTERM, SIGHUP and SIGQUIT
//! on to G, once. A process outside the terminal's foreground group cannot
//! read the terminal (SIGTTIN stops it), so when exec runs in the
//! foreground of its controlling terminal it makes G the foreground group
//! while CMD runs (`tcsetpgrp`) and takes the terminal back after. Then
//! Ctrl-C and Ctrl-\ go from the terminal to G only, exec (in the
//! background meanwhile) does not see them, and CMD reads the terminal as
//! if run directly. (One exception to "once": when the terminal hangs up,
//! the kernel sends SIGHUP to its foreground group, G, and the shell sends
//! SIGHUP to its jobs, exec among them, which passes it on.)
//!
//! When CMD stops for job control (Ctrl-Z, SIGTTIN, SIGTTOU), exec takes
//! the terminal back and stops its own group with the same signal, so that
//! the shell sees its job stopped; once continued (`fg`), it gives G the
//! terminal again if it is in the foreground, and continues G. (The lease
//! is not renewed while exec is stopped: stopped longer than the lease, the
//! lock is lost, and CMD is stopped once exec runs again.)

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fairlock::{AcquireOptions, Leadership, LockClient, LockGuard, LockHandle, Owner, Permits};
use nix::errno::Errno;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, pthread_sigmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid, tcgetpgrp, tcsetpgrp};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use crate::progress::LiveLine;
use crate::{Cli, Failure, LockSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct ExecArgs {
    /// Lock name.
    name: String,

    /// Give up after DUR and exit 75 (the queue entry is removed), e.g. 30s,
    /// 1h30m (1ms to 365days). Default: wait until granted.
    #[arg(long, value_name = "DUR", value_parser = duration::wait, allow_hyphen_values = true)]
    wait: Option<Duration>,

    /// Use the non-fair lock (Redisson's getLock) instead of the fair one.
    #[arg(long, conflicts_with_all = ["read", "write", "semaphore"])]
    nonfair: bool,

    /// Take the read side of the read-write lock NAME (Redisson's
    /// getReadWriteLock(NAME).readLock(); redisson protocol): CMD runs
    /// beside other readers, never beside a writer.
    #[arg(long, conflicts_with_all = ["write", "semaphore"])]
    read: bool,

    /// Take the write side of the read-write lock NAME (Redisson's
    /// getReadWriteLock(NAME).writeLock(); redisson protocol): CMD runs
    /// alone.
    #[arg(long, conflicts_with = "semaphore")]
    write: bool,

    /// Take permits of the semaphore NAME instead of a lock (native: fair,
    /// first come first served; redisson: Redisson's
    /// getPermitExpirableSemaphore(NAME)): CMD runs while at most
    /// --permits permits are out, across all clients. The permits have the
    /// watchdog's lease: a fairlock that dies gives them back when it ends.
    /// CMD gets their ids in FAIRLOCK_PERMITS (native: the acquisition's
    /// owner id) and, under native, the acquisition's fencing token in
    /// FAIRLOCK_TOKEN.
    #[arg(long, requires = "permits")]
    semaphore: bool,

    /// The semaphore's total, set when it does not exist yet (an existing
    /// semaphore keeps its own).
    #[arg(long, value_name = "N", requires = "semaphore")]
    permits: Option<u32>,

    /// How many permits CMD takes (default 1).
    #[arg(long, value_name = "K", default_value_t = 1, requires = "semaphore")]
    take: u32,

    /// When the lock is lost while CMD runs: `kill` stops CMD's process group
    /// (SIGTERM, then SIGKILL) and exits 71; `ignore` lets it run on.
    #[arg(long, value_enum, default_value_t = OnLost::Kill)]
    on_lost: OnLost,

    /// After a lost lock, the most time CMD's process group gets between
    /// SIGTERM and SIGKILL, 0s to 365days; SIGKILL comes as soon as CMD
    /// itself exited.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration::grace, allow_hyphen_values = true)]
    grace: Duration,

    /// Serve metrics (acquisition, wait, hold, renewals, lost locks; the
    /// lock's name as the `lock` label) in the Prometheus text format at
    /// http://HOST:PORT/metrics while exec runs (port 0: any free port,
    /// printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,

    #[command(flatten)]
    settings: LockSettings,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnLost {
    Kill,
    Ignore,
}

/// The signals passed on to CMD's group (and that cancel a wait).
pub(crate) struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn install() -> Result<Self, Failure> {
        let mut streams = Vec::new();
        for sig in [
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            streams.push((sig, catch(sig)?));
        }
        Ok(Self { streams })
    }

    /// The next signal received.
    pub(crate) async fn recv(&mut self) -> Signal {
        let waits = self.streams.iter_mut().map(|(sig, stream)| {
            let sig = *sig;
            Box::pin(async move {
                stream.recv().await;
                sig
            })
        });
        futures_select_all(waits).await
    }
}

/// Handle `sig` from now on (the default action no longer applies; a
/// program this process starts gets the default action back).
fn catch(sig: Signal) -> Result<tokio::signal::unix::Signal, Failure> {
    signal(SignalKind::from_raw(sig as i32))
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot handle {sig}: {e}")))
}

async fn futures_select_all<F: std::future::Future<Output = Signal> + Unpin>(
    futures: impl IntoIterator<Item = F>,
) -> Signal {
    let mut futures: Vec<F> = futures.into_iter().collect();
    std::future::poll_fn(|cx| {
        for future in &mut futures {
            if let std::task::Poll::Ready(sig) = std::pin::Pin::new(future).poll(cx) {
                return std::task::Poll::Ready(sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// When a waiter first looks up its place in line, and how often after.
const FIRST_LOOK: Duration = Duration::from_millis(250);
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Shows "waiting for WHAT: position P of Q" on stderr (WHAT: the lock's
/// name, or "K permit(s) of NAME"): in place on a terminal, one line per
/// change otherwise.
struct Progress {
    what: String,
    line: LiveLine,
    last: Option<(u64, u64)>,
}

impl Progress {
    fn new(what: String) -> Self {
        Self {
            what,
            line: LiveLine::stderr(),
            last: None,
        }
    }

    fn position(&mut self, now: (u64, u64)) {
        if self.last == Some(now) {
            return;
        }
        self.last = Some(now);
        let line = format!("waiting for {}: position {} of {}", self.what, now.0, now.1);
        self.show(&line);
    }

    /// A lock without a line (a non-fair lock, Redisson's read-write
    /// lock): say once that we wait.
    fn nonfair(&mut self) {
        if !self.line.shown() {
            let line = format!(
                "waiting for {} (non-fair lock: no queue position)",
                self.what
            );
            self.show(&line);
        }
    }

    /// Redisson's semaphore has no line either: say once that we wait.
    fn no_line(&mut self) {
        if !self.line.shown() {
            let line = format!("waiting for {} (no queue position)", self.what);
            self.show(&line);
        }
    }

    fn show(&mut self, line: &str) {
        self.line.show(line);
    }

    fn clear(&mut self) {
        self.line.clear();
    }
}

pub(crate) async fn run(cli: &Cli, args: &ExecArgs) -> Result<u8, Failure> {
    let _server = match &args.metrics_addr {
        Some(addr) => Some(crate::metrics_server::serve(addr).await?),
        None => None,
    };
    let settings = cli.settings(&args.settings);
    // One lock: its name is a label of bounded cardinality.
    let config = cli
        .config(&cli.url(), &settings, fairlock::ClientConfig::DEFAULT_LEASE)?
        .metrics_lock_label(fairlock::LockLabel::Name);
    let client = LockClient::with_config(config)
        .await
        .map_err(crate::failure::connect_failure)?;
    let result = run_with(&client, args).await;
    // Release whatever is still held, leave the queue, and let the
    // background work finish before the process exits.
    client.shutdown().await;
    result
}

/// What CMD runs under: a hold of a lock, a semaphore's permits, or a
/// leadership (`fairlock elect`).
pub(crate) enum Held {
    Lock(LockGuard),
    Permits(Permits),
    Leader(Leadership),
}

/// How CMD runs, whatever it runs under.
pub(crate) struct Run<'a> {
    /// The lock's (election's) name.
    pub(crate) name: &'a str,
    /// What it is, in messages: "lock", "leadership of".
    pub(crate) what: &'a str,
    pub(crate) command: &'a [String],
    pub(crate) on_lost: OnLost,
    pub(crate) grace: Duration,
}

impl ExecArgs {
    fn run(&self) -> Run<'_> {
        Run {
            name: &self.name,
            what: "lock",
            command: &self.command,
            on_lost: self.on_lost,
            grace: self.grace,
        }
    }
}

impl Held {
    fn lost(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        match self {
            Held::Lock(guard) => Box::pin(guard.lost()),
            Held::Permits(permits) => Box::pin(permits.lost()),
            Held::Leader(leadership) => Box::pin(leadership.lost()),
        }
    }

    async fn release(self) -> fairlock::Result<()> {
        match self {
            Held::Lock(guard) => guard.unlock().await,
            Held::Permits(permits) => permits.release().await,
            Held::Leader(leadership) => leadership.resign().await,
        }
    }
}

/// Wait for `take` permits of the semaphore NAME, then run CMD.
async fn run_with_permits(
    client: &LockClient,
    args: &ExecArgs,
    permits: u32,
) -> Result<u8, Failure> {
    let semaphore = client.semaphore(&args.name, permits)?;
    let mut signals = Signals::install()?;
    let mut progress = Progress::new(format!("{} permit(s) of {}", args.take, args.name));
    // Our own owner id, to ask for our place in the native semaphore's line
    // (Redisson's has none).
    let owner: Owner = client.new_owner();
    let lined = client.config().get_protocol() == fairlock::Protocol::Native;
    let taken = {
        let acquire = semaphore.acquire_as(
            &owner,
            args.take,
            args.wait,
            fairlock::PermitLease::Watchdog,
        );
        tokio::pin!(acquire);
        let mut look =
            tokio::time::interval_at(tokio::time::Instant::now() + FIRST_LOOK, LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                result = &mut acquire => break result,
                _ = look.tick() => if lined {
                    let place = tokio::time::timeout(LOOK_EVERY, semaphore.queue_position(&owner)).await;
                    if let Ok(Ok(Some(place))) = place {
                        progress.position(place);
                    }
                } else {
                    progress.no_line();
                },
                sig = signals.recv() => {
                    // Dropping the acquire future leaves no permit taken.
                    progress.clear();
                    eprintln!("fairlock: {sig} while waiting for {}; giving up", args.name);
                    return Ok(128 + sig as u8);
                }
            }
        }
    };
    progress.clear();
    let Some(taken) = taken? else {
        eprintln!(
            "fairlock: {} permits of {} not acquired within {}",
            args.take,
            args.name,
            duration::format(args.wait.unwrap_or_default())
        );
        return Ok(exit::TIMEOUT);
    };
    run_locked(Held::Permits(taken), &args.run(), &mut signals).await
}

async fn run_with(client: &LockClient, args: &ExecArgs) -> Result<u8, Failure> {
    if let (true, Some(permits)) = (args.semaphore, args.permits) {
        return run_with_permits(client, args, permits).await;
    }
    let handle: LockHandle = if args.nonfair {
        client.lock(&args.name)?.into()
    } else if args.read {
        client.read_write_lock(&args.name)?.read().clone()
    } else if args.write {
        client.read_write_lock(&args.name)?.write().clone()
    } else {
        client.fair_lock(&args.name)?.into()
    };
    // The fair lock has a line in which to show our place, and so has the
    // native read-write lock (one line for both sides); a non-fair lock and
    // Redisson's read-write lock have none.
    let lined = !args.nonfair
        && (!(args.read || args.write)
            || client.config().get_protocol() == fairlock::Protocol::Native);
    let mut signals = Signals::install()?;
    // Our own owner id, to ask for our place in line.
    let owner: Owner = client.new_owner();
    let mut options = AcquireOptions::new().owner(owner.clone());
    if let Some(wait) = args.wait {
        options = options.wait(wait);
    }

    // Wait for the lock, showing our place in line: one cheap look (not
    // the whole queue) about once a second.
    let mut progress = Progress::new(args.name.clone());
    let guard = {
        let acquire = handle.acquire(options);
        tokio::pin!(acquire);
        let mut look =
            tokio::time::interval_at(tokio::time::Instant::now() + FIRST_LOOK, LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                result = &mut acquire => break result,
                _ = look.tick() => if lined {
                    let place = tokio::time::timeout(LOOK_EVERY, handle.queue_position(&owner)).await;
                    if let Ok(Ok(Some(place))) = place {
                        progress.position(place);
                    }
                } else {
                    progress.nonfair();
                },
                sig = signals.recv() => {
                    // Dropping the acquire future takes us out of the queue.
                    progress.clear();
                    eprintln!("fairlock: {sig} while waiting for {}; leaving the queue", args.name);
                    return Ok(128 + sig as u8);
                }
            }
        }
    };
    progress.clear();
    let Some(guard) = guard? else {
        eprintln!(
            "fairlock: {} not acquired within {}",
            args.name,
            duration::format(args.wait.unwrap_or_default())
        );
        return Ok(exit::TIMEOUT);
    };
    run_locked(Held::Lock(guard), &args.run(), &mut signals).await
}

/// Run CMD while `guard` holds the lock; CMD's whole process group is gone
/// before the lock is let go.
pub(crate) async fn run_locked(
    guard: Held,
    args: &Run<'_>,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let (mut group, mut sentinel) = match Group::start().await {
        Ok(started) => started,
        Err(failure) => {
            let _ = guard.release().await;
            return Err(failure);
        }
    };
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("FAIRLOCK_NAME", args.name)
        .process_group(group.id.as_raw());
    match &guard {
        Held::Lock(guard) => {
            command
                .env("FAIRLOCK_OWNER", guard.owner().as_str())
                .env_remove("FAIRLOCK_PERMITS");
            match guard.token() {
                Some(token) => command.env("FAIRLOCK_TOKEN", token.to_string()),
                None => command.env_remove("FAIRLOCK_TOKEN"),
            };
        }
        Held::Leader(leadership) => {
            command
                .env("FAIRLOCK_OWNER", leadership.owner().as_str())
                .env("FAIRLOCK_TERM", leadership.term().to_string())
                .env("FAIRLOCK_TOKEN", leadership.term().to_string())
                .env_remove("FAIRLOCK_PERMITS");
        }
        Held::Permits(permits) => {
            command
                .env("FAIRLOCK_PERMITS", permits.ids().join(","))
                .env_remove("FAIRLOCK_OWNER");
            match permits.token() {
                Some(token) => command.env("FAIRLOCK_TOKEN", token.to_string()),
                None => command.env_remove("FAIRLOCK_TOKEN"),
            };
        }
    }
    let pid = match command.spawn() {
        // `watch` reaps it, not std.
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(err) => {
            drop(group);
            let _ = guard.release().await;
            // 127: the shell's code for a command that cannot be found.
            eprintln!("fairlock: cannot run {:?}: {err}", args.command[0]);
            return Ok(if err.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_RUN
            });
        }
    };
    let mut events = watch(pid)?;
    let lost = guard.lost();
    tokio::pin!(lost);
    // Cleared once the loss was reported (the future must not be polled again).
    let mut lost_pending = true;
    let mut sentinel_running = true;
    let code = loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Ok(Event::Exited(code))) => {
                    // What CMD left running in its group must not outlive the lock.
                    group.kill();
                    break code;
                }
                Some(Ok(Event::Stopped(sig))) => group.suspend(sig).await,
                Some(Err(err)) => {
                    return Err(Failure::new(exit::SOFTWARE, format!("waiting for the command: {err}")));
                }
                None => return Err(Failure::new(exit::SOFTWARE, "lost track of the command")),
            },
            () = &mut lost, if lost_pending => {
                lost_pending = false;
                if args.on_lost == OnLost::Ignore {
                    eprintln!("fairlock: lost the {} {}; --on-lost ignore: the command runs on", args.what, args.name);
                    continue;
                }
                eprintln!("fairlock: lost the {} {}; stopping the command", args.what, args.name);
                group.stop(&mut events, args.grace).await;
                drop(guard);
                return Ok(exit::LOST);
            }
            sig = signals.recv() => group.signal(sig),
            status = sentinel.wait(), if sentinel_running => {
                sentinel_running = false;
                let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                eprintln!(
                    "fairlock: warning: the exec sentinel ended ({status}); \
                     should fairlock die now, the command would not be stopped"
                );
            }
        }
    };
    Ok(match guard.release().await {
        Ok(()) => code,
        Err(err) if err.is_lock_lost() => {
            eprintln!(
                "fairlock: the {} {} was lost before the command finished: {err}",
                args.what, args.name
            );
            exit::LOST
        }
        Err(err) => {
            eprintln!(
                "fairlock: could not release {} ({err}); it expires with its lease",
                args.name
            );
            code
        }
    })
}

/// What `waitpid` tells of CMD.
enum Event {
    /// Its exit code, or 128+N when signal N ended it.
    Exited(u8),
    /// Stopped by this signal.
    Stopped(Signal),
}

/// Wait for CMD on a thread of its own (`waitpid` blocks), reporting stops
/// and, last, the exit. The thread reaps CMD; it ends once CMD exited.
fn watch(pid: Pid) -> Result<mpsc::UnboundedReceiver<nix::Result<Event>>, Failure> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::Builder::new()
        .name("exec-waitpid".into())
        .spawn(move || {
            loop {
                let event = match waitpid(pid, Some(WaitPidFlag::WUNTRACED)) {
                    Ok(WaitStatus::Exited(_, code)) => {
                        Ok(Event::Exited(u8::try_from(code).unwrap_or(1)))
                    }
                    Ok(WaitStatus::Signaled(_, sig, _)) => {
                        Ok(Event::Exited(u8::try_from(128 + sig as i32).unwrap_or(255)))
                    }
                    Ok(WaitStatus::Stopped(_, sig)) => Ok(Event::Stopped(sig)),
                    Ok(_) | Err(Errno::EINTR) => continue,
                    Err(err) => Err(err),
                };
                let last = !matches!(event, Ok(Event::Stopped(_)));
                if tx.send(event).is_err() || last {
                    return;
                }
            }
        })
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch the command: {e}")))?;
    Ok(rx)
}

/// CMD's process group, led by the sentinel. Dropping it kills the group
/// (SIGKILL) and gives the terminal back to exec's group.
struct Group {
    id: Pid,
    terminal: Terminal,
    /// Set once the group got SIGKILL: its id may be reused after that.
    killed: bool,
    /// exec's end of the sentinel's stdin. Only this process holds it (pipes
    /// are close-on-exec): it closes when exec exits or dies, and the
    /// sentinel then kills the group.
    _lifeline: tokio::process::ChildStdin,
}

impl Group {
    /// Start the sentinel, the group's leader, and wait until it is ready
    /// (catching the signals it must survive); if exec runs in the
    /// foreground of its terminal, make the group the foreground group
    /// (before CMD starts: CMD may read the terminal at once).
    async fn start() -> Result<(Self, tokio::process::Child), Failure> {
        let terminal = Terminal::open();
        let failed = |what: String| Failure::new(exit::SOFTWARE, what);
        let mut sentinel = tokio::process::Command::new(this_program())
            .arg0("fairlock")
            .arg("exec-sentinel")
            .arg("--give-terminal-to")
            .arg(terminal.own.as_raw().to_string())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| failed(format!("cannot start the exec sentinel: {e}")))?;
        let (Some(id), Some(lifeline), Some(ready)) =
            (sentinel.id(), sentinel.stdin.take(), sentinel.stdout.take())
        else {
            return Err(failed("the exec sentinel did not start".into()));
        };
        // From here on, dropping the group kills the sentinel.
        let mut group = Group {
            id: Pid::from_raw(id as i32),
            terminal,
            killed: false,
            _lifeline: lifeline,
        };
        let mut line = String::new();
        let mut ready = tokio::io::BufReader::new(ready);
        let answer =
            tokio::time::timeout(Duration::from_secs(10), ready.read_line(&mut line)).await;
        if !matches!(answer, Ok(Ok(_))) || line != "ready\n" {
            return Err(failed("the exec sentinel did not start".into()));
        }
        group.terminal.lend(group.id);
        Ok((group, sentinel))
    }

    fn signal(&self, sig: Signal) {
        if !self.killed {
            let _ = killpg(self.id, sig);
        }
    }

    /// SIGKILL to everyone in the group (the sentinel too), and the
    /// terminal back to exec's group.
    fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        self.killed = true;
        self.terminal.reclaim();
    }

    /// Stop the group after a lost lock: SIGTERM (and SIGCONT, for stopped
    /// members), then SIGKILL as soon as CMD exited, or after `grace`.
    async fn stop(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<nix::Result<Event>>,
        grace: Duration,
    ) {
        self.signal(Signal::SIGTERM);
        self.signal(Signal::SIGCONT);
        let exited = async { while let Some(Ok(Event::Stopped(_))) = events.recv().await {} };
        let in_time = tokio::time::timeout(grace, exited).await.is_ok();
        if !in_time {
            eprintln!(
                "fairlock: the command did not stop within {}; killing it",
                duration::format(grace)
            );
        }
        self.kill();
        if !in_time {
            let reaped = async { while let Some(Ok(Event::Stopped(_))) = events.recv().await {} };
            let _ = tokio::time::timeout(Duration::from_secs(5), reaped).await;
        }
    }

    /// CMD stopped. For job control (SIGTSTP: Ctrl-Z; SIGTTIN, SIGTTOU: it
    /// used the terminal from the background), do what the terminal would
    /// have done were CMD in exec's group: stop exec's group, so that the
    /// shell sees its job stopped and takes the terminal. Other stops
    /// (SIGSTOP) are someone else's business.
    async fn suspend(&mut self, sig: Signal) {
        let job_control = matches!(sig, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU);
        if !job_control || !self.terminal.exists() {
            return;
        }
        self.terminal.reclaim();
        // Returns once we are continued (`fg`, `bg`), or at once when the
        // kernel dropped the stop: it does for an orphaned process group,
        // which no shell would ever continue.
        let _ = killpg(self.terminal.own, sig);
        if self.terminal.in_foreground() {
            self.terminal.lend(self.id);
        } else if sig != Signal::SIGTSTP {
            // Continued in the background, CMD will stop on the terminal
            // again: do not spin if nothing stops us.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.signal(Signal::SIGCONT);
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// This program, to start the sentinel. `/proc/self/exe` (Linux) still
/// works when the binary was replaced since exec started.
pub(crate) fn this_program() -> PathBuf {
    let link = Path::new("/proc/self/exe");
    if link.exists() {
        return link.to_path_buf();
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fairlock"))
}

/// exec's controlling terminal (if it has one) and who has it.
struct Terminal {
    tty: Option<File>,
    /// exec's process group.
    own: Pid,
    /// The group the terminal was lent to.
    lent_to: Option<Pid>,
}

impl Terminal {
    fn open() -> Self {
        // The controlling terminal, whether or not stdin is it.
        let tty = File::options().read(true).write(true).open("/dev/tty").ok();
        Self {
            tty,
            own: getpgrp(),
            lent_to: None,
        }
    }

    fn exists(&self) -> bool {
        self.tty.is_some()
    }

    /// Whether exec's group is the terminal's foreground group.
    fn in_foreground(&self) -> bool {
        self.tty
            .as_ref()
            .is_some_and(|tty| tcgetpgrp(tty) == Ok(self.own))
    }

    /// Make `group` the terminal's foreground group, if exec's group is now.
    fn lend(&mut self, group: Pid) {
        if !self.in_foreground() {
            return;
        }
        if let Some(tty) = &self.tty {
            if set_foreground(tty, group).is_ok() {
                self.lent_to = Some(group);
            }
        }
    }

    /// Give the terminal back to exec's group, if it was lent and the
    /// borrower still has it.
    fn reclaim(&mut self) {
        if let (Some(tty), Some(group)) = (&self.tty, self.lent_to.take()) {
            if tcgetpgrp(tty) == Ok(group) {
                let _ = set_foreground(tty, self.own);
            }
        }
    }
}

/// `tcsetpgrp`, with SIGTTOU blocked on this thread for the call: from a
/// background group, the call would otherwise stop the caller with SIGTTOU.
/// (A child started later does not inherit the mask: it is restored before
/// this returns.)
fn set_foreground(tty: &File, group: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
    let result = tcsetpgrp(tty, group);
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    result
}

#[derive(clap::Args, Debug)]
pub(crate) struct SentinelArgs {
    /// exec's process group: the terminal goes back to it when the sentinel
    /// kills CMD's group while that has the terminal.
    #[arg(long, value_name = "PGID")]
    give_terminal_to: i32,
}

/// What the sentinel catches (and drops): what a terminal sends to its
/// foreground group, what exec passes on, and what a command may send to
/// its own group (`kill -USR1 0`).
const SENTINEL_CATCHES: [Signal; 10] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGALRM,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
];

/// `fairlock exec-sentinel`: leads CMD's process group (see the module
/// docs). Says "ready" on stdout once it catches its signals, then reads
/// stdin, the lifeline from exec, until end-of-file: exec is gone. Then it
/// gives the terminal back if the group has it, and kills the group,
/// itself included.
pub(crate) async fn sentinel(args: &SentinelArgs) -> Result<u8, Failure> {
    // exec starts it as the leader of a new group. Run otherwise (by hand),
    // it would kill a group it did not make for itself: refuse.
    let own = getpgrp();
    if own != getpid() {
        return Err(Failure::new(
            exit::USAGE,
            "exec-sentinel is started by `fairlock exec` only",
        ));
    }
    let mut caught = Vec::new();
    for sig in SENTINEL_CATCHES {
        caught.push(catch(sig)?);
    }
    let mut stdout = tokio::io::stdout();
    let said = async {
        stdout.write_all(b"ready\n").await?;
        stdout.flush().await
    };
    said.await
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("exec sentinel: {e}")))?;
    let mut lifeline = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while matches!(lifeline.read(&mut buf).await, Ok(1..)) {}
    // exec is gone. If our group has the terminal, it goes back to exec's
    // group (for a script that ran exec in its foreground). exec's parent
    // learns of exec's end as we do: reading the terminal in that instant,
    // before we gave it back, it is stopped (SIGTTIN) until continued.
    let mut terminal = Terminal {
        tty: Terminal::open().tty,
        own: Pid::from_raw(args.give_terminal_to),
        lent_to: Some(own),
    };
    terminal.reclaim();
    let _ = killpg(own, Signal::SIGKILL);
    drop(caught);
    Ok(exit::SOFTWARE)
}

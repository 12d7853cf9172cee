//! `fairlock exec`: run a command while holding a lock.

use std::io::{IsTerminal, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fairlock::{AcquireOptions, LockClient, LockGuard, Owner};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::{Cli, Failure, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct ExecArgs {
    /// Lock name.
    name: String,

    /// Give up after DUR and exit 75 (the queue entry is removed).
    /// Default: wait until granted.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    wait: Option<Duration>,

    /// Use the non-fair lock (Redisson's getLock) instead of the fair one.
    #[arg(long)]
    nonfair: bool,

    /// When the lock is lost while CMD runs: `kill` stops CMD (SIGTERM, then
    /// SIGKILL after --grace) and exits 71; `ignore` lets it run on.
    #[arg(long, value_enum, default_value_t = OnLost::Kill)]
    on_lost: OnLost,

    /// Time between SIGTERM and SIGKILL when stopping CMD after a lost lock.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration::parse)]
    grace: Duration,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum OnLost {
    Kill,
    Ignore,
}

/// The signals forwarded to the child (and that cancel a wait).
struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let mut streams = Vec::new();
        for (kind, sig) in [
            (SignalKind::interrupt(), Signal::SIGINT),
            (SignalKind::terminate(), Signal::SIGTERM),
            (SignalKind::hangup(), Signal::SIGHUP),
            (SignalKind::quit(), Signal::SIGQUIT),
        ] {
            let stream = signal(kind)
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot handle {sig}: {e}")))?;
            streams.push((sig, stream));
        }
        Ok(Self { streams })
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
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

/// A fair or non-fair lock handle.
enum Handle {
    Fair(fairlock::FairLock),
    Plain(fairlock::Lock),
}

impl Handle {
    async fn acquire(&self, options: AcquireOptions) -> fairlock::Result<Option<LockGuard>> {
        match self {
            Handle::Fair(lock) => lock.acquire(options).await,
            Handle::Plain(lock) => lock.acquire(options).await,
        }
    }
}

/// When a waiter first looks up its place in line, and how often after.
const FIRST_LOOK: Duration = Duration::from_millis(250);
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// Shows "waiting for NAME: position P of Q" on stderr: in place on a
/// terminal, one line per change otherwise.
struct Progress {
    name: String,
    terminal: bool,
    last: Option<(u64, u64)>,
    shown: bool,
}

impl Progress {
    fn position(&mut self, now: (u64, u64)) {
        if self.last == Some(now) {
            return;
        }
        self.last = Some(now);
        let line = format!("waiting for {}: position {} of {}", self.name, now.0, now.1);
        self.show(&line);
    }

    /// The non-fair lock has no queue: say once that we wait.
    fn nonfair(&mut self) {
        if !self.shown {
            let line = format!(
                "waiting for {} (non-fair lock: no queue position)",
                self.name
            );
            self.show(&line);
        }
    }

    fn show(&mut self, line: &str) {
        self.shown = true;
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.terminal && self.shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
        }
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    }
}

pub(crate) async fn run(cli: &Cli, args: &ExecArgs) -> Result<u8, Failure> {
    let client = cli.connect(&cli.url()).await?;
    let result = run_with(&client, args).await;
    // Queue exits and releases run in the background: let them finish.
    client.flush().await;
    result
}

async fn run_with(client: &LockClient, args: &ExecArgs) -> Result<u8, Failure> {
    let handle = if args.nonfair {
        Handle::Plain(client.lock(&args.name)?)
    } else {
        Handle::Fair(client.fair_lock(&args.name)?)
    };
    let mut signals = Signals::install()?;
    // Our own owner id, to ask for our place in line.
    let owner: Owner = client.new_owner();
    let mut options = AcquireOptions::new().owner(owner.clone());
    if let Some(wait) = args.wait {
        options = options.wait(wait);
    }

    // Wait for the lock, showing our place in line: one cheap look (not
    // the whole queue) about once a second.
    let mut progress = Progress {
        name: args.name.clone(),
        terminal: std::io::stderr().is_terminal(),
        last: None,
        shown: false,
    };
    let guard = {
        let acquire = handle.acquire(options);
        tokio::pin!(acquire);
        let mut look =
            tokio::time::interval_at(tokio::time::Instant::now() + FIRST_LOOK, LOOK_EVERY);
        look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                result = &mut acquire => break result,
                _ = look.tick() => match &handle {
                    Handle::Fair(lock) => {
                        let place = tokio::time::timeout(LOOK_EVERY, lock.queue_position(&owner)).await;
                        if let Ok(Ok(Some(place))) = place {
                            progress.position(place);
                        }
                    }
                    Handle::Plain(_) => progress.nonfair(),
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

    let mut command = tokio::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("FAIRLOCK_NAME", &args.name)
        .env("FAIRLOCK_OWNER", guard.owner().as_str());
    match guard.token() {
        Some(token) => command.env("FAIRLOCK_TOKEN", token.to_string()),
        None => command.env_remove("FAIRLOCK_TOKEN"),
    };
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let _ = guard.unlock().await;
            // 127: the shell's code for a command that cannot be run.
            eprintln!("fairlock: cannot run {:?}: {err}", args.command[0]);
            return Ok(if err.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            });
        }
    };
    let pid = child.id().map(|id| Pid::from_raw(id as i32));
    let lost = guard.lost();
    tokio::pin!(lost);
    // Cleared once the loss was reported (the future must not be polled again).
    let mut lost_pending = true;
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = match status {
                    Ok(status) => exit_code(status),
                    Err(err) => return Err(Failure::new(exit::SOFTWARE, format!("waiting for the command: {err}"))),
                };
                return Ok(match guard.unlock().await {
                    Ok(()) => code,
                    Err(err) if err.is_lock_lost() => {
                        eprintln!("fairlock: the lock {} was lost before the command finished: {err}", args.name);
                        exit::LOST
                    }
                    Err(err) => {
                        eprintln!("fairlock: could not release {} ({err}); it expires with its lease", args.name);
                        code
                    }
                });
            }
            () = &mut lost, if lost_pending => {
                lost_pending = false;
                if args.on_lost == OnLost::Ignore {
                    eprintln!("fairlock: lost the lock {}; --on-lost ignore: the command runs on", args.name);
                    continue;
                }
                eprintln!("fairlock: lost the lock {}; stopping the command", args.name);
                if let Some(pid) = pid {
                    let _ = kill(pid, Signal::SIGTERM);
                }
                if tokio::time::timeout(args.grace, child.wait()).await.is_err() {
                    eprintln!("fairlock: the command did not stop within {}; killing it", duration::format(args.grace));
                    let _ = child.kill().await;
                }
                drop(guard);
                return Ok(exit::LOST);
            }
            sig = signals.recv() => {
                if let Some(pid) = pid {
                    let _ = kill(pid, sig);
                }
            }
        }
    }
}

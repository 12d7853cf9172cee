//! `fairlock watch NAME...`: a live view of locks (or, with `--semaphore`,
//! semaphores).
//!
//! Every `--interval` each lock is read (one inspect script per lock, the
//! same read as `inspect`) and shown: holder, how long it has held, lease
//! left, token, queue length and the longest wait; a semaphore's permits
//! taken and by whom, and its line. On a terminal the view is redrawn in
//! place; otherwise (a pipe, a file) each refresh prints one line per lock;
//! `--json` prints one JSON object per lock and refresh.
//!
//! Hold and wait times are what `watch` observed: a holder or waiter that
//! was already there at the first read has held or waited at least that
//! long (`>=` in text, `"..._exact": false` in JSON).

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime};

use fairlock::{HoldMode, LockClient, LockInfo, QueuedWaiter, SemaphoreInfo};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::{Cli, Failure, LockSettings, duration, metrics_server};

#[derive(clap::Args, Debug)]
pub(crate) struct WatchArgs {
    /// Lock names (with --semaphore: semaphore names).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,

    /// Time between refreshes (100ms to 1h).
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = interval, allow_hyphen_values = true)]
    interval: Duration,

    /// Stop after N refreshes. Default: run until interrupted (SIGINT,
    /// SIGTERM).
    #[arg(long, value_name = "N")]
    count: Option<u64>,

    /// One JSON object per lock and refresh, on a line of its own:
    /// {"time","name","protocol","locked","holder","holder_label",
    /// "holders":[{"owner","label","count","mode"}],"token",
    /// "held_for_ms","held_for_exact","lease_ms","queue_length",
    /// "longest_wait_ms","longest_wait_exact","waiters":[{"owner","label","mode"}]}
    /// (null where not applicable; labels are the clients' --label, HOST:PID
    /// by default, null for Java Redisson clients; "mode" is "exclusive",
    /// or "read" / "write" for a read-write lock's holder or waiter), or
    /// {"time","name","error"} when the read failed. With --semaphore:
    /// {"time","name","protocol","kind","exists","total","available",
    /// "taken":[{"id","owner","label","permits","token","lease_ms"}],
    /// "queue_length","longest_wait_ms","longest_wait_exact",
    /// "waiters":[{"owner","label","permits"}]} (as `inspect --semaphore
    /// --json` describes them).
    #[arg(long)]
    json: bool,

    /// The NAMEs are semaphores (the ones `exec --semaphore` takes): show
    /// the permits taken of the total, each holder with its permits and
    /// lease left, and the line with the permits each waiter asks for.
    #[arg(long)]
    semaphore: bool,

    /// Serve the watched locks' state (and the library's metrics) in the
    /// Prometheus text format at http://HOST:PORT/metrics while watching
    /// (port 0: any free port, printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Lock settings, refused: this subcommand takes no lock.
    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

fn interval(text: &str) -> Result<Duration, String> {
    duration::within(
        text,
        Duration::from_millis(100),
        Duration::from_secs(3600),
        "",
    )
}

/// When `watch` first saw something, and whether it was there already at
/// the first read (then its age is a lower bound).
#[derive(Debug, Clone, Copy)]
struct Seen {
    since: Instant,
    exact: bool,
}

/// What one lock looked like across refreshes.
#[derive(Default)]
struct Tracked {
    /// The holder (owner, token) and when it was first seen.
    holder: Option<((String, Option<u64>), Seen)>,
    /// Waiters by owner.
    waiters: HashMap<String, Seen>,
}

/// One lock at one refresh.
struct View {
    name: String,
    result: Result<Shown, String>,
}

/// What one read found: a lock's state or a semaphore's.
enum Reading {
    Lock(LockInfo),
    Semaphore(SemaphoreInfo),
}

impl Reading {
    fn queue(&self) -> &[QueuedWaiter] {
        match self {
            Reading::Lock(info) => &info.queue,
            Reading::Semaphore(info) => &info.queue,
        }
    }

    /// The holder whose hold time is shown: a lock's first holder (with
    /// its token, so that a new acquisition by the same owner starts a new
    /// hold). A semaphore's holders come and go independently: none.
    fn holder(&self) -> Option<(String, Option<u64>)> {
        match self {
            Reading::Lock(info) => info.holders.first().map(|h| (h.owner.clone(), info.token)),
            Reading::Semaphore(_) => None,
        }
    }
}

struct Shown {
    reading: Reading,
    held_for: Option<(Duration, bool)>,
    longest_wait: Option<(Duration, bool)>,
}

impl Tracked {
    /// Update from a fresh read; `first`: the first read of this lock.
    fn update(&mut self, reading: Reading, now: Instant, first: bool) -> Shown {
        let seen = Seen {
            since: now,
            exact: !first,
        };
        self.holder = match (reading.holder(), self.holder.take()) {
            (Some(holder), Some((old, since))) if old == holder => Some((old, since)),
            (Some(holder), _) => Some((holder, seen)),
            (None, _) => None,
        };
        let mut waiters = HashMap::with_capacity(reading.queue().len());
        for waiter in reading.queue() {
            let since = self.waiters.get(&waiter.owner).copied().unwrap_or(seen);
            waiters.insert(waiter.owner.clone(), since);
        }
        self.waiters = waiters;
        let age = |seen: &Seen| (now.saturating_duration_since(seen.since), seen.exact);
        Shown {
            held_for: self.holder.as_ref().map(|(_, seen)| age(seen)),
            longest_wait: self.waiters.values().map(age).max_by_key(|(d, _)| *d),
            reading,
        }
    }
}

/// What `watch` reads: a lock (or read-write lock) by name, or a semaphore.
enum Watched {
    Lock(String),
    Semaphore(fairlock::Semaphore),
}

impl Watched {
    fn name(&self) -> &str {
        match self {
            Watched::Lock(name) => name,
            Watched::Semaphore(semaphore) => semaphore.name(),
        }
    }

    async fn read(
        &self,
        client: &LockClient,
        protocol: fairlock::Protocol,
    ) -> Result<Reading, fairlock::Error> {
        match self {
            // A read-write lock's hash under redisson is read as one.
            Watched::Lock(name) => crate::inspect::inspect_any(client, protocol, name)
                .await
                .map(Reading::Lock),
            Watched::Semaphore(semaphore) => semaphore.inspect().await.map(Reading::Semaphore),
        }
    }
}

pub(crate) async fn run(cli: &Cli, args: &WatchArgs) -> Result<u8, Failure> {
    let _server = match &args.metrics_addr {
        Some(addr) => Some(metrics_server::serve(addr).await?),
        None => None,
    };
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    // Names are checked before the first read.
    let watched = args
        .names
        .iter()
        .map(|name| {
            if args.semaphore {
                crate::inspect::semaphore(&client, name).map(Watched::Semaphore)
            } else {
                client
                    .fair_lock(name)
                    .map(|lock| Watched::Lock(lock.name().to_owned()))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let result = watch(&client, cli.protocol, &watched, args).await;
    client.shutdown().await;
    result
}

async fn watch(
    client: &LockClient,
    protocol: fairlock::Protocol,
    watched: &[Watched],
    args: &WatchArgs,
) -> Result<u8, Failure> {
    let terminal = !args.json && std::io::stdout().is_terminal();
    let mut tracked: Vec<Tracked> = watched.iter().map(|_| Tracked::default()).collect();
    let mut ticks = tokio::time::interval(args.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = std::pin::pin!(stop_signal());
    let mut refreshes = 0u64;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = &mut stop => break,
        }
        let first = refreshes == 0;
        let mut views = Vec::with_capacity(watched.len());
        for (object, tracked) in watched.iter().zip(&mut tracked) {
            let read = object.read(client, protocol).await;
            let now = Instant::now();
            let result = read
                .map(|reading| tracked.update(reading, now, first))
                .map_err(|e| Failure::from(e).message);
            views.push(View {
                name: object.name().to_owned(),
                result,
            });
        }
        let time = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
        export(&views);
        let mut out = std::io::stdout().lock();
        let printed = if args.json {
            views
                .iter()
                .try_for_each(|view| writeln!(out, "{}", to_json(&time, view)))
        } else if terminal {
            let what = if args.semaphore { "semaphore" } else { "lock" };
            let mut screen = format!(
                "\x1b[H\x1b[2Jfairlock watch: {} {what}(s), every {} ({time})\n\n",
                views.len(),
                duration::format(args.interval)
            );
            for view in &views {
                screen += &to_text(view);
                screen.push('\n');
            }
            write!(out, "{screen}")
        } else {
            views
                .iter()
                .try_for_each(|view| writeln!(out, "{time} {}", to_text(view)))
        };
        // stdout closed (the reader went away): stop quietly.
        if printed.and_then(|()| out.flush()).is_err() {
            break;
        }
        refreshes += 1;
        if args.count.is_some_and(|count| refreshes >= count) {
            break;
        }
    }
    Ok(0)
}

/// Resolves on SIGINT or SIGTERM (never, if they cannot be caught).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// A duration with `>=` when it is a lower bound.
fn age((value, exact): (Duration, bool)) -> String {
    let shown = duration::format(round(value));
    if exact { shown } else { format!(">={shown}") }
}

/// To the tenth of a second, for reading.
fn round(value: Duration) -> Duration {
    Duration::from_millis(value.as_millis() as u64 / 100 * 100)
}

fn millis(value: Duration) -> u64 {
    u64::try_from(value.as_millis()).unwrap_or(u64::MAX)
}

fn to_text(view: &View) -> String {
    let shown = match &view.result {
        Ok(shown) => shown,
        Err(error) => return format!("{}: error: {error}", view.name),
    };
    let mut line = format!("{}: ", view.name);
    match &shown.reading {
        Reading::Lock(info) => line += &lock_text(info, shown),
        Reading::Semaphore(info) => line += &semaphore_text(info),
    }
    let queue = shown.reading.queue();
    line += &format!(", {} waiting", queue.len());
    if let Some(wait) = shown.longest_wait {
        line += &format!(" (longest {})", age(wait));
    }
    // Who waits, first in line first: each by its label, or by its owner
    // id when its client wrote none; with the side a read-write lock's
    // waiter asks for, the permits a semaphore's asks for.
    if !queue.is_empty() {
        let shown: Vec<String> = queue
            .iter()
            .take(SHOWN_WAITERS)
            .map(|w| {
                let who = w.label.as_deref().unwrap_or(&w.owner);
                match w.mode {
                    HoldMode::Read => format!("{who} (read)"),
                    HoldMode::Write => format!("{who} (write)"),
                    HoldMode::Permits => format!("{who} ({})", crate::inspect::permits(w.permits)),
                    _ => who.to_owned(),
                }
            })
            .collect();
        line += &format!(": {}", shown.join(", "));
        if queue.len() > SHOWN_WAITERS {
            line += &format!(" and {} more", queue.len() - SHOWN_WAITERS);
        }
    }
    line
}

/// A lock's holders, hold time, token and lease, for a text line.
fn lock_text(info: &LockInfo, shown: &Shown) -> String {
    if info.holders.is_empty() {
        return "free".to_owned();
    }
    // Every holder: one for a lock, the writer and the readers of a
    // read-write lock (each with its mode).
    let holders: Vec<String> = info
        .holders
        .iter()
        .map(|holder| {
            let mode = match holder.mode {
                HoldMode::Read => " (read)",
                HoldMode::Write => " (write)",
                _ => "",
            };
            format!(
                "{}{}{mode}",
                holder.owner,
                crate::inspect::on(&holder.label)
            )
        })
        .collect();
    let mut text = format!("held by {}", holders.join(", "));
    if let Some(held) = shown.held_for {
        text += &format!(" for {}", age(held));
    }
    if let Some(token) = info.token {
        text += &format!(", token {token}");
    }
    if let Some(lease) = info.remaining_lease {
        text += &format!(", lease {} left", duration::format(round(lease)));
    }
    text
}

/// A semaphore's permits and who holds them, for a text line: `3 of 8
/// permits taken (5 available) by OWNER on LABEL (2 permits, lease 27s
/// left), ...` (under redisson each permit id, which names no owner).
fn semaphore_text(info: &SemaphoreInfo) -> String {
    let mut text = crate::inspect::semaphore_summary(info, |n| format!(" ({n} available)"));
    if info.taken.is_empty() {
        return text;
    }
    let taken: Vec<String> = info
        .taken
        .iter()
        .take(SHOWN_WAITERS)
        .map(|t| {
            let lease = t
                .remaining_lease
                .map(|d| format!("lease {} left", duration::format(round(d))))
                .unwrap_or_else(|| "no lease".to_owned());
            match &t.owner {
                Some(owner) => format!(
                    "{owner}{} ({}, {lease})",
                    crate::inspect::on(&t.label),
                    crate::inspect::permits(t.permits)
                ),
                None => format!("permit {} ({lease})", t.id),
            }
        })
        .collect();
    text += &format!(" by {}", taken.join(", "));
    if info.taken.len() > SHOWN_WAITERS {
        text += &format!(" and {} more", info.taken.len() - SHOWN_WAITERS);
    }
    text
}

/// Waiters (and a semaphore's holders) named on a text line (`--json`
/// lists them all).
const SHOWN_WAITERS: usize = 5;

fn to_json(time: &str, view: &View) -> Value {
    let shown = match &view.result {
        Ok(shown) => shown,
        Err(error) => return json!({"time": time, "name": view.name, "error": error}),
    };
    let info = match &shown.reading {
        Reading::Lock(info) => info,
        Reading::Semaphore(info) => return semaphore_json(time, info, shown),
    };
    json!({
        "time": time,
        "name": view.name,
        "protocol": info.protocol.as_str(),
        "locked": info.is_locked(),
        "holder": info.holders.first().map(|h| h.owner.clone()),
        "holder_label": info.holders.first().and_then(|h| h.label.clone()),
        "holders": info.holders.iter().map(|h| json!({"owner": h.owner, "label": h.label, "count": h.count, "mode": crate::inspect::mode(h.mode)})).collect::<Vec<_>>(),
        "token": info.token,
        "held_for_ms": shown.held_for.map(|(d, _)| millis(d)),
        "held_for_exact": shown.held_for.map(|(_, exact)| exact),
        "lease_ms": info.remaining_lease.map(millis),
        "queue_length": info.queue.len(),
        "longest_wait_ms": shown.longest_wait.map(|(d, _)| millis(d)),
        "longest_wait_exact": shown.longest_wait.map(|(_, exact)| exact),
        "waiters": info.queue.iter().map(|w| json!({"owner": w.owner, "label": w.label, "mode": crate::inspect::mode(w.mode)})).collect::<Vec<_>>(),
    })
}

fn semaphore_json(time: &str, info: &SemaphoreInfo, shown: &Shown) -> Value {
    let inspected = crate::inspect::semaphore_to_json(info, None);
    json!({
        "time": time,
        "name": info.name,
        "protocol": info.protocol.as_str(),
        "kind": crate::inspect::semaphore_kind(info.kind),
        "exists": info.exists,
        "total": crate::inspect::semaphore_total(info),
        "available": info.available,
        "taken": inspected["taken"],
        "queue_length": info.queue.len(),
        "longest_wait_ms": shown.longest_wait.map(|(d, _)| millis(d)),
        "longest_wait_exact": shown.longest_wait.map(|(_, exact)| exact),
        "waiters": info.queue.iter().map(|w| json!({"owner": w.owner, "label": w.label, "permits": w.permits})).collect::<Vec<_>>(),
    })
}

/// The watched locks as gauges (read by `--metrics-addr`; without a
/// recorder these do nothing). A semaphore is "locked" while any permit is
/// taken, and has no single lease or hold time: its permits available
/// instead.
fn export(views: &[View]) {
    for view in views {
        let Ok(shown) = &view.result else {
            continue;
        };
        let lock = view.name.clone();
        let seconds = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
        let (locked, lease) = match &shown.reading {
            Reading::Lock(info) => (info.is_locked(), Some(info.remaining_lease)),
            Reading::Semaphore(info) => {
                metrics::gauge!("fairlock_watch_permits_available", "lock" => lock.clone())
                    .set(info.available as f64);
                (!info.taken.is_empty(), None)
            }
        };
        metrics::gauge!("fairlock_watch_locked", "lock" => lock.clone()).set(if locked {
            1.0
        } else {
            0.0
        });
        metrics::gauge!("fairlock_watch_queue_length", "lock" => lock.clone())
            .set(shown.reading.queue().len() as f64);
        if let Some(lease) = lease {
            metrics::gauge!("fairlock_watch_lease_seconds", "lock" => lock.clone())
                .set(seconds(lease));
            metrics::gauge!("fairlock_watch_held_seconds", "lock" => lock.clone())
                .set(seconds(shown.held_for.map(|(d, _)| d)));
        }
        metrics::gauge!("fairlock_watch_longest_wait_seconds", "lock" => lock)
            .set(seconds(shown.longest_wait.map(|(d, _)| d)));
    }
}

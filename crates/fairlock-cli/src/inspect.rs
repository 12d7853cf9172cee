//! `fairlock inspect` and `fairlock force-unlock`, of a lock, a read-write
//! lock or (with `--semaphore`) a semaphore.

use std::io::{BufRead, IsTerminal, Write};

use fairlock::{HoldMode, LockInfo, Protocol, QueuedWaiter, SemaphoreInfo, SemaphoreKind};
use serde_json::{Value, json};

use crate::{Cli, Failure, LockSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Lock name (with --semaphore: semaphore name).
    name: String,
    /// Print one JSON object: {"name","protocol","locked","holders":[{"owner","label","count","mode"}],
    /// "lease_ms","token","queue":[{"position","owner","label","mode","expires_in_ms"}],
    /// "node","other_protocol"} (null where not applicable). "mode" is
    /// "exclusive" (a lock), or "read" / "write" (a read-write lock's
    /// reader or writer, holding or waiting). "node" is the
    /// host:port serving the lock (on a Redis Cluster, the master of its slot). "other_protocol" is
    /// null, or {"protocol","locked","queue_length","flag"} when the other
    /// protocol's keys hold the name.
    ///
    /// With --semaphore: {"name","protocol","kind","exists","total","available",
    /// "taken":[{"id","owner","label","permits","token","lease_ms"}],
    /// "queue":[{"position","owner","label","permits","expires_in_ms"}],
    /// "other_protocol"}: "kind" is "native", "permit_expirable"
    /// (Redisson's RPermitExpirableSemaphore) or "count_only" (redisson: a
    /// count and no permit id taken, which may be Redisson's plain
    /// RSemaphore: "total" is then null, unknown); "exists" is false when
    /// no total is stored (nobody set the semaphore up, or under native
    /// nobody used it for 20 s);
    /// each taken entry is an acquisition of "permits" permits under
    /// native (id = owner), one permit under redisson (owner, label and
    /// token null: Redisson's permit ids name no owner); "other_protocol"
    /// is null or {"protocol","taken","queue_length","flag"}.
    #[arg(long)]
    json: bool,
    /// NAME is a semaphore (the one `exec --semaphore` takes): show its
    /// total, the permits available, each taken permit (holder, label,
    /// permits, lease left) and the line (position, holder, permits asked
    /// for, entry expiry; native only: Redisson's semaphore has no line).
    #[arg(long)]
    semaphore: bool,
    /// Lock settings, refused: this subcommand takes no lock.
    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ForceUnlockArgs {
    /// Lock name (with --semaphore: semaphore name).
    name: String,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    /// The lock is a non-fair lock (Redisson's getLock): wake its waiters on
    /// its channel instead of the fair queue's head.
    #[arg(long, conflicts_with_all = ["read", "write"])]
    nonfair: bool,
    /// The lock is a read-write lock (redisson protocol): release every
    /// reader, if it is held for reading.
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// The lock is a read-write lock (redisson protocol): release the
    /// writer, if it is held for writing.
    #[arg(long, conflicts_with = "semaphore")]
    write: bool,
    /// NAME is a semaphore: give back every taken permit, whoever holds it,
    /// and let the waiters in (native: each holder's client is told at
    /// once; redisson: a permit id names no owner, so holders find out at
    /// their next renewal, and Java waiters wake on the release message).
    #[arg(long, conflicts_with_all = ["nonfair", "read"])]
    semaphore: bool,
    /// Lock settings, refused: this subcommand takes no lock.
    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

/// The JSON form of a lock's state.
pub(crate) fn to_json(info: &LockInfo, other: Option<&OtherProtocol>) -> Value {
    json!({
        "name": info.name,
        "protocol": info.protocol.as_str(),
        "locked": info.is_locked(),
        "holders": info.holders.iter().map(|h| json!({"owner": h.owner, "label": h.label, "count": h.count, "mode": mode(h.mode)})).collect::<Vec<_>>(),
        "lease_ms": info.remaining_lease.map(|d| d.as_millis() as u64),
        "token": info.token,
        "node": info.node,
        "queue": info.queue.iter().map(|w| json!({
            "position": w.position,
            "owner": w.owner,
            "label": w.label,
            "mode": mode(w.mode),
            "expires_in_ms": w.expires_in.map(|d| d.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "other_protocol": other.map(OtherProtocol::to_json),
    })
}

/// A semaphore's kind in JSON.
pub(crate) fn semaphore_kind(kind: SemaphoreKind) -> &'static str {
    match kind {
        SemaphoreKind::Native => "native",
        SemaphoreKind::CountOnly => "count_only",
        _ => "permit_expirable",
    }
}

/// A semaphore's total in JSON: null when Redis does not tell it (a count
/// alone may be Redisson's plain semaphore, which records no total).
pub(crate) fn semaphore_total(info: &SemaphoreInfo) -> Option<i64> {
    (info.kind != SemaphoreKind::CountOnly).then_some(info.total)
}

/// The JSON form of a semaphore's state.
pub(crate) fn semaphore_to_json(info: &SemaphoreInfo, other: Option<&OtherProtocol>) -> Value {
    json!({
        "name": info.name,
        "protocol": info.protocol.as_str(),
        "kind": semaphore_kind(info.kind),
        "exists": info.exists,
        "total": semaphore_total(info),
        "available": info.available,
        "taken": info.taken.iter().map(|t| json!({
            "id": t.id,
            "owner": t.owner,
            "label": t.label,
            "permits": t.permits,
            "token": t.token,
            "lease_ms": t.remaining_lease.map(|d| d.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "queue": info.queue.iter().map(|w| json!({
            "position": w.position,
            "owner": w.owner,
            "label": w.label,
            "permits": w.permits,
            "expires_in_ms": w.expires_in.map(|d| d.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "other_protocol": other.map(OtherProtocol::to_json),
    })
}

/// The permits a semaphore's taken entries add up to.
fn permits_taken(info: &SemaphoreInfo) -> u64 {
    info.taken.iter().map(|t| u64::from(t.permits)).sum()
}

/// `N permit(s)`.
pub(crate) fn permits(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 permit".to_owned(),
        n => format!("{n} permits"),
    }
}

/// What a semaphore's permits are: `3 of 8 permits taken` and, formatted
/// by `available`, the permits available; or that no total is stored.
pub(crate) fn semaphore_summary(info: &SemaphoreInfo, available: fn(i64) -> String) -> String {
    if !info.exists && info.taken.is_empty() {
        return "no semaphore (no total stored)".to_owned();
    }
    if info.kind == SemaphoreKind::CountOnly {
        // Redis holds a count and no permit id: which of Redisson's two
        // kinds it is, and so its total, cannot be told.
        let expirable = match info.available {
            n if n > 0 => format!("of {}, none taken", permits(n.unsigned_abs())),
            _ => "with no permit taken".to_owned(),
        };
        return format!(
            "{} available, no permit id taken: a plain RSemaphore (counting_semaphore; it \
             records neither its total nor its holders) or an RPermitExpirableSemaphore {expirable}",
            info.available
        );
    }
    format!(
        "{} of {} taken{}",
        permits_taken(info),
        permits(info.total.max(0).unsigned_abs()),
        available(info.available)
    )
}

fn semaphore_to_text(info: &SemaphoreInfo, other: Option<&OtherProtocol>) -> String {
    let mut out = format!(
        "{} ({} semaphore): {}\n",
        info.name,
        info.protocol,
        semaphore_summary(info, |n| format!(", {n} available"))
    );
    for taken in &info.taken {
        let lease = taken
            .remaining_lease
            .map(|d| format!("lease {} left", duration::format(d)))
            .unwrap_or_else(|| "no lease".to_owned());
        match &taken.owner {
            Some(owner) => {
                let token = taken
                    .token
                    .map(|t| format!(", token {t}"))
                    .unwrap_or_default();
                out += &format!(
                    "  holder   {owner}{}  ({}{token}, {lease})\n",
                    on(&taken.label),
                    permits(taken.permits)
                );
            }
            // Redisson: one line per permit id, which names no owner.
            None => out += &format!("  permit   {}  ({lease})\n", taken.id),
        }
    }
    if info.protocol == Protocol::Redisson {
        out += "  queue    none (Redisson's semaphore has no line)\n";
    } else {
        out += &queue_text(&info.queue, |waiter| match waiter.permits {
            0 => "asks an unknown number of permits (its record was lost), ".to_owned(),
            n => format!("asks {}, ", permits(n)),
        });
    }
    if let Some(other) = other {
        out += &format!("note: {}\n", other.describe(&info.name));
    }
    out
}

/// The text lines of a line of waiters: each with its position, owner and
/// label, then `what` it asks for (ending in ", " when not empty) and when
/// its entry expires.
fn queue_text(queue: &[QueuedWaiter], what: impl Fn(&QueuedWaiter) -> String) -> String {
    if queue.is_empty() {
        return "  queue    empty\n".to_owned();
    }
    let mut out = format!("  queue    {} waiting\n", queue.len());
    for waiter in queue {
        let expires = waiter
            .expires_in
            .map(|d| format!("entry expires in {}", duration::format(d)))
            .unwrap_or_else(|| "no deadline".to_owned());
        out += &format!(
            "    {:>3}. {}{}  ({}{expires})\n",
            waiter.position,
            waiter.owner,
            on(&waiter.label),
            what(waiter)
        );
    }
    out
}

fn to_text(info: &LockInfo, other: Option<&OtherProtocol>) -> String {
    let mut out = format!(
        "{} ({}): {}\n",
        info.name,
        info.protocol,
        if info.is_locked() { "locked" } else { "free" }
    );
    if let Some(node) = &info.node {
        out += &format!("  node     {node}\n");
    }
    for holder in &info.holders {
        let role = match holder.mode {
            HoldMode::Read => "reader",
            HoldMode::Write => "writer",
            _ => "holder",
        };
        out += &format!(
            "  {role:<8} {}{}  (hold count {})\n",
            holder.owner,
            on(&holder.label),
            holder.count
        );
    }
    if let Some(lease) = info.remaining_lease {
        out += &format!("  lease    {} left\n", duration::format(lease));
    }
    if let Some(token) = info.token {
        out += &format!("  token    {token}\n");
    }
    // The side a read-write lock's waiter asks for (one line for both
    // under native).
    out += &queue_text(&info.queue, |waiter| {
        match waiter.mode {
            HoldMode::Read => "reader, ",
            HoldMode::Write => "writer, ",
            _ => "",
        }
        .to_owned()
    });
    if let Some(other) = other {
        out += &format!("note: {}\n", other.describe(&info.name));
    }
    out
}

/// A holder's or waiter's mode in JSON.
pub(crate) fn mode(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Read => "read",
        HoldMode::Write => "write",
        HoldMode::Permits => "permits",
        _ => "exclusive",
    }
}

/// ` on LABEL` after an owner id whose client wrote a label (Java Redisson
/// clients write none).
pub(crate) fn on(label: &Option<String>) -> String {
    label
        .as_deref()
        .map(|label| format!(" on {label}"))
        .unwrap_or_default()
}

/// What the other protocol's keys say about a name: the same name under
/// the other protocol is a different lock (or semaphore), and a user who
/// picked the wrong `--protocol` would otherwise see a free one.
pub(crate) struct OtherProtocol {
    protocol: Protocol,
    /// What was looked for.
    kind: Kind,
    /// A lock: held; a semaphore: some permit taken.
    held: bool,
    queue_length: u64,
    /// A Redisson semaphore's count, when no permit id is taken (it may be
    /// the plain kind, whose taken permits nothing records).
    count: Option<i64>,
}

/// The object `inspect` and `force-unlock` look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Lock,
    Semaphore,
}

impl OtherProtocol {
    fn describe(&self, name: &str) -> String {
        let (what, held) = match self.kind {
            Kind::Lock => ("lock", if self.held { "locked" } else { "free" }),
            Kind::Semaphore => (
                "semaphore",
                if self.held {
                    "permits taken"
                } else {
                    "no permit taken"
                },
            ),
        };
        let state = match (self.kind, self.held, self.queue_length, self.count) {
            (Kind::Semaphore, false, 0, Some(count)) => {
                format!("a count of {count} available, no permit id taken")
            }
            (Kind::Lock, true, 0, _) | (Kind::Semaphore, _, 0, _) => held.to_owned(),
            (_, _, n, _) => format!("{held}, {n} waiting"),
        };
        format!(
            "{name} is also a {what} under the {} protocol ({state}): pass --protocol {} to see \
             or change it",
            self.protocol, self.protocol
        )
    }

    fn to_json(&self) -> Value {
        let held = match self.kind {
            Kind::Lock => "locked",
            Kind::Semaphore => "taken",
        };
        json!({
            "protocol": self.protocol.as_str(),
            held: self.held,
            "queue_length": self.queue_length,
            "flag": format!("--protocol {}", self.protocol),
        })
    }
}

fn other(protocol: Protocol) -> Protocol {
    match protocol {
        Protocol::Redisson => Protocol::Native,
        _ => Protocol::Redisson,
    }
}

/// A redisson key in the suffix form (`{NAME}:SUFFIX`, or `NAME:SUFFIX`
/// for a name with a brace) or the prefix form (`PREFIX:{NAME}`).
fn redisson_suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

fn redisson_prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The keys that say whether the other protocol uses a name: the one that
/// says it is held (its type, and the command counting its entries), the
/// one that holds its line (the same), and for a Redisson semaphore the
/// count under the bare name (used but idle when it holds a number).
struct Probe {
    held: (String, &'static str, &'static str),
    queue: (String, &'static str, &'static str),
    count: Option<String>,
}

fn probe(other: Protocol, kind: Kind, name: &str) -> Probe {
    let native = |suffix: &str| format!("fairlock:{{{name}}}:{suffix}");
    match (other, kind) {
        (Protocol::Redisson, Kind::Lock) => Probe {
            held: (name.to_owned(), "hash", "HLEN"),
            queue: (
                redisson_prefixed("redisson_lock_queue", name),
                "list",
                "LLEN",
            ),
            count: None,
        },
        (Protocol::Redisson, Kind::Semaphore) => Probe {
            held: (redisson_suffixed(name, "timeout"), "zset", "ZCARD"),
            // No line: a key that never exists.
            queue: (redisson_suffixed(name, "timeout"), "none", "ZCARD"),
            count: Some(name.to_owned()),
        },
        // The native lock's key is a string (layout version 2): held
        // unless it is the free marker a release leaves (`TOKEN:0:...`).
        (_, Kind::Lock) => Probe {
            held: (native("lock"), "string", "GET"),
            queue: (native("line"), "zset", "ZCARD"),
            count: None,
        },
        (_, Kind::Semaphore) => Probe {
            held: (native("sem:holders"), "zset", "ZCARD"),
            queue: (native("sem:line"), "zset", "ZCARD"),
            count: None,
        },
    }
}

/// Look for the other protocol's keys of `name` as a lock or a semaphore
/// (their names: `docs/native-protocol.md`, `docs/redisson-protocol.md`,
/// `docs/semaphore.md`). Only keys of the right Redis type count (under
/// `redisson` the lock key is the bare name, which an application may use
/// for other data). `None` when there are none, or when the look fails: it
/// is a courtesy, not the answer.
async fn look_at_other_protocol(
    url: &str,
    protocol: Protocol,
    kind: Kind,
    name: &str,
) -> Option<OtherProtocol> {
    let other = other(protocol);
    let probe = probe(other, kind, name);
    let look = async {
        let client = crate::redis_client(url).ok()?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(3)))
            .set_response_timeout(Some(std::time::Duration::from_secs(3)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        let held = entries(&mut conn, &probe.held).await? > 0;
        let queue_length = entries(&mut conn, &probe.queue).await?;
        // A Redisson semaphore nobody holds a permit id of: its count, a
        // number (a plain RSemaphore's permits may be taken all the same).
        let mut count = None;
        if let Some(key) = &probe.count {
            let value: Option<String> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap_or(None);
            count = value.and_then(|v| v.parse::<i64>().ok());
        }
        (held || queue_length > 0 || count.is_some()).then_some(OtherProtocol {
            protocol: other,
            kind,
            held,
            queue_length,
            count: count.filter(|_| !held),
        })
    };
    look.await
}

/// The entries of `key` (counted with `command`; `GET`: a native lock's
/// holder, 1 or 0) when it is of type `want`, else 0; `None` when a call
/// failed.
async fn entries(
    conn: &mut redis::aio::MultiplexedConnection,
    (key, want, command): &(String, &'static str, &'static str),
) -> Option<u64> {
    let found: String = redis::cmd("TYPE").arg(key).query_async(conn).await.ok()?;
    if found != *want {
        return Some(0);
    }
    if *command == "GET" {
        // A native lock's value: one holder, or none in the free marker.
        let value: String = redis::cmd("GET").arg(key).query_async(conn).await.ok()?;
        return Some(u64::from(
            value.split(':').nth(1).is_some_and(|count| count != "0"),
        ));
    }
    redis::cmd(command).arg(key).query_async(conn).await.ok()
}

pub(crate) async fn inspect(cli: &Cli, args: &InspectArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    let result = inspect_with(cli, &client, &url, args).await;
    client.shutdown().await;
    result
}

async fn inspect_with(
    cli: &Cli,
    client: &fairlock::LockClient,
    url: &str,
    args: &InspectArgs,
) -> Result<u8, Failure> {
    if args.semaphore {
        let info = semaphore(client, &args.name)?.inspect().await?;
        let other = look_at_other_protocol(url, cli.protocol, Kind::Semaphore, &args.name).await;
        if args.json {
            println!("{}", semaphore_to_json(&info, other.as_ref()));
        } else {
            print!("{}", semaphore_to_text(&info, other.as_ref()));
        }
        return Ok(0);
    }
    let info = inspect_any(client, cli.protocol, &args.name).await?;
    let other = look_at_other_protocol(url, cli.protocol, Kind::Lock, &args.name).await;
    if args.json {
        println!("{}", to_json(&info, other.as_ref()));
    } else {
        print!("{}", to_text(&info, other.as_ref()));
    }
    Ok(0)
}

/// The semaphore `name`, to look at or force-release: made with a total of
/// 0, which none of those calls writes (an absent semaphore stays absent).
pub(crate) fn semaphore(
    client: &fairlock::LockClient,
    name: &str,
) -> Result<fairlock::Semaphore, fairlock::Error> {
    client.semaphore(name, 0)
}

/// The lock `name` as a lock, or as a read-write lock: under redisson when
/// its hash is a read-write lock's (which a lock's inspect refuses as not a
/// lock); under native, where the two are different objects, when the lock
/// is free and nobody waits for it but the read-write lock is in use.
pub(crate) async fn inspect_any(
    client: &fairlock::LockClient,
    protocol: Protocol,
    name: &str,
) -> Result<LockInfo, fairlock::Error> {
    match client.fair_lock(name)?.inspect().await {
        Err(err @ fairlock::Error::NotALock { .. }) if protocol == Protocol::Redisson => {
            match client.read_write_lock(name)?.inspect().await {
                Ok(info) => Ok(info),
                Err(_) => Err(err),
            }
        }
        Ok(info) if protocol == Protocol::Native && !info.is_locked() && info.queue.is_empty() => {
            match client.read_write_lock(name)?.inspect().await {
                Ok(rw) if rw.is_locked() || !rw.queue.is_empty() => Ok(rw),
                _ => Ok(info),
            }
        }
        info => info,
    }
}

pub(crate) async fn force_unlock(cli: &Cli, args: &ForceUnlockArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    let result = force_unlock_with(cli, &client, &url, args).await;
    client.shutdown().await;
    result
}

async fn force_unlock_with(
    cli: &Cli,
    client: &fairlock::LockClient,
    url: &str,
    args: &ForceUnlockArgs,
) -> Result<u8, Failure> {
    if args.semaphore {
        return force_release(cli, client, url, args).await;
    }
    let fair = client.fair_lock(&args.name)?;
    if !args.yes && std::io::stdin().is_terminal() {
        let info = inspect_any(client, cli.protocol, &args.name).await?;
        if !info.is_locked() {
            println!("{} is not locked", args.name);
            hint_other_protocol(cli, url, Kind::Lock, &args.name).await;
            return Ok(0);
        }
        let holders: Vec<&str> = info.holders.iter().map(|h| h.owner.as_str()).collect();
        let question = format!("force-unlock {} held by {}?", args.name, holders.join(", "));
        if !confirmed(&question)? {
            eprintln!("not unlocked: {} is still held", args.name);
            return Ok(exit::DECLINED_OR_FAILED);
        }
    }
    let released = if args.nonfair {
        client.lock(&args.name)?.force_unlock().await?
    } else if args.read {
        client
            .read_write_lock(&args.name)?
            .read()
            .force_unlock()
            .await?
    } else if args.write {
        client
            .read_write_lock(&args.name)?
            .write()
            .force_unlock()
            .await?
    } else {
        fair.force_unlock().await?
    };
    if released {
        println!("{} unlocked", args.name);
    } else {
        println!("{} was not locked", args.name);
        hint_other_protocol(cli, url, Kind::Lock, &args.name).await;
    }
    Ok(0)
}

/// `force-unlock --semaphore`: every taken permit given back.
async fn force_release(
    cli: &Cli,
    client: &fairlock::LockClient,
    url: &str,
    args: &ForceUnlockArgs,
) -> Result<u8, Failure> {
    let semaphore = semaphore(client, &args.name)?;
    if !args.yes && std::io::stdin().is_terminal() {
        let info = semaphore.inspect().await?;
        if info.taken.is_empty() {
            println!("no permit of {} is taken", args.name);
            hint_other_protocol(cli, url, Kind::Semaphore, &args.name).await;
            return Ok(0);
        }
        // Native: each holder; redisson: permit ids, which name no owner.
        // The first few: a semaphore may have thousands.
        let mut holders: Vec<&str> = info
            .taken
            .iter()
            .take(NAMED_HOLDERS)
            .map(|t| t.owner.as_deref().unwrap_or(&t.id))
            .collect();
        let more = info.taken.len().saturating_sub(NAMED_HOLDERS);
        let more = format!("and {more} more");
        if info.taken.len() > NAMED_HOLDERS {
            holders.push(&more);
        }
        let question = format!(
            "force-release every permit of {} ({} of {} taken, by {})?",
            args.name,
            permits_taken(&info),
            info.total,
            holders.join(", ")
        );
        if !confirmed(&question)? {
            eprintln!("not released: the permits of {} are still taken", args.name);
            return Ok(exit::DECLINED_OR_FAILED);
        }
    }
    match semaphore.force_release().await? {
        0 => {
            println!("no permit of {} was taken", args.name);
            hint_other_protocol(cli, url, Kind::Semaphore, &args.name).await;
        }
        n => println!("{}: {} released", args.name, permits(n)),
    }
    Ok(0)
}

/// Holders named in `force-unlock --semaphore`'s question.
const NAMED_HOLDERS: usize = 5;

/// Ask `question` on the terminal, with what a forced release does to its
/// holders; `true` for a yes.
fn confirmed(question: &str) -> Result<bool, Failure> {
    eprint!(
        "{question} A `fairlock exec` holder stops its command (exit 71) when it notices, at \
         its next renewal at the latest; a fairlock library holder's lost() resolves; any other \
         holder keeps running, unaware, unless it checks. [y/N] "
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// After finding nothing to release: say so when the other protocol holds the name.
async fn hint_other_protocol(cli: &Cli, url: &str, kind: Kind, name: &str) {
    if let Some(other) = look_at_other_protocol(url, cli.protocol, kind, name).await {
        eprintln!("fairlock: note: {}", other.describe(name));
    }
}

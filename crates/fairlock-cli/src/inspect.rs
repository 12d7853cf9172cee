//! `fairlock inspect` and `fairlock force-unlock`.

use std::io::{BufRead, IsTerminal, Write};

use fairlock::{HoldMode, LockInfo, Protocol};
use serde_json::{Value, json};

use crate::{Cli, Failure, LockSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Lock name.
    name: String,
    /// Print one JSON object: {"name","protocol","locked","holders":[{"owner","label","count","mode"}],
    /// "lease_ms","token","queue":[{"position","owner","label","expires_in_ms"}],
    /// "node","other_protocol"} (null where not applicable). "mode" is
    /// "exclusive" (a lock), or "read" / "write" (a read-write lock's
    /// reader or writer: shown under redisson when the name is one). "node" is the
    /// host:port serving the lock (on a Redis Cluster, the master of its slot). "other_protocol" is
    /// null, or {"protocol","locked","queue_length","flag"} when the other
    /// protocol's keys hold the name.
    #[arg(long)]
    json: bool,
    /// Lock settings, refused: this subcommand takes no lock.
    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ForceUnlockArgs {
    /// Lock name.
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
    #[arg(long)]
    write: bool,
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
            "expires_in_ms": w.expires_in.map(|d| d.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "other_protocol": other.map(|o| json!({
            "protocol": o.protocol.as_str(),
            "locked": o.locked,
            "queue_length": o.queue_length,
            "flag": format!("--protocol {}", o.protocol),
        })),
    })
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
    if info.queue.is_empty() {
        out += "  queue    empty\n";
    } else {
        out += &format!("  queue    {} waiting\n", info.queue.len());
        for waiter in &info.queue {
            let expires = waiter
                .expires_in
                .map(|d| format!("entry expires in {}", duration::format(d)))
                .unwrap_or_else(|| "no deadline".to_owned());
            out += &format!(
                "    {:>3}. {}{}  ({expires})\n",
                waiter.position,
                waiter.owner,
                on(&waiter.label)
            );
        }
    }
    if let Some(other) = other {
        out += &format!("note: {}\n", other.describe(&info.name));
    }
    out
}

/// A holder's mode in JSON.
pub(crate) fn mode(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Read => "read",
        HoldMode::Write => "write",
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
/// the other protocol is a different lock, and a user who picked the wrong
/// `--protocol` would otherwise see a free lock.
pub(crate) struct OtherProtocol {
    protocol: Protocol,
    locked: bool,
    queue_length: u64,
}

impl OtherProtocol {
    fn describe(&self, name: &str) -> String {
        let state = match (self.locked, self.queue_length) {
            (true, 0) => "locked".to_owned(),
            (true, n) => format!("locked, {n} waiting"),
            (false, n) => format!("free, {n} waiting"),
        };
        format!(
            "{name} is also a lock under the {} protocol ({state}): pass --protocol {} to see \
             or change it",
            self.protocol, self.protocol
        )
    }
}

fn other(protocol: Protocol) -> Protocol {
    match protocol {
        Protocol::Redisson => Protocol::Native,
        _ => Protocol::Redisson,
    }
}

/// Look for the other protocol's lock and queue keys of `name` (their
/// names: `docs/native-protocol.md`, `docs/redisson-protocol.md`). Only keys
/// of the right Redis type count (under `redisson` the lock key is the bare
/// name, which an application may use for other data). `None` when there
/// are none, or when the look fails: it is a courtesy, not the answer.
async fn look_at_other_protocol(
    url: &str,
    protocol: Protocol,
    name: &str,
) -> Option<OtherProtocol> {
    let other = other(protocol);
    let (lock, lock_count, queue, queue_type, queue_count) = match other {
        Protocol::Redisson => {
            let queue = if name.contains('{') {
                format!("redisson_lock_queue:{name}")
            } else {
                format!("redisson_lock_queue:{{{name}}}")
            };
            (name.to_owned(), "HLEN", queue, "list", "LLEN")
        }
        _ => (
            format!("fairlock:{{{name}}}:lock"),
            "HLEN",
            format!("fairlock:{{{name}}}:queue"),
            "zset",
            "ZCARD",
        ),
    };
    let look = async {
        let client = crate::redis_client(url).ok()?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(std::time::Duration::from_secs(3)))
            .set_response_timeout(Some(std::time::Duration::from_secs(3)));
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        let (lock_type, found_queue_type): (String, String) = redis::pipe()
            .cmd("TYPE")
            .arg(&lock)
            .cmd("TYPE")
            .arg(&queue)
            .query_async(&mut conn)
            .await
            .ok()?;
        let mut locked = false;
        if lock_type == "hash" {
            let fields: u64 = redis::cmd(lock_count)
                .arg(&lock)
                .query_async(&mut conn)
                .await
                .ok()?;
            locked = fields > 0;
        }
        let mut queue_length = 0;
        if found_queue_type == queue_type {
            queue_length = redis::cmd(queue_count)
                .arg(&queue)
                .query_async(&mut conn)
                .await
                .ok()?;
        }
        (locked || queue_length > 0).then_some(OtherProtocol {
            protocol: other,
            locked,
            queue_length,
        })
    };
    look.await
}

pub(crate) async fn inspect(cli: &Cli, args: &InspectArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    let info = inspect_any(&client, cli.protocol, &args.name).await?;
    let other = look_at_other_protocol(&url, cli.protocol, &args.name).await;
    if args.json {
        println!("{}", to_json(&info, other.as_ref()));
    } else {
        print!("{}", to_text(&info, other.as_ref()));
    }
    client.shutdown().await;
    Ok(0)
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
    let fair = client.fair_lock(&args.name)?;
    if !args.yes && std::io::stdin().is_terminal() {
        let info = inspect_any(client, cli.protocol, &args.name).await?;
        if !info.is_locked() {
            println!("{} is not locked", args.name);
            hint_other_protocol(cli, url, &args.name).await;
            return Ok(0);
        }
        let holders: Vec<&str> = info.holders.iter().map(|h| h.owner.as_str()).collect();
        eprint!(
            "force-unlock {} held by {}? A `fairlock exec` holder stops its command (exit 71) \
             when it notices, at its next renewal at the latest; a fairlock library holder's \
             lost() resolves; any other holder keeps running, unaware, unless it checks. [y/N] ",
            args.name,
            holders.join(", ")
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("reading the answer: {e}")))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
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
        hint_other_protocol(cli, url, &args.name).await;
    }
    Ok(0)
}

/// After finding nothing to unlock: say so when the other protocol holds the name.
async fn hint_other_protocol(cli: &Cli, url: &str, name: &str) {
    if let Some(other) = look_at_other_protocol(url, cli.protocol, name).await {
        eprintln!("fairlock: note: {}", other.describe(name));
    }
}

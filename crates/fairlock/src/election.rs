//! Leader election on the fair lock: [`Election`], [`Leadership`],
//! [`Leader`] and [`LeaderChanges`].
//!
//! The election `NAME` **is** the fair lock `NAME`: candidates are its
//! waiters (so they lead in the order they arrived), the leader is its
//! holder and a term is the fencing token of that hold. Besides the lock's
//! own keys the election writes one list, its log
//! (`fairlock:{NAME}:elect:log`), and publishes on one channel
//! (`fairlock:{NAME}:elect:changes`); see `docs/election.md`.
//!
//! The leader's writes to the log are fenced: `election.lua` writes only
//! while the lock key names the writer's owner under the writer's term. A
//! published value whose term is not the lock's current token is stale, and
//! [`Election::leader`] does not report it.

use std::collections::VecDeque;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::core::ClientCore;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::FairLock;
use crate::owner::Owner;
use crate::transport::Script;
use crate::wakeup::Subscription;

/// The longest value a leader may publish, in bytes (64 KiB): every
/// observer reads up to 16 of them at each re-read.
pub const MAX_LEADER_VALUE_LEN: usize = 64 * 1024;

/// Entries the log keeps (newest first): an observer that missed fewer
/// changes than this (a lost message, a reconnect) still sees each of them.
/// Sent to `election.lua` and `election_read.lua`.
const LOG_LEN: &str = "16";

/// The longest entry the election writes, in bytes: `TERM:SEQ:KIND:`
/// (at most 16 + 1 + 16 + 3), a label and a value. `election_read.lua`
/// refuses a longer one, so a read costs the client at most 16 of these
/// (about 1 MiB).
const MAX_ENTRY_LEN: usize = 36 + crate::label::MAX_LABEL_LEN + 1 + MAX_LEADER_VALUE_LEN;

/// How often an observer reads the election again without being told:
/// the bound on how late it sees a change whose message was lost, and a
/// leader whose lease ran out (nobody publishes that).
pub(crate) const OBSERVE_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest life of the log after its last write (its life is
/// max(3 x the lease, this)): observers that missed a message find the
/// entries they missed for at least this long.
const MIN_LOG_LIFE: Duration = Duration::from_secs(60);

macro_rules! election_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $file),
                concat!(
                    include_str!("protocol/common.lua"),
                    include_str!("protocol/native/line.lua"),
                    include_str!("protocol/native/lock_prelude.lua"),
                    include_str!(concat!("protocol/native/", $file))
                ),
            )
        })
    };
}

static WRITE: LazyLock<Script> = election_script!("election.lua");
static READ: LazyLock<Script> = election_script!("election_read.lua");

/// What a leader writes to the log.
#[derive(Clone, Copy)]
enum Write {
    /// An entry: this term leads with a value.
    Lead,
    /// An entry: this term resigned.
    Resign,
    /// Keep the log alive; and when it holds no entry of this term (lost
    /// in a failover, or evicted), publish the value again.
    Keep,
}

impl Write {
    fn code(self) -> &'static str {
        match self {
            Write::Lead => "l",
            Write::Resign => "r",
            Write::Keep => "t",
        }
    }
}

/// What every handle on one election shares.
struct Shared {
    core: Arc<ClientCore>,
    lock: FairLock,
    lock_key: String,
    log_key: String,
    channel: String,
}

impl Shared {
    fn name(&self) -> &str {
        self.lock.name()
    }

    /// How long the log lives after a write.
    fn log_life(&self) -> Duration {
        (self.core.config().lease * 3).max(MIN_LOG_LIFE)
    }

    /// Run `election.lua` for `owner` in `term`: `true` when written,
    /// `false` when `owner` does not hold the lock under `term`.
    async fn write(&self, owner: &Owner, term: u64, what: Write, value: &str) -> Result<bool> {
        let term = term.to_string();
        let life = self.log_life().as_millis().to_string();
        let keys = [self.lock_key.as_str(), self.log_key.as_str()];
        let args = [
            owner.as_str(),
            &term,
            what.code(),
            value,
            &life,
            &self.channel,
            LOG_LEN,
        ];
        let written: i64 = self
            .core
            .retry()
            .run(|| self.core.conn().script(&WRITE, self.name(), &keys, &args))
            .await?;
        Ok(written == 1)
    }

    /// Read the holder and the log.
    async fn read(&self) -> Result<Snapshot> {
        let keys = [self.lock_key.as_str(), self.log_key.as_str()];
        let longest = MAX_ENTRY_LEN.to_string();
        let args = [LOG_LEN, longest.as_str()];
        let (token, _owner, _label, pttl, log, bound): (
            Option<String>,
            Option<String>,
            Option<String>,
            i64,
            Vec<String>,
            u64,
        ) = self
            .core
            .retry()
            .run(|| self.core.conn().script(&READ, self.name(), &keys, &args))
            .await?;
        let holder = match token {
            Some(token) => Some(token.parse::<u64>().map_err(|_| {
                Error::Protocol(format!("election {:?}: a token {token:?}", self.name()))
            })?),
            None => None,
        };
        let not_ours = |reason: &str| Error::NotALock {
            name: self.name().to_owned(),
            key: self.log_key.clone(),
            reason: reason.into(),
        };
        let entries = log
            .iter()
            .map(|text| Entry::parse(text))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                not_ours("the election log holds an entry that is not an election entry")
            })?;
        // The election writes each entry above the one before, in a term a
        // grant made: anything else was written by another program, and
        // reporting it would name a leader the lock never had.
        if entries.iter().any(|entry| entry.term > bound) {
            return Err(not_ours(
                "the election log holds an entry of a term never granted",
            ));
        }
        if entries
            .windows(2)
            .any(|pair| pair[0].key() <= pair[1].key())
        {
            return Err(not_ours("the election log's entries are out of order"));
        }
        Ok(Snapshot {
            holder,
            pttl,
            entries,
        })
    }

    fn lost(&self, owner: &Owner) -> Error {
        Error::LockLost {
            name: self.name().to_owned(),
            owner: owner.to_string(),
        }
    }
}

/// One entry of the log: `TERM:SEQ:KIND:LABEL<TAB>VALUE`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    term: u64,
    seq: u64,
    /// `true`: leads with `value`; `false`: resigned.
    leads: bool,
    label: String,
    value: String,
}

impl Entry {
    fn parse(text: &str) -> Option<Self> {
        // Digits only, as the scripts' counters (`parse` would take a '+').
        let number = |part: &str| {
            part.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| part.parse::<u64>().ok())
                .flatten()
        };
        let mut parts = text.splitn(4, ':');
        let term = number(parts.next()?)?;
        let seq = number(parts.next()?)?;
        let leads = match parts.next()? {
            "l" => true,
            "r" => false,
            _ => return None,
        };
        let (label, value) = parts.next()?.split_once('\t')?;
        // A client label as `label.rs` allows it (shown on a terminal as it
        // is): one from another program could hide escape sequences.
        if label.len() > crate::label::MAX_LABEL_LEN || label.chars().any(char::is_control) {
            return None;
        }
        Some(Self {
            term,
            seq,
            leads,
            label: label.to_owned(),
            value: value.to_owned(),
        })
    }

    fn key(&self) -> (u64, u64) {
        (self.term, self.seq)
    }

    /// The state this entry begins: its leader, or nobody.
    fn change(&self) -> Option<Leader> {
        self.leads.then(|| Leader {
            value: self.value.clone(),
            label: self.label.clone(),
            term: self.term,
        })
    }
}

/// The lock's holder and the log, read at one instant.
struct Snapshot {
    /// The holder's token; `None` when the lock is free.
    holder: Option<u64>,
    /// The holder's lease left, in ms (-2 when free).
    pttl: i64,
    /// Newest first.
    entries: Vec<Entry>,
}

impl Snapshot {
    /// The leader now: the newest entry leads, and its term is the lock's
    /// current token. Anything else is nobody: a stale value (its leader's
    /// lease ran out), a resignation, or a holder that has not published
    /// (a plain lock holder, or a leader in its first round trip).
    fn current(&self) -> Option<Leader> {
        let head = self.entries.first()?;
        if self.holder == Some(head.term) {
            head.change()
        } else {
            None
        }
    }
}

/// Who leads an election: the value it published, its client's label and
/// its term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// What the leader published ([`Election::campaign`],
    /// [`Leadership::proclaim`]).
    pub value: String,
    /// The leader's client label (`HOST:PID` by default, see
    /// [`ClientConfig::label`](crate::ClientConfig::label)).
    pub label: String,
    /// Its term: the fencing token of its hold of the lock, strictly
    /// increasing from one leader to the next.
    pub term: u64,
}

/// A leader election on the fair lock of the same name: see
/// [`LockClient::election`](crate::LockClient::election). Cheap to clone.
#[derive(Clone)]
pub struct Election {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name())
            .finish()
    }
}

fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_LEADER_VALUE_LEN {
        return Err(Error::InvalidConfig(format!(
            "a leader value of {} bytes: at most {MAX_LEADER_VALUE_LEN}",
            value.len()
        )));
    }
    Ok(())
}

impl Election {
    /// The election on `lock` (a native fair lock, its name checked).
    pub(crate) fn new(core: &Arc<ClientCore>, lock: FairLock) -> Self {
        let key = |suffix: &str| format!("fairlock:{{{}}}:{suffix}", lock.name());
        Self {
            shared: Arc::new(Shared {
                core: Arc::clone(core),
                lock_key: key("lock"),
                log_key: key("elect:log"),
                channel: key("elect:changes"),
                lock,
            }),
        }
    }

    /// The election's name (its fair lock's).
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// The fair lock whose holder leads.
    pub fn lock(&self) -> &FairLock {
        &self.shared.lock
    }

    /// Wait until this candidate leads, publish `value` and return the
    /// leadership. Candidates lead in the order they asked (they wait in the
    /// fair lock's line).
    ///
    /// # Errors
    /// As [`LockHandle::lock`](crate::LockHandle::lock);
    /// [`Error::InvalidConfig`] for a value over [`MAX_LEADER_VALUE_LEN`];
    /// [`Error::LockLost`] when the lock was lost before the value was
    /// published (the lease ran out in between).
    ///
    /// # Cancel safety
    /// Dropping the future takes the candidate out of the line; if it was
    /// made leader meanwhile, it resigns in the background (its value, if
    /// published, is marked resigned and the lock released). No candidate
    /// or leadership is left behind.
    pub async fn campaign(&self, value: &str) -> Result<Leadership> {
        check_value(value)?;
        let guard = self.shared.lock.lock().await?;
        self.lead(guard, value).await
    }

    /// [`campaign`](Self::campaign), waiting at most `wait`: `None` when
    /// the candidate did not lead in time (it has then left the line).
    /// A `wait` of zero tries once.
    ///
    /// # Errors
    /// As [`campaign`](Self::campaign), plus [`Error::InvalidDuration`]
    /// for a bad wait.
    ///
    /// # Cancel safety
    /// As [`campaign`](Self::campaign).
    pub async fn try_campaign_for(
        &self,
        value: &str,
        wait: Duration,
    ) -> Result<Option<Leadership>> {
        check_value(value)?;
        match self.shared.lock.try_lock_for(wait).await? {
            Some(guard) => self.lead(guard, value).await.map(Some),
            None => Ok(None),
        }
    }

    /// Publish `value` under the hold `guard`; the leadership resigns when
    /// this future is dropped before it returns.
    async fn lead(&self, guard: LockGuard, value: &str) -> Result<Leadership> {
        let term = guard.token().ok_or_else(|| {
            Error::Protocol(format!(
                "election {:?}: a hold without a token",
                self.name()
            ))
        })?;
        let leadership = Leadership {
            shared: Arc::clone(&self.shared),
            owner: guard.owner().clone(),
            term,
            value: Arc::new(std::sync::Mutex::new(value.to_owned())),
            guard: Some(guard),
        };
        leadership.proclaim(value).await?;
        leadership.keep_log();
        Ok(leadership)
    }

    /// Who leads now, or `None`: nobody holds the lock, or its holder has
    /// published no value in its term (a leader that resigned, a leader in
    /// the round trip between taking the lock and publishing, or a plain
    /// lock holder of the same name). A value whose term is not the current
    /// holder's token is stale and never reported.
    ///
    /// # Errors
    /// [`Error::Connection`]; [`Error::WrongType`] or [`Error::NotALock`]
    /// when the lock key or the log holds another program's data.
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        Ok(self.shared.read().await?.current())
    }

    /// Watch the leader change: see [`LeaderChanges`]. Subscribes, then
    /// reads the election: the first change returned is the state at that
    /// read, and every change after it is returned, however late the first
    /// [`next`](LeaderChanges::next) comes (up to the log's 16 entries).
    ///
    /// # Errors
    /// As [`leader`](Self::leader).
    ///
    /// # Cancel safety
    /// Dropping the future drops the subscription; nothing is left behind.
    pub async fn observe(&self) -> Result<LeaderChanges> {
        let subscription = self
            .shared
            .core
            .wakeups()
            .subscribe(
                &self.shared.channel,
                self.shared.core.config().response_timeout,
            )
            .await;
        let mut changes = LeaderChanges {
            shared: Arc::clone(&self.shared),
            subscription,
            last: None,
            first: true,
            shown: None,
            pending: VecDeque::new(),
            stale: true,
            next_read: Instant::now(),
        };
        changes.subscription.mark_seen();
        let snapshot = self.shared.read().await?;
        changes.take_in(&snapshot);
        Ok(changes)
    }
}

/// This candidate leads: the hold of the election's lock, with its term.
///
/// - [`lost`](Self::lost) resolves when the leadership is lost or may be
///   (as [`LockGuard::lost`]: the lock found taken or gone, or the last
///   confirmed lease ran out, a paused process included); a leader must
///   stop acting as one then;
/// - [`resign`](Self::resign) gives it up; dropping it resigns in the
///   background (as a dropped guard releases), which
///   [`LockClient::shutdown`](crate::LockClient::shutdown) and
///   [`flush`](crate::LockClient::flush) wait for.
#[must_use = "dropping a leadership resigns right away"]
pub struct Leadership {
    shared: Arc<Shared>,
    owner: Owner,
    term: u64,
    /// The value last proclaimed (published or on its way), which the log's
    /// keep-alive publishes again when the log lost this term's entries.
    value: Arc<std::sync::Mutex<String>>,
    /// `None` once resigned.
    guard: Option<LockGuard>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.shared.name())
            .field("term", &self.term)
            .field("owner", &self.owner)
            .finish()
    }
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// The term: the fencing token of this leader's hold of the lock,
    /// strictly greater than every earlier leader's. Pass it to the systems
    /// the leader writes to, so they can refuse a deposed leader's writes.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The hold's owner.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// `false` once the leadership is known lost or may be (see
    /// [`lost`](Self::lost)).
    pub fn is_leader(&self) -> bool {
        self.guard.as_ref().is_some_and(LockGuard::is_held)
    }

    /// A future that resolves when this leadership is lost or may be: as
    /// [`LockGuard::lost`] (the lock taken or gone, or the last confirmed
    /// lease ran out without a renewal: a paused process stops believing
    /// at its lease's end). `'static`: spawn it, or `select!` on it next to
    /// the leader's work. Also resolves once resigned.
    ///
    /// # Cancel safety
    /// Dropping it has no effect.
    pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let lost = self.guard.as_ref().map(LockGuard::lost);
        async move {
            if let Some(lost) = lost {
                lost.await;
            }
        }
    }

    /// Publish `value` in place of the current one, keeping the
    /// leadership. Fenced: written only while this leader's term holds the
    /// lock, so a deposed leader's value never overwrites its successor's.
    ///
    /// # Errors
    /// [`Error::LockLost`] when this term no longer holds the lock, or
    /// [`lost`](Self::lost) has resolved (nothing written);
    /// [`Error::InvalidConfig`] for a value over [`MAX_LEADER_VALUE_LEN`];
    /// [`Error::Connection`].
    ///
    /// # Cancel safety
    /// The value may or may not have been published when the future is
    /// dropped; the leadership is unchanged.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        // Not once the leader stopped believing (`lost()`): the server may
        // name it a little longer (its key expires no earlier), but a
        // leader that stopped acting as one must not publish either.
        if !self.is_leader() {
            return Err(self.shared.lost(&self.owner));
        }
        value.clone_into(&mut self.value.lock().unwrap_or_else(|e| e.into_inner()));
        if self
            .shared
            .write(&self.owner, self.term, Write::Lead, value)
            .await?
        {
            Ok(())
        } else {
            Err(self.shared.lost(&self.owner))
        }
    }

    /// Keep the log alive while this leader leads: a write every third
    /// of its life, which publishes the value again when the log holds no
    /// entry of this term (so `leader()` names this leader again within
    /// that time); ends by itself when the hold ends (released or lost).
    fn keep_log(&self) {
        let Some(guard) = &self.guard else { return };
        let lost = guard.lost();
        let shared = Arc::clone(&self.shared);
        let owner = self.owner.clone();
        let term = self.term;
        let value = Arc::clone(&self.value);
        let every = shared.log_life() / 3;
        self.shared.core.spawn_detached(async move {
            tokio::pin!(lost);
            loop {
                tokio::select! {
                    () = &mut lost => break,
                    () = tokio::time::sleep(every) => {}
                }
                let value = value.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Ok(false) = shared.write(&owner, term, Write::Keep, &value).await {
                    break;
                }
            }
        });
    }

    /// Give up the leadership: mark this term resigned in the log (fenced,
    /// so observers see nobody lead) and release the lock, which passes to
    /// the next candidate in line.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the leadership had been lost already;
    /// [`Error::Connection`] when Redis stayed unreachable for the retry
    /// budget (the lock then frees itself at its lease's end).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the resignation: it runs to its
    /// end in the background.
    pub async fn resign(mut self) -> Result<()> {
        match self.resign_in_background() {
            Some(task) => task
                .await
                .map_err(|err| Error::Protocol(format!("the resignation task failed: {err}")))?,
            None => Err(self.shared.lost(&self.owner)),
        }
    }

    fn resign_in_background(&mut self) -> Option<tokio::task::JoinHandle<Result<()>>> {
        let guard = self.guard.take()?;
        let shared = Arc::clone(&self.shared);
        let owner = self.owner.clone();
        let term = self.term;
        Some(self.shared.core.spawn_cleanup(async move {
            let written = shared.write(&owner, term, Write::Resign, "").await;
            let released = guard.unlock().await;
            match written {
                Ok(true) => released,
                Ok(false) => Err(shared.lost(&owner)),
                Err(err) => Err(err),
            }
        }))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        drop(self.resign_in_background());
    }
}

/// The leader's changes, in order: from [`Election::observe`].
///
/// [`next`](Self::next) returns `Some(leader)` when a leader began (or
/// published a new value, [`Leadership::proclaim`]) and `None` when nobody
/// leads any more (the leader resigned, or its lease ran out); the first
/// call returns the state when [`Election::observe`] read it. Each change is returned once, in
/// the order it happened; terms never go back.
///
/// How soon: a published change within one round trip of the message
/// (each change publishes one). A message lost (a pub/sub reconnect) is
/// made good by reading again on reconnect, and at least every second
/// (`OBSERVE_INTERVAL`); the log keeps the last 16 changes, so fewer missed
/// changes than that are each still returned. A leader whose lease runs
/// out publishes nothing: that is seen within one second, or at the lease's
/// end when that comes first.
pub struct LeaderChanges {
    shared: Arc<Shared>,
    subscription: Subscription,
    /// The newest log entry taken in.
    last: Option<(u64, u64)>,
    /// No read taken in yet.
    first: bool,
    /// The state last queued (`None` before the first).
    shown: Option<Option<Leader>>,
    pending: VecDeque<Option<Leader>>,
    /// Read before waiting (a wake-up came, or nothing was read yet).
    stale: bool,
    /// When to read again without a message.
    next_read: Instant,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges")
            .field("election", &self.shared.name())
            .field("shown", &self.shown)
            .finish()
    }
}

impl LeaderChanges {
    /// The next change: `Some(leader)` a leader (a new term, or a new value
    /// in the same term), `None` nobody leads. Waits until there is one.
    ///
    /// # Errors
    /// As [`Election::leader`]; the stream stays usable (the next call reads
    /// again).
    ///
    /// # Cancel safety
    /// Cancel-safe: a change is taken out only when returned, and a wake-up
    /// taken by a dropped call makes the next call read at once.
    pub async fn next(&mut self) -> Result<Option<Leader>> {
        loop {
            if let Some(change) = self.pending.pop_front() {
                return Ok(change);
            }
            if !self.stale {
                let wait = self.next_read.saturating_duration_since(Instant::now());
                self.subscription.wait(wait).await;
                self.stale = true;
            }
            self.subscription.mark_seen();
            let snapshot = self.shared.read().await?;
            self.take_in(&snapshot);
        }
    }

    /// Queue the changes `snapshot` shows since the last read.
    fn take_in(&mut self, snapshot: &Snapshot) {
        let previous = self.last;
        if self.first {
            self.first = false;
        } else {
            // Oldest first: every entry after the last one taken in.
            let newer: Vec<Option<Leader>> = snapshot
                .entries
                .iter()
                .rev()
                .filter(|entry| self.last.is_none_or(|last| entry.key() > last))
                .map(Entry::change)
                .collect();
            for change in newer {
                self.queue(change);
            }
        }
        // A log whose head is of a term older than an entry taken in
        // already (a failover to a replica that missed the newest writes)
        // names a state older than one shown: nobody, rather than going
        // back. A head of the same term with a lower SEQ is the term's
        // entries published again (see `keep_log`): taken in from there.
        let head = snapshot.entries.first().map(Entry::key);
        let went_back = head.is_some_and(|head| previous.is_some_and(|last| head.0 < last.0));
        if let Some(head) = head {
            if self.last.is_none_or(|last| head > last || head.0 == last.0) {
                self.last = Some(head);
            }
        }
        let mut current = snapshot.current().filter(|_| !went_back);
        // The lock still names the term last shown, and the log holds none
        // of its entries (lost in a failover, or evicted): that leader has
        // neither resigned nor published since. Still it, rather than
        // nobody and then the same term again when its keep-alive
        // publishes the value again.
        if let (None, Some(Some(shown))) = (&current, &self.shown) {
            if snapshot.holder == Some(shown.term)
                && snapshot
                    .entries
                    .iter()
                    .all(|entry| entry.term != shown.term)
            {
                current = Some(shown.clone());
            }
        }
        let mut wait = OBSERVE_INTERVAL;
        if current.is_some() {
            if let Ok(left) = u64::try_from(snapshot.pttl) {
                wait = wait.min(Duration::from_millis(left + 1));
            }
        }
        self.queue(current);
        self.next_read = Instant::now() + wait;
        self.stale = false;
    }

    fn queue(&mut self, change: Option<Leader>) {
        if self.shown.as_ref() != Some(&change) {
            self.pending.push_back(change.clone());
            self.shown = Some(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Entry;

    #[test]
    fn entries_parse_and_refuse_other_text() {
        let entry = Entry::parse("17:2:l:host:1\tvalue:with:colons").unwrap();
        assert_eq!((entry.term, entry.seq, entry.leads), (17, 2, true));
        assert_eq!(
            (entry.label.as_str(), entry.value.as_str()),
            ("host:1", "value:with:colons")
        );
        assert!(!Entry::parse("17:3:r:host:1\t").unwrap().leads);
        let longest = format!("1:1:l:{}\tv", "x".repeat(crate::label::MAX_LABEL_LEN));
        assert!(Entry::parse(&longest).is_some());
        assert_eq!(Entry::parse(&longest.replace("\tv", "x\tv")), None);
        for bad in [
            "",
            "x:1:l:a\tb",
            "1:1:x:a\tb",
            "1:1:l:no tab",
            "1:l:a\tb",
            "+1:1:l:a\tb",
            "1:+1:l:a\tb",
            "1:1:l:a\x1b[2J\tb",
            "1:1:l:a\nb\tc",
        ] {
            assert_eq!(Entry::parse(bad), None, "{bad:?}");
        }
    }
}

//! The model's state: the server (master and its lagging replica), each
//! client (its tasks, its registry of holds, its pub/sub inbox) and the
//! ghost variables the properties read.

/// An owner: `client * OWNERS_PER_CLIENT + slot` (the implementation's
/// `CLIENT_UUID:N`).
pub type Owner = u8;

/// How many owner slots each client has.
pub const OWNERS_PER_CLIENT: u8 = 4;

/// The client an owner belongs to.
pub fn client_of(owner: Owner) -> usize {
    usize::from(owner / OWNERS_PER_CLIENT)
}

/// One acquisition's secret (the implementation's 128-bit nonce): the
/// client, the task and the program step that acquires. Unique per
/// acquisition, as the random nonce is.
pub type Nonce = (u8, u8, u8);

/// A fencing token.
pub type Token = u32;

/// The lock key (`fairlock:{NAME}:lock`, layout version 2) while held:
/// `TOKEN:COUNT:FLAGS:NONCE:REQUEST:OWNER`, with its expiry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lock {
    /// `OWNER`.
    pub owner: Owner,
    /// `COUNT`: holds of the owner.
    pub count: u8,
    /// `TOKEN`: the fencing token of this acquisition.
    pub token: Token,
    /// Claimed: the flag u is not set (it is while a handoff awaits its
    /// new holder).
    pub claimed: bool,
    /// The flag w: the line may not be empty (invariant W: set whenever a
    /// waiter is in line).
    pub waiting: bool,
    /// The flag k (non-fair, with w): taken past a woken waiter that has not
    /// been back since; the release wakes nobody and leaves w and k.
    pub woken: bool,
    /// `NONCE`: the acquisition's secret.
    pub nonce: Nonce,
    /// The key's expiry, in server ticks (absolute, as replicated).
    pub expires: u8,
    /// Ghost: when the lock was handed over (for the grant-life property).
    pub granted_at: u8,
}

/// A queued waiter: its place in `queue`, its deadline in `alive`, its
/// record in `leases`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Waiter {
    /// The waiting owner.
    pub owner: Owner,
    /// Its arrival number (`queue`'s score).
    pub arrival: u32,
    /// Its liveness deadline (`alive`'s score), in ticks.
    pub alive: u8,
    /// The lease it asked for.
    pub lease: u8,
    /// Its own waiter ttl.
    pub ttl: u8,
    /// Its grant message's secret.
    pub nonce: Nonce,
}

/// The lock key while free: the marker a release leaves,
/// `TOKEN:0:FLAGS::REQUEST:` (it lives 20 s and more: longer than any check
/// here, so it is not expired in the model).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Marker {
    /// The last hold's token: the next one is drawn above it.
    pub token: Token,
    /// The flag w: waiters may be in line.
    pub waiting: bool,
    /// The flag k: the head of the line was woken (non-fair) and a taker
    /// not in line may go first.
    pub woken: bool,
}

/// What one Redis server holds for the lock: the whole state a failover
/// can lose. The token counter lives in the lock key (held or the free
/// marker): once the key is gone (a lease ran out), only the clock term of
/// the next token keeps tokens increasing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// The lock key while held, if present and not expired.
    pub lock: Option<Lock>,
    /// The lock key while free: a release's marker.
    pub marker: Option<Marker>,
    /// The line (`line` and `waiters`), in arrival order.
    pub queue: Vec<Waiter>,
}

/// A pub/sub message on a client's one connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    /// `grant:TOKEN:SERVER_MS:EXPIRE_MS:MAC` on the waiter's channel; the
    /// MAC is modelled by the nonce it was made with.
    Grant {
        /// The waiter the grant is for.
        owner: Owner,
        /// The token of the handed-over acquisition.
        token: Token,
        /// Server time of the grant.
        at: u8,
        /// The PEXPIRE the handoff set.
        expire: u8,
        /// The secret the MAC proves.
        nonce: Nonce,
        /// The master (failover epoch) that published it.
        epoch: u8,
    },
    /// The lock key on `fairlock:revoked:CLIENT`: a force-release removed
    /// a hold of this client.
    Revoke,
    /// `free` on a non-fair waiter's channel: a release (or a give-up) left
    /// the lock free and woke it, the first live waiter.
    Free {
        /// The waiter woken.
        owner: Owner,
    },
}

/// Where a task is in its program step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Ready to start its next step.
    Ready,
    /// A `Lock` step read the owner's hold count and holds the per-owner
    /// acquisition turn (unless hole 4 is reverted).
    Begun,
    /// Queued: refreshing, listening for its grant.
    Waiting {
        /// Arrival number of its place, as last seen (ghost, for FIFO).
        arrival: u32,
        /// Liveness deadline its last refresh set (ghost, for FIFO).
        alive: u8,
        /// Attempted since the last tick (waiters refresh every tick).
        refreshed: bool,
        /// Ghost: the server handed it the lock (it has been served, even
        /// if it never learns it).
        served: bool,
        /// When its last attempt ran (the server time its last queued reply
        /// carries): a grant message dated no later is not trusted.
        queued_at: u8,
    },
    /// A grant message was read and checked, its hold not yet registered.
    GrantRead {
        /// The grant's token.
        token: Token,
        /// Its end as the waiter computes it.
        until: u8,
        /// A revocation came with or after it: verify with the server.
        verify: bool,
        /// The failover epoch the grant came from.
        epoch: u8,
    },
    /// A reply the client relies on waits for the replica (`WAIT`).
    Syncing {
        /// The acquired token.
        token: Token,
        /// The belief the reply gives.
        until: u8,
        /// Whether the hold is claimed (else: a handed-over grant).
        claimed: bool,
        /// A re-entry (the hold count went up) rather than a new hold.
        reentry: bool,
        /// The master the write went to.
        epoch: u8,
    },
    /// The last attempt's reply was lost (its script ran): the
    /// acquisition failed, and its undo (leave the line, release the hold
    /// the attempt may have made) is still to run, under the owner's turn.
    Undoing,
    /// The program is over (or its acquisition failed).
    Done,
}

impl Phase {
    /// An acquisition in progress (it holds its owner's turn): begun,
    /// waiting, acting on a grant, waiting for the replica, or undoing.
    pub fn in_flight(&self) -> bool {
        matches!(
            self,
            Phase::Begun
                | Phase::Waiting { .. }
                | Phase::GrantRead { .. }
                | Phase::Syncing { .. }
                | Phase::Undoing
        )
    }
}

/// One guard a task holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    /// The acquisition's token.
    pub token: Token,
    /// Renewed by the watchdog.
    pub watchdog: bool,
}

/// One task of a client: a small program of lock/unlock steps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Task {
    /// The program step it is at.
    pub pc: u8,
    /// Where it is within that step.
    pub phase: Phase,
    /// The owner of the current (or last) acquisition.
    pub owner: Owner,
    /// The owner's hold count read when the current acquisition began
    /// (sent with every attempt as `base`).
    pub base: u8,
    /// When the current acquisition's wait budget runs out.
    pub deadline: u8,
    /// Its guards, by the index of the `Lock` step that made them.
    pub guards: Vec<Option<Guard>>,
}

/// The client's registry entry for one (lock, owner): the acquisition's
/// token and the belief (`is_held()`: not lost and before `until`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    /// The owner.
    pub owner: Owner,
    /// The acquisition's token.
    pub token: Token,
    /// The belief's end, in ticks.
    pub until: u8,
    /// Guards (the hold count as the client sees it).
    pub guards: u8,
    /// Guards renewed by the watchdog.
    pub watch_guards: u8,
    /// The lease to claim a handed-over grant with.
    pub lease: u8,
    /// Claimed (a handed-over grant is not, until its claim).
    pub claimed: bool,
    /// Found lost (a failed renewal or check, or retired).
    pub lost: bool,
    /// An extension the renewal or claim got, waiting for the replica:
    /// the new end and the master's epoch.
    pub pending: Option<(u8, u8)>,
}

impl Hold {
    /// The client believes it holds the lock through this entry.
    pub fn believes(&self, now: u8) -> bool {
        !self.lost && self.guards > 0 && now < self.until
    }
}

/// A client process: its tasks, its holds, its pub/sub connection.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Its tasks.
    pub tasks: Vec<Task>,
    /// Its registry of holds.
    pub holds: Vec<Hold>,
    /// Messages published to it and not read yet, in order.
    pub inbox: Vec<Msg>,
    /// The process died: it does nothing more and believes nothing.
    pub crashed: bool,
}

/// Ghost bits: events the `sometimes` properties look for.
pub mod seen {
    /// A release or force-release handed the lock to a waiter.
    pub const HANDOFF: u16 = 1;
    /// An owner re-entered its hold.
    pub const REENTRY: u16 = 1 << 1;
    /// The watchdog renewed a lease.
    pub const RENEWAL: u16 = 1 << 2;
    /// A handed-over grant was claimed.
    pub const CLAIM: u16 = 1 << 3;
    /// A waiter proceeded on a grant message.
    pub const GRANT_TRUSTED: u16 = 1 << 4;
    /// A client checked its holds after a revocation.
    pub const REVOCATION: u16 = 1 << 5;
    /// The replica was promoted.
    pub const FAILOVER: u16 = 1 << 6;
    /// A lease ran out on the server while its holder still had guards.
    pub const EXPIRY: u16 = 1 << 7;
    /// A non-fair release woke the first waiter (`free`) instead of
    /// handing it the lock.
    pub const WOKEN: u16 = 1 << 8;
    /// A non-fair taker not in line took a lock whose woken waiter was on
    /// its way.
    pub const BARGE: u16 = 1 << 9;
}

/// The ghost variables the properties read (not part of the system).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ghost {
    /// The highest token ever granted.
    pub max_token: Token,
    /// A grant drew a token not above an earlier one.
    pub token_regressed: bool,
    /// A take or handoff passed over an earlier live waiter.
    pub fifo_broken: bool,
    /// The lock was free, with a live waiter waiting, at two tick
    /// boundaries in a row, and nobody took it in between.
    pub idle_with_waiter: bool,
    /// The lock was free, with a live waiter waiting, at the last tick, and
    /// nobody has taken it since.
    pub idle_last_tick: bool,
    /// Holds a force-release removed whose client has not checked yet:
    /// their beliefs are excused (force-unlock overrides exclusion until
    /// the revocation is read).
    pub excused: Vec<(Owner, Token)>,
    /// Server holds left to lapse with their lease, by design: a guard of
    /// a hold known lost never releases, and an acquisition whose `WAIT`
    /// failed leaves what the server has of it (their counts are not
    /// backed by guards, and need not be).
    pub orphaned: Vec<(Owner, Token)>,
    /// Events seen (see [`seen`]).
    pub seen: u16,
}

/// The whole model state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// The clock, in ticks (the server's and every client's: client clocks
    /// do not matter to the protocol, only durations do).
    pub now: u8,
    /// The master.
    pub master: Server,
    /// The replica: a past state of the master (it lags until `Replicate`).
    pub replica: Server,
    /// Failovers so far (the master epoch).
    pub epoch: u8,
    /// Force-unlocks so far.
    pub forced: u8,
    /// Attempt replies lost so far.
    pub lost_replies: u8,
    /// The clients.
    pub clients: Vec<Client>,
    /// Ghost variables.
    pub ghost: Ghost,
}

impl State {
    /// The (owner, token) pairs that some client believes it holds now,
    /// the excused ones (see [`Ghost::excused`]) left out.
    pub fn believers(&self) -> Vec<(Owner, Token, u8)> {
        let mut out = Vec::new();
        for client in &self.clients {
            if client.crashed {
                continue;
            }
            for hold in &client.holds {
                if hold.believes(self.now)
                    && !self.ghost.excused.contains(&(hold.owner, hold.token))
                    && !out
                        .iter()
                        .any(|&(o, t, _)| o == hold.owner && t == hold.token)
                {
                    out.push((hold.owner, hold.token, hold.until));
                }
            }
        }
        out
    }
}

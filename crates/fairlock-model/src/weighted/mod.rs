//! A model of the design of the `native` read-write lock and semaphore
//! (`docs/kinds.md`): one fair queue of weighted requests in front of a
//! capacity, checked before the scripts are written.
//!
//! # What it models
//!
//! - **The server**: the holders (client, weight, token, expiry, claimed,
//!   and the weight meta records for each), the line (client, the weight
//!   its record names, liveness deadline), the token counter and meta's
//!   `used` (the weight held, as the scripts count it: every admission
//!   decides by it). Each script of the design (`acquire`, which also
//!   refreshes and claims; `release`; `give_up`; `renew`; an operator's
//!   `force_release`) is one atomic step that first reclaims expired
//!   holders, and ends by admitting the head of the line while it fits,
//!   then the next head (a release may admit a group of readers at once).
//!   One reclaim takes at most [`RECLAIM_LIMIT`] (1) due holders, the
//!   soonest first (the scripts' 64, in spirit): the others stay in the
//!   holders set, counted, for a later script. The holders set has one
//!   entry per id (an acquisition: client and round), as a sorted set: a
//!   grant to an id that still has an entry (a grant it did not claim in
//!   time, left for a later reclaim) would write over it, so the grant
//!   first reclaims that entry (`make_way`). A recount of `used` (a
//!   reclaimed holder's weight in meta lost) counts each live hold at its
//!   key's weight and each due holder left for a later reclaim at the
//!   weight meta records, which that reclaim gives back.
//!   Dead waiters are dropped when they reach the head (the line of the
//!   key layout version 2): one further back keeps its place, and a late
//!   refresh of its own keeps it live in that place.
//! - **Stale meta** (`Config::stale_meta`): the holders set expires with
//!   the last hold keys while meta lives on (a waiter keeps it), so the
//!   next script finds `used` counting holds that are gone, and cleans
//!   meta up (`used` 0, every recorded weight deleted) at its first write
//!   of meta. `acquire` writes meta before anything else; the other
//!   scripts write it only as they admit or release, which is where the
//!   order of the clean-up and the admitted holder's record matters.
//! - **Another program's writes** (`Config::foreign_data`): once per run,
//!   a waiter's line record rewritten with a weight of 0, and once a
//!   holder's weight in meta rewritten with something that is not a
//!   weight. A record without a weight of at least 1 is a lost one: its
//!   waiter waits at the head until its next attempt writes it again; a
//!   holder's lost weight is counted again from the hold keys.
//! - **Line records written over with another weight**
//!   (`Config::forged_weights`): once per run, a waiter's line record
//!   rewritten with one less than its request, one more that fits, or one
//!   above the capacity. The admission reads the record: a head whose
//!   record is above the capacity never fits, and waits at the head as one
//!   that does not fit now (nobody is admitted past it) until its next
//!   attempt writes the record again; one that fits is granted at the
//!   record's weight, and the grant message names that weight. The waiter
//!   trusts a grant message only at its own request's weight (any other is
//!   only a wake-up), and its next `acquire` corrects the hold it finds
//!   (the claim): one above the request is lowered to it (`used` drops by
//!   the difference, and the line is admitted again); one below is raised
//!   when the difference fits, else given back, and the waiter goes back
//!   to the head of the line (in front of everyone) with its record
//!   written again, and waits on.
//! - **The clients**: each runs `rounds` acquire-hold-release rounds of one
//!   request (its weight: 1 for a reader or a one-permit request, the
//!   capacity for a writer), waits within a budget, refreshes its place
//!   every tick, reads grant messages (which may be lost; one made at
//!   another weight than its request is only a wake-up), renews its hold
//!   (which claims a handed-over grant), and may crash; with
//!   `Config::pauses` a waiter may let ticks pass without its refresh (its
//!   grant may expire unclaimed, and its next call is granted again under
//!   the same id); with `Config::evictions` a hold key may be lost once
//!   before its lease ends.
//! - **Time**: ticks; leases, waiter ttls and budgets are a few ticks.
//!
//! # Abstractions
//!
//! One object, no re-entry or downgrade, no failover, no message
//! duplication (the mutex's model covers those with the same rules); a
//! script and its reply are one step. A force-release's revocation is read
//! at once (the mutex's model covers a late one). A `renew` of a live hold
//! reclaims and admits as every script does (the implementation's renewal
//! does neither: more admissions than it makes, never fewer); a `release`
//! or a `renew` of a hold whose key is gone touches nothing, as in the
//! implementation.
//!
//! # Properties
//!
//! [`CAPACITY`]: the weights of the parties that believe they hold never
//! add up past the capacity (for the read-write lock: a writer is alone,
//! readers only beside readers); [`W_BELIEF_BACKED`]; [`W_TOKENS`];
//! [`W_FIFO`]: nobody is granted while a live waiter that came earlier
//! still waits; [`W_NO_IDLE`]: no script leaves a live head that fits
//! waiting (but one whose record is not its request: lost or written over);
//! [`W_WAITS_END`]; [`W_META`]: after every script meta's `used` is the
//! weight held and meta records each holder's weight (but one another
//! program wrote over); [`W_PLACE_KEPT`]: a live waiter leaves the line
//! only by a grant, its own give-up or claim, or its death; and witnesses
//! that keep it from being vacuous (two holders at once, a group admitted
//! by one release, a dead holder's weight coming back, a holder admitted
//! on stale meta by a script other than `acquire`, a waiter whose record
//! was lost admitted once written again, a hold granted below its request
//! raised at its claim, one that cannot be raised given back and its
//! waiter admitted later from the head of the line, one granted above its
//! request lowered, a waiter whose record was written above the capacity
//! admitted once written again, a waiter whose grant expired unclaimed
//! granted again once its old entry was reclaimed, a recount counting a
//! due holder left for a later reclaim).
//!
//! A grant over an id's old entry (the mutant [`Mutant::RegrantOverEntry`])
//! and a recount leaving due holders out ([`Mutant::RecountSkipsDue`]) are
//! caught by [`W_META`]: `used` counts a weight nobody holds (permits
//! lost), or less than is held (given back twice later).
//!
//! A hold key lost before its lease ends (evicted, deleted) while its
//! entry says the lease runs (`Config::evictions`, once per run): its
//! waiter is not granted again under its id before that entry is due
//! (`make_way` refuses), and nobody passes it at the head of the line.
//! A `make_way` that reclaimed such an entry early breaks no property
//! within these bounds (the suite's
//! `a_waiter_whose_granted_key_was_evicted_is_counted_once` checks it); a
//! recount's counting of such an entry at meta's weight or the whole
//! capacity is modelled, never reached (no configuration loses a key and
//! a weight in meta both).
//!
//! Since the claim corrects a hold of any weight but the request, a
//! record of weight 0 admitted (the mutant [`Mutant::AdmitWeightZero`])
//! oversteps no capacity any more; what catches it is [`W_HOLD_WEIGHT`]:
//! the scripts refuse the hold key of weight 0 it writes.

use stateright::{Model, Property};

mod scripts;

/// The weights of believing holders never exceed the capacity.
pub const CAPACITY: &str = "believed weight within capacity";
/// Every belief is backed by a holder on the server, same token, lasting
/// at least as long.
pub const W_BELIEF_BACKED: &str = "belief backed by the server (weighted)";
/// Every grant draws a token above every earlier one.
pub const W_TOKENS: &str = "tokens increase (weighted)";
/// No grant passes over a live waiter that came earlier.
pub const W_FIFO: &str = "FIFO among live waiters (weighted)";
/// No script ends with a live head of the line that fits.
pub const W_NO_IDLE: &str = "no live head left waiting while it fits";
/// No live waiter waits past its budget and one tick.
pub const W_WAITS_END: &str = "every weighted wait ends within its budget";
/// Sometimes two parties hold at once (sharing works).
pub const SOME_SHARED: &str = "sometimes two holders at once";
/// Sometimes one script admits two waiters.
pub const SOME_GROUP: &str = "sometimes a group is admitted at once";
/// After every script, meta's `used` is the weight held, and meta records
/// each holder's weight (but a record another program wrote over).
pub const W_META: &str = "meta counts what is held";
/// Sometimes a crashed holder's weight comes back by its expiry.
pub const SOME_RECLAIM: &str = "sometimes a dead holder's weight comes back";
/// Sometimes a script other than `acquire` admits on stale meta (the holders
/// set expired with the last hold keys).
pub const SOME_STALE_ADMIT: &str = "sometimes a give-up or a force-release admits on stale meta";
/// Sometimes a waiter whose line record another program wrote over with a
/// weight of 0 is admitted (once its own attempt wrote the record again).
pub const SOME_REWRITTEN: &str = "sometimes a waiter whose record was written over is admitted";
/// A live waiter leaves the line only by a grant, its own give-up or
/// claim, or its death (its place's ttl ran out).
pub const W_PLACE_KEPT: &str =
    "a live waiter leaves the line only by a grant, its own give-up or claim, or its death";
/// Every hold granted weighs at least 1: the scripts refuse a hold key of
/// weight 0 as not a semaphore's (its waiter's next call would get
/// `NOTALOCK`, and its release could give nothing back).
pub const W_HOLD_WEIGHT: &str = "every hold granted weighs at least 1";
/// Sometimes a hold granted at a record written over below its request is
/// raised to the request by its claim.
pub const SOME_RAISED: &str = "sometimes a hold granted below its request is raised at its claim";
/// Sometimes a hold granted at a record written over below its request
/// cannot be raised at its claim: it is given back, its waiter goes back
/// to the head of the line, and is admitted later (at its request).
pub const SOME_REQUEUED: &str =
    "sometimes a waiter given back a hold below its request is admitted from the head of the line";
/// Sometimes a hold granted at a record written over above its request is
/// lowered to the request by its claim.
pub const SOME_LOWERED: &str = "sometimes a hold granted above its request is lowered at its claim";
/// Sometimes a waiter whose record another program wrote over with a
/// weight above the capacity is admitted (once its own attempt wrote the
/// record again).
pub const SOME_ABOVE_ADMITTED: &str =
    "sometimes a waiter whose record was written over above the capacity is admitted";

/// Sometimes a waiter whose grant expired unclaimed, its entry in the
/// holders set left for a later reclaim (one reclaim takes one due holder,
/// the soonest), is granted again under its own id once its old entry was
/// reclaimed (`make_way`).
pub const SOME_REGRANT: &str =
    "sometimes a waiter whose grant expired unclaimed is granted again after its old entry went";
/// Sometimes `used` is counted again while a holder whose lease ended is
/// left for a later reclaim: it counts with the weight meta records.
pub const SOME_RECOUNT_DUE: &str =
    "sometimes a recount counts a holder whose lease ended and is not reclaimed yet";

/// Sometimes a request is kept from a grant while its own old entry in
/// the holders set runs (its key lost before its lease ended).
pub const SOME_ENTRY_WAIT: &str =
    "sometimes a request waits for its own old entry whose key was lost";

/// The names of the `always` properties.
pub const W_SAFETY: [&str; 9] = [
    CAPACITY,
    W_BELIEF_BACKED,
    W_TOKENS,
    W_FIFO,
    W_NO_IDLE,
    W_WAITS_END,
    W_META,
    W_PLACE_KEPT,
    W_HOLD_WEIGHT,
];
/// The names of the `sometimes` properties.
pub const W_WITNESSES: [&str; 12] = [
    SOME_SHARED,
    SOME_GROUP,
    SOME_RECLAIM,
    SOME_STALE_ADMIT,
    SOME_REWRITTEN,
    SOME_RAISED,
    SOME_REQUEUED,
    SOME_LOWERED,
    SOME_ABOVE_ADMITTED,
    SOME_REGRANT,
    SOME_RECOUNT_DUE,
    SOME_ENTRY_WAIT,
];

/// How many due holders one script reclaims (the scripts' RECLAIM_LIMIT,
/// 64, in spirit: more are due than one script takes).
pub const RECLAIM_LIMIT: usize = 1;

/// A deliberate bug, to show that the properties catch it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// Admission grants the head whether it fits or not.
    AdmitPastCapacity,
    /// Admission passes over a head that does not fit to a waiter behind
    /// it that does.
    Overtake,
    /// A request that fits is granted at once even when live waiters queue.
    FastPathIgnoresLine,
    /// The reclaim drops holders one tick before their expiry.
    ReclaimLive,
    /// A grant reuses the last token.
    TokenReused,
    /// A release does not admit the line (waiters wait for their refresh).
    NoAdmitOnRelease,
    /// The old write order of an admission (`kind.added`): the holder's
    /// weight is recorded in meta before meta is written, whose clean-up
    /// of stale meta then deletes it with the gone holders' weights.
    StaleCleanupAfterAdded,
    /// A line record whose weight is 0 is admitted, as a holder of weight 0.
    /// Caught while a waiter trusted any grant message; now its grant is
    /// only a wake-up and its claim raises the hold (or puts it back at the
    /// head of the line) as a lowered record's: it breaks no property.
    AdmitWeightZero,
    /// A hold's end gives back the weight meta records for it, 0 when that
    /// is not a weight (lost or written over), never the hold key's own,
    /// and `used` is not counted again.
    WeightReadAsZero,
    /// A waiter trusts a grant message whatever weight it was granted at,
    /// and its claim keeps a hold of another weight than its request.
    GrantIgnoresWeight,
    /// The old admission of a head whose record is above the capacity: it
    /// leaves the line, told 'refused', and the admission goes on to the
    /// next head; the waiter's next attempt queues it at the back.
    RefuseNeverFits,
    /// A grant to an id whose old entry is still in the holders set (an
    /// unclaimed grant that expired, left for a later reclaim) writes over
    /// that entry (`make_way` does nothing): its old weight stays counted
    /// in `used`, and nothing gives it back.
    RegrantOverEntry,
    /// A recount of `used` (a reclaimed holder's weight in meta lost)
    /// leaves out holders whose lease ended and whose reclaim is left for
    /// a later script, while meta keeps their weights: that reclaim gives
    /// them back a second time.
    RecountSkipsDue,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 13] = [
        Mutant::AdmitPastCapacity,
        Mutant::Overtake,
        Mutant::FastPathIgnoresLine,
        Mutant::ReclaimLive,
        Mutant::TokenReused,
        Mutant::NoAdmitOnRelease,
        Mutant::StaleCleanupAfterAdded,
        Mutant::AdmitWeightZero,
        Mutant::WeightReadAsZero,
        Mutant::GrantIgnoresWeight,
        Mutant::RefuseNeverFits,
        Mutant::RegrantOverEntry,
        Mutant::RecountSkipsDue,
    ];

    /// Its name in snake case (`check --variant weighted:NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Mutant::AdmitPastCapacity => "admit_past_capacity",
            Mutant::Overtake => "overtake",
            Mutant::FastPathIgnoresLine => "fast_path_ignores_line",
            Mutant::ReclaimLive => "reclaim_live",
            Mutant::TokenReused => "token_reused",
            Mutant::NoAdmitOnRelease => "no_admit_on_release",
            Mutant::StaleCleanupAfterAdded => "stale_cleanup_after_added",
            Mutant::AdmitWeightZero => "admit_weight_zero",
            Mutant::WeightReadAsZero => "weight_read_as_zero",
            Mutant::GrantIgnoresWeight => "grant_ignores_weight",
            Mutant::RefuseNeverFits => "refuse_never_fits",
            Mutant::RegrantOverEntry => "regrant_over_entry",
            Mutant::RecountSkipsDue => "recount_skips_due",
        }
    }

    /// The mutant named `name` (see [`Mutant::name`]).
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The object and its clients.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    /// Total weight that may be held at once.
    pub capacity: u8,
    /// Each client's request weight.
    pub weights: Vec<u8>,
    /// Acquire-hold-release rounds per client.
    pub rounds: u8,
    /// Ticks a grant taken by the caller (or claimed) lasts.
    pub lease: u8,
    /// Ticks a waiter's place lasts without a refresh; a handed-over grant
    /// lasts min(lease, waiter ttl) until claimed.
    pub waiter_ttl: u8,
    /// Ticks a client waits before giving up.
    pub budget: u8,
    /// The clock stops here.
    pub max_time: u8,
    /// Clients may crash.
    pub crashes: bool,
    /// Grant messages may be lost.
    pub lost_grants: bool,
    /// The holders set expires with the last hold keys (see the module
    /// docs), and an operator may force-release once.
    pub stale_meta: bool,
    /// Another program may write over a waiter's line record (a weight of
    /// 0) and a holder's weight in meta, once each.
    pub foreign_data: bool,
    /// Another program may write over a waiter's line record with another
    /// weight than its request (one less, one more that fits, one above
    /// the capacity), once per run.
    pub forged_weights: bool,
    /// A waiting client may let a tick pass without its refresh (a pause:
    /// its grant may expire unclaimed, its place in line die).
    pub pauses: bool,
    /// Once per run, a hold key is lost before its lease ends (evicted,
    /// or deleted by another program) while its entry in the holders set
    /// says the lease runs.
    pub evictions: bool,
}

impl Config {
    /// A semaphore of 2 permits; requests of 1, 2 and 1 permits.
    pub fn semaphore() -> Config {
        Config {
            capacity: 2,
            weights: vec![1, 2, 1],
            rounds: 1,
            lease: 3,
            waiter_ttl: 2,
            budget: 4,
            max_time: 6,
            crashes: false,
            lost_grants: true,
            stale_meta: false,
            foreign_data: false,
            forged_weights: false,
            pauses: false,
            evictions: false,
        }
    }

    /// A read-write lock: a writer and two readers (capacity 3: the writer
    /// weighs the capacity).
    pub fn read_write() -> Config {
        Config {
            capacity: 3,
            weights: vec![3, 1, 1],
            ..Config::semaphore()
        }
    }

    /// A semaphore of 1 permit whose holders may crash: a dead holder's
    /// permit comes back by its expiry.
    pub fn crashes() -> Config {
        Config {
            capacity: 1,
            weights: vec![1, 1],
            rounds: 1,
            crashes: true,
            lost_grants: false,
            ..Config::semaphore()
        }
    }

    /// Stale meta: a semaphore of 2 permits, a request of 2 whose hold may
    /// run out unrenewed (its holders set with it) while requests of 1 and
    /// 1 wait, whose budget may end as it does (a give-up on stale meta),
    /// and an operator's force-release.
    pub fn stale_meta() -> Config {
        Config {
            capacity: 2,
            weights: vec![2, 1, 1],
            budget: 3,
            max_time: 5,
            lost_grants: false,
            stale_meta: true,
            ..Config::semaphore()
        }
    }

    /// Records written by another program: a semaphore of 1 permit and
    /// three requests of 1; a waiter's line record written over with a
    /// weight of 0, a holder's weight in meta with something that is not
    /// a weight.
    pub fn foreign_data() -> Config {
        Config {
            capacity: 1,
            weights: vec![1, 1, 1],
            max_time: 5,
            lost_grants: false,
            foreign_data: true,
            ..Config::semaphore()
        }
    }

    /// Line records written over with other weights: a semaphore of 2
    /// permits, requests of 2, 1 and 2; a waiter's record written over
    /// with one less than its request (admitted at it, then raised at its
    /// claim or put back at the head of the line), one more that fits
    /// (lowered at its claim) or one above the capacity (waiting at the
    /// head until its next attempt writes it again).
    pub fn forged_weights() -> Config {
        Config {
            capacity: 2,
            weights: vec![2, 1, 2],
            max_time: 5,
            lost_grants: false,
            forged_weights: true,
            ..Config::semaphore()
        }
    }

    /// Grants left unclaimed: a semaphore of 2 permits, three requests of
    /// 1, waiters that may pause past their grant (it expires unclaimed)
    /// and holders past their lease, so that more holders are due than one
    /// reclaim takes; a waiter whose grant expired is granted again under
    /// its own id; and once a hold key lost before its lease ends (its
    /// waiter not granted again before its old entry is due).
    pub fn regrant() -> Config {
        Config {
            capacity: 2,
            weights: vec![1, 1, 1],
            max_time: 5,
            lost_grants: false,
            pauses: true,
            evictions: true,
            ..Config::semaphore()
        }
    }

    /// A recount beside holders left for a later reclaim: a semaphore of 2
    /// permits, three requests of 1, holders that may stay silent past
    /// their lease (two due at once: one reclaim takes one), and a
    /// holder's weight in meta written over by another program, so that
    /// its reclaim counts `used` again while the other is due.
    pub fn recount() -> Config {
        Config {
            capacity: 2,
            weights: vec![1, 1, 1],
            max_time: 4,
            lost_grants: false,
            foreign_data: true,
            ..Config::semaphore()
        }
    }
}

/// What meta records for a holder's weight (`w:ID`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Record {
    /// Its weight.
    Kept(u8),
    /// Nothing: deleted by a script.
    Deleted,
    /// Something that is not a weight, written by another program.
    Forged,
}

/// A holder on the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SHolder {
    client: u8,
    round: u8,
    /// The weight granted (its hold key's).
    weight: u8,
    token: u16,
    expires: u8,
    claimed: bool,
    /// What meta records for its weight.
    recorded: Record,
    /// Its hold key is there (it expires with `expires`; another program
    /// or an eviction may delete it before, `Config::evictions`).
    key: bool,
}

impl SHolder {
    /// Whether its hold key lives at `now`.
    fn key_lives(&self, now: u8) -> bool {
        self.key && self.expires > now
    }
}

/// A waiter in line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SWaiter {
    client: u8,
    round: u8,
    /// The weight its line record names (its request but when another
    /// program wrote over it).
    record: u8,
    alive_until: u8,
}

/// What a client is doing.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WPhase {
    /// About to make its first attempt of a round.
    Ready,
    /// Queued; `refreshed`: it has refreshed its place this tick.
    Waiting {
        /// When it gives up.
        deadline: u8,
        /// Refreshed during this tick.
        refreshed: bool,
    },
    /// Believes it holds, under `token`, until `until`.
    Holding {
        /// The grant's token.
        token: u16,
        /// The end of its belief.
        until: u8,
    },
    /// No rounds left.
    Done,
}

/// A grant message: signed over all of it, the weight included.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Grant {
    /// The acquisition (round) it was made to.
    round: u8,
    token: u16,
    expires: u8,
    /// The weight granted: the line record's at the admission.
    weight: u8,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WClient {
    phase: WPhase,
    round: u8,
    crashed: bool,
    /// Grant messages not yet read.
    inbox: Vec<Grant>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WState {
    now: u8,
    holders: Vec<SHolder>,
    line: Vec<SWaiter>,
    token: u16,
    clients: Vec<WClient>,
    /// Meta's `used`: the weight held, as the scripts count it.
    meta_used: u8,
    /// When the holders set expires (`Config::stale_meta` only; 0 while
    /// nobody holds: the set is gone).
    set_until: u8,
    /// The operator's force-release was sent (once per run).
    forced: bool,
    /// Whose line record another program wrote over, in which round, and
    /// the weight written (once per run).
    forged_record: Option<(u8, u8, u8)>,
    /// Another program wrote over a holder's weight in meta (once per run).
    forged_weight: bool,
    token_regressed: bool,
    fifo_broken: bool,
    idle_head: bool,
    meta_off: bool,
    shared: bool,
    group: bool,
    reclaimed_dead: bool,
    stale_admit: bool,
    rewritten_admit: bool,
    place_lost: bool,
    /// A hold of weight 0 was granted.
    weightless_hold: bool,
    raised: bool,
    /// The waiter whose record was written over went back to the head of
    /// the line (its hold given back).
    requeued: bool,
    requeued_admit: bool,
    lowered: bool,
    above_admitted: bool,
    /// A waiter's own due entry was reclaimed by `make_way` before its
    /// grant.
    regranted: bool,
    /// A recount counted a due holder left for a later reclaim.
    recount_due: bool,
    /// A hold key was lost before its lease ended (once per run).
    evicted: bool,
    /// `make_way` kept a request from a grant while its own old entry ran.
    entry_waited: bool,
}

/// A step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WAction {
    /// The clock advances one tick.
    Tick,
    /// `acquire` (first attempt, refresh or claim) by client `c`.
    Acquire(u8),
    /// `give_up` by client `c` (its budget ran out).
    GiveUp(u8),
    /// `release` by client `c`.
    Release(u8),
    /// `renew` by client `c` (its watchdog; claims a handed-over grant).
    Renew(u8),
    /// Client `c` reads its next grant message.
    Deliver(u8),
    /// Client `c`'s next grant message is lost.
    Lose(u8),
    /// Client `c` dies.
    Crash(u8),
    /// An operator's `force_release`: every hold given back, each holder
    /// told at once.
    ForceRelease,
    /// Another program writes the weight `w` into waiter `c`'s line record.
    ForgeRecord(u8, u8),
    /// Another program writes something that is not a weight over holder
    /// `c`'s weight in meta.
    ForgeWeight(u8),
    /// Holder `c`'s hold key is lost (evicted) before its lease ends.
    Evict(u8),
}

/// The design under `config`, with `mutant` (if any) put in.
#[derive(Clone, Debug)]
pub struct WeightedModel {
    /// The object and its clients.
    pub config: Config,
    /// The deliberate bug, if any.
    pub mutant: Option<Mutant>,
}

impl Model for WeightedModel {
    type State = WState;
    type Action = WAction;

    fn init_states(&self) -> Vec<WState> {
        vec![WState {
            now: 0,
            holders: Vec::new(),
            line: Vec::new(),
            token: 0,
            clients: self
                .config
                .weights
                .iter()
                .map(|_| WClient {
                    phase: WPhase::Ready,
                    round: 0,
                    crashed: false,
                    inbox: Vec::new(),
                })
                .collect(),
            meta_used: 0,
            set_until: 0,
            forced: false,
            forged_record: None,
            forged_weight: false,
            token_regressed: false,
            fifo_broken: false,
            idle_head: false,
            meta_off: false,
            shared: false,
            group: false,
            reclaimed_dead: false,
            stale_admit: false,
            rewritten_admit: false,
            place_lost: false,
            weightless_hold: false,
            raised: false,
            requeued: false,
            requeued_admit: false,
            lowered: false,
            above_admitted: false,
            regranted: false,
            recount_due: false,
            evicted: false,
            entry_waited: false,
        }]
    }

    fn actions(&self, st: &WState, actions: &mut Vec<WAction>) {
        let tick_ok = st.now < self.config.max_time
            && st
                .clients
                .iter()
                .filter(|c| !c.crashed)
                .all(|c| match c.phase {
                    WPhase::Waiting {
                        deadline,
                        refreshed,
                    } => (refreshed || self.config.pauses) && st.now < deadline,
                    // A holder may pause past its belief's end: it then no
                    // longer believes, and its next call finds what is left.
                    _ => true,
                });
        if tick_ok {
            actions.push(WAction::Tick);
        }
        if self.config.stale_meta && !st.forced {
            actions.push(WAction::ForceRelease);
        }
        for (i, client) in st.clients.iter().enumerate() {
            let c = i as u8;
            if st.forged_record.is_none() && st.line.iter().any(|w| w.client == c) {
                let weight = self.config.weights[i];
                let cap = self.config.capacity;
                if self.config.foreign_data {
                    actions.push(WAction::ForgeRecord(c, 0));
                }
                if self.config.forged_weights {
                    if weight > 1 {
                        actions.push(WAction::ForgeRecord(c, weight - 1));
                    }
                    if weight < cap {
                        actions.push(WAction::ForgeRecord(c, weight + 1));
                    }
                    actions.push(WAction::ForgeRecord(c, cap + 1));
                }
            }
            if self.config.foreign_data
                && !st.forged_weight
                && st.holders.iter().any(|h| h.client == c)
            {
                actions.push(WAction::ForgeWeight(c));
            }
            if self.config.evictions
                && !st.evicted
                && st
                    .holders
                    .iter()
                    .any(|h| h.client == c && h.key_lives(st.now))
            {
                actions.push(WAction::Evict(c));
            }
            if client.crashed {
                continue;
            }
            match client.phase {
                WPhase::Ready => actions.push(WAction::Acquire(c)),
                WPhase::Waiting {
                    deadline,
                    refreshed,
                } => {
                    if st.now >= deadline {
                        actions.push(WAction::GiveUp(c));
                    } else if !refreshed {
                        actions.push(WAction::Acquire(c));
                    }
                }
                WPhase::Holding { .. } => {
                    actions.push(WAction::Release(c));
                    actions.push(WAction::Renew(c));
                }
                WPhase::Done => {}
            }
            if !client.inbox.is_empty() {
                actions.push(WAction::Deliver(c));
                if self.config.lost_grants {
                    actions.push(WAction::Lose(c));
                }
            }
            if self.config.crashes && client.phase != WPhase::Done {
                actions.push(WAction::Crash(c));
            }
        }
    }

    fn next_state(&self, last: &WState, action: WAction) -> Option<WState> {
        let mut st = last.clone();
        match action {
            WAction::Tick => {
                st.now += 1;
                for client in &mut st.clients {
                    if let WPhase::Waiting { refreshed, .. } = &mut client.phase {
                        *refreshed = false;
                    }
                }
            }
            WAction::Acquire(c) => self.acquire(&mut st, c),
            WAction::GiveUp(c) => self.give_up(&mut st, c),
            WAction::Release(c) => {
                let WPhase::Holding { token, .. } = st.clients[usize::from(c)].phase else {
                    return None;
                };
                self.release(&mut st, c, token);
            }
            WAction::Renew(c) => {
                let WPhase::Holding { token, .. } = st.clients[usize::from(c)].phase else {
                    return None;
                };
                self.renew(&mut st, c, token);
            }
            WAction::Deliver(c) => {
                let weight = self.config.weights[usize::from(c)];
                let trusts_any = self.is(Mutant::GrantIgnoresWeight);
                let client = &mut st.clients[usize::from(c)];
                let grant = client.inbox.remove(0);
                // A grant for the acquisition still waiting, at the weight
                // it asked for, is trusted until its expiry; any other is
                // stale, or only a wake-up (made at a record another
                // program wrote over: the next attempt's claim corrects
                // it).
                if grant.round == client.round
                    && (grant.weight == weight || trusts_any)
                    && matches!(client.phase, WPhase::Waiting { .. })
                    && grant.expires > st.now
                {
                    client.phase = WPhase::Holding {
                        token: grant.token,
                        until: grant.expires,
                    };
                }
            }
            WAction::Lose(c) => {
                st.clients[usize::from(c)].inbox.remove(0);
            }
            WAction::Crash(c) => {
                let client = &mut st.clients[usize::from(c)];
                client.crashed = true;
                client.inbox.clear();
            }
            WAction::ForceRelease => self.force_release(&mut st),
            WAction::ForgeRecord(c, weight) => {
                for w in st.line.iter_mut().filter(|w| w.client == c) {
                    w.record = weight;
                    st.forged_record = Some((c, w.round, weight));
                }
            }
            WAction::Evict(c) => {
                st.evicted = true;
                let now = st.now;
                for h in st.holders.iter_mut().filter(|h| h.client == c) {
                    if h.key_lives(now) {
                        h.key = false;
                    }
                }
            }
            WAction::ForgeWeight(c) => {
                st.forged_weight = true;
                for h in st.holders.iter_mut().filter(|h| h.client == c) {
                    h.recorded = Record::Forged;
                }
            }
        }
        if Self::believers(&st).count() >= 2 {
            st.shared = true;
        }
        if Self::place_lost(last, &st, &action) {
            st.place_lost = true;
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(CAPACITY, |m: &WeightedModel, st: &WState| {
                let believed: u16 = WeightedModel::believers(st)
                    .map(|(c, _, _)| u16::from(m.config.weights[usize::from(c)]))
                    .sum();
                believed <= u16::from(m.config.capacity)
            }),
            Property::always(W_BELIEF_BACKED, |_, st: &WState| {
                WeightedModel::believers(st).all(|(c, token, until)| {
                    st.holders
                        .iter()
                        .any(|h| h.client == c && h.token == token && h.expires >= until)
                })
            }),
            Property::always(W_TOKENS, |_, st: &WState| !st.token_regressed),
            Property::always(W_FIFO, |_, st: &WState| !st.fifo_broken),
            Property::always(W_NO_IDLE, |_, st: &WState| !st.idle_head),
            Property::always(W_WAITS_END, |_, st: &WState| {
                st.clients
                    .iter()
                    .filter(|c| !c.crashed)
                    .all(|c| match c.phase {
                        WPhase::Waiting { deadline, .. } => st.now <= deadline.saturating_add(1),
                        _ => true,
                    })
            }),
            Property::always(W_META, |_, st: &WState| !st.meta_off),
            Property::always(W_PLACE_KEPT, |_, st: &WState| !st.place_lost),
            Property::always(W_HOLD_WEIGHT, |_, st: &WState| !st.weightless_hold),
            Property::sometimes(SOME_SHARED, |_, st: &WState| st.shared),
            Property::sometimes(SOME_GROUP, |_, st: &WState| st.group),
            Property::sometimes(SOME_RECLAIM, |_, st: &WState| st.reclaimed_dead),
            Property::sometimes(SOME_STALE_ADMIT, |_, st: &WState| st.stale_admit),
            Property::sometimes(SOME_REWRITTEN, |_, st: &WState| st.rewritten_admit),
            Property::sometimes(SOME_RAISED, |_, st: &WState| st.raised),
            Property::sometimes(SOME_REQUEUED, |_, st: &WState| st.requeued_admit),
            Property::sometimes(SOME_LOWERED, |_, st: &WState| st.lowered),
            Property::sometimes(SOME_ABOVE_ADMITTED, |_, st: &WState| st.above_admitted),
            Property::sometimes(SOME_REGRANT, |_, st: &WState| st.regranted),
            Property::sometimes(SOME_RECOUNT_DUE, |_, st: &WState| st.recount_due),
            Property::sometimes(SOME_ENTRY_WAIT, |_, st: &WState| st.entry_waited),
        ]
    }
}

//! A model of the leader election (`docs/election.md`,
//! `crates/fairlock/src/election.rs`): terms, succession, a paused leader,
//! a proclaim racing a succession, and an observer.
//!
//! # What it models
//!
//! - **The server**: the fair lock reduced to what the election needs (its
//!   holder, the hold's token, its expiry by the server's clock; the line
//!   of candidates in arrival order; tokens drawn above every earlier one),
//!   and the election's log (entries `TERM:SEQ:KIND:VALUE`, oldest first
//!   here). `election.lua` (a fenced write: `l` publish, `r` resign) and
//!   `election_read.lua` (the holder and the log, read at once) are each
//!   one atomic step.
//! - **Candidates**: each campaigns once: joins the line, is granted the
//!   lock at the head of the line once it is free (a handoff, or its
//!   refresh after the holder's lease ran out), publishes its value (value
//!   1), may proclaim another (value 2) at any time while it has the
//!   leadership, renews its lease (the watchdog; or not: a paused or
//!   cut-off leader simply takes no step while time passes), and resigns
//!   (a fenced `r`, then the release) or never does (it died).
//! - **Belief**: a leader believes until the lease the server last
//!   confirmed ends (`Leadership::lost` fires then); the server's key
//!   expires no earlier.
//! - **An observer**: reads the holder and the log at any time (a message,
//!   the interval, a reconnect: any read at any time) and turns each read
//!   into changes as `LeaderChanges::take_in` does: every log entry after
//!   the last one taken in, oldest first, then the state now.
//! - **Time**: ticks; the lease is [`LEASE`] ticks.
//!
//! # Abstractions
//!
//! One election, two or three candidates, each campaigning once; a script
//! and its reply are one step; the log is not trimmed (a scenario writes
//! fewer than its 16 entries); no failover (the lock's model covers the
//! grant's replication and [`crate::NativeModel`] its handoffs, waiter
//! liveness and lost messages: here a grant reaches its candidate).
//!
//! # Properties
//!
//! [`ONE_LEADER`]: never two candidates believing they lead;
//! [`TERMS`]: each leader's term is above every earlier one; [`LOG_ORDER`]:
//! the log's entries only go forward (no value of an earlier term after a
//! later term's); [`OBSERVED`]: the observer returns each term once, in
//! order (a term, once left for nobody or a later term, never comes
//! back). Witnesses: a succession, a leader deposed while it did not
//! resign, a proclaim refused by the fence, an observer that saw two terms.

use stateright::{Model, Property};

/// Never two candidates believing they lead.
pub const ONE_LEADER: &str = "never two leaders believing";
/// Every grant's term is above every earlier one.
pub const TERMS: &str = "terms increase";
/// The log only goes forward.
pub const LOG_ORDER: &str = "the log's entries go forward";
/// The observer returns each term once, in order, and skips none that
/// published (the log is not trimmed here).
pub const OBSERVED: &str = "observers see each term once, in order";
/// Sometimes a second leader published.
pub const SOME_SUCCESSION: &str = "sometimes a successor publishes";
/// Sometimes a leader's belief ended without a resignation while another
/// held the lock.
pub const SOME_DEPOSED: &str = "sometimes a paused leader is deposed";
/// Sometimes a proclaim is refused by the fence.
pub const SOME_REFUSED: &str = "sometimes a deposed leader's proclaim is refused";
/// Sometimes the observer returned two terms.
pub const SOME_OBSERVED_TWO: &str = "sometimes the observer sees two terms";

/// Every safety property.
pub const E_SAFETY: [&str; 4] = [ONE_LEADER, TERMS, LOG_ORDER, OBSERVED];
/// Every witness.
pub const E_WITNESSES: [&str; 4] = [
    SOME_SUCCESSION,
    SOME_DEPOSED,
    SOME_REFUSED,
    SOME_OBSERVED_TWO,
];

/// The lease, in ticks.
pub const LEASE: u8 = 2;

/// A deliberate bug.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// `proclaim` writes without checking that its term holds the lock.
    ProclaimUnfenced,
    /// A leader believes one tick past the lease the server confirmed.
    BeliefPastLease,
    /// A grant reuses the last token instead of drawing a greater one.
    TermReused,
    /// The observer takes in only the newest log entry, not every one after
    /// the last it saw.
    ObserverSkipsHistory,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 4] = [
        Mutant::ProclaimUnfenced,
        Mutant::BeliefPastLease,
        Mutant::TermReused,
        Mutant::ObserverSkipsHistory,
    ];

    /// Its name on the command line (`election:NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Mutant::ProclaimUnfenced => "proclaim_unfenced",
            Mutant::BeliefPastLease => "belief_past_lease",
            Mutant::TermReused => "term_reused",
            Mutant::ObserverSkipsHistory => "observer_skips_history",
        }
    }

    /// The mutant named `name`.
    pub fn named(name: &str) -> Option<Mutant> {
        Mutant::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// A candidate's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Has not campaigned yet.
    Idle,
    /// In line.
    Waiting,
    /// Has the leadership (believing or not).
    Leading {
        /// Its term.
        term: u16,
        /// It believes while the clock is below this.
        until: u8,
        /// Its value is published.
        published: bool,
        /// It proclaimed (once per scenario, to bound the model).
        proclaimed: bool,
    },
    /// Resigned, or its campaign failed.
    Done,
}

/// One entry of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The writer's term.
    pub term: u16,
    /// Counts the term's entries from 1.
    pub seq: u8,
    /// `l` (a value) or `r` (resigned).
    pub leads: bool,
    /// The value (1 published by the campaign, 2 proclaimed).
    pub value: u8,
}

/// A change the observer returned: the leader's term and value, or nobody.
pub type Change = Option<(u16, u8)>;

/// The observer (`LeaderChanges`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Observer {
    /// The newest entry taken in.
    pub last: Option<(u16, u8)>,
    /// The last change returned.
    pub shown: Option<Change>,
    /// The greatest term returned.
    pub max_seen: u16,
    /// Terms up to this one were left (for nobody or a later term).
    pub closed: u16,
    /// Distinct terms returned.
    pub terms_seen: u8,
    /// The terms returned (bit `term`).
    pub returned: u32,
    /// A term returned out of order or twice, or a published term skipped.
    pub violated: bool,
}

/// The whole state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EState {
    /// The server's clock.
    pub now: u8,
    /// The lock: holder, token, expiry (held while `now < expiry`).
    pub lock: Option<(u8, u16, u8)>,
    /// The greatest token drawn.
    pub last_token: u16,
    /// Candidates in line, in arrival order.
    pub line: Vec<u8>,
    /// The log, oldest first.
    pub log: Vec<Entry>,
    /// Each candidate.
    pub clients: Vec<Phase>,
    /// The observer.
    pub observer: Observer,
    /// A grant drew a term not above every earlier one.
    pub term_regressed: bool,
    /// A proclaim was refused by the fence.
    pub refused: bool,
}

/// A step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EAction {
    /// The clock moves on.
    Tick,
    /// Candidate `c` joins the line.
    Campaign(u8),
    /// The lock goes to candidate `c`, the head of the line.
    Grant(u8),
    /// Candidate `c` publishes its value (the end of `campaign`).
    Publish(u8),
    /// Candidate `c` proclaims a new value.
    Proclaim(u8),
    /// Candidate `c`'s watchdog renews its lease.
    Renew(u8),
    /// Candidate `c` resigns.
    Resign(u8),
    /// The observer reads the election.
    Observe,
}

/// The election with `clients` candidates for `max_time` ticks, and
/// `mutant` (if any) put in.
#[derive(Clone, Debug)]
pub struct ElectionModel {
    /// How many candidates.
    pub clients: u8,
    /// The clock stops here.
    pub max_time: u8,
    /// The deliberate bug, if any.
    pub mutant: Option<Mutant>,
}

impl ElectionModel {
    /// The faithful model: two candidates, six ticks.
    pub fn new() -> ElectionModel {
        ElectionModel {
            clients: 2,
            max_time: 6,
            mutant: None,
        }
    }

    /// The model with `mutant` put in.
    pub fn mutated(mutant: Mutant) -> ElectionModel {
        ElectionModel {
            mutant: Some(mutant),
            ..ElectionModel::new()
        }
    }

    fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// The holder and its token, while the key has not expired.
    fn holder(st: &EState) -> Option<(u8, u16)> {
        st.lock
            .filter(|&(_, _, expiry)| st.now < expiry)
            .map(|(c, token, _)| (c, token))
    }

    /// `election.lua`: written only while `c` holds the lock under `term`
    /// (unless `fenced` is off).
    fn write(st: &mut EState, c: u8, term: u16, leads: bool, value: u8, fenced: bool) -> bool {
        if fenced && ElectionModel::holder(st) != Some((c, term)) {
            return false;
        }
        let seq = match st.log.last() {
            Some(head) if head.term == term => head.seq + 1,
            _ => 1,
        };
        st.log.push(Entry {
            term,
            seq,
            leads,
            value,
        });
        true
    }

    /// `LeaderChanges::take_in`, on a read of the holder and the log.
    fn observe(&self, st: &mut EState) {
        let holder = ElectionModel::holder(st).map(|(_, token)| token);
        let log = st.log.clone();
        let obs = &mut st.observer;
        let newer: Vec<&Entry> = if self.is(Mutant::ObserverSkipsHistory) {
            log.last().into_iter().collect()
        } else {
            log.iter().collect()
        };
        for entry in newer {
            if obs.last.is_none_or(|last| (entry.term, entry.seq) > last) {
                let change = entry.leads.then_some((entry.term, entry.value));
                Self::queue(obs, change);
            }
        }
        if let Some(head) = log.last() {
            obs.last = Some((head.term, head.seq));
        }
        let current = log
            .last()
            .filter(|head| head.leads && holder == Some(head.term))
            .map(|head| (head.term, head.value));
        Self::queue(obs, current);
        // Every term that published, up to the last one returned, was
        // returned: none skipped.
        let skipped = log
            .iter()
            .any(|e| e.leads && e.term <= obs.max_seen && obs.returned & (1 << e.term) == 0);
        if skipped {
            obs.violated = true;
        }
    }

    /// Return `change` unless it is the one last returned; check the order.
    fn queue(obs: &mut Observer, change: Change) {
        if obs.shown == Some(change) {
            return;
        }
        obs.shown = Some(change);
        match change {
            Some((term, _)) => {
                if term < obs.max_seen || term <= obs.closed {
                    obs.violated = true;
                }
                if term > obs.max_seen {
                    obs.terms_seen += 1;
                    obs.max_seen = term;
                }
                obs.returned |= 1 << term;
            }
            None => obs.closed = obs.max_seen,
        }
    }

    fn believes(&self, st: &EState, c: usize) -> bool {
        matches!(st.clients[c], Phase::Leading { until, .. } if st.now < until)
    }

    fn until(&self, now: u8) -> u8 {
        now + LEASE + u8::from(self.is(Mutant::BeliefPastLease))
    }
}

impl Default for ElectionModel {
    fn default() -> Self {
        ElectionModel::new()
    }
}

impl Model for ElectionModel {
    type State = EState;
    type Action = EAction;

    fn init_states(&self) -> Vec<EState> {
        let mut st = EState {
            now: 0,
            lock: None,
            last_token: 0,
            line: Vec::new(),
            log: Vec::new(),
            clients: vec![Phase::Idle; usize::from(self.clients)],
            observer: Observer::default(),
            term_regressed: false,
            refused: false,
        };
        // `observe()` reads once at once.
        self.observe(&mut st);
        vec![st]
    }

    fn actions(&self, st: &EState, actions: &mut Vec<EAction>) {
        if st.now < self.max_time {
            actions.push(EAction::Tick);
        }
        actions.push(EAction::Observe);
        for c in 0..self.clients {
            match st.clients[usize::from(c)] {
                Phase::Idle => actions.push(EAction::Campaign(c)),
                Phase::Waiting => {
                    if st.line.first() == Some(&c) && ElectionModel::holder(st).is_none() {
                        actions.push(EAction::Grant(c));
                    }
                }
                Phase::Leading {
                    published,
                    proclaimed,
                    ..
                } => {
                    if !published {
                        actions.push(EAction::Publish(c));
                    } else if !proclaimed {
                        actions.push(EAction::Proclaim(c));
                    }
                    actions.push(EAction::Renew(c));
                    actions.push(EAction::Resign(c));
                }
                Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &EState, action: EAction) -> Option<EState> {
        let mut st = last.clone();
        match action {
            EAction::Tick => st.now += 1,
            EAction::Observe => {
                self.observe(&mut st);
                if st == *last {
                    return None;
                }
            }
            EAction::Campaign(c) => {
                st.clients[usize::from(c)] = Phase::Waiting;
                st.line.push(c);
            }
            EAction::Grant(c) => {
                let term = if self.is(Mutant::TermReused) {
                    st.last_token.max(1)
                } else {
                    st.last_token + 1
                };
                if term <= st.last_token {
                    st.term_regressed = true;
                }
                st.last_token = st.last_token.max(term);
                st.lock = Some((c, term, st.now + LEASE));
                st.line.remove(0);
                st.clients[usize::from(c)] = Phase::Leading {
                    term,
                    until: self.until(st.now),
                    published: false,
                    proclaimed: false,
                };
            }
            EAction::Publish(c) => {
                let Phase::Leading {
                    term,
                    until,
                    proclaimed,
                    ..
                } = st.clients[usize::from(c)]
                else {
                    return None;
                };
                if ElectionModel::write(&mut st, c, term, true, 1, true) {
                    st.clients[usize::from(c)] = Phase::Leading {
                        term,
                        until,
                        published: true,
                        proclaimed,
                    };
                } else {
                    // The campaign answers LockLost; its leadership is
                    // dropped (its resignation is refused by the fence).
                    st.clients[usize::from(c)] = Phase::Done;
                }
            }
            EAction::Proclaim(c) => {
                let Phase::Leading {
                    term,
                    until,
                    published,
                    ..
                } = st.clients[usize::from(c)]
                else {
                    return None;
                };
                let fenced = !self.is(Mutant::ProclaimUnfenced);
                if !ElectionModel::write(&mut st, c, term, true, 2, fenced) {
                    st.refused = true;
                }
                st.clients[usize::from(c)] = Phase::Leading {
                    term,
                    until,
                    published,
                    proclaimed: true,
                };
            }
            EAction::Renew(c) => {
                let Phase::Leading {
                    term,
                    published,
                    proclaimed,
                    ..
                } = st.clients[usize::from(c)]
                else {
                    return None;
                };
                if ElectionModel::holder(&st) != Some((c, term)) {
                    return None;
                }
                st.lock = Some((c, term, st.now + LEASE));
                st.clients[usize::from(c)] = Phase::Leading {
                    term,
                    until: self.until(st.now),
                    published,
                    proclaimed,
                };
            }
            EAction::Resign(c) => {
                let Phase::Leading { term, .. } = st.clients[usize::from(c)] else {
                    return None;
                };
                ElectionModel::write(&mut st, c, term, false, 0, true);
                if ElectionModel::holder(&st) == Some((c, term)) {
                    st.lock = None;
                }
                st.clients[usize::from(c)] = Phase::Done;
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_LEADER, |m: &ElectionModel, st: &EState| {
                (0..st.clients.len()).filter(|&c| m.believes(st, c)).count() <= 1
            }),
            Property::always(TERMS, |_, st: &EState| !st.term_regressed),
            Property::always(LOG_ORDER, |_, st: &EState| {
                st.log
                    .windows(2)
                    .all(|w| (w[0].term, w[0].seq) < (w[1].term, w[1].seq))
            }),
            Property::always(OBSERVED, |_, st: &EState| !st.observer.violated),
            Property::sometimes(SOME_SUCCESSION, |_, st: &EState| {
                st.log.iter().filter(|e| e.leads && e.seq == 1).count() >= 2
            }),
            Property::sometimes(SOME_DEPOSED, |m: &ElectionModel, st: &EState| {
                let holder = ElectionModel::holder(st);
                (0..st.clients.len()).any(|c| {
                    matches!(st.clients[c], Phase::Leading { .. })
                        && !m.believes(st, c)
                        && holder.is_some_and(|(h, _)| usize::from(h) != c)
                })
            }),
            Property::sometimes(SOME_REFUSED, |_, st: &EState| st.refused),
            Property::sometimes(SOME_OBSERVED_TWO, |_, st: &EState| {
                st.observer.terms_seen >= 2
            }),
        ]
    }
}

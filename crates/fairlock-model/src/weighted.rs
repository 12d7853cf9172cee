//! A model of the design of the `native` read-write lock and semaphore
//! (`docs/kinds.md`): one fair queue of weighted requests in front of a
//! capacity, checked before the scripts are written.
//!
//! # What it models
//!
//! - **The server**: the holders (client, weight, token, expiry, claimed),
//!   the line (client, weight, liveness deadline) and the token counter.
//!   Each script of the design (`acquire`, which also refreshes and claims;
//!   `release`; `give_up`; `renew`) is one atomic step that first reclaims
//!   expired holders and drops dead waiters, and ends by admitting the
//!   head of the line while it fits, then the next head (a release may
//!   admit a group of readers at once).
//! - **The clients**: each runs `rounds` acquire-hold-release rounds of one
//!   request (its weight: 1 for a reader or a one-permit request, the
//!   capacity for a writer), waits within a budget, refreshes its place
//!   every tick, reads grant messages (which may be lost), renews its hold
//!   (which claims a handed-over grant), and may crash.
//! - **Time**: ticks; leases, waiter ttls and budgets are a few ticks.
//!
//! # Abstractions
//!
//! One object, no re-entry or downgrade, no failover, no force-unlock, no
//! message duplication (the mutex's model covers those with the same
//! rules); a script and its reply are one step.
//!
//! # Properties
//!
//! [`CAPACITY`]: the weights of the parties that believe they hold never
//! add up past the capacity (for the read-write lock: a writer is alone,
//! readers only beside readers); [`W_BELIEF_BACKED`]; [`W_TOKENS`];
//! [`W_FIFO`]: nobody is granted while a live waiter that came earlier
//! still waits; [`W_NO_IDLE`]: no script leaves a live head that fits
//! waiting; [`W_WAITS_END`]; and witnesses that keep it from being vacuous
//! (two holders at once, a group admitted by one release, a dead holder's
//! weight coming back).

use stateright::{Model, Property};

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
/// Sometimes a crashed holder's weight comes back by its expiry.
pub const SOME_RECLAIM: &str = "sometimes a dead holder's weight comes back";

/// The names of the `always` properties.
pub const W_SAFETY: [&str; 6] = [
    CAPACITY,
    W_BELIEF_BACKED,
    W_TOKENS,
    W_FIFO,
    W_NO_IDLE,
    W_WAITS_END,
];
/// The names of the `sometimes` properties.
pub const W_WITNESSES: [&str; 3] = [SOME_SHARED, SOME_GROUP, SOME_RECLAIM];

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
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 6] = [
        Mutant::AdmitPastCapacity,
        Mutant::Overtake,
        Mutant::FastPathIgnoresLine,
        Mutant::ReclaimLive,
        Mutant::TokenReused,
        Mutant::NoAdmitOnRelease,
    ];
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
}

/// A holder on the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SHolder {
    client: u8,
    round: u8,
    weight: u8,
    token: u16,
    expires: u8,
    claimed: bool,
}

/// A waiter in line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SWaiter {
    client: u8,
    round: u8,
    weight: u8,
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

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WClient {
    phase: WPhase,
    round: u8,
    crashed: bool,
    /// Grant messages not yet read: (round, token, expires).
    inbox: Vec<(u8, u16, u8)>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WState {
    now: u8,
    holders: Vec<SHolder>,
    line: Vec<SWaiter>,
    token: u16,
    clients: Vec<WClient>,
    token_regressed: bool,
    fifo_broken: bool,
    idle_head: bool,
    shared: bool,
    group: bool,
    reclaimed_dead: bool,
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
}

/// The design under `config`, with `mutant` (if any) put in.
#[derive(Clone, Debug)]
pub struct WeightedModel {
    /// The object and its clients.
    pub config: Config,
    /// The deliberate bug, if any.
    pub mutant: Option<Mutant>,
}

impl WeightedModel {
    /// The faithful design.
    pub fn new(config: Config) -> WeightedModel {
        WeightedModel {
            config,
            mutant: None,
        }
    }

    /// The design with `mutant` put in.
    pub fn mutated(config: Config, mutant: Mutant) -> WeightedModel {
        WeightedModel {
            config,
            mutant: Some(mutant),
        }
    }

    fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    fn used(st: &WState) -> u8 {
        st.holders.iter().map(|h| h.weight).sum()
    }

    /// The first steps of every script: expired holders and dead waiters go.
    fn reclaim(&self, st: &mut WState) {
        let now = st.now;
        let early = u8::from(self.is(Mutant::ReclaimLive));
        let before = st.holders.clone();
        st.holders.retain(|h| h.expires > now + early);
        for gone in before.iter().filter(|h| !st.holders.contains(h)) {
            if st.clients[usize::from(gone.client)].crashed {
                st.reclaimed_dead = true;
            }
        }
        st.line.retain(|w| w.alive_until > now);
    }

    fn next_token(&self, st: &mut WState) -> u16 {
        let token = if self.is(Mutant::TokenReused) && st.token > 0 {
            st.token
        } else {
            st.token + 1
        };
        if token <= st.token {
            st.token_regressed = true;
        }
        st.token = token;
        token
    }

    /// Hand the object to the head of the line while it fits, then to the
    /// next head; each grant is published to its waiter and lasts
    /// min(lease, waiter ttl) until claimed.
    fn admit(&self, st: &mut WState) {
        let mut granted = 0;
        loop {
            let used = Self::used(st);
            let cap = self.config.capacity;
            let pick = if self.is(Mutant::AdmitPastCapacity) {
                (!st.line.is_empty()).then_some(0)
            } else if self.is(Mutant::Overtake) {
                st.line.iter().position(|w| used + w.weight <= cap)
            } else {
                st.line
                    .first()
                    .filter(|w| used + w.weight <= cap)
                    .map(|_| 0)
            };
            let Some(i) = pick else { break };
            if i > 0 {
                st.fifo_broken = true;
            }
            let w = st.line.remove(i);
            let token = self.next_token(st);
            let expires = st.now + self.config.lease.min(self.config.waiter_ttl);
            st.holders.push(SHolder {
                client: w.client,
                round: w.round,
                weight: w.weight,
                token,
                expires,
                claimed: false,
            });
            st.clients[usize::from(w.client)]
                .inbox
                .push((w.round, token, expires));
            granted += 1;
        }
        if granted >= 2 {
            st.group = true;
        }
    }

    /// Observed after every script (not a step of it): a live head that
    /// fits left waiting is a bug (the ghost flag the property reads).
    fn check_idle(&self, st: &mut WState) {
        if st
            .line
            .first()
            .is_some_and(|w| Self::used(st) + w.weight <= self.config.capacity)
        {
            st.idle_head = true;
        }
    }

    fn acquire(&self, st: &mut WState, c: u8) {
        self.reclaim(st);
        let now = st.now;
        let round = st.clients[usize::from(c)].round;
        let weight = self.config.weights[usize::from(c)];
        self.admit(st);
        // Handed over (now or earlier) to this acquisition: claim it.
        if let Some(h) = st
            .holders
            .iter_mut()
            .find(|h| h.client == c && h.round == round)
        {
            h.claimed = true;
            h.expires = h.expires.max(now + self.config.lease);
            let (token, until) = (h.token, h.expires);
            st.line.retain(|w| w.client != c);
            self.check_idle(st);
            st.clients[usize::from(c)].phase = WPhase::Holding { token, until };
            return;
        }
        let live_ahead = !st.line.is_empty();
        if st.line.iter().any(|w| w.client == c && w.round == round) {
            for w in st.line.iter_mut().filter(|w| w.client == c) {
                w.alive_until = now + self.config.waiter_ttl;
            }
        } else if (!live_ahead || self.is(Mutant::FastPathIgnoresLine))
            && Self::used(st) + weight <= self.config.capacity
        {
            if live_ahead {
                st.fifo_broken = true;
            }
            let token = self.next_token(st);
            let until = now + self.config.lease;
            st.holders.push(SHolder {
                client: c,
                round,
                weight,
                token,
                expires: until,
                claimed: true,
            });
            self.check_idle(st);
            st.clients[usize::from(c)].phase = WPhase::Holding { token, until };
            return;
        } else {
            st.line.push(SWaiter {
                client: c,
                round,
                weight,
                alive_until: now + self.config.waiter_ttl,
            });
        }
        self.check_idle(st);
        let client = &mut st.clients[usize::from(c)];
        client.phase = match client.phase {
            WPhase::Waiting { deadline, .. } => WPhase::Waiting {
                deadline,
                refreshed: true,
            },
            _ => WPhase::Waiting {
                deadline: now + self.config.budget,
                refreshed: true,
            },
        };
    }

    fn finish_round(&self, st: &mut WState, c: u8) {
        let client = &mut st.clients[usize::from(c)];
        client.round += 1;
        client.inbox.retain(|(round, _, _)| *round >= client.round);
        client.phase = if client.round >= self.config.rounds {
            WPhase::Done
        } else {
            WPhase::Ready
        };
    }

    fn give_up(&self, st: &mut WState, c: u8) {
        self.reclaim(st);
        let round = st.clients[usize::from(c)].round;
        st.line.retain(|w| w.client != c);
        st.holders.retain(|h| !(h.client == c && h.round == round));
        self.admit(st);
        self.check_idle(st);
        self.finish_round(st, c);
    }

    fn release(&self, st: &mut WState, c: u8, token: u16) {
        self.reclaim(st);
        st.holders.retain(|h| !(h.client == c && h.token == token));
        if !self.is(Mutant::NoAdmitOnRelease) {
            self.admit(st);
        }
        self.check_idle(st);
        self.finish_round(st, c);
    }

    fn renew(&self, st: &mut WState, c: u8, token: u16) {
        self.reclaim(st);
        let now = st.now;
        let lease = self.config.lease;
        let renewed = st
            .holders
            .iter_mut()
            .find(|h| h.client == c && h.token == token)
            .map(|h| {
                h.claimed = true;
                h.expires = h.expires.max(now + lease);
                h.expires
            });
        self.admit(st);
        self.check_idle(st);
        match renewed {
            Some(until) => st.clients[usize::from(c)].phase = WPhase::Holding { token, until },
            // Lost: the client is told and stops holding.
            None => self.finish_round(st, c),
        }
    }

    fn believers(st: &WState) -> impl Iterator<Item = (u8, u16, u8)> + '_ {
        st.clients
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.crashed)
            .filter_map(move |(i, c)| match c.phase {
                WPhase::Holding { token, until } if until > st.now => Some((i as u8, token, until)),
                _ => None,
            })
    }
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
            token_regressed: false,
            fifo_broken: false,
            idle_head: false,
            shared: false,
            group: false,
            reclaimed_dead: false,
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
                    } => refreshed && st.now < deadline,
                    // A holder may pause past its belief's end: it then no
                    // longer believes, and its next call finds what is left.
                    _ => true,
                });
        if tick_ok {
            actions.push(WAction::Tick);
        }
        for (i, client) in st.clients.iter().enumerate() {
            let c = i as u8;
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
                let client = &mut st.clients[usize::from(c)];
                let (round, token, expires) = client.inbox.remove(0);
                // A grant for the acquisition still waiting is trusted
                // until its expiry; any other is stale.
                if round == client.round
                    && matches!(client.phase, WPhase::Waiting { .. })
                    && expires > st.now
                {
                    client.phase = WPhase::Holding {
                        token,
                        until: expires,
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
        }
        if Self::believers(&st).count() >= 2 {
            st.shared = true;
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
            Property::sometimes(SOME_SHARED, |_, st: &WState| st.shared),
            Property::sometimes(SOME_GROUP, |_, st: &WState| st.group),
            Property::sometimes(SOME_RECLAIM, |_, st: &WState| st.reclaimed_dead),
        ]
    }
}

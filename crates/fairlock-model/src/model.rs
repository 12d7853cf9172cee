//! The stateright [`Model`]: the actions, their effects, the properties.

use stateright::{Model, Property};

use crate::client;
use crate::scenario::{Scenario, Step};
use crate::scripts::{self, Env};
use crate::state::{Client, Ghost, Msg, Phase, Server, State, Task, seen};
use crate::variant::Variant;

/// The native protocol under one [`Scenario`], with one [`Variant`].
#[derive(Clone, Debug)]
pub struct NativeModel {
    /// The clients' programs and the faults allowed.
    pub scenario: Scenario,
    /// The fixes left out and the mutants put in.
    pub variant: Variant,
}

/// One step of the system: a script run by a client (with its reply), a
/// client's own step, or the environment's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// The clock advances one tick; expired keys go.
    Tick,
    /// Client `c`'s task `t` starts a `Lock` step: reads the owner's hold
    /// count (`base`), draws the acquisition's secret.
    Begin(usize, usize),
    /// `acquire` (first attempt, refresh, or wake-up) for a task.
    Attempt(usize, usize),
    /// `give_up`: the wait's budget ran out.
    GiveUp(usize, usize),
    /// `acquire` for a task whose reply is lost: the script runs, the
    /// acquisition fails with its outcome unknown.
    AttemptLost(usize, usize),
    /// The undo of an acquisition whose last reply was lost: `give_up`,
    /// then a release of the hold the attempt may have made.
    Undo(usize, usize),
    /// `release` of the guard the task's `Unlock` step names.
    Unlock(usize, usize),
    /// Client `c` reads the next message on its pub/sub connection.
    Deliver(usize),
    /// The next wake-up message (a grant, or a non-fair `free`) to client
    /// `c` is lost.
    Drop(usize),
    /// The next wake-up message to client `c` comes twice.
    Duplicate(usize),
    /// A task that read a grant proceeds: registers the hold (or, told to
    /// verify, calls `acquire`).
    Proceed(usize, usize),
    /// A task's `WAIT` returns: the replica has every write so far.
    Synced(usize, usize),
    /// A task's `WAIT` fails: the master it wrote to was replaced.
    SyncFailed(usize, usize),
    /// `renew` of hold `h` of client `c`: the watchdog's renewal, or the
    /// claim of a handed-over grant.
    Renew(usize, usize),
    /// The `WAIT` after a renewal or claim of hold `h` of client `c` ends.
    RenewSynced(usize, usize),
    /// The replica catches up with the master.
    Replicate,
    /// The replica becomes the master (losing what it lacked); a tick
    /// passes (a failover takes time).
    Failover,
    /// `force_release` (an operator's `force-unlock`).
    ForceUnlock,
    /// Client `c`'s process dies.
    Crash(usize),
}

impl NativeModel {
    /// The model of `scenario` under `variant`.
    pub fn new(scenario: Scenario, variant: Variant) -> NativeModel {
        NativeModel { scenario, variant }
    }

    fn env(&self) -> Env<'_> {
        Env {
            variant: &self.variant,
            scenario: &self.scenario,
        }
    }

    /// Properties about exclusion are waived after a failover when the
    /// clients do not WAIT for replicas (the documented window).
    fn waived(&self, st: &State) -> bool {
        st.epoch > 0 && !self.scenario.min_replicas
    }

    fn tick(&self, st: &mut State) {
        st.now += 1;
        let now = st.now;
        if let Some(lock) = &st.master.lock {
            if lock.expires <= now {
                let guarded = st.clients.iter().any(|c| {
                    c.holds
                        .iter()
                        .any(|h| h.owner == lock.owner && h.token == lock.token && h.guards > 0)
                });
                if guarded {
                    st.ghost.seen |= seen::EXPIRY;
                }
                st.master.lock = None;
            }
        }
        if st.replica.lock.as_ref().is_some_and(|l| l.expires <= now) {
            st.replica.lock = None;
        }
        for client in &mut st.clients {
            for task in &mut client.tasks {
                if let Phase::Waiting { refreshed, .. } = &mut task.phase {
                    *refreshed = false;
                }
            }
        }
    }

    /// May the clock advance? Live waiters refresh every tick and give up
    /// when their budget runs out (their timers are not late).
    fn tick_allowed(&self, st: &State) -> bool {
        st.now < self.scenario.max_time
            && st.clients.iter().filter(|c| !c.crashed).all(|c| {
                c.tasks.iter().all(|task| match task.phase {
                    Phase::Waiting { refreshed, .. } => refreshed && st.now < task.deadline,
                    // A begun acquisition whose budget is spent makes its
                    // call (and gives up) before the clock moves on.
                    Phase::Begun => st.now < task.deadline,
                    // A grant to verify is checked at once.
                    Phase::GrantRead { verify, .. } => !verify,
                    _ => true,
                })
            })
    }

    /// A live waiter waits while the lock is free (checked as a tick ends).
    fn idle_with_waiter(&self, st: &State) -> bool {
        st.master.lock.is_none()
            && st.clients.iter().filter(|c| !c.crashed).any(|c| {
                c.tasks
                    .iter()
                    .any(|t| matches!(t.phase, Phase::Waiting { .. }))
            })
    }
}

impl Model for NativeModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let clients = self
            .scenario
            .clients
            .iter()
            .map(|tasks| Client {
                tasks: tasks
                    .iter()
                    .map(|_| Task {
                        pc: 0,
                        phase: Phase::Ready,
                        owner: 0,
                        base: 0,
                        deadline: 0,
                        guards: Vec::new(),
                    })
                    .collect(),
                holds: Vec::new(),
                inbox: Vec::new(),
                crashed: false,
            })
            .collect();
        vec![State {
            now: 0,
            master: Server::default(),
            replica: Server::default(),
            epoch: 0,
            forced: 0,
            lost_replies: 0,
            clients,
            ghost: Ghost::default(),
        }]
    }

    fn actions(&self, st: &State, actions: &mut Vec<Action>) {
        let sc = &self.scenario;
        if self.tick_allowed(st) {
            actions.push(Action::Tick);
        }
        for (c, client) in st.clients.iter().enumerate() {
            if client.crashed {
                continue;
            }
            for (t, task) in client.tasks.iter().enumerate() {
                match &task.phase {
                    Phase::Ready => match client::step(sc, st, c, t) {
                        Some(Step::Lock { owner, .. }) => {
                            let owner = client::owner_of(c, owner);
                            if self.variant.concurrent_same_owner
                                || !client::owner_busy(st, c, t, owner)
                            {
                                actions.push(Action::Begin(c, t));
                            }
                        }
                        // Releases take no turn (owner.rs): they only lower
                        // the count, never the secret an undo goes by.
                        Some(Step::Unlock(_)) => actions.push(Action::Unlock(c, t)),
                        None => {}
                    },
                    Phase::Begun => {
                        actions.push(Action::Attempt(c, t));
                        if sc.lost_replies && st.lost_replies == 0 {
                            actions.push(Action::AttemptLost(c, t));
                        }
                    }
                    Phase::Undoing => actions.push(Action::Undo(c, t)),
                    Phase::Waiting { refreshed, .. } => {
                        if st.now >= task.deadline {
                            actions.push(Action::GiveUp(c, t));
                        } else if !refreshed {
                            actions.push(Action::Attempt(c, t));
                        }
                    }
                    Phase::GrantRead { .. } => actions.push(Action::Proceed(c, t)),
                    Phase::Syncing { epoch, .. } => {
                        if *epoch != st.epoch {
                            actions.push(Action::SyncFailed(c, t));
                        } else if st.replica == st.master {
                            actions.push(Action::Synced(c, t));
                        }
                    }
                    Phase::Done => {}
                }
            }
            for (h, hold) in client.holds.iter().enumerate() {
                // The watchdog drops a hold whose lease ran out unrenewed;
                // a deferred claim runs however late it comes.
                if hold.lost || hold.guards == 0 || (hold.claimed && !hold.believes(st.now)) {
                    continue;
                }
                match hold.pending {
                    Some((_, epoch)) => {
                        if epoch != st.epoch || st.replica == st.master {
                            actions.push(Action::RenewSynced(c, h));
                        }
                    }
                    None => {
                        if hold.watch_guards > 0 || !hold.claimed {
                            actions.push(Action::Renew(c, h));
                        }
                    }
                }
            }
            if let Some(msg) = client.inbox.first() {
                actions.push(Action::Deliver(c));
                // A revocation is never lost unnoticed: a dropped
                // connection makes the client check its holds as well.
                if sc.message_faults && matches!(msg, Msg::Grant { .. } | Msg::Free { .. }) {
                    actions.push(Action::Drop(c));
                    if client.inbox.len() < 3 {
                        actions.push(Action::Duplicate(c));
                    }
                }
            }
            if sc.crashes {
                actions.push(Action::Crash(c));
            }
        }
        if (sc.min_replicas || sc.failovers > 0) && st.replica != st.master {
            actions.push(Action::Replicate);
        }
        if st.epoch < sc.failovers && self.tick_allowed(st) {
            actions.push(Action::Failover);
        }
        if st.forced < sc.force_unlocks && st.master.lock.is_some() {
            actions.push(Action::ForceUnlock);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let sc = &self.scenario;
        let env = self.env();
        let mut st = last.clone();
        match action {
            Action::Tick => {
                // Free at two tick boundaries in a row with a live waiter
                // waiting: nobody took it within a refresh interval.
                let idle = self.idle_with_waiter(&st) && st.epoch == 0;
                if idle && st.ghost.idle_last_tick {
                    st.ghost.idle_with_waiter = true;
                }
                st.ghost.idle_last_tick = idle;
                self.tick(&mut st);
            }
            Action::Begin(c, t) => {
                let Some(Step::Lock { owner, wait, .. }) = client::step(sc, &st, c, t) else {
                    return None;
                };
                let owner = client::owner_of(c, owner);
                let base = client::hold_count(&st, c, owner);
                let now = st.now;
                let task = &mut st.clients[c].tasks[t];
                task.owner = owner;
                task.base = base;
                task.deadline = now.saturating_add(wait);
                task.phase = Phase::Begun;
            }
            Action::Attempt(c, t) => client::attempt(sc, env, &mut st, c, t),
            Action::AttemptLost(c, t) => {
                let (lease, _) = client::lease_of(sc, &st, c, t);
                let task = &st.clients[c].tasks[t];
                let (owner, base, nonce) = (task.owner, task.base, (c as u8, t as u8, task.pc));
                let _ = scripts::acquire(&mut st, env, owner, lease, base, nonce);
                st.lost_replies += 1;
                st.clients[c].tasks[t].phase = Phase::Undoing;
            }
            Action::Undo(c, t) => {
                let task = &st.clients[c].tasks[t];
                let (owner, base, nonce) = (task.owner, task.base, (c as u8, t as u8, task.pc));
                st.clients[c].tasks[t].phase = Phase::Done;
                scripts::give_up(&mut st, env, owner, nonce);
                scripts::undo_release(&mut st, env, owner, base, nonce);
            }
            Action::GiveUp(c, t) => {
                let task = &st.clients[c].tasks[t];
                let (owner, nonce) = (task.owner, (c as u8, t as u8, task.pc));
                // No longer waiting when its give-up passes a grant on.
                st.clients[c].tasks[t].phase = Phase::Done;
                scripts::give_up(&mut st, env, owner, nonce);
            }
            Action::Unlock(c, t) => {
                let Some(Step::Unlock(i)) = client::step(sc, &st, c, t) else {
                    return None;
                };
                let task = &mut st.clients[c].tasks[t];
                task.pc += 1;
                let owner = match sc.clients[c][t][usize::from(i)] {
                    Step::Lock { owner, .. } => client::owner_of(c, owner),
                    Step::Unlock(_) => return None,
                };
                let Some(guard) = task.guards.get_mut(usize::from(i)).and_then(Option::take) else {
                    return Some(st);
                };
                let holds = &mut st.clients[c].holds;
                let Some(h) = holds
                    .iter()
                    .position(|h| h.owner == owner && h.token == guard.token)
                else {
                    return Some(st);
                };
                let hold = &mut holds[h];
                hold.guards -= 1;
                hold.watch_guards -= u8::from(guard.watchdog && hold.watch_guards > 0);
                let lost = hold.lost;
                if hold.guards == 0 {
                    holds.remove(h);
                }
                // A retired or lost hold's guard never releases.
                if lost {
                    st.ghost.orphaned.push((owner, guard.token));
                } else {
                    scripts::release(&mut st, env, owner, guard.token);
                }
            }
            Action::Deliver(c) => client::deliver(env, &mut st, c),
            Action::Drop(c) => {
                st.clients[c].inbox.remove(0);
            }
            Action::Duplicate(c) => {
                let msg = st.clients[c].inbox[0].clone();
                st.clients[c].inbox.insert(0, msg);
            }
            Action::Proceed(c, t) => {
                let Phase::GrantRead {
                    token,
                    until,
                    verify,
                    epoch,
                } = st.clients[c].tasks[t].phase.clone()
                else {
                    return None;
                };
                if verify && st.now < st.clients[c].tasks[t].deadline {
                    client::attempt(sc, env, &mut st, c, t);
                } else if verify {
                    // Budget spent: give up (a grant still its own passes on).
                    let task = &mut st.clients[c].tasks[t];
                    let (owner, nonce) = (task.owner, (c as u8, t as u8, task.pc));
                    task.phase = Phase::Done;
                    scripts::give_up(&mut st, env, owner, nonce);
                } else {
                    st.ghost.seen |= seen::GRANT_TRUSTED;
                    if sc.min_replicas {
                        st.clients[c].tasks[t].phase = Phase::Syncing {
                            token,
                            until,
                            claimed: false,
                            reentry: false,
                            epoch,
                        };
                    } else {
                        client::register(sc, env, &mut st, c, t, token, until, false, false);
                    }
                }
            }
            Action::Synced(c, t) => {
                let Phase::Syncing {
                    token,
                    until,
                    claimed,
                    reentry,
                    ..
                } = st.clients[c].tasks[t].phase.clone()
                else {
                    return None;
                };
                client::register(sc, env, &mut st, c, t, token, until, claimed, reentry);
            }
            Action::SyncFailed(c, t) => {
                // The acquisition fails with an error; what the server still
                // has of it lapses with its lease.
                if let Phase::Syncing { token, .. } = st.clients[c].tasks[t].phase {
                    let owner = st.clients[c].tasks[t].owner;
                    st.ghost.orphaned.push((owner, token));
                }
                st.clients[c].tasks[t].phase = Phase::Done;
            }
            Action::Renew(c, h) => client::renew(sc, env, &mut st, c, h),
            Action::RenewSynced(c, h) => {
                let hold = &mut st.clients[c].holds[h];
                if let Some((until, epoch)) = hold.pending.take() {
                    if epoch == st.epoch {
                        hold.until = hold.until.max(until);
                    }
                }
            }
            Action::Replicate => st.replica = st.master.clone(),
            Action::Failover => {
                st.master = st.replica.clone();
                st.epoch += 1;
                st.ghost.seen |= seen::FAILOVER;
                self.tick(&mut st);
            }
            Action::ForceUnlock => {
                st.forced += 1;
                scripts::force_release(&mut st, env);
            }
            Action::Crash(c) => {
                let client = &mut st.clients[c];
                client.crashed = true;
                client.holds.clear();
                client.inbox.clear();
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        crate::properties::all()
    }
}

impl NativeModel {
    /// Exclusion is waived in this state (failover without `min_replicas`).
    pub fn exclusion_waived(&self, st: &State) -> bool {
        self.waived(st)
    }
}

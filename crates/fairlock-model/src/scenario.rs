//! What the clients do and what the environment may do: the bounds of one
//! check.

/// A lease, as `lock()` (watchdog) or `lock_with_lease(d)` (explicit) ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lease {
    /// Renewed by the watchdog with [`Scenario::watchdog_lease`].
    Watchdog,
    /// An explicit lease of this many ticks, never renewed.
    Explicit(u8),
}

/// One step of a task's program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Acquire with owner slot `owner`, waiting at most `wait` ticks.
    Lock {
        /// The owner slot (0..4) of this client.
        owner: u8,
        /// The lease asked for.
        lease: Lease,
        /// The wait budget, in ticks.
        wait: u8,
    },
    /// Unlock the guard made by the `Lock` at this step index.
    Unlock(u8),
}

/// The bounds of one check: the clients' programs and the faults allowed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Scenario {
    /// A short name (printed with the counterexample).
    pub name: &'static str,
    /// For each client, its tasks' programs.
    pub clients: Vec<Vec<Vec<Step>>>,
    /// The watchdog's lease (`lock()`), in ticks.
    pub watchdog_lease: u8,
    /// Every waiter's ttl, in ticks (refreshes come every tick).
    pub waiter_ttl: u8,
    /// The clock stops here (the time bound of the check).
    pub max_time: u8,
    /// The clients WAIT for a replica before relying on a write.
    pub min_replicas: bool,
    /// Failovers allowed (0 or 1).
    pub failovers: u8,
    /// Force-unlocks allowed.
    pub force_unlocks: u8,
    /// Grant messages may be dropped or duplicated.
    pub message_faults: bool,
    /// Clients may crash.
    pub crashes: bool,
    /// One acquisition attempt's reply may be lost (its script ran): the
    /// acquisition fails and undoes what the attempt may have done.
    pub lost_replies: bool,
    /// The fair lock (`true`) or the non-fair one: a release wakes the
    /// first live waiter (`free`) instead of handing the lock over, unless
    /// that waiter joined the line in an earlier tick (it waited too long
    /// to be overtaken), and anybody may take a free lock first.
    pub fair: bool,
}

fn lock(owner: u8, lease: Lease, wait: u8) -> Step {
    Step::Lock { owner, lease, wait }
}

impl Scenario {
    /// Two clients, each locking once and unlocking, with lost and
    /// duplicated grant messages and crashes: handoffs, claims, dead
    /// waiters, expiry.
    pub fn handoffs() -> Scenario {
        let once = vec![lock(0, Lease::Explicit(3), 3), Step::Unlock(0)];
        Scenario {
            name: "handoffs",
            clients: vec![vec![once.clone()], vec![once]],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 4,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 0,
            message_faults: true,
            crashes: true,
            lost_replies: false,
            fair: true,
        }
    }

    /// Hole 1's setting: a watchdog hold re-entered with a longer explicit
    /// lease, the first guard unlocked; another client wants the lock.
    pub fn reentry() -> Scenario {
        Scenario {
            name: "reentry",
            clients: vec![
                vec![vec![
                    lock(0, Lease::Watchdog, 0),
                    lock(0, Lease::Explicit(5), 0),
                    Step::Unlock(0),
                ]],
                vec![vec![lock(0, Lease::Explicit(2), 5)]],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 6,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 0,
            message_faults: false,
            crashes: false,
            lost_replies: false,
            fair: true,
        }
    }

    /// Hole 2's setting: a holder and two waiters; one force-unlock.
    pub fn force_unlock() -> Scenario {
        let once = vec![lock(0, Lease::Explicit(2), 3), Step::Unlock(0)];
        Scenario {
            name: "force_unlock",
            clients: vec![
                vec![vec![lock(0, Lease::Explicit(2), 0), Step::Unlock(0)]],
                vec![once.clone()],
                vec![once],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 3,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 1,
            message_faults: false,
            crashes: false,
            lost_replies: false,
            fair: true,
        }
    }

    /// Hole 3's setting: min_replicas on, one failover; a holder hands the
    /// lock to a waiter with a long lease, then wants it again.
    pub fn replicas() -> Scenario {
        Scenario {
            name: "replicas",
            clients: vec![
                vec![vec![
                    lock(0, Lease::Explicit(2), 0),
                    Step::Unlock(0),
                    lock(0, Lease::Explicit(2), 4),
                ]],
                vec![vec![lock(0, Lease::Explicit(4), 2)]],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 4,
            min_replicas: true,
            failovers: 1,
            force_unlocks: 0,
            message_faults: false,
            crashes: false,
            lost_replies: false,
            fair: true,
        }
    }

    /// Hole 4's setting: two tasks of one client lock and unlock with the
    /// same owner at once; another client wants the lock.
    pub fn shared_owner() -> Scenario {
        let once = vec![lock(0, Lease::Explicit(4), 2), Step::Unlock(0)];
        Scenario {
            name: "shared_owner",
            clients: vec![
                vec![once.clone(), once],
                vec![vec![lock(0, Lease::Explicit(2), 3)]],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 3,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 0,
            message_faults: false,
            crashes: false,
            lost_replies: false,
            fair: true,
        }
    }

    /// The shared-owner finding's and its review's setting: two tasks of
    /// one client share an owner (one holds, the other re-enters, either
    /// order), another client holds or waits, and one attempt's reply may
    /// be lost.
    pub fn lost_reply() -> Scenario {
        Scenario {
            name: "lost_reply",
            clients: vec![
                vec![
                    vec![lock(0, Lease::Explicit(3), 2), Step::Unlock(0)],
                    vec![lock(0, Lease::Explicit(3), 0), Step::Unlock(0)],
                ],
                vec![vec![lock(0, Lease::Explicit(2), 2), Step::Unlock(0)]],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 3,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 0,
            message_faults: false,
            crashes: false,
            lost_replies: true,
            fair: true,
        }
    }

    /// The non-fair lock: a holder that releases and asks again at once
    /// (taking it past the waiter its release woke, or waiting behind it),
    /// and a waiter; wake-ups may be lost or duplicated.
    pub fn nonfair() -> Scenario {
        Scenario {
            name: "nonfair",
            clients: vec![
                vec![vec![
                    lock(0, Lease::Explicit(2), 2),
                    Step::Unlock(0),
                    lock(0, Lease::Explicit(2), 2),
                    Step::Unlock(2),
                ]],
                vec![vec![lock(0, Lease::Explicit(2), 3), Step::Unlock(0)]],
            ],
            watchdog_lease: 2,
            waiter_ttl: 2,
            max_time: 3,
            min_replicas: false,
            failovers: 0,
            force_unlocks: 0,
            message_faults: true,
            crashes: false,
            lost_replies: false,
            fair: false,
        }
    }

    /// Every scenario the bounded check of the correct model runs.
    pub fn all() -> Vec<Scenario> {
        vec![
            Scenario::handoffs(),
            Scenario::reentry(),
            Scenario::force_unlock(),
            Scenario::replicas(),
            Scenario::shared_owner(),
            Scenario::lost_reply(),
            Scenario::nonfair(),
        ]
    }

    /// The scenario named `name`.
    pub fn named(name: &str) -> Option<Scenario> {
        Scenario::all().into_iter().find(|s| s.name == name)
    }
}

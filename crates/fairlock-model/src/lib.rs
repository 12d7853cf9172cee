//! A model of fairlock's `native` protocol, checked exhaustively (within
//! bounds) with [stateright](https://docs.rs/stateright).
//!
//! # What it models
//!
//! - **The server**: the lock key of the layout version 2 (while held:
//!   owner, count, token, claimed, the flag w, nonce, expiry; while free:
//!   the marker with the last token and its flags w and k), the line
//!   (arrival order, liveness deadlines, each waiter's lease, ttl and
//!   secret). Each Lua script (`acquire` with its fast path, `release` with
//!   its fast path and `hand_off` or the non-fair wake-up, `give_up`,
//!   `force_release`, `renew` as renewal, claim and check) is **one atomic
//!   step**, written from `crates/fairlock/src/protocol/native/*.lua`.
//! - **A replica** that lags: a past state of the master, brought up to date
//!   by its own action; a failover replaces the master by it. With
//!   `min_replicas` a client relies on a write only after its `WAIT`
//!   (modelled as: the replica equals the master) returned.
//! - **The clients**: tasks running small lock/unlock programs, each
//!   client's registry of holds (token, guards = the hold count as the
//!   client sees it, the belief's end), its watchdog (renewals, claims), and
//!   its one pub/sub connection: grant and revocation messages in order,
//!   which may be delayed, lost or duplicated (grants) and are read by the
//!   client in two steps (read, then register) as the implementation does;
//!   a non-fair waiter's `free` wake-up, which may be lost or duplicated.
//! - **Time**: a global clock in ticks; leases, waiter ttls and wait budgets
//!   are a few ticks; keys expire by the server's clock; a holder may pause
//!   for any number of ticks; live waiters refresh every tick.
//! - **Faults**: lost and duplicated grant messages, crashed clients,
//!   force-unlock, one failover.
//!
//! # Abstractions
//!
//! One lock; two or three clients; the fair lock, and the non-fair one
//! (`Scenario::fair`) in one scenario; a script and its reply are one step
//! (replies are never lost; the scripts' handling of a lost reply, `count ==
//! base + 1`, is kept); the release's answer (request id, cache), type
//! checks and key TTLs other than the lock's are left out (the free marker
//! outlives every check). Each module says where it abstracts.
//!
//! # Properties
//!
//! See [`properties`]: mutual exclusion (never two believing holders; with
//! `min_replicas` also across a failover), beliefs backed by the server,
//! every counted hold has a guard, no ghost waiter (a live place in line
//! whose acquisition is over), increasing tokens, FIFO among live waiters
//! (the fair lock), no idle lock while a live waiter waits, bounded waits,
//! bounded unclaimed grants; and `sometimes`
//! witnesses (a handoff, a re-entry, a renewal, a claim, ...) so that a
//! vacuous model is caught.
//!
//! # Variants
//!
//! [`Variant`] switches each known hole's fix off, or a safety mutant on;
//! the tests assert that each is caught.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

mod client;
pub mod election;
mod model;
pub mod properties;
mod report;
mod scenario;
mod scripts;
mod state;
mod variant;
pub mod weighted;

pub use model::{Action, NativeModel};
pub use report::{Outcome, check, describe, format_path, owner_name, summary};
pub use scenario::{Lease, Scenario, Step};
pub use state::{
    Client, Ghost, Guard, Hold, Lock, Marker, Msg, Nonce, OWNERS_PER_CLIENT, Owner, Phase, Server,
    State, Task, Token, Waiter, client_of, seen,
};
pub use variant::{GRANT_OVERTRUST, VARIANT_NAMES, Variant};

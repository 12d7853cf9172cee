//! Fault injection: queue samples, forged grants, and faults of the
//! workers, the network, the server and (Sentinel, Cluster) failovers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::{FairLock, Protocol};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis::aio::MultiplexedConnection;

use crate::history::{Failover, QueueLog, combo};
use crate::private_cluster;
use crate::private_sentinel;
use crate::{Failure, exit};

use super::stage::{Stage, lock_cluster, lock_deployment, on_cluster};
use super::workload::Workers;
use super::{End, FAIR, Plan, Progress, Rng, StopSignals, raw_connection, server_time_us};

/// At most one sentinel is frozen per this long. A sentinel whose timer
/// was delayed by more than 2 s (a SIGSTOP) enters TILT mode for 30 s: it
/// takes no action and answers no to its peers' "is the master down"
/// questions. Frozen more often, two of the three sentinels were in TILT
/// at once and no failover could happen (a killed master stayed the master
/// for minutes, and nothing was granted).
pub(super) const SENTINEL_FREEZE_EVERY: Duration = Duration::from_secs(40);

/// The faults injected so far.
#[derive(Default)]
pub(super) struct Injected {
    pub(super) kills: u32,
    pub(super) pauses: u32,
    pub(super) delays: u32,
    pub(super) silent: u32,
    pub(super) cuts: u32,
    pub(super) busy: u32,
    pub(super) forged: u64,
    /// Standalone: 2 s PUBLISH floods on every subscribed channel, and
    /// `SCRIPT FLUSH`es.
    pub(super) floods: u32,
    pub(super) flushes: u32,
    /// Sentinel and Cluster: SIGKILLs and SIGSTOPs of a master.
    pub(super) master_kills: u32,
    pub(super) master_pauses: u32,
    /// Sentinel: `SENTINEL FAILOVER`s, sentinels frozen for a while.
    pub(super) sentinel_failovers: u32,
    pub(super) sentinel_pauses: u32,
    /// Cluster: `CLUSTER FAILOVER`s, slot migrations of a busy lock.
    pub(super) cluster_failovers: u32,
    pub(super) migrations: u32,
    /// Sentinel: `SENTINEL FAILOVER`s sent right after a handoff seen in
    /// the fair queue (server time, µs).
    pub(super) handoff_failovers: Vec<u64>,
    /// Each failover fault (server time, µs, and the locks it hit).
    pub(super) failovers: Vec<Failover>,
    /// When each fault hit (server time, µs) and whom: a worker's pid, or
    /// 0 for every worker (a fault of the network or the server).
    pub(super) hits: Vec<(u64, u32)>,
}

impl Injected {
    /// Faults of every kind, forged grants apart.
    fn total(&self) -> u32 {
        self.kills
            + self.pauses
            + self.delays
            + self.silent
            + self.cuts
            + self.busy
            + self.floods
            + self.flushes
            + self.master_kills
            + self.master_pauses
            + self.sentinel_failovers
            + self.sentinel_pauses
            + self.cluster_failovers
            + self.migrations
    }
}

/// The orchestrator's side of the run: it samples the fair queue, forges
/// grants and injects faults.
pub(super) struct Injector<'a> {
    plan: &'a Plan,
    stage: &'a Stage,
    /// The fair locks, each with its queue's snapshots.
    locks: Vec<(String, FairLock)>,
    conn: MultiplexedConnection,
    rng: Rng,
    /// The wake-up channels of [`FAIR`]'s queue, but for the owner.
    channel_prefix: String,
    pub(super) queues: HashMap<String, QueueLog>,
    pub(super) injected: Injected,
    next_forgery: Instant,
    next_fault: Instant,
    /// When the reply delay in force ends.
    undelay_at: Option<Instant>,
    /// Sentinel: the state of failover faults.
    failover: FailoverState,
}

/// Failover faults in progress (Sentinel topology).
pub(super) struct FailoverState {
    /// The port of a killed master, to start again as a replica once the
    /// sentinels named another master.
    rejoin: Option<u16>,
    /// When a killed master's rejoin last waited long enough to be
    /// reported (every 30 s while the sentinels name no other master).
    rejoin_reported: Option<Instant>,
    /// A SIGSTOPped master's pid, and when to SIGCONT it.
    resume: Option<(u32, Instant)>,
    /// Sentinel: a SIGSTOPped sentinel (its index and pid), and when to
    /// SIGCONT it.
    sentinel_resume: Option<(usize, u32, Instant)>,
    /// When a sentinel was frozen last (see [`SENTINEL_FREEZE_EVERY`]).
    sentinel_frozen_at: Option<Instant>,
    /// Cluster: a killed master's port and the slot of a lock it served,
    /// to start it again once another master serves that slot.
    cluster_rejoin: Option<(u16, u16)>,
    /// Cluster: a slot migration under way.
    migration: Option<Migration>,
    /// No failover fault before this.
    next_allowed: Instant,
}

/// Where a cluster fault hits: the master serving a lock's slot, its
/// replica in sync, the locks it serves, and another master (where a
/// migration would take the slot).
pub(super) struct ClusterTarget {
    master: u16,
    replica: u16,
    slot: u16,
    locks: Vec<String>,
    to: u16,
}

/// A slot on its way from one master to another, a step at a time.
pub(super) struct Migration {
    slot: u16,
    from: u16,
    to: u16,
    /// Keys moved already: what is left is `SETSLOT NODE`.
    moved: bool,
    /// When to take the next step.
    next: Instant,
    /// Steps that failed so far (retried after a while).
    failures: u32,
}

impl<'a> Injector<'a> {
    pub(super) fn new(plan: &'a Plan, stage: &'a Stage, seed: u64) -> Result<Self, Failure> {
        let channel_prefix = match plan.protocol {
            Protocol::Redisson => format!("redisson_lock__channel:{{{FAIR}}}"),
            _ => format!("fairlock:{{{FAIR}}}:wake"),
        };
        let locks = stage
            .fair_locks
            .iter()
            .map(|name| Ok((name.clone(), stage.observer.fair_lock(name)?)))
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(Self {
            plan,
            stage,
            locks,
            conn: stage.conn.clone(),
            rng: Rng(seed | 1),
            channel_prefix,
            queues: stage
                .fair_locks
                .iter()
                .map(|name| {
                    let log = QueueLog {
                        // Redisson drops a waiter at the head whose
                        // deadline has passed, live or not.
                        slot_us: (plan.protocol == Protocol::Redisson)
                            .then(|| plan.settings.waiter_slot().as_micros() as u64),
                        ..QueueLog::default()
                    };
                    (name.clone(), log)
                })
                .collect(),
            injected: Injected::default(),
            next_forgery: Instant::now(),
            next_fault: Instant::now() + Duration::from_millis(1500),
            undelay_at: None,
            failover: FailoverState {
                rejoin: None,
                resume: None,
                rejoin_reported: None,
                sentinel_resume: None,
                sentinel_frozen_at: None,
                cluster_rejoin: None,
                migration: None,
                next_allowed: Instant::now() + Duration::from_secs(2),
            },
        })
    }

    /// Until the deadline, a stop signal or a failure: show progress,
    /// sample the queue, end reply delays, forge grants, inject faults.
    pub(super) async fn run(
        &mut self,
        workers: &mut Workers<'_>,
        started: Instant,
        deadline: Instant,
        stop: &StopSignals,
    ) -> End {
        let mut progress = Progress::new(started, self.plan.duration);
        let end = loop {
            if Instant::now() >= deadline {
                break End::Deadline;
            }
            if let Some(signal) = stop.received() {
                break End::Signal(signal);
            }
            progress.tick(workers.reports.holds(), self.injected.total());
            if let Err(failure) = self.step(workers, deadline).await {
                break End::Failed(failure);
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        };
        progress.line.clear();
        // A paused master or sentinel must not stay paused after the run,
        // nor a slot half-way to another master.
        if let Some((pid, _)) = self.failover.resume.take() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        if let Some((_, pid, _)) = self.failover.sentinel_resume.take() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
        }
        while self.failover.migration.is_some() {
            if let Err(failure) = self.migrate_step(true).await {
                eprintln!("torture: {}", failure.message);
                break;
            }
        }
        end
    }

    async fn step(&mut self, workers: &mut Workers<'_>, deadline: Instant) -> Result<(), Failure> {
        self.sample_queue().await;
        if self.undelay_at.is_some_and(|at| Instant::now() >= at) {
            if let Some(proxy) = &self.stage.proxy {
                proxy.delay_replies(Duration::ZERO);
            }
            self.undelay_at = None;
        }
        self.tend_failovers().await?;
        // Forged grants go to a standalone server (under Sentinel the
        // connection is the clock's).
        if self.plan.faults && self.stage.proxy.is_some() && Instant::now() >= self.next_forgery {
            self.forge_grants().await?;
        }
        if self.plan.faults
            && Instant::now() >= self.next_fault
            && deadline > Instant::now() + self.plan.pause_for
        {
            self.inject_fault(workers, deadline).await?;
        }
        Ok(())
    }

    /// Record each fair queue if it changed, with each waiter's deadline
    /// (this host's clock, the one Redisson's deadlines and the workers'
    /// server times are read from; taken before the read, so that a
    /// deadline derived from it is never later than the server's).
    async fn sample_queue(&mut self) {
        for (name, lock) in &self.locks {
            let at = unix_us();
            if let Ok(info) = lock.inspect().await {
                let deadlines = info
                    .queue
                    .iter()
                    .map(|w| w.expires_in.map(|left| at + left.as_micros() as u64))
                    .collect();
                let owners: Vec<String> = info.queue.into_iter().map(|w| w.owner).collect();
                let log = self.queues.entry(name.clone()).or_default();
                if log.snapshots.last() != Some(&owners) {
                    log.snapshots.push(owners);
                    log.deadlines.push((at, deadlines));
                }
            }
        }
    }

    /// A hostile client with PUBLISH rights forges grants to every queued
    /// waiter (a huge token: any holder with it is a violation).
    async fn forge_grants(&mut self) -> Result<(), Failure> {
        let now_ms = server_time_us(&mut self.conn).await? / 1000;
        let queued = self
            .queues
            .get(FAIR)
            .and_then(|log| log.snapshots.last().cloned());
        for owner in queued.unwrap_or_default() {
            let forgery = format!(
                "grant:9000000000000000000:{now_ms}:60000:{:040x}",
                self.rng.next()
            );
            let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
                .arg(format!("{}:{owner}", self.channel_prefix))
                .arg(forgery)
                .query_async(&mut self.conn)
                .await;
            self.injected.forged += 1;
        }
        self.next_forgery = Instant::now() + Duration::from_millis(50);
        Ok(())
    }

    /// One fault of a random kind: SIGKILL or SIGSTOP a random worker,
    /// delay replies, kill pub/sub silently, cut every connection, or run
    /// a BUSY script.
    async fn inject_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let victim = self.rng.below(workers.count() as u64) as usize;
        let at = server_time_us(&mut self.conn).await?;
        if self.stage.sentinel.is_some() {
            return self
                .inject_sentinel_fault(workers, deadline, victim, at)
                .await;
        }
        if self.stage.cluster.is_some() {
            return self
                .inject_cluster_fault(workers, deadline, victim, at)
                .await;
        }
        // Faults of the server itself (BUSY scripts, floods, SCRIPT FLUSH:
        // kinds 5 to 7) only where the run may change the server.
        let kinds = if self.plan.server_faults { 8 } else { 5 };
        let kind = self.rng.below(kinds);
        // Network and server faults hit every worker.
        let hit = if kind < 2 { workers.pid(victim) } else { 0 };
        self.injected.hits.push((at, hit));
        match kind {
            0 => {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            }
            1 => self.pause(workers, victim).await,
            2 => {
                let delay = Duration::from_millis(30 + self.rng.below(120));
                if let Some(proxy) = &self.stage.proxy {
                    proxy.delay_replies(delay);
                }
                self.undelay_at = Some(Instant::now() + Duration::from_secs(2));
                self.injected.delays += 1;
            }
            3 => {
                if let Some(proxy) = &self.stage.proxy {
                    proxy.blackhole_pubsub();
                }
                self.injected.silent += 1;
            }
            4 => {
                if let Some(proxy) = &self.stage.proxy {
                    proxy.cut_all();
                }
                self.injected.cuts += 1;
            }
            5 => {
                self.busy_script().await?;
                self.injected.busy += 1;
            }
            6 => {
                self.publish_flood().await?;
                self.injected.floods += 1;
            }
            _ => {
                // Every client's next script call meets NOSCRIPT.
                let _: redis::RedisResult<()> = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut self.conn)
                    .await;
                self.injected.flushes += 1;
            }
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        Ok(())
    }

    /// Sentinel: SIGKILL or SIGSTOP a worker, freeze a sentinel for a
    /// few seconds (a silent sentinel: its clients hear nothing, not even
    /// an error), or (when the replica is in sync and no failover is under
    /// way) SIGKILL or SIGSTOP the master or ask the sentinels to fail
    /// over.
    async fn inject_sentinel_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
        victim: usize,
        at: u64,
    ) -> Result<(), Failure> {
        let mut kind = self.rng.below(6);
        if kind == 5 {
            if self.failover.sentinel_resume.is_none()
                && self
                    .failover
                    .sentinel_frozen_at
                    .is_none_or(|at| at.elapsed() >= SENTINEL_FREEZE_EVERY)
            {
                self.freeze_sentinel(at);
                self.next_fault =
                    Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
                return Ok(());
            }
            kind = self.rng.below(5);
        }
        let master = if kind >= 2 {
            self.failover_target().await
        } else {
            None
        };
        if kind >= 2 && master.is_none() {
            kind = self.rng.below(2);
        }
        self.injected
            .hits
            .push((at, if kind < 2 { workers.pid(victim) } else { 0 }));
        match (kind, master) {
            (0, _) => {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            }
            (1, _) => self.pause(workers, victim).await,
            (2, Some(port)) => {
                if let Some(deployment) = &self.stage.sentinel {
                    lock_deployment(deployment).kill_node(port);
                }
                self.failover.rejoin = Some(port);
                self.injected.master_kills += 1;
                self.failed_over(Failover::of_all(at, "SIGKILL of the master"));
            }
            (3, Some(port)) => {
                let pid = self
                    .stage
                    .sentinel
                    .as_ref()
                    .and_then(|d| lock_deployment(d).node_pid(port));
                if let Some(pid) = pid {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
                    // Past the sentinels' down-after: they fail over, and the
                    // old master comes back to find itself demoted.
                    self.failover.resume =
                        Some((pid, Instant::now() + private_sentinel::DOWN_AFTER * 3));
                    self.injected.master_pauses += 1;
                    self.failed_over(Failover::of_all(at, "SIGSTOP of the master"));
                }
            }
            (_, Some(_)) => {
                // Half of them right after a handoff, when the run draws
                // that combination.
                let at_handoff = self.plan.combos.contains(&combo::FAILOVER_AT_HANDOFF)
                    && self.rng.below(2) == 0
                    && self.await_handoff().await;
                let at = match at_handoff {
                    true => server_time_us(&mut self.conn).await?,
                    false => at,
                };
                let asked: Option<String> = query(
                    &self.sentinel_url(),
                    redis::cmd("SENTINEL")
                        .arg("FAILOVER")
                        .arg(private_sentinel::SERVICE),
                )
                .await;
                if asked.is_some() {
                    self.injected.sentinel_failovers += 1;
                    if at_handoff {
                        self.injected.handoff_failovers.push(at);
                    }
                    self.failed_over(Failover::of_all(at, "SENTINEL FAILOVER"));
                }
            }
            _ => {}
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        Ok(())
    }

    /// Watch the first fair lock for up to 3 s until its holder changes
    /// from one owner to another (a handoff): `true` as soon as it did.
    async fn await_handoff(&mut self) -> bool {
        let Some((_, lock)) = self.locks.first() else {
            return false;
        };
        let lock = lock.clone();
        let holder = |info: fairlock::LockInfo| info.holders.first().map(|h| h.owner.clone());
        let until = Instant::now() + Duration::from_secs(3);
        let mut previous = lock.inspect().await.ok().and_then(holder);
        while Instant::now() < until {
            let now = lock.inspect().await.ok().and_then(holder);
            if previous.is_some() && now.is_some() && now != previous {
                return true;
            }
            if now.is_some() {
                previous = now;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        false
    }

    fn failed_over(&mut self, failover: Failover) {
        self.injected.failovers.push(failover);
        // Room for the failover, the old master's return and its resync
        // (on a cluster, the next fault waits for the cluster to be ok
        // and the target's replica in sync anyway).
        let room = if self.stage.cluster.is_some() { 3 } else { 10 };
        self.failover.next_allowed = Instant::now() + Duration::from_secs(room);
    }

    /// SIGSTOP a random sentinel for 2 to 5 s (past its peers'
    /// down-after: they see it down; its clients see nothing).
    fn freeze_sentinel(&mut self, at: u64) {
        let index = self.rng.below(private_sentinel::SENTINELS as u64) as usize;
        let pid = self
            .stage
            .sentinel
            .as_ref()
            .and_then(|d| lock_deployment(d).sentinel_pid(index));
        let Some(pid) = pid else { return };
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
        let thaw = Instant::now() + Duration::from_millis(2000 + self.rng.below(3000));
        self.failover.sentinel_resume = Some((index, pid, thaw));
        self.failover.sentinel_frozen_at = Some(Instant::now());
        self.injected.sentinel_pauses += 1;
        self.injected.hits.push((at, 0));
    }

    /// A sentinel that is not frozen, for the orchestrator's questions.
    fn sentinel_url(&self) -> String {
        let frozen = self.failover.sentinel_resume.map(|(index, _, _)| index);
        self.stage
            .sentinel
            .as_ref()
            .map(|d| lock_deployment(d).sentinel_url_except(frozen))
            .unwrap_or_default()
    }

    /// The master's port, when a failover fault may hit now: none under
    /// way, and the replica in sync.
    async fn failover_target(&mut self) -> Option<u16> {
        if self.failover.rejoin.is_some()
            || self.failover.resume.is_some()
            || Instant::now() < self.failover.next_allowed
        {
            return None;
        }
        let port = self.master_port().await?;
        let url = self
            .stage
            .sentinel
            .as_ref()
            .and_then(|d| lock_deployment(d).node_url(port))?;
        let info: String = query(&url, redis::cmd("INFO").arg("replication")).await?;
        let synced = info.contains("role:master")
            && info
                .lines()
                .any(|l| l.starts_with("slave0:") && l.contains("state=online"));
        synced.then_some(port)
    }

    /// The master's port, as the first sentinel names it.
    async fn master_port(&self) -> Option<u16> {
        let named: (String, u16) = query(
            &self.sentinel_url(),
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(private_sentinel::SERVICE),
        )
        .await?;
        Some(named.1)
    }

    /// SIGCONT a paused master when due; start a killed one again, as a
    /// replica, once the sentinels named another master.
    async fn tend_failovers(&mut self) -> Result<(), Failure> {
        if let Some((pid, at)) = self.failover.resume {
            if Instant::now() >= at {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
                self.failover.resume = None;
            }
        }
        if let Some((_, pid, at)) = self.failover.sentinel_resume {
            if Instant::now() >= at {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
                self.failover.sentinel_resume = None;
            }
        }
        if self.stage.cluster.is_some() {
            return self.tend_cluster().await;
        }
        let Some(port) = self.failover.rejoin else {
            return Ok(());
        };
        let Some(master) = self.master_port().await else {
            return Ok(());
        };
        if master == port {
            let since = *self
                .failover
                .rejoin_reported
                .get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(30) {
                self.failover.rejoin_reported = Some(Instant::now());
                self.report_stuck_failover(port).await;
            }
            return Ok(());
        }
        self.failover.rejoin_reported = None;
        if let Some(deployment) = &self.stage.sentinel {
            let deployment = Arc::clone(deployment);
            let _ = tokio::task::spawn_blocking(move || {
                lock_deployment(&deployment).rejoin(port, master)
            })
            .await;
        }
        self.failover.rejoin = None;
        Ok(())
    }

    /// Cluster: start a killed master again (as a replica) once another
    /// master serves its slot, and take the next step of a migration.
    async fn tend_cluster(&mut self) -> Result<(), Failure> {
        if let (Some((port, slot)), Some(cluster)) =
            (self.failover.cluster_rejoin, &self.stage.cluster)
        {
            let served_elsewhere = on_cluster(cluster, move |c| {
                Ok(c.master_of(slot).is_ok_and(|master| master != port))
            })
            .await
            .unwrap_or(false);
            if served_elsewhere {
                on_cluster(cluster, move |c| c.restart(port))
                    .await
                    .map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
                self.failover.cluster_rejoin = None;
            }
        }
        if self
            .failover
            .migration
            .as_ref()
            .is_some_and(|m| Instant::now() >= m.next)
        {
            self.migrate_step(false).await?;
        }
        Ok(())
    }

    /// The next step of the migration under way: move the keys, then
    /// `SETSLOT NODE`. A step that fails is tried again half a second
    /// later (`now`: at once); after 20 failures the run stops.
    async fn migrate_step(&mut self, now: bool) -> Result<(), Failure> {
        let (Some(step), Some(cluster)) = (self.failover.migration.as_mut(), &self.stage.cluster)
        else {
            return Ok(());
        };
        let (slot, from, to, moved) = (step.slot, step.from, step.to, step.moved);
        let result = on_cluster(cluster, move |c| {
            if moved {
                c.finish_migration(slot, from, to)
            } else {
                c.move_keys(slot, from, to)
            }
        })
        .await;
        match result {
            Ok(()) if moved => {
                self.failover.migration = None;
                self.failover.next_allowed = Instant::now() + Duration::from_secs(3);
            }
            Ok(()) => {
                step.moved = true;
                step.next = Instant::now() + Duration::from_millis(200 + self.rng.below(400));
            }
            Err(e) => {
                step.failures += 1;
                if step.failures >= 20 {
                    return Err(Failure::new(
                        exit::UNAVAILABLE,
                        format!("migrating slot {slot} from :{from} to :{to}: {e}"),
                    ));
                }
                if !now {
                    step.next = Instant::now() + Duration::from_millis(500);
                }
            }
        }
        Ok(())
    }

    /// Cluster: SIGKILL or SIGSTOP a worker, or (when no failover or
    /// migration is under way, the cluster is ok and the target master's
    /// replica in sync) hit the master serving a random lock: `CLUSTER
    /// FAILOVER` on its replica, SIGKILL it, SIGSTOP it for three node
    /// timeouts, or start migrating the lock's slot to another master
    /// (keys moved and the slot handed over in later steps, while the
    /// workers hold and wait).
    async fn inject_cluster_fault(
        &mut self,
        workers: &mut Workers<'_>,
        deadline: Instant,
        victim: usize,
        at: u64,
    ) -> Result<(), Failure> {
        // A third of the faults hit a worker; the others the cluster, of
        // a kind drawn among those injected least so far (a short run
        // sees each kind it has time for).
        let mut kind = self.rng.below(6);
        if kind >= 2 {
            let counts = [
                self.injected.cluster_failovers,
                self.injected.master_kills,
                self.injected.master_pauses,
                self.injected.migrations,
            ];
            let least = counts.iter().min().copied().unwrap_or(0);
            let kinds: Vec<u64> = (2..6)
                .filter(|k| counts[*k as usize - 2] == least)
                .collect();
            kind = kinds[self.rng.below(kinds.len() as u64) as usize];
        }
        let target = if kind >= 2 {
            self.cluster_target().await
        } else {
            None
        };
        if kind >= 2 && target.is_none() {
            kind = self.rng.below(2);
        }
        self.next_fault = Instant::now() + Duration::from_millis(1500 + self.rng.below(1500));
        let Some(cluster) = self.stage.cluster.clone() else {
            return Ok(());
        };
        let Some(target) = target else {
            self.injected.hits.push((at, workers.pid(victim)));
            if kind == 0 {
                self.injected.kills += 1;
                let left = deadline.saturating_duration_since(Instant::now());
                workers.replace(victim, left).await?;
            } else {
                self.pause(workers, victim).await;
            }
            return Ok(());
        };
        let ClusterTarget {
            master,
            replica,
            slot,
            locks,
            to,
        } = target;
        let failover = |kind: &str| Failover {
            at,
            kind: kind.to_owned(),
            locks: locks.clone(),
        };
        match kind {
            2 => {
                if on_cluster(&cluster, move |c| c.failover(replica))
                    .await
                    .is_ok()
                {
                    self.injected.cluster_failovers += 1;
                    self.failed_over(failover("CLUSTER FAILOVER"));
                }
            }
            3 => {
                on_cluster(&cluster, move |c| {
                    c.kill(master);
                    Ok(())
                })
                .await
                .map_err(|e| Failure::new(exit::SOFTWARE, e))?;
                self.failover.cluster_rejoin = Some((master, slot));
                self.injected.master_kills += 1;
                self.failed_over(failover("SIGKILL of a master"));
            }
            4 => {
                let pid = lock_cluster(&cluster).pid(master);
                if let Some(pid) = pid {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGSTOP);
                    // Past the node timeout: the replica takes over, and the
                    // old master comes back to find itself demoted.
                    self.failover.resume =
                        Some((pid, Instant::now() + private_cluster::NODE_TIMEOUT * 3));
                    self.injected.master_pauses += 1;
                    self.failed_over(failover("SIGSTOP of a master"));
                }
            }
            _ => {
                let begun = on_cluster(&cluster, move |c| c.begin_migration(slot, to)).await;
                if let Ok(from) = begun {
                    self.failover.migration = Some(Migration {
                        slot,
                        from,
                        to,
                        moved: false,
                        next: Instant::now() + Duration::from_millis(200 + self.rng.below(400)),
                        failures: 0,
                    });
                    self.injected.migrations += 1;
                }
            }
        }
        // A fault of the server: every worker may feel it.
        self.injected.hits.push((at, 0));
        Ok(())
    }

    /// The master serving a random lock, when a fault may hit it now: no
    /// failover, rejoin or migration under way, the cluster ok, and the
    /// master's replica in sync.
    async fn cluster_target(&mut self) -> Option<ClusterTarget> {
        if self.failover.cluster_rejoin.is_some()
            || self.failover.resume.is_some()
            || self.failover.migration.is_some()
            || Instant::now() < self.failover.next_allowed
        {
            return None;
        }
        let cluster = self.stage.cluster.as_ref()?;
        let slots = self.stage.slots.clone();
        let (_, slot) = *slots.get(self.rng.below(slots.len() as u64) as usize)?;
        let pick = self.rng.next();
        on_cluster(cluster, move |c| {
            c.healthy()?;
            let master = c.master_of(slot)?;
            let replica = c
                .synced_replica(master)?
                .ok_or_else(|| format!(":{master} has no replica in sync"))?;
            let others: Vec<u16> = c.masters()?.into_iter().filter(|p| *p != master).collect();
            let to = *others
                .get((pick % others.len().max(1) as u64) as usize)
                .ok_or("no other master")?;
            let rows = c.rows()?;
            let served = |s: u16| rows.iter().any(|r| r.port == master && r.serves(s));
            let locks = slots
                .iter()
                .filter(|(_, s)| served(*s))
                .map(|(name, _)| name.clone())
                .collect();
            Ok(ClusterTarget {
                master,
                replica,
                slot,
                locks,
                to,
            })
        })
        .await
        .ok()
    }

    /// On stderr: what each sentinel and data node says, while the
    /// sentinels still name the master killed on `port` (30 s or more).
    async fn report_stuck_failover(&self, port: u16) {
        let Some(deployment) = &self.stage.sentinel else {
            return;
        };
        let (sentinels, nodes) = lock_deployment(deployment).all_urls();
        eprintln!("torture: the sentinels still name the killed master :{port} after 30 s or more");
        let wanted = [
            "flags",
            "num-slaves",
            "num-other-sentinels",
            "failover-state",
            "leader",
            "config-epoch",
        ];
        for url in sentinels {
            let view: Option<Vec<String>> = query(
                &url,
                redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(private_sentinel::SERVICE),
            )
            .await;
            let fields: Vec<String> = view
                .unwrap_or_default()
                .chunks(2)
                .filter(|pair| pair.len() == 2 && wanted.contains(&pair[0].as_str()))
                .map(|pair| format!("{}={}", pair[0], pair[1]))
                .collect();
            let replicas: Option<redis::Value> = query(
                &url,
                redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(private_sentinel::SERVICE),
            )
            .await;
            eprintln!("torture:   sentinel {url}: {fields:?}; replicas {replicas:?}");
        }
        for url in nodes {
            let info: Option<String> = query(&url, redis::cmd("INFO").arg("replication")).await;
            let lines: Vec<&str> = info
                .as_deref()
                .unwrap_or("(no answer)")
                .lines()
                .filter(|l| !l.starts_with("master_repl") && !l.starts_with("repl_backlog"))
                .collect();
            eprintln!("torture:   node {url}: {}", lines.join(" "));
        }
    }

    /// SIGSTOP worker `victim` past its lease, sampling the queue
    /// meanwhile, then SIGCONT it.
    async fn pause(&mut self, workers: &Workers<'_>, victim: usize) {
        workers.signal(victim, Signal::SIGSTOP);
        self.injected.pauses += 1;
        let until = Instant::now() + self.plan.pause_for;
        while Instant::now() < until {
            self.sample_queue().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        workers.signal(victim, Signal::SIGCONT);
    }

    /// A script that keeps Redis busy for 300 ms, in the background.
    /// A hostile client with PUBLISH rights floods every channel anyone
    /// listens on (waiters' wake-up channels, clients' revocation
    /// channels) with junk for 2 s, as fast as one pipelined connection
    /// goes, straight to the server.
    async fn publish_flood(&mut self) -> Result<(), Failure> {
        let mut flood_conn = raw_connection(&self.stage.url).await?;
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut flood_conn)
            .await
            .unwrap_or_default();
        if channels.is_empty() {
            return Ok(());
        }
        tokio::spawn(async move {
            let until = Instant::now() + Duration::from_secs(2);
            while Instant::now() < until {
                let mut pipe = redis::pipe();
                for channel in &channels {
                    for _ in 0..8 {
                        pipe.cmd("PUBLISH").arg(channel).arg("flood").ignore();
                    }
                }
                if pipe.query_async::<()>(&mut flood_conn).await.is_err() {
                    return;
                }
            }
        });
        Ok(())
    }

    async fn busy_script(&mut self) -> Result<(), Failure> {
        let mut busy_conn = raw_connection(&self.stage.url).await?;
        tokio::spawn(async move {
            let script = "local t = redis.call('time') local e = t[1] * 1000000 + t[2] + 300000 \
                          while true do local n = redis.call('time') \
                          if n[1] * 1000000 + n[2] > e then return 1 end end";
            let _: redis::RedisResult<i64> = redis::cmd("EVAL")
                .arg(script)
                .arg(0)
                .query_async(&mut busy_conn)
                .await;
        });
        Ok(())
    }
}

/// One command on a fresh connection, at most 2 s; `None` on any error.
pub(super) async fn query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> Option<T> {
    let client = crate::redis_client(url).ok()?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()?;
    cmd.query_async(&mut conn).await.ok()
}

/// This host's clock (µs since the Unix epoch).
fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

//! The end of a run: the history collected, checked, and summed up.

use std::collections::HashMap;
use std::time::Duration;

use fairlock::Protocol;

use std::collections::BTreeMap;

use crate::exit;
use crate::history::{self, Event, Failovers, Hold, QueueLog, Report, Tally, combo};

use super::faults::Injected;
use super::workload::Reports;
use super::{Plan, Topology};

/// The run's history as the checker takes it.
pub(super) struct History {
    pub(super) events: Vec<Event>,
    /// Each fault once per client it hit.
    pub(super) faults: Vec<history::Fault>,
}

/// Every event the workers reported, and each fault attributed to the
/// clients it hit: a worker's own client (named by its pid), or every
/// client for a fault of the network or the server (pid 0).
pub(super) fn collect(reports: &Reports, hits: &[(u64, u32)]) -> History {
    let events = reports.events();
    let clients: HashMap<u32, String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Client { pid, id, .. } => Some((*pid, id.clone())),
            _ => None,
        })
        .collect();
    let faults = hits
        .iter()
        .flat_map(|&(at, pid)| {
            let hit: Vec<String> = if pid == 0 {
                clients.values().cloned().collect()
            } else {
                vec![clients.get(&pid).cloned().unwrap_or_default()]
            };
            hit.into_iter()
                .map(move |client| history::Fault { at, client })
        })
        .collect();
    History { events, faults }
}

/// What the checks found.
pub(super) struct Verdict {
    report: Report,
    /// Holds with the forged token: granted by a message, not the server.
    forged_holds: usize,
    /// How long each failover stopped its locks (µs), by kind.
    recovery: Vec<(String, u64)>,
    /// Holds told they lost the lock: all, and those at a failover.
    lost: (usize, usize),
    /// The longest stretch without a grant (µs), and when it began (µs
    /// into the run).
    pub(super) stall: (u64, u64),
    /// Per combination the run meant to test: drawn, checked.
    tallies: Vec<(&'static str, Tally)>,
    /// Calls the library answered otherwise than it should, grouped, with
    /// how often each was seen.
    findings: Vec<(String, usize)>,
    /// Waits that ended otherwise than they should while a fault hit their
    /// client (see [`crate::history::Window`]): not findings.
    excused: usize,
    /// Why the run proves nothing, if it does not: what it meant to check
    /// and never did.
    inconclusive: Vec<String>,
}

impl Verdict {
    pub(super) fn violations(&self) -> usize {
        self.report.violations() + self.forged_holds
    }

    fn findings(&self) -> usize {
        self.findings.iter().map(|(_, n)| n).sum()
    }

    /// 1 for a violation or a finding, else 2 when inconclusive, else 0.
    pub(super) fn exit_code(&self) -> u8 {
        if self.violations() > 0 || self.findings() > 0 {
            exit::DECLINED_OR_FAILED
        } else if !self.inconclusive.is_empty() {
            exit::INCONCLUSIVE
        } else {
            0
        }
    }

    /// The last line of the summary.
    fn line(&self) -> String {
        match (self.violations(), self.findings()) {
            (0, 0) if self.inconclusive.is_empty() => "verdict: passed".to_owned(),
            (0, 0) => format!(
                "verdict: inconclusive: {} (a run that checked nothing proves nothing)",
                self.inconclusive.join("; ")
            ),
            (0, _) => "verdict: failed: findings (the library answered otherwise than it should)"
                .to_owned(),
            _ => "verdict: failed: violations".to_owned(),
        }
    }
}

/// A failover timed at a handoff is checked when a hold began this long
/// before it at most (µs): the handoff it followed.
const FAILOVER_HANDOFF_US: u64 = 500_000;

pub(super) fn check(
    plan: &Plan,
    history: &History,
    queues: HashMap<String, QueueLog>,
    failovers: &Failovers,
    injected: &Injected,
) -> Verdict {
    let report = history::check(
        &history.events,
        &queues,
        plan.protocol == Protocol::Native,
        &history.faults,
        plan.bounds(),
        failovers,
    );
    let forged_holds = history
        .events
        .iter()
        .filter(
            |e| matches!(e, Event::Hold(Hold { token: Some(t), .. }) if *t >= 9_000_000_000_000_000_000),
        )
        .count();
    let mut counted = history::tally(&history.events);
    let starts: Vec<u64> = history
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Hold(hold) => Some(hold.start),
            _ => None,
        })
        .collect();
    let at_handoff = counted
        .entry(combo::FAILOVER_AT_HANDOFF.to_owned())
        .or_default();
    for &at in &injected.handoff_failovers {
        at_handoff.drawn += 1;
        if starts
            .iter()
            .any(|&s| s <= at && at - s <= FAILOVER_HANDOFF_US)
        {
            at_handoff.checked += 1;
        }
    }
    let tallies: Vec<(&'static str, Tally)> = plan
        .combos
        .iter()
        .map(|c| (*c, counted.get(*c).copied().unwrap_or_default()))
        .collect();
    let mut grouped: BTreeMap<String, usize> = BTreeMap::new();
    let mut excused = 0;
    for event in &history.events {
        if let Event::Answer {
            combo,
            target,
            op,
            answer,
            ok: false,
            window,
        } = event
        {
            if window.as_ref().is_some_and(|w| w.hit_by(&history.faults)) {
                excused += 1;
                continue;
            }
            *grouped
                .entry(format!("{combo}: {op} of {target} answered {answer}"))
                .or_default() += 1;
        }
    }
    let mut inconclusive = Vec::new();
    if report.holds == 0 {
        inconclusive.push("no hold was recorded".to_owned());
    }
    if report.fifo_pairs_checked == 0 {
        inconclusive.push("no queue-order pair was checked".to_owned());
    }
    if report.permit_holds == 0 {
        inconclusive.push("the semaphore had no hold: its permits were not checked".to_owned());
    }
    if plan.read_write() && (report.read_holds == 0 || report.write_holds == 0) {
        inconclusive.push(format!(
            "the read-write lock had {} read holds and {} write holds: a writer's \
             exclusion was not checked against readers",
            report.read_holds, report.write_holds
        ));
    }
    for (name, tally) in &tallies {
        if tally.checked == 0 {
            inconclusive.push(format!("{name} drawn {} times, checked none", tally.drawn));
        }
    }
    Verdict {
        report,
        forged_holds,
        recovery: failovers.recovery(&history.events),
        lost: failovers.lost(&history.events),
        stall: (0, 0),
        tallies,
        findings: grouped.into_iter().collect(),
        excused,
        inconclusive,
    }
}

/// Per kind of failover: how many were measured, the median and the
/// longest recovery.
pub(super) fn recovery_summary(recovery: &[(String, u64)]) -> String {
    let mut by_kind: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
    for (kind, us) in recovery {
        by_kind.entry(kind.as_str()).or_default().push(*us);
    }
    by_kind
        .into_iter()
        .map(|(kind, mut times)| {
            times.sort_unstable();
            let ms = |us: u64| format!("{:.2}s", us as f64 / 1e6);
            format!(
                "{kind}: {} measured, median {}, max {}",
                times.len(),
                ms(times[times.len() / 2]),
                ms(times[times.len() - 1])
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The summary on stdout; `early`: why and when the run stopped before
/// its end.
pub(super) fn print_summary(
    plan: &Plan,
    history: &History,
    injected: &Injected,
    verdict: &Verdict,
    elapsed: Duration,
    early: Option<&str>,
) {
    if let Some(early) = early {
        println!("stopped early {early} (the checks cover the run so far)");
    }
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for event in &history.events {
        if let Event::NoGrant { outcome, .. } = event {
            *outcomes.entry(outcome.as_str()).or_default() += 1;
        }
    }
    let report = &verdict.report;
    println!(
        "operations: {} holds, {} timeouts, {} cancellations, {} errors in {:.1}s",
        report.holds,
        outcomes.get("timeout").unwrap_or(&0),
        outcomes.get("cancelled").unwrap_or(&0),
        outcomes.get("error").unwrap_or(&0),
        elapsed.as_secs_f64()
    );
    let Injected {
        kills,
        pauses,
        delays,
        silent,
        cuts,
        busy,
        forged,
        floods,
        flushes,
        master_kills,
        master_pauses,
        sentinel_failovers,
        sentinel_pauses,
        cluster_failovers,
        migrations,
        ..
    } = injected;
    println!(
        "faults injected: {kills} SIGKILL, {pauses} SIGSTOP past the lease, {delays} reply delays, \
         {silent} silent pub/sub deaths, {cuts} connection cuts, {busy} BUSY scripts, {floods} PUBLISH \
         floods, {flushes} SCRIPT FLUSHes, {forged} forged grants"
    );
    let overlaps_at_failovers = format!(
        "overlaps that started at a failover (asynchronous replication, not counted as \
         violations): {}",
        report.failover_overlaps
    );
    match plan.topology {
        Topology::Standalone => {}
        Topology::Sentinel => println!(
            "failovers: {master_kills} SIGKILL of the master, {master_pauses} SIGSTOP of the \
             master, {sentinel_failovers} SENTINEL FAILOVER; {sentinel_pauses} sentinels \
             frozen; {overlaps_at_failovers}"
        ),
        Topology::Cluster => println!(
            "failovers: {cluster_failovers} CLUSTER FAILOVER, {master_kills} SIGKILL of a \
             master, {master_pauses} SIGSTOP of a master; {migrations} slot migrations of a \
             busy lock; {overlaps_at_failovers}"
        ),
    }
    if !verdict.recovery.is_empty() {
        println!(
            "recovery (longest wait for a grant of a lock the failover hit, from the fault): {}",
            recovery_summary(&verdict.recovery)
        );
    }
    let (lost, lost_at_failovers) = verdict.lost;
    println!(
        "checks: overlaps {}, FIFO {} (of {} queue-order pairs), requeued live waiters {}{}, tokens {}, liveness {}",
        report.overlaps,
        report.fifo_violations,
        report.fifo_pairs_checked,
        report.requeued,
        if report.strict_order {
            ""
        } else {
            " (allowed: Redisson drops waiters past their slot)"
        },
        if plan.protocol == Protocol::Native {
            report.token_violations.to_string()
        } else {
            "n/a".to_owned()
        },
        report.liveness_violations
    );
    if plan.read_write() {
        println!(
            "read-write lock: {} read holds ({} began beside another reader's), {} write holds",
            report.read_holds, report.shared_reads, report.write_holds
        );
    }
    println!(
        "semaphore: {} holds, at most {} of {} permits out at once; over the total: {}",
        report.permit_holds,
        report.most_permits_out,
        super::SEM_PERMITS,
        report.permits_over
    );
    if plan.protocol == Protocol::Native {
        let leaderships = elections(history);
        println!(
            "election: {} leaderships (each a hold of {}: overlaps and terms checked above)",
            leaderships,
            super::ELECT
        );
    }
    if !report.strict_order {
        println!(
            "waiters overtaken after their deadline had passed (Redisson's rule, not counted as violations): {}",
            report.overtaken_past_deadline
        );
    }
    for example in &report.examples {
        println!("  {example}");
    }
    if let Some(around) = &report.first_overlap {
        for line in context(history, around) {
            println!("{line}");
        }
    }
    println!(
        "holds told they lost the lock (is_held() false at their end): {lost}{}",
        if plan.topology == Topology::Standalone {
            String::new()
        } else {
            format!(", {lost_at_failovers} of them at a failover")
        }
    );
    println!(
        "longest stretch without a grant of any lock: {:.1}s, from {:.0}s into the run",
        verdict.stall.0 as f64 / 1e6,
        verdict.stall.1 as f64 / 1e6
    );
    println!("forged tokens held: {}", verdict.forged_holds);
    println!(
        "overlaps that started after a force-unlock (the revoked holder had not heard yet, not \
         counted as violations): {}",
        report.revoked_overlaps
    );
    println!(
        "application data changed by lock calls: {}",
        report.data_changed
    );
    if !verdict.tallies.is_empty() {
        let per: Vec<String> = verdict
            .tallies
            .iter()
            .map(|(name, t)| format!("{name} {} drawn, {} checked", t.drawn, t.checked))
            .collect();
        println!("combinations: {}", per.join("; "));
    }
    println!("findings: {}", verdict.findings());
    if verdict.excused > 0 {
        println!(
            "  and {} waits that ended ungranted while a fault hit their client (not findings)",
            verdict.excused
        );
    }
    for (finding, times) in &verdict.findings {
        println!("  {finding} (x{times})");
    }
    println!("violations: {}", verdict.violations());
    println!("{}", verdict.line());
}

/// How far around the first overlap its context reaches (µs).
const CONTEXT_US: u64 = 100_000;

/// At most this many lines of context.
const CONTEXT_LINES: usize = 40;

/// The history around the first overlap counted as a violation: the holds
/// of its lock, the force-unlocks and the faults within [`CONTEXT_US`],
/// in time order, so that a failure seen only in a log (CI) can be traced.
fn context(history: &History, (lock, from, to): &(String, u64, u64)) -> Vec<String> {
    let window = from.saturating_sub(CONTEXT_US)..=to.saturating_add(CONTEXT_US);
    // The force-unlocks that replied (their sent line is paired with it).
    let answered: std::collections::HashSet<(&str, u64)> = history
        .events
        .iter()
        .filter_map(|event| match event {
            Event::ForceUnlock { lock, from, .. } => Some((lock.as_str(), *from)),
            _ => None,
        })
        .collect();
    let mut lines: Vec<(u64, String)> = Vec::new();
    for event in &history.events {
        let at = match event {
            Event::Hold(hold) if &hold.lock == lock => [hold.requested, hold.start, hold.end]
                .into_iter()
                .find(|t| window.contains(t))
                .or_else(|| {
                    (hold.start < *window.start() && hold.end > *window.end()).then_some(hold.start)
                }),
            // A force-unlock whose run may overlap the window, however
            // long before it began: one with a reply ran between `from`
            // and `at`; one without (cut short) is taken to have run
            // within UNFINISHED_FORCE_UNLOCK_US, which groups the checker's
            // excuses over that whole time.
            Event::ForceUnlock {
                lock: l, from, at, ..
            } if l == lock && *from <= *window.end() && *at >= *window.start() => Some(*from),
            Event::ForceUnlockSent { lock: l, from } if window.contains(from) && l == lock => {
                Some(*from)
            }
            Event::ForceUnlockSent { lock: l, from }
                if l == lock
                    && !answered.contains(&(l.as_str(), *from))
                    && *from <= *window.end()
                    && from.saturating_add(history::UNFINISHED_FORCE_UNLOCK_US)
                        >= *window.start() =>
            {
                Some(*from)
            }
            _ => None,
        };
        if let Some(at) = at {
            lines.push((at, event.to_line()));
        }
    }
    for fault in &history.faults {
        if window.contains(&fault.at) {
            lines.push((
                fault.at,
                format!("fault at {} hit client {}", fault.at, fault.client),
            ));
        }
    }
    lines.sort();
    let mut out = vec![format!(
        "around the first overlap ({lock}, {}..{} us; {} lines of {}):",
        window.start(),
        window.end(),
        lines.len().min(CONTEXT_LINES),
        lines.len()
    )];
    out.extend(
        lines
            .into_iter()
            .take(CONTEXT_LINES)
            .map(|(_, line)| format!("    {line}")),
    );
    out
}

/// The leaderships of the election (holds of [`super::ELECT`]).
fn elections(history: &History) -> usize {
    history
        .events
        .iter()
        .filter(|e| matches!(e, Event::Hold(h) if h.lock == super::ELECT))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::history::test_support::{hold, with};

    /// A hold of `lock` from `start` to `end` (µs), its token its start.
    fn held(lock: &str, owner: &str, start: u64, end: u64) -> Event {
        with(hold(owner, start, start, start, end), |h| {
            h.lock = lock.into()
        })
    }

    /// The context of an overlap names its two holds, a force-unlock and a
    /// fault near it, in time order, and leaves out other locks and other
    /// times.
    #[test]
    fn the_context_of_an_overlap_shows_what_happened_around_it() {
        let history = History {
            events: vec![
                held("l", "b", 1_060_000, 1_100_000),
                held("l", "a", 1_000_000, 1_080_000),
                held("other", "c", 1_050_000, 1_070_000),
                held("l", "old", 100_000, 200_000),
                Event::ForceUnlockSent {
                    lock: "l".into(),
                    from: 1_050_000,
                },
                // Sent long before, never answered: it may have run in
                // the window.
                Event::ForceUnlockSent {
                    lock: "l".into(),
                    from: 200_000,
                },
                // Sent and answered long before: not in the window.
                Event::ForceUnlockSent {
                    lock: "l".into(),
                    from: 300_000,
                },
                Event::ForceUnlock {
                    lock: "l".into(),
                    from: 300_000,
                    at: 310_000,
                    released: true,
                },
            ],
            faults: vec![history::Fault {
                at: 1_055_000,
                client: "x".into(),
            }],
        };
        let lines = context(&history, &("l".to_owned(), 1_000_000, 1_080_000));
        assert_eq!(lines.len(), 6, "{lines:#?}");
        assert!(
            lines[1].contains("force_unlock_sent") && lines[1].contains("200000"),
            "{lines:#?}"
        );
        assert!(lines[2].contains("\"owner\":\"a\""), "{lines:#?}");
        assert!(lines[3].contains("force_unlock_sent"), "{lines:#?}");
        assert!(lines[4].contains("fault at 1055000"), "{lines:#?}");
        assert!(lines[5].contains("\"owner\":\"b\""), "{lines:#?}");
    }
}

//! `fairlock bench`: fairlock's locks (both protocols, fair and non-fair)
//! and rslock, measured side by side in one run on one Redis, round by
//! round (A B C A B C ...) so that the machine's noise hits all alike; PING
//! round trips, Redis CPU, server commands and client CPU per operation
//! beside them. A table on stdout, `--json`, and `--svg FILE` for a chart.

mod chart;
mod election;
mod kinds;
mod latch;
mod line;
mod measure;
mod read_write;
mod report;
mod scenario;
mod semaphore;
mod subject;

use std::path::PathBuf;
use std::time::Duration;

use crate::private_redis::PrivateRedis;
use crate::{Cli, Failure, duration, exit};

use kinds::KindSeries;
use latch::LatchSubject;
use line::LineSubject;
use read_write::RwSubject;
use scenario::{Sample, Workload};
use semaphore::SemSubject;
use subject::Subject;

/// Which scenarios run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Which {
    /// Every scenario below.
    All,
    /// Lock + unlock, one task, nobody else.
    Uncontended,
    /// --workers tasks (own connections) GET+SET a counter under the lock.
    Contended,
    /// As contended, but the tasks share one client (one `LockClient`, one
    /// rslock `LockManager`), as the tasks of one service do.
    Shared,
    /// Latency from a release sent to the next holder proceeding, 8 workers.
    Handoff,
    /// Redis time per handoff with --waiters waiters in line: the fair
    /// locks, the read-write locks and the semaphores (--kind).
    Queue,
    /// --workers tasks sharing one client take a read-write lock, one in
    /// four writing: fairlock's under both protocols and rds_lock.
    ReadWrite,
    /// --workers tasks sharing one client take 1 or 2 of a semaphore's 4
    /// permits: fairlock's under both protocols and the counting kind.
    Semaphore,
    /// Not in `all`: a leader election (native) without a leader, from a
    /// leader's death (SIGKILL; lease 1 s) and from a resignation to the
    /// next leader, once per round.
    Election,
    /// --waiters tasks sharing one client wait on a count-down latch: the
    /// time from the count-down that opens it to the last waiter woken,
    /// both protocols.
    Latch,
}

#[derive(clap::Args, Debug)]
pub(crate) struct BenchArgs {
    /// The scenario to run.
    #[arg(value_enum, default_value_t = Which::All)]
    scenario: Which,
    /// contended and shared: concurrent workers (contended: each with its
    /// own client); a comma list runs each (1 to 256).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_values_t = [8u16, 32],
          value_parser = clap::value_parser!(u16).range(1..=256))]
    workers: Vec<u16>,
    /// queue: waiters in line; latch: waiters of the latch; a comma list
    /// runs each (1 to 100000).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_values_t = [10u32, 1_000, 10_000],
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    waiters: Vec<u32>,
    /// queue: the kinds whose lines are measured (a comma list of lock,
    /// read-write, semaphore).
    #[arg(long, value_name = "KIND[,KIND...]", value_delimiter = ',', value_enum,
          default_values_t = [QueueKind::Lock, QueueKind::ReadWrite, QueueKind::Semaphore])]
    kind: Vec<QueueKind>,
    /// Rounds: each implementation runs once per round, in turn (1 to 100).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// How long each implementation runs per round and scenario (10ms to 10m).
    #[arg(long, value_name = "DUR", default_value = "1s", value_parser = duration::bench_round, allow_hyphen_values = true)]
    duration: Duration,
    /// Print the results as one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write a chart of the results to FILE (SVG).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    /// With --svg: an earlier run's --json output, drawn beside this run
    /// (each implementation's earlier bar, lighter, next to its bar now):
    /// before and after a change. Compare ratios to rslock, not rates
    /// across runs.
    #[arg(long, value_name = "FILE", requires = "svg")]
    before: Option<PathBuf>,
    /// Also run each of fairlock's locks with metrics written (a Prometheus
    /// recorder installed, lock names as labels), right beside the same
    /// lock without (the order swapped every round), and report what the
    /// metrics cost: time and client CPU per operation, with / without.
    /// Not with the queue scenario.
    #[arg(long)]
    metrics_cost: bool,
    /// Run only these implementations (a comma list of native-fair,
    /// native-non-fair, redisson-fair, redisson-non-fair, rslock), e.g. to
    /// profile one.
    #[arg(long, value_name = "NAME[,NAME...]", value_delimiter = ',', value_parser = implementation)]
    only: Vec<Subject>,

    /// Lock settings, refused: bench sets its own.
    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

/// The kinds of object whose lines the queue scenario measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// The fair locks (native and Redisson's `RFairLock`).
    Lock,
    /// The read-write locks (native, mixed and writers only; Redisson's,
    /// writers only).
    ReadWrite,
    /// The semaphores (native, Redisson's expirable and counting ones).
    Semaphore,
}

fn implementation(name: &str) -> Result<Subject, String> {
    Subject::ALL
        .into_iter()
        .find(|s| s.key() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = Subject::ALL.iter().map(|s| s.key()).collect();
            format!(
                "unknown implementation {name:?} (known: {})",
                known.join(", ")
            )
        })
}

/// Workers of the handoff scenario.
const HANDOFF_WORKERS: usize = 8;

/// One measured case: a scenario with its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Case {
    Uncontended,
    Contended(usize),
    /// Contended, the workers sharing one client.
    Shared(usize),
    Handoff(usize),
    Queue(usize),
}

impl Case {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Case::Uncontended => "uncontended",
            Case::Contended(_) => "contended",
            Case::Shared(_) => "shared",
            Case::Handoff(_) => "handoff",
            Case::Queue(_) => "queue",
        }
    }

    /// The case in a lock name: `contended-8`.
    fn slug(self) -> String {
        match self {
            Case::Uncontended => self.key().into(),
            Case::Contended(n) | Case::Shared(n) | Case::Handoff(n) | Case::Queue(n) => {
                format!("{}-{n}", self.key())
            }
        }
    }

    pub(crate) fn title(self) -> String {
        match self {
            Case::Uncontended => "uncontended".into(),
            Case::Contended(n) => format!("contended, {n} workers"),
            Case::Shared(n) => format!("contended, {n} workers sharing one client"),
            Case::Handoff(n) => format!("handoff, {n} workers"),
            Case::Queue(n) => format!("queue, {n} waiters"),
        }
    }

    fn subjects(self, metrics_cost: bool) -> Vec<Subject> {
        match self {
            Case::Queue(_) => Subject::ALL.into_iter().filter(|s| s.queues()).collect(),
            _ if metrics_cost => Subject::WITH_METRICS.to_vec(),
            _ => Subject::ALL.to_vec(),
        }
    }
}

/// Every round of one implementation in one case.
pub(crate) struct Series {
    pub(crate) case: Case,
    pub(crate) subject: Subject,
    pub(crate) samples: Vec<Sample>,
}

/// A whole run.
pub(crate) struct Results {
    pub(crate) rounds: u32,
    pub(crate) duration: Duration,
    pub(crate) server_version: measure::ServerVersion,
    pub(crate) private_server: bool,
    pub(crate) cores: usize,
    pub(crate) load_before: Option<f64>,
    pub(crate) load_after: Option<f64>,
    /// PING round trips per round: (count, cost).
    pub(crate) ping: Vec<Sample>,
    pub(crate) series: Vec<Series>,
    /// The read-write scenario: per worker count, each lock's rounds.
    pub(crate) read_write: Vec<KindSeries<RwSubject>>,
    /// The semaphore scenario: per worker count, each semaphore's rounds.
    pub(crate) semaphore: Vec<KindSeries<SemSubject>>,
    /// The queue scenario of the read-write locks and the semaphores: per
    /// number of waiters, each line's rounds.
    pub(crate) lines: Vec<KindSeries<LineSubject>>,
    /// The latch scenario: per number of waiters, each latch's rounds.
    pub(crate) latch: Vec<KindSeries<LatchSubject>>,
}

pub(crate) async fn run(cli: &Cli, args: &BenchArgs) -> Result<u8, Failure> {
    cli.refuse_settings("bench", &args.misplaced)?;
    // A chart that cannot be written is refused now, not after the run.
    if let Some(path) = &args.svg {
        std::fs::File::create(path).map_err(|e| {
            Failure::new(
                exit::USAGE,
                format!("--svg: cannot write {}: {e}", path.display()),
            )
        })?;
    }
    // So is an earlier run that cannot be read.
    let before = match &args.before {
        Some(path) => Some(chart::Before::read(path).map_err(|e| {
            Failure::new(
                exit::USAGE,
                format!("--before: cannot read {}: {e}", path.display()),
            )
        })?),
        None => None,
    };
    let (url, server) = match cli.explicit_url() {
        Some(url) => (url, None),
        None => {
            let server = PrivateRedis::start().map_err(|e| Failure::new(exit::UNAVAILABLE, e))?;
            (server.url(), Some(server))
        }
    };
    if args.scenario == Which::Election {
        return election::run(&url, args).await;
    }
    let cases = cases(args);
    let metrics = if args.metrics_cost {
        Some(crate::metrics_server::install_recorder()?)
    } else {
        None
    };
    let mut admin = measure::connect(&url).await?;
    let mut pinger = measure::connect(&url).await?;
    let server_version = measure::server_version(&mut admin).await?;
    let mut results = Results {
        rounds: args.rounds,
        duration: args.duration,
        server_version,
        private_server: server.is_some(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_before: measure::load_average(),
        load_after: None,
        ping: Vec::new(),
        series: cases
            .iter()
            .flat_map(|&case| {
                case.subjects(args.metrics_cost)
                    .into_iter()
                    .filter(|s| {
                        args.only.is_empty()
                            || args.only.contains(&s.without_metrics().unwrap_or(*s))
                    })
                    .map(move |subject| Series {
                        case,
                        subject,
                        samples: Vec::new(),
                    })
            })
            .collect(),
        read_write: if matches!(args.scenario, Which::All | Which::ReadWrite) {
            KindSeries::each(&RwSubject::ALL, &workers(args))
        } else {
            Vec::new()
        },
        semaphore: if matches!(args.scenario, Which::All | Which::Semaphore) {
            KindSeries::each(&SemSubject::ALL, &workers(args))
        } else {
            Vec::new()
        },
        lines: if matches!(args.scenario, Which::All | Which::Queue) {
            KindSeries::each(&line_subjects(args), &waiters(args))
        } else {
            Vec::new()
        },
        latch: if matches!(args.scenario, Which::All | Which::Latch) {
            KindSeries::each(&LatchSubject::ALL, &waiters(args))
        } else {
            Vec::new()
        },
    };
    if !args.json {
        let mut titles: Vec<String> = cases.iter().map(|c| c.title()).collect();
        if !results.read_write.is_empty() {
            titles.push("read-write".into());
        }
        if !results.semaphore.is_empty() {
            titles.push("semaphore".into());
        }
        let mut lines: Vec<usize> = results.lines.iter().map(|s| s.workers).collect();
        lines.dedup();
        titles.extend(
            lines
                .iter()
                .map(|n| format!("queue of the other kinds, {n} waiters")),
        );
        let mut latch: Vec<usize> = results.latch.iter().map(|s| s.workers).collect();
        latch.dedup();
        titles.extend(latch.iter().map(|n| format!("latch, {n} waiters")));
        eprintln!(
            "fairlock bench: {} on {} ({}), {} round(s) of {} per implementation and scenario",
            titles.join("; "),
            if server.is_some() {
                "a private redis-server"
            } else {
                url.as_str()
            },
            results.server_version,
            args.rounds,
            duration::format(args.duration)
        );
    }
    let run_id = format!("fairlock-bench-{}", std::process::id());
    for round in 1..=args.rounds {
        let (ops, cost) = measure::ping(&mut pinger, &mut admin, args.duration).await?;
        results.ping.push(Sample {
            ops,
            cost,
            ..Sample::default()
        });
        for index in order(&results.series, round) {
            let series = &mut results.series[index];
            let name = format!(
                "{run_id}-{}-{}-{round}",
                series.case.slug(),
                series.subject.key()
            );
            if !args.json {
                eprintln!(
                    "round {round}/{}: {}: {}",
                    args.rounds,
                    series.case.title(),
                    series.subject.label()
                );
            }
            let sample = measure_one(series.case, series.subject, &url, &name, args, &mut admin)
                .await
                .map_err(|f| {
                    Failure::new(
                        f.code,
                        format!(
                            "{} ({}): {}",
                            series.subject.label(),
                            series.case.title(),
                            f.message
                        ),
                    )
                })?;
            measure::delete_keys(&mut admin, &name).await?;
            series.samples.push(sample);
        }
        kinds::run_round(
            &mut results.read_write,
            round,
            args,
            &url,
            &run_id,
            &mut admin,
        )
        .await?;
        kinds::run_round(
            &mut results.semaphore,
            round,
            args,
            &url,
            &run_id,
            &mut admin,
        )
        .await?;
        kinds::run_round(&mut results.lines, round, args, &url, &run_id, &mut admin).await?;
        kinds::run_round(&mut results.latch, round, args, &url, &run_id, &mut admin).await?;
    }
    results.load_after = measure::load_average();
    drop(metrics);
    if let Some(path) = &args.svg {
        chart::write(&results, path, before.as_ref()).map_err(|e| {
            Failure::new(
                exit::SOFTWARE,
                format!("cannot write the chart to {}: {e}", path.display()),
            )
        })?;
    }
    if args.json {
        println!("{:#}", report::json(&results));
    } else {
        print!("{}", report::table(&results));
    }
    Ok(0)
}

/// The order of the series in round `round`: as listed, except that a lock
/// with metrics goes before the same lock without in even rounds (so that a
/// machine speeding up or slowing down within a round favours neither).
fn order(series: &[Series], round: u32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..series.len()).collect();
    if round.is_multiple_of(2) {
        for i in 1..series.len() {
            let base = series[i].subject.without_metrics();
            if base.is_some() && base == Some(series[i - 1].subject) {
                order.swap(i - 1, i);
            }
        }
    }
    order
}

fn workers(args: &BenchArgs) -> Vec<usize> {
    args.workers.iter().map(|&n| usize::from(n)).collect()
}

fn waiters(args: &BenchArgs) -> Vec<usize> {
    args.waiters.iter().map(|&n| n as usize).collect()
}

/// The lines of the other kinds that `--kind` asks for.
fn line_subjects(args: &BenchArgs) -> Vec<LineSubject> {
    let mut subjects = Vec::new();
    if args.kind.contains(&QueueKind::ReadWrite) {
        subjects.extend(LineSubject::READ_WRITE);
    }
    if args.kind.contains(&QueueKind::Semaphore) {
        subjects.extend(LineSubject::SEMAPHORE);
    }
    subjects
}

/// The cases the arguments ask for, in the order they run in each round.
fn cases(args: &BenchArgs) -> Vec<Case> {
    let mut cases = Vec::new();
    let all = args.scenario == Which::All;
    if all || args.scenario == Which::Uncontended {
        cases.push(Case::Uncontended);
    }
    if all || args.scenario == Which::Contended {
        cases.extend(
            args.workers
                .iter()
                .map(|&n| Case::Contended(usize::from(n))),
        );
    }
    if all || args.scenario == Which::Shared {
        cases.extend(args.workers.iter().map(|&n| Case::Shared(usize::from(n))));
    }
    if all || args.scenario == Which::Handoff {
        cases.push(Case::Handoff(HANDOFF_WORKERS));
    }
    if (all || args.scenario == Which::Queue) && args.kind.contains(&QueueKind::Lock) {
        cases.extend(args.waiters.iter().map(|&n| Case::Queue(n as usize)));
    }
    cases
}

async fn measure_one(
    case: Case,
    subject: Subject,
    url: &str,
    name: &str,
    args: &BenchArgs,
    admin: &mut redis::aio::MultiplexedConnection,
) -> Result<Sample, Failure> {
    let d = args.duration;
    match case {
        Case::Uncontended => scenario::uncontended(subject, url, name, d, admin).await,
        Case::Contended(n) => {
            scenario::contended(subject, url, name, n, Workload::Counter, d, admin).await
        }
        Case::Shared(n) => {
            scenario::contended(subject, url, name, n, Workload::SharedCounter, d, admin).await
        }
        Case::Handoff(n) => {
            scenario::contended(subject, url, name, n, Workload::Nothing, d, admin).await
        }
        Case::Queue(n) => scenario::queue(subject, url, name, n, d, admin).await,
    }
}

//! The metrics written through the `metrics` facade (cargo feature
//! `metrics`), and [`LockLabel`], which says whether they name locks.
//!
//! Only [`events`](crate::events) calls the functions here; without the
//! feature they do nothing and compile to nothing. Every metric, its type,
//! labels and meaning is listed in `docs/observability.md`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Whether (and how) metrics carry a `lock` label naming the lock.
///
/// Off by default: every distinct label value is one more time series in
/// the metrics backend, and names built from ids (`order:81723`) would
/// create one per id. Opt in with [`Name`](LockLabel::Name) when the set of
/// lock names is small and fixed, or map names to a few groups with
/// [`group`](LockLabel::group):
///
/// ```
/// use fairlock::{ClientConfig, LockLabel};
/// # fn main() -> fairlock::Result<()> {
/// // "order:81723" and "order:5" are both counted under lock="order".
/// let config = ClientConfig::from_url("redis://127.0.0.1:6379")?.metrics_lock_label(
///     LockLabel::group(|name| name.split(':').next().unwrap_or(name).to_owned()),
/// );
/// # let _ = config; Ok(()) }
/// ```
///
/// The label is only used by metrics (feature `metrics`); statistics and
/// tracing are unaffected.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum LockLabel {
    /// No `lock` label (the default).
    #[default]
    Off,
    /// The lock's name as it is.
    Name,
    /// The value the function returns for the lock's name. Keep the set of
    /// values small: it is the number of series per metric.
    Group(Arc<dyn Fn(&str) -> String + Send + Sync>),
}

impl LockLabel {
    /// Label each lock with the group `group` returns for its name.
    pub fn group(group: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        LockLabel::Group(Arc::new(group))
    }

    /// The `lock` label value for the lock `name`, when there is one.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn value(&self, name: &str) -> Option<String> {
        match self {
            LockLabel::Off => None,
            LockLabel::Name => Some(name.to_owned()),
            LockLabel::Group(group) => Some(group(name)),
        }
    }
}

impl fmt::Debug for LockLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockLabel::Off => "Off",
            LockLabel::Name => "Name",
            LockLabel::Group(_) => "Group(..)",
        })
    }
}

/// The metric names, as listed in `docs/observability.md`.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) mod names {
    pub(crate) const ACQUISITIONS: &str = "fairlock_acquisitions_total";
    pub(crate) const WAIT: &str = "fairlock_wait_seconds";
    pub(crate) const ATTEMPTS: &str = "fairlock_attempts_total";
    pub(crate) const HANDOFFS: &str = "fairlock_handoffs_total";
    pub(crate) const HANDOFF_LATENCY: &str = "fairlock_handoff_latency_seconds";
    pub(crate) const RELEASES: &str = "fairlock_releases_total";
    pub(crate) const HOLD: &str = "fairlock_hold_seconds";
    pub(crate) const RENEWALS: &str = "fairlock_renewals_total";
    pub(crate) const LOST: &str = "fairlock_locks_lost_total";
    pub(crate) const FORCE_UNLOCKS: &str = "fairlock_force_unlocks_total";
    pub(crate) const PUBSUB_RECONNECTS: &str = "fairlock_pubsub_reconnects_total";
    pub(crate) const PUBSUB_BEHIND: &str = "fairlock_pubsub_behind_total";
    pub(crate) const SCRIPT_RELOADS: &str = "fairlock_script_reloads_total";
    pub(crate) const HELD: &str = "fairlock_held_locks";
    pub(crate) const WAITING: &str = "fairlock_waiting_tasks";
    pub(crate) const LATCH_COUNT_DOWNS: &str = "fairlock_latch_count_downs_total";
    pub(crate) const LATCH_WAITS: &str = "fairlock_latch_waits_total";
    pub(crate) const LATCH_WAIT: &str = "fairlock_latch_wait_seconds";
}

/// Every `outcome` label of an acquisition, as `events::Outcome::label`
/// writes them (a test there checks it).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const OUTCOMES: [&str; 5] =
    ["immediate", "after_wait", "timed_out", "cancelled", "error"];

/// The labels of one lock-scoped metric: `protocol`, the given ones, and
/// `lock` when the user opted in.
#[cfg(feature = "metrics")]
fn labels(
    protocol: &'static str,
    more: &[(&'static str, &'static str)],
    lock: Option<String>,
) -> Vec<::metrics::Label> {
    let mut labels = Vec::with_capacity(2 + more.len());
    labels.push(::metrics::Label::from_static_parts("protocol", protocol));
    for &(key, value) in more {
        labels.push(::metrics::Label::from_static_parts(key, value));
    }
    if let Some(lock) = lock {
        labels.push(::metrics::Label::new("lock", lock));
    }
    labels
}

/// Where lock-scoped metrics go: this client's protocol and lock label.
pub(crate) struct Meters {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    protocol: &'static str,
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    lock_label: LockLabel,
    /// `ClientConfig::metrics`: off, every call returns at once.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    enabled: bool,
    /// The keys of the metrics every lock + unlock writes, built once.
    #[cfg(feature = "metrics")]
    hot: Option<HotKeys>,
}

/// Where the facade's macros put what they register: this module, at INFO.
#[cfg(feature = "metrics")]
static METADATA: ::metrics::Metadata<'static> =
    ::metrics::Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));

/// The keys (names and labels) of the metrics written on every acquisition
/// and release, built once per client when they carry no `lock` label (the
/// default; a `lock` label takes a key per lock name, built per write as
/// before). Building a key per write (its labels, its hash) cost about
/// 3,500 instructions per lock + unlock with no recorder installed. The
/// recorder is still asked for the metric at every write (as the macros
/// do), so a recorder installed later, or a local one, sees every write.
#[cfg(feature = "metrics")]
struct HotKeys {
    waiting: ::metrics::Key,
    held: ::metrics::Key,
    attempts: ::metrics::Key,
    hold: ::metrics::Key,
    /// (fair, outcome, acquisitions counter, wait histogram).
    acquisitions: Vec<(bool, &'static str, ::metrics::Key, ::metrics::Key)>,
    /// (how, releases counter).
    releases: Vec<(&'static str, ::metrics::Key)>,
    /// (result, renewals counter).
    renewals: Vec<(&'static str, ::metrics::Key)>,
    /// (handoff, handoffs counter, latency histogram).
    handoffs: Vec<(&'static str, ::metrics::Key, ::metrics::Key)>,
}

#[cfg(feature = "metrics")]
impl HotKeys {
    fn new(protocol: &'static str) -> Self {
        let key = |name: &'static str, more: &[(&'static str, &'static str)]| {
            ::metrics::Key::from_parts(name, labels(protocol, more, None))
        };
        let mut acquisitions = Vec::new();
        for fair in [true, false] {
            for outcome in OUTCOMES {
                let more = [Meters::kind(fair), ("outcome", outcome)];
                acquisitions.push((
                    fair,
                    outcome,
                    key(names::ACQUISITIONS, &more),
                    key(names::WAIT, &more),
                ));
            }
        }
        let releases = ["unlock", "drop", "shutdown"]
            .map(|how| (how, key(names::RELEASES, &[("how", how)])))
            .into();
        let renewals = ["ok", "failed"]
            .map(|result| (result, key(names::RENEWALS, &[("result", result)])))
            .into();
        let handoffs = ["direct", "woken"]
            .map(|how| {
                let more = [("handoff", how)];
                (
                    how,
                    key(names::HANDOFFS, &more),
                    key(names::HANDOFF_LATENCY, &more),
                )
            })
            .into();
        Self {
            waiting: key(names::WAITING, &[]),
            held: key(names::HELD, &[]),
            attempts: key(names::ATTEMPTS, &[]),
            hold: key(names::HOLD, &[]),
            acquisitions,
            releases,
            renewals,
            handoffs,
        }
    }
}

/// The recorder of now's counter, gauge or histogram for `key`.
#[cfg(feature = "metrics")]
fn counter(key: &::metrics::Key) -> ::metrics::Counter {
    ::metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

#[cfg(feature = "metrics")]
fn gauge(key: &::metrics::Key) -> ::metrics::Gauge {
    ::metrics::with_recorder(|recorder| recorder.register_gauge(key, &METADATA))
}

#[cfg(feature = "metrics")]
fn histogram(key: &::metrics::Key) -> ::metrics::Histogram {
    ::metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
}

#[cfg(feature = "metrics")]
impl Meters {
    pub(crate) fn new(protocol: &'static str, lock_label: LockLabel, enabled: bool) -> Self {
        let hot = (enabled && matches!(lock_label, LockLabel::Off)).then(|| HotKeys::new(protocol));
        Self {
            protocol,
            lock_label,
            enabled,
            hot,
        }
    }

    fn lock(&self, lock: &str) -> Option<String> {
        self.lock_label.value(lock)
    }

    /// Whether metrics are written with a `lock` label (else the lock's
    /// name passed to them is not read).
    pub(crate) fn labels_locks(&self) -> bool {
        self.enabled && !matches!(self.lock_label, LockLabel::Off)
    }

    fn kind(fair: bool) -> (&'static str, &'static str) {
        ("kind", if fair { "fair" } else { "nonfair" })
    }

    pub(crate) fn acquisition(
        &self,
        lock: &str,
        fair: bool,
        outcome: &'static str,
        wait: Duration,
    ) {
        if !self.enabled {
            return;
        }
        let cached = self.hot.as_ref().and_then(|hot| {
            hot.acquisitions
                .iter()
                .find(|(f, o, ..)| *f == fair && *o == outcome)
        });
        if let Some((.., count, waited)) = cached {
            counter(count).increment(1);
            histogram(waited).record(wait.as_secs_f64());
            return;
        }
        let labels = labels(
            self.protocol,
            &[Self::kind(fair), ("outcome", outcome)],
            self.lock(lock),
        );
        ::metrics::counter!(names::ACQUISITIONS, labels.clone()).increment(1);
        ::metrics::histogram!(names::WAIT, labels).record(wait.as_secs_f64());
    }

    pub(crate) fn attempt(&self, lock: &str) {
        if !self.enabled {
            return;
        }
        if let Some(hot) = &self.hot {
            counter(&hot.attempts).increment(1);
            return;
        }
        let labels = labels(self.protocol, &[], self.lock(lock));
        ::metrics::counter!(names::ATTEMPTS, labels).increment(1);
    }

    pub(crate) fn handoff(&self, lock: &str, kind: &'static str, latency: Duration) {
        if !self.enabled {
            return;
        }
        let cached = self
            .hot
            .as_ref()
            .and_then(|hot| hot.handoffs.iter().find(|(how, ..)| *how == kind));
        if let Some((_, count, latency_key)) = cached {
            counter(count).increment(1);
            histogram(latency_key).record(latency.as_secs_f64());
            return;
        }
        let labels = labels(self.protocol, &[("handoff", kind)], self.lock(lock));
        ::metrics::counter!(names::HANDOFFS, labels.clone()).increment(1);
        ::metrics::histogram!(names::HANDOFF_LATENCY, labels).record(latency.as_secs_f64());
    }

    pub(crate) fn waiting(&self, delta: f64) {
        if !self.enabled {
            return;
        }
        if let Some(hot) = &self.hot {
            gauge(&hot.waiting).increment(delta);
            return;
        }
        ::metrics::gauge!(names::WAITING, "protocol" => self.protocol).increment(delta);
    }

    pub(crate) fn hold_started(&self) {
        if !self.enabled {
            return;
        }
        if let Some(hot) = &self.hot {
            gauge(&hot.held).increment(1.0);
            return;
        }
        ::metrics::gauge!(names::HELD, "protocol" => self.protocol).increment(1.0);
    }

    pub(crate) fn hold_ended(&self, lock: &str, held_for: Duration) {
        if !self.enabled {
            return;
        }
        if let Some(hot) = &self.hot {
            gauge(&hot.held).decrement(1.0);
            histogram(&hot.hold).record(held_for.as_secs_f64());
            return;
        }
        ::metrics::gauge!(names::HELD, "protocol" => self.protocol).decrement(1.0);
        let labels = labels(self.protocol, &[], self.lock(lock));
        ::metrics::histogram!(names::HOLD, labels).record(held_for.as_secs_f64());
    }

    pub(crate) fn released(&self, lock: &str, how: &'static str) {
        if !self.enabled {
            return;
        }
        let cached = self
            .hot
            .as_ref()
            .and_then(|hot| hot.releases.iter().find(|(h, _)| *h == how));
        if let Some((_, key)) = cached {
            counter(key).increment(1);
            return;
        }
        let labels = labels(self.protocol, &[("how", how)], self.lock(lock));
        ::metrics::counter!(names::RELEASES, labels).increment(1);
    }

    pub(crate) fn renewal(&self, lock: &str, result: &'static str) {
        if !self.enabled {
            return;
        }
        let cached = self
            .hot
            .as_ref()
            .and_then(|hot| hot.renewals.iter().find(|(r, _)| *r == result));
        if let Some((_, key)) = cached {
            counter(key).increment(1);
            return;
        }
        let labels = labels(self.protocol, &[("result", result)], self.lock(lock));
        ::metrics::counter!(names::RENEWALS, labels).increment(1);
    }

    pub(crate) fn lost(&self, lock: &str, cause: &'static str) {
        if !self.enabled {
            return;
        }
        let labels = labels(self.protocol, &[("cause", cause)], self.lock(lock));
        ::metrics::counter!(names::LOST, labels).increment(1);
    }

    pub(crate) fn force_unlock(&self, lock: &str, released: bool) {
        if !self.enabled {
            return;
        }
        let released = ("released", if released { "true" } else { "false" });
        let labels = labels(self.protocol, &[released], self.lock(lock));
        ::metrics::counter!(names::FORCE_UNLOCKS, labels).increment(1);
    }

    /// A latch count-down answered (`counted`: it took one off the count).
    pub(crate) fn latch_count_down(&self, latch: &str, counted: bool) {
        if !self.enabled {
            return;
        }
        let counted = ("counted", if counted { "yes" } else { "no" });
        let labels = labels(self.protocol, &[counted], self.lock(latch));
        ::metrics::counter!(names::LATCH_COUNT_DOWNS, labels).increment(1);
    }

    /// A latch wait ended, `opened` or not (timed out), after `waited`.
    pub(crate) fn latch_wait(&self, latch: &str, opened: bool, waited: Duration) {
        if !self.enabled {
            return;
        }
        let outcome = ("outcome", if opened { "opened" } else { "timeout" });
        let labels = labels(self.protocol, &[outcome], self.lock(latch));
        ::metrics::counter!(names::LATCH_WAITS, labels.clone()).increment(1);
        ::metrics::histogram!(names::LATCH_WAIT, labels).record(waited.as_secs_f64());
    }

    pub(crate) fn pubsub_reconnect(&self) {
        if !self.enabled {
            return;
        }
        ::metrics::counter!(names::PUBSUB_RECONNECTS, "protocol" => self.protocol).increment(1);
    }

    pub(crate) fn pubsub_behind(&self, reason: &'static str) {
        if !self.enabled {
            return;
        }
        ::metrics::counter!(names::PUBSUB_BEHIND, "protocol" => self.protocol, "reason" => reason)
            .increment(1);
    }

    pub(crate) fn script_reload(&self) {
        if !self.enabled {
            return;
        }
        ::metrics::counter!(names::SCRIPT_RELOADS, "protocol" => self.protocol).increment(1);
    }
}

/// Without the feature: the same calls, doing nothing.
#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
impl Meters {
    pub(crate) fn new(protocol: &'static str, lock_label: LockLabel, enabled: bool) -> Self {
        Self {
            protocol,
            lock_label,
            enabled,
        }
    }
    #[inline(always)]
    pub(crate) fn labels_locks(&self) -> bool {
        false
    }
    #[inline(always)]
    pub(crate) fn acquisition(&self, _: &str, _: bool, _: &'static str, _: Duration) {}
    #[inline(always)]
    pub(crate) fn attempt(&self, _: &str) {}
    #[inline(always)]
    pub(crate) fn handoff(&self, _: &str, _: &'static str, _: Duration) {}
    #[inline(always)]
    pub(crate) fn waiting(&self, _: f64) {}
    #[inline(always)]
    pub(crate) fn hold_started(&self) {}
    #[inline(always)]
    pub(crate) fn hold_ended(&self, _: &str, _: Duration) {}
    #[inline(always)]
    pub(crate) fn released(&self, _: &str, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn renewal(&self, _: &str, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn lost(&self, _: &str, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn force_unlock(&self, _: &str, _: bool) {}
    #[inline(always)]
    pub(crate) fn latch_count_down(&self, _: &str, _: bool) {}
    #[inline(always)]
    pub(crate) fn latch_wait(&self, _: &str, _: bool, _: Duration) {}
    #[inline(always)]
    pub(crate) fn pubsub_reconnect(&self) {}
    #[inline(always)]
    pub(crate) fn pubsub_behind(&self, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn script_reload(&self) {}
}

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
}

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
}

#[cfg(feature = "metrics")]
impl Meters {
    pub(crate) fn new(protocol: &'static str, lock_label: LockLabel, enabled: bool) -> Self {
        Self {
            protocol,
            lock_label,
            enabled,
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
        let labels = labels(self.protocol, &[], self.lock(lock));
        ::metrics::counter!(names::ATTEMPTS, labels).increment(1);
    }

    pub(crate) fn handoff(&self, lock: &str, kind: &'static str, latency: Duration) {
        if !self.enabled {
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
        ::metrics::gauge!(names::WAITING, "protocol" => self.protocol).increment(delta);
    }

    pub(crate) fn hold_started(&self) {
        if !self.enabled {
            return;
        }
        ::metrics::gauge!(names::HELD, "protocol" => self.protocol).increment(1.0);
    }

    pub(crate) fn hold_ended(&self, lock: &str, held_for: Duration) {
        if !self.enabled {
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
        let labels = labels(self.protocol, &[("how", how)], self.lock(lock));
        ::metrics::counter!(names::RELEASES, labels).increment(1);
    }

    pub(crate) fn renewal(&self, lock: &str, result: &'static str) {
        if !self.enabled {
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
    pub(crate) fn pubsub_reconnect(&self) {}
    #[inline(always)]
    pub(crate) fn pubsub_behind(&self, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn script_reload(&self) {}
}

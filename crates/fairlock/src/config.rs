//! Client configuration.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::meters::LockLabel;
use crate::protocol::{Protocol, ProtocolSettings};
use crate::retry::RetryPolicy;
use crate::transport::{Endpoint, Timeouts, URL_FORMS};

/// The longest duration accepted for a lease, a wait or a waiter slot: 365 days.
///
/// Longer values are almost always a unit mistake (seconds passed as
/// milliseconds, `Duration::MAX` as "forever"); use [`lock`](crate::LockHandle::lock)
/// to wait without a bound and the watchdog to hold without one.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Settings of a [`LockClient`](crate::LockClient).
///
/// Built from a Redis URL, then adjusted with by-value setters named after
/// the setting (`lease(..)`); each setting is read back with `get_` and the
/// same name (`get_lease()`):
///
/// ```
/// use std::time::Duration;
/// # fn main() -> fairlock::Result<()> {
/// let config = fairlock::ClientConfig::from_url("redis://:secret@127.0.0.1:6380/2")?
///     .lease(Duration::from_secs(9))
///     .waiter_slot(Duration::from_secs(60));
/// assert_eq!(config.get_renew_interval(), Duration::from_secs(3));
/// // Debug output never shows the password.
/// assert!(!format!("{config:?}").contains("secret"));
/// # Ok(()) }
/// ```
///
/// URLs: `redis://[user][:password@]host[:port][/db]`, `rediss://` for TLS
/// (feature `tls`, on by default), `redis+unix:///path` or `unix:///path`,
/// and for Redis Sentinel
/// `redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]`
/// (`rediss+sentinel://` over TLS; the credentials are the data nodes',
/// see [`sentinel_auth`](Self::sentinel_auth) for the sentinels' own),
/// and a Redis Cluster as `redis+cluster://[user:password@]host:port[,host:port...]`
/// (`rediss+cluster://` for TLS): every seed is tried, one that answers is
/// enough.
#[derive(Clone)]
pub struct ClientConfig {
    pub(crate) endpoint: Endpoint,
    pub(crate) protocol: Protocol,
    pub(crate) lease: Duration,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) waiter_slot: Duration,
    pub(crate) waiter_ttl: Duration,
    pub(crate) clock_offset_ms: i64,
    pub(crate) response_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) retry_budget: Duration,
    pub(crate) lock_label: LockLabel,
    pub(crate) metrics: bool,
    pub(crate) min_replicas: Option<(u32, Duration)>,
    pub(crate) label: String,
}

impl ClientConfig {
    /// Default lease of a lock renewed by the watchdog: 30 s (Redisson's
    /// `lockWatchdogTimeout`).
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// Default waiter slot (Redisson's `fairLockWaitTimeout`): 300 s.
    pub const DEFAULT_WAITER_SLOT: Duration = Duration::from_secs(300);
    /// Default waiter ttl of the native protocol: 6 s.
    pub const DEFAULT_WAITER_TTL: Duration = Duration::from_secs(6);

    /// The URL forms [`from_url`](Self::from_url) accepts, for messages.
    pub const URL_FORMS: &'static str = URL_FORMS;

    /// Parse a Redis URL; its query parameters give the other settings,
    /// the rest take their defaults.
    ///
    /// The parameters (durations in humantime's format: `500ms`, `30s`,
    /// `5m`, `1h30m`, from 1 ms to 365 days) and the setter each one calls:
    ///
    /// | parameter | setter |
    /// | --- | --- |
    /// | `protocol=native\|redisson` | [`protocol`](Self::protocol) |
    /// | `lease=DUR` | [`lease`](Self::lease) |
    /// | `renew_interval=DUR` | [`renew_interval`](Self::renew_interval) |
    /// | `waiter_ttl=DUR` | [`waiter_ttl`](Self::waiter_ttl) |
    /// | `waiter_slot=DUR` | [`waiter_slot`](Self::waiter_slot) |
    /// | `response_timeout=DUR` | [`response_timeout`](Self::response_timeout) |
    /// | `connect_timeout=DUR` | [`connect_timeout`](Self::connect_timeout) |
    /// | `retry_budget=DUR` | [`retry_budget`](Self::retry_budget) |
    /// | `min_replicas=N` | [`min_replicas`](Self::min_replicas) (timeout 1 s unless given) |
    /// | `min_replicas_timeout=DUR` | [`min_replicas`](Self::min_replicas) |
    /// | `metrics=true\|false` | [`metrics`](Self::metrics) |
    /// | `label=TEXT` | [`label`](Self::label) (taken as written: no percent-decoding) |
    ///
    /// A unix socket URL also keeps the Redis client's own `db`, `user` and
    /// `pass`. Setters called afterwards override the URL's values.
    ///
    /// ```
    /// use std::time::Duration;
    /// use fairlock::{ClientConfig, Protocol};
    /// # fn main() -> fairlock::Result<()> {
    /// let config = ClientConfig::from_url(
    ///     "redis://127.0.0.1:6379/0?protocol=redisson&lease=30s&waiter_ttl=6s&response_timeout=3s",
    /// )?;
    /// assert_eq!(config.get_protocol(), Protocol::Redisson);
    /// assert_eq!(config.get_lease(), Duration::from_secs(30));
    /// // An unknown parameter is refused by name.
    /// let err = ClientConfig::from_url("redis://127.0.0.1/0?leese=30s").unwrap_err();
    /// assert!(err.to_string().contains("unknown URL parameter \"leese\""));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when the URL cannot be parsed; the message
    /// says why, lists the accepted forms ([`URL_FORMS`](Self::URL_FORMS))
    /// and never repeats the password. [`Error::InvalidConfig`] naming the
    /// parameter for an unknown, repeated or empty parameter and for a value
    /// that does not parse (with the value and the accepted form);
    /// [`Error::InvalidDuration`] naming the parameter for a duration out of
    /// range; and the errors of [`LockClient::with_config`](crate::LockClient::with_config)'s
    /// checks for settings that do not fit together.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::from_text(url, &|_| None)
    }

    /// Every setting's default, for `endpoint`.
    pub(crate) fn defaults(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            protocol: Protocol::default(),
            lease: Self::DEFAULT_LEASE,
            renew_interval: None,
            waiter_slot: Self::DEFAULT_WAITER_SLOT,
            waiter_ttl: Self::DEFAULT_WAITER_TTL,
            clock_offset_ms: 0,
            response_timeout: Duration::from_secs(3),
            connect_timeout: Duration::from_secs(3),
            retry_budget: Duration::from_secs(10),
            lock_label: LockLabel::Off,
            metrics: true,
            min_replicas: None,
            label: crate::label::default_label().to_owned(),
        }
    }

    /// The wire protocol. Default: [`Protocol::Native`]; choose
    /// [`Protocol::Redisson`] to share locks with Java services using Redisson.
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Lease of locks taken without an explicit lease; the watchdog renews
    /// them every [`renew_interval`](Self::get_renew_interval) while they are
    /// held. Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How often the watchdog renews. Default: a third of the lease.
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// `redisson` protocol only: how long a queued waiter's place in a fair
    /// lock stays valid beyond the waiter ahead of it (Redisson's
    /// `fairLockWaitTimeout`). A waiter that dies is purged once its slot runs
    /// out; so is a live one that waits longer (Redisson's rule).
    /// `try_lock_for(wait)` uses `wait` instead, as Redisson does. Default: 300 s.
    pub fn waiter_slot(mut self, slot: Duration) -> Self {
        self.waiter_slot = slot;
        self
    }

    /// `native` protocol only: a waiter refreshes its place every third of
    /// this; a waiter that stops refreshing (its process died) is skipped
    /// once it ran out, and a lock handed to a waiter that turns out dead
    /// passes on after it. Live waiters are never dropped, however long they
    /// wait, as long as a call to Redis takes less than a third of this: a
    /// waiter whose calls take longer cannot prove it is alive and is
    /// treated as dead (skipped, then queued again). Keep it at least three
    /// round trips on the slowest path you expect. Default: 6 s.
    pub fn waiter_ttl(mut self, ttl: Duration) -> Self {
        self.waiter_ttl = ttl;
        self
    }

    /// Test hook: shift the clock this client reports to Redis by `offset_ms`
    /// (Redisson's deadlines come from client clocks; the native protocol
    /// sends no time at all). Not for production use.
    #[doc(hidden)]
    pub fn clock_offset_ms(mut self, offset_ms: i64) -> Self {
        self.clock_offset_ms = offset_ms;
        self
    }

    /// How long to wait for a reply to one command before treating the
    /// connection as broken. Default: 3 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long one connection attempt may take. Default: 3 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long an operation keeps retrying through connection errors
    /// (within its own wait budget) before it fails with
    /// [`Error::Connection`]. Default: 10 s.
    pub fn retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }

    /// Whether metrics (feature `metrics`) carry a `lock` label, and with
    /// which value: see [`LockLabel`]. Default: [`LockLabel::Off`], no
    /// label (one series per metric, whatever the number of locks).
    pub fn metrics_lock_label(mut self, label: LockLabel) -> Self {
        self.lock_label = label;
        self
    }

    /// The configured lock label of metrics.
    pub fn get_metrics_lock_label(&self) -> &LockLabel {
        &self.lock_label
    }

    /// Whether this client writes metrics through the `metrics` facade
    /// (with the cargo feature `metrics`; without it, none are written
    /// anyway). Default: `true`. Turn it off for a client whose locks
    /// should not count, such as a health check's; its
    /// [`statistics`](crate::LockClient::statistics) and tracing events
    /// stay as they are. `fairlock bench --metrics-cost` compares clients
    /// with and without metrics this way.
    pub fn metrics(mut self, enabled: bool) -> Self {
        self.metrics = enabled;
        self
    }

    /// Whether this client writes metrics.
    pub fn get_metrics(&self) -> bool {
        self.metrics
    }

    /// Who this client is, in words a person reads: stored next to each
    /// lock the client holds or waits for, and shown by
    /// [`inspect`](crate::LockHandle::inspect) (and `fairlock inspect`,
    /// `fairlock watch`) beside the owner id, and in the log line of a
    /// lost lock. Not empty, at most [`MAX_LABEL_LEN`](crate::MAX_LABEL_LEN)
    /// bytes, no control characters. Labels are not unique and not checked
    /// against anything: they are for reading, never for deciding.
    /// Default: `HOST:PID` (the host name from `/proc/sys/kernel/hostname`,
    /// else `$HOSTNAME`), such as `build-7:31337`.
    ///
    /// ```
    /// # fn main() -> fairlock::Result<()> {
    /// let config = fairlock::ClientConfig::from_url("redis://127.0.0.1:6379")?
    ///     .label("billing-worker@build-7");
    /// assert_eq!(config.get_label(), "billing-worker@build-7");
    /// # Ok(()) }
    /// ```
    ///
    /// A label that breaks the rules is refused with
    /// [`Error::InvalidConfig`] when the client connects.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// The client's label.
    pub fn get_label(&self) -> &str {
        &self.label
    }

    /// Credentials for the sentinels of a `redis+sentinel://` URL (the
    /// URL's own user and password are the data nodes'). An empty
    /// `username` authenticates as the default user (`AUTH password`).
    /// Ignored for other URLs. Default: no authentication to the sentinels.
    ///
    /// ```
    /// # fn main() -> fairlock::Result<()> {
    /// let config = fairlock::ClientConfig::from_url(
    ///     "redis+sentinel://app:data-secret@10.0.0.1:26379,10.0.0.2:26379/orders/0",
    /// )?
    /// .sentinel_auth("", "sentinel-secret");
    /// assert!(!format!("{config:?}").contains("secret"));
    /// # Ok(()) }
    /// ```
    pub fn sentinel_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.endpoint
            .set_sentinel_auth(username.into(), password.into());
        self
    }

    /// After every acquisition and every release, wait until `replicas`
    /// replicas acknowledged it (Redis `WAIT replicas timeout`), for at most
    /// `timeout`. When fewer did, an acquisition is undone (released) and
    /// fails with [`Error::ReplicasNotSynced`]; a release (already done)
    /// reports the same error. Redisson's `checkLockSyncedSlaves` with
    /// `slavesSyncTimeout`.
    ///
    /// This narrows the window in which a failover loses a lock: a lock
    /// acknowledged by `replicas` replicas survives the promotion of any of
    /// them. It cannot close it: replication stays asynchronous (a renewal
    /// is believed only once acknowledged, but the server applied it
    /// before), and the sentinels may promote a replica that had not
    /// acknowledged. Fencing tokens are the real protection (see
    /// `docs/topologies.md`). Holds survive a failover only when the new
    /// master has `replicas` replicas acknowledging their renewals within the
    /// lease (a demoted master rejoins late: run one replica more).
    ///
    /// It applies to the locks and to the native read-write lock and
    /// semaphore, not to the redisson semaphores (Redisson applies
    /// `checkLockSyncedSlaves` to its locks only).
    ///
    /// `replicas == 0` turns it off (the default). Each acquisition and
    /// release costs one more round trip on a separate connection (`WAIT`
    /// blocks the connection it is sent on). On a Redis Cluster the `WAIT`
    /// runs on the master serving the lock's slot and counts that master's
    /// replicas; the write it waits for is a `SET` of a key in the lock's
    /// slot that expires after 10 s.
    pub fn min_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.min_replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// The configured replica acknowledgement: `(replicas, timeout)`.
    pub fn get_min_replicas(&self) -> Option<(u32, Duration)> {
        self.min_replicas
    }

    /// Trust the CA certificate `pem` (PEM) for `rediss://` connections,
    /// instead of the built-in webpki roots (for servers with a private CA).
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.endpoint.set_tls_root_certificate(pem.into());
        self
    }

    /// Present a client certificate and key (both PEM) on `rediss://`
    /// connections (mutual TLS).
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.endpoint
            .set_tls_client_certificate(cert_pem.into(), key_pem.into());
        self
    }

    /// The configured protocol.
    pub fn get_protocol(&self) -> Protocol {
        self.protocol
    }

    /// The configured lease.
    pub fn get_lease(&self) -> Duration {
        self.lease
    }

    /// The watchdog's renewal interval (a third of the lease unless set).
    pub fn get_renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.lease / 3)
    }

    /// The configured waiter slot.
    pub fn get_waiter_slot(&self) -> Duration {
        self.waiter_slot
    }

    /// The configured waiter ttl.
    pub fn get_waiter_ttl(&self) -> Duration {
        self.waiter_ttl
    }

    /// `host:port` (or socket path) of the server, for messages.
    pub fn address(&self) -> String {
        self.endpoint.address()
    }

    /// The configured response timeout.
    pub fn get_response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// The configured connect timeout.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The configured retry budget.
    pub fn get_retry_budget(&self) -> Duration {
        self.retry_budget
    }

    /// Check every setting; called by [`LockClient::with_config`](crate::LockClient::with_config).
    pub(crate) fn validate(&self) -> Result<()> {
        check_duration("lease", self.lease)?;
        check_duration("renew interval", self.get_renew_interval())?;
        check_duration("waiter slot", self.waiter_slot)?;
        check_duration("waiter ttl", self.waiter_ttl)?;
        if self.waiter_ttl < Duration::from_millis(30) {
            return Err(Error::InvalidDuration {
                what: "waiter ttl",
                value: self.waiter_ttl,
                reason: "must be at least 30 ms (waiters refresh every third of it)",
            });
        }
        check_duration("response timeout", self.response_timeout)?;
        check_duration("connect timeout", self.connect_timeout)?;
        check_duration("retry budget", self.retry_budget)?;
        crate::label::validate(&self.label)?;
        if let Some((_, timeout)) = self.min_replicas {
            check_duration("replica acknowledgement timeout", timeout)?;
        }
        if self.get_renew_interval() >= self.lease {
            return Err(Error::InvalidConfig(format!(
                "renew interval {:?} must be shorter than the lease {:?}",
                self.get_renew_interval(),
                self.lease
            )));
        }
        Ok(())
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("address", &self.address())
            .field("db", &self.endpoint.db())
            .field("username", &self.endpoint.username())
            .field(
                "password",
                &self.endpoint.has_password().then_some("<hidden>"),
            )
            .field("protocol", &self.protocol)
            .field("lease", &self.lease)
            .field("renew_interval", &self.get_renew_interval())
            .field("waiter_slot", &self.waiter_slot)
            .field("waiter_ttl", &self.waiter_ttl)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("retry_budget", &self.retry_budget)
            .field("metrics", &self.metrics)
            .field("metrics_lock_label", &self.lock_label)
            .field("tls_files", &self.endpoint.tls_files_summary())
            .field(
                "sentinel_auth",
                &self.endpoint.has_sentinel_auth().then_some("<hidden>"),
            )
            .field("min_replicas", &self.min_replicas)
            .field("label", &self.label)
            .finish()
    }
}

impl ClientConfig {
    /// Connect and response timeouts, for the transport.
    pub(crate) fn timeouts(&self) -> Timeouts {
        Timeouts {
            connect: self.connect_timeout,
            response: self.response_timeout,
        }
    }

    /// What the protocol needs from these settings.
    pub(crate) fn protocol_settings(&self) -> ProtocolSettings {
        ProtocolSettings {
            protocol: self.protocol,
            waiter_ttl: self.waiter_ttl,
            waiter_slot: self.waiter_slot,
            clock_offset_ms: self.clock_offset_ms,
            label: self.label.as_str().into(),
            labels: Default::default(),
            // Longer than the last retry of a release can come: a retry
            // within the budget, re-sent once more from the background after
            // a drop, each call bounded by the response timeout.
            release_cache: (2 * (self.retry_budget + self.response_timeout))
                .max(Duration::from_secs(20)),
        }
    }

    /// The retry policy every retrying call of the client follows.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retry_budget)
    }
}

/// Check that a duration is at least 1 ms and at most [`MAX_DURATION`];
/// returns it in whole milliseconds (sub-millisecond parts round up).
pub(crate) fn check_duration(what: &'static str, value: Duration) -> Result<u64> {
    if value < Duration::from_millis(1) {
        return Err(Error::InvalidDuration {
            what,
            value,
            reason: "must be at least 1 ms",
        });
    }
    if value > MAX_DURATION {
        return Err(Error::InvalidDuration {
            what,
            value,
            reason: "must be at most 365 days",
        });
    }
    let millis = value.as_millis() as u64;
    Ok(if !value.subsec_nanos().is_multiple_of(1_000_000) {
        millis + 1
    } else {
        millis
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert!(check_duration("lease", Duration::ZERO).is_err());
        assert!(check_duration("lease", Duration::from_micros(999)).is_err());
        assert!(check_duration("lease", Duration::MAX).is_err());
        assert_eq!(
            check_duration("lease", Duration::from_micros(1500)).unwrap(),
            2
        );
        assert_eq!(
            check_duration("lease", MAX_DURATION).unwrap(),
            31_536_000_000
        );
    }

    #[test]
    fn defaults_and_secrets() {
        let c = ClientConfig::from_url("redis://alice:hunter2@localhost:7000/3").unwrap();
        assert_eq!(c.get_lease(), Duration::from_secs(30));
        assert_eq!(c.get_renew_interval(), Duration::from_secs(10));
        assert_eq!(c.get_waiter_slot(), Duration::from_secs(300));
        assert_eq!(c.address(), "localhost:7000");
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("alice"), "{shown}");
        assert!(ClientConfig::from_url("http://x").is_err());
    }

    #[test]
    fn bad_urls_say_why_and_hide_the_password() {
        let message = |url: &str| ClientConfig::from_url(url).unwrap_err().to_string();
        let shown = message("http://127.0.0.1:1");
        assert!(shown.contains("unknown scheme \"http\""), "{shown}");
        assert!(shown.contains(ClientConfig::URL_FORMS), "{shown}");
        let shown = message("redis:/x");
        assert!(shown.contains("missing hostname"), "{shown}");
        let shown = message("redis://:hunter2@127.0.0.1:99999");
        assert!(shown.contains("does not parse as a URL"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redis://:***@127.0.0.1:99999"), "{shown}");
        assert!(message("127.0.0.1:6379").contains("no scheme"));
        assert!(message("redis://host/x").contains("invalid database number"));
    }
}

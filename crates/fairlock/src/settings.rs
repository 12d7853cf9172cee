//! Settings given as text: a Redis URL's query parameters
//! (`redis://host/0?protocol=redisson&lease=30s`) and `FAIRLOCK_*`
//! environment variables. One table names each setting in both forms; each
//! value goes through the builder's setter and is checked as the builder's
//! settings are, with the same typed errors.

use std::time::Duration;

use crate::config::{ClientConfig, check_duration};
use crate::error::{Error, Result};
use crate::protocol::Protocol;
use crate::transport::Endpoint;

/// The variables that name the Redis URL, the first set one wins.
pub(crate) const URL_VARS: [&str; 2] = ["FAIRLOCK_URL", "REDIS_URL"];

/// The sentinels' own credentials (environment only: a URL's query is no
/// place for a password).
pub(crate) const SENTINEL_VARS: [&str; 2] =
    ["FAIRLOCK_SENTINEL_USER", "FAIRLOCK_SENTINEL_PASSWORD"];

/// Query parameters a unix socket URL keeps for the Redis client.
const UNIX_PARAMS: [&str; 3] = ["db", "user", "pass"];

/// The accepted duration text, for messages.
const DURATION_FORM: &str =
    "use a number with a unit, such as 500ms, 30s, 5m or 1h30m (1ms to 365days)";

/// Replica acknowledgement timeout when only the count is given: 1 s
/// (Redisson's `slavesSyncTimeout`).
const DEFAULT_REPLICA_TIMEOUT: Duration = Duration::from_secs(1);

/// Where a value came from, for messages: `URL parameter lease` or
/// `environment variable FAIRLOCK_LEASE`.
#[derive(Clone, Copy)]
struct Source {
    /// "URL parameter" or "environment variable".
    kind: &'static str,
    /// The parameter or variable name; also the `what` of
    /// [`Error::InvalidDuration`].
    name: &'static str,
}

impl Source {
    fn refuse(self, value: &str, why: &str) -> Error {
        Error::InvalidConfig(format!(
            "{} {}={value:?} is not valid: {why}",
            self.kind, self.name
        ))
    }

    fn duration(self, value: &str) -> Result<Duration> {
        let duration = humantime::parse_duration(value)
            .map_err(|e| self.refuse(value, &format!("{e}; {DURATION_FORM}")))?;
        check_duration(self.name, duration)?;
        Ok(duration)
    }
}

type Apply = fn(ClientConfig, Source, &str) -> Result<ClientConfig>;

/// One setting: its URL parameter, its environment variable, its setter.
struct Setting {
    param: &'static str,
    var: &'static str,
    apply: Apply,
}

/// The URL parameters, as [`SETTINGS`] names them (a unit test keeps the
/// two alike).
pub(crate) const PARAMS: [&str; 12] = [
    "protocol",
    "lease",
    "renew_interval",
    "waiter_ttl",
    "waiter_slot",
    "response_timeout",
    "connect_timeout",
    "retry_budget",
    "min_replicas",
    "min_replicas_timeout",
    "metrics",
    "label",
];

/// Every setting text can give, in the order they are applied (the
/// replica count before its timeout).
const SETTINGS: [Setting; 12] = [
    Setting {
        param: "protocol",
        var: "FAIRLOCK_PROTOCOL",
        apply: |config, from, value| match value {
            "native" => Ok(config.protocol(Protocol::Native)),
            "redisson" => Ok(config.protocol(Protocol::Redisson)),
            _ => Err(from.refuse(value, "use native or redisson")),
        },
    },
    Setting {
        param: "lease",
        var: "FAIRLOCK_LEASE",
        apply: |config, from, value| Ok(config.lease(from.duration(value)?)),
    },
    Setting {
        param: "renew_interval",
        var: "FAIRLOCK_RENEW_INTERVAL",
        apply: |config, from, value| Ok(config.renew_interval(from.duration(value)?)),
    },
    Setting {
        param: "waiter_ttl",
        var: "FAIRLOCK_WAITER_TTL",
        apply: |config, from, value| Ok(config.waiter_ttl(from.duration(value)?)),
    },
    Setting {
        param: "waiter_slot",
        var: "FAIRLOCK_WAITER_SLOT",
        apply: |config, from, value| Ok(config.waiter_slot(from.duration(value)?)),
    },
    Setting {
        param: "response_timeout",
        var: "FAIRLOCK_RESPONSE_TIMEOUT",
        apply: |config, from, value| Ok(config.response_timeout(from.duration(value)?)),
    },
    Setting {
        param: "connect_timeout",
        var: "FAIRLOCK_CONNECT_TIMEOUT",
        apply: |config, from, value| Ok(config.connect_timeout(from.duration(value)?)),
    },
    Setting {
        param: "retry_budget",
        var: "FAIRLOCK_RETRY_BUDGET",
        apply: |config, from, value| Ok(config.retry_budget(from.duration(value)?)),
    },
    Setting {
        param: "min_replicas",
        var: "FAIRLOCK_MIN_REPLICAS",
        apply: |config, from, value| {
            let replicas: u32 = value.parse().map_err(|_| {
                from.refuse(value, "use a number of replicas (0 turns the wait off)")
            })?;
            let timeout = config
                .get_min_replicas()
                .map_or(DEFAULT_REPLICA_TIMEOUT, |(_, timeout)| timeout);
            Ok(config.min_replicas(replicas, timeout))
        },
    },
    Setting {
        param: "min_replicas_timeout",
        var: "FAIRLOCK_MIN_REPLICAS_TIMEOUT",
        apply: |config, from, value| {
            let timeout = from.duration(value)?;
            match config.get_min_replicas() {
                Some((replicas, _)) => Ok(config.min_replicas(replicas, timeout)),
                None => Err(from.refuse(
                    value,
                    "it needs min_replicas (FAIRLOCK_MIN_REPLICAS) above 0",
                )),
            }
        },
    },
    Setting {
        param: "metrics",
        var: "FAIRLOCK_METRICS",
        apply: |config, from, value| match value {
            "true" | "1" => Ok(config.metrics(true)),
            "false" | "0" => Ok(config.metrics(false)),
            _ => Err(from.refuse(value, "use true or false")),
        },
    },
    Setting {
        param: "label",
        var: "FAIRLOCK_LABEL",
        apply: |config, from, value| match crate::label::problem(value) {
            Some(reason) => Err(from.refuse(value, reason)),
            None => Ok(config.label(value)),
        },
    },
];

/// The names of the URL parameters, for messages.
fn param_names() -> String {
    PARAMS.join(", ")
}

/// Every environment variable `from_env` reads.
pub(crate) fn env_vars() -> impl Iterator<Item = &'static str> {
    URL_VARS
        .into_iter()
        .chain(SETTINGS.iter().map(|setting| setting.var))
        .chain(SENTINEL_VARS)
}

/// A URL taken apart: what the Redis client parses, and fairlock's own
/// parameters by their index in [`SETTINGS`].
pub(crate) struct SplitUrl {
    pub(crate) url: String,
    params: Vec<(usize, String)>,
}

/// Take fairlock's parameters out of `url`'s query. A unix socket URL keeps
/// `db`, `user` and `pass` for the Redis client; any other parameter is
/// refused, as is one given twice or without a value.
pub(crate) fn split_url(url: &str) -> Result<SplitUrl> {
    let Some((base, rest)) = url.split_once('?') else {
        return Ok(SplitUrl {
            url: url.to_owned(),
            params: Vec::new(),
        });
    };
    let (query, fragment) = match rest.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (rest, None),
    };
    let unix = matches!(
        base.split_once("://").map(|(scheme, _)| scheme),
        Some("unix" | "redis+unix" | "valkey+unix")
    );
    let mut params: Vec<(usize, String)> = Vec::new();
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (pair, None),
        };
        match SETTINGS.iter().position(|setting| setting.param == key) {
            Some(index) => {
                let param = SETTINGS[index].param;
                let Some(value) = value.filter(|value| !value.is_empty()) else {
                    return Err(Error::InvalidConfig(format!(
                        "URL parameter {param:?} has no value"
                    )));
                };
                if params.iter().any(|(seen, _)| *seen == index) {
                    return Err(Error::InvalidConfig(format!(
                        "URL parameter {param:?} is given more than once"
                    )));
                }
                params.push((index, value.to_owned()));
            }
            None if unix && UNIX_PARAMS.contains(&key) => kept.push(pair),
            None => {
                let unix_note = if unix {
                    ", and db, user, pass for a unix socket"
                } else {
                    ""
                };
                return Err(Error::InvalidConfig(format!(
                    "unknown URL parameter {key:?}; the parameters are {}{unix_note}",
                    param_names()
                )));
            }
        }
    }
    let mut url = base.to_owned();
    if !kept.is_empty() {
        url.push('?');
        url.push_str(&kept.join("&"));
    }
    if let Some(fragment) = fragment {
        url.push('#');
        url.push_str(fragment);
    }
    Ok(SplitUrl { url, params })
}

impl SplitUrl {
    /// Apply the URL's parameters to `config`; a variable `lookup` finds
    /// (set and not empty) replaces the parameter of its setting.
    pub(crate) fn apply(
        &self,
        mut config: ClientConfig,
        lookup: &dyn Fn(&'static str) -> Option<String>,
    ) -> Result<ClientConfig> {
        for (index, setting) in SETTINGS.iter().enumerate() {
            let from_env = lookup(setting.var).map(|value| {
                let from = Source {
                    kind: "environment variable",
                    name: setting.var,
                };
                (from, value)
            });
            let from_url = || {
                self.params
                    .iter()
                    .find(|(seen, _)| *seen == index)
                    .map(|(_, value)| {
                        let from = Source {
                            kind: "URL parameter",
                            name: setting.param,
                        };
                        (from, value.clone())
                    })
            };
            if let Some((from, value)) = from_env.or_else(from_url) {
                config = (setting.apply)(config, from, &value)?;
            }
        }
        Ok(config)
    }
}

/// The sentinels' credentials from the environment, when given.
pub(crate) fn sentinel_auth(
    config: ClientConfig,
    lookup: &dyn Fn(&'static str) -> Option<String>,
) -> Result<ClientConfig> {
    let [user_var, password_var] = SENTINEL_VARS;
    match (lookup(user_var), lookup(password_var)) {
        (user, Some(password)) => Ok(config.sentinel_auth(user.unwrap_or_default(), password)),
        (Some(_), None) => Err(Error::InvalidConfig(format!(
            "environment variable {user_var} is set without {password_var}"
        ))),
        (None, None) => Ok(config),
    }
}

/// Settings from the URL's parameters and the environment.
impl ClientConfig {
    /// The query parameters [`from_url`](Self::from_url) reads (the
    /// environment variables of [`from_env`](Self::from_env) are these in
    /// upper case, after `FAIRLOCK_`). A tool that hands the same URL to
    /// another Redis client takes these out first.
    pub const URL_PARAMETERS: &'static [&'static str] = &PARAMS;

    /// Settings from the process environment: the URL from `FAIRLOCK_URL`,
    /// else `REDIS_URL` (with its query parameters, as
    /// [`from_url`](Self::from_url)), then one variable per setting, which
    /// replaces the URL's parameter of the same setting:
    /// `FAIRLOCK_PROTOCOL`, `FAIRLOCK_LEASE`, `FAIRLOCK_RENEW_INTERVAL`,
    /// `FAIRLOCK_WAITER_TTL`, `FAIRLOCK_WAITER_SLOT`,
    /// `FAIRLOCK_RESPONSE_TIMEOUT`, `FAIRLOCK_CONNECT_TIMEOUT`,
    /// `FAIRLOCK_RETRY_BUDGET`, `FAIRLOCK_MIN_REPLICAS`,
    /// `FAIRLOCK_MIN_REPLICAS_TIMEOUT`, `FAIRLOCK_METRICS`, `FAIRLOCK_LABEL` (the parameter
    /// names in upper case), and the sentinels' own credentials
    /// `FAIRLOCK_SENTINEL_USER` and `FAIRLOCK_SENTINEL_PASSWORD` (see
    /// [`sentinel_auth`](Self::sentinel_auth)). An empty variable counts as
    /// unset.
    ///
    /// ```no_run
    /// # async fn demo() -> fairlock::Result<()> {
    /// // FAIRLOCK_URL=redis://locks.internal:6379/0 FAIRLOCK_PROTOCOL=redisson FAIRLOCK_LEASE=1m
    /// let config = fairlock::ClientConfig::from_env()?;
    /// let client = fairlock::LockClient::with_config(config).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when neither URL variable is set, or a
    /// variable is not UTF-8; otherwise as [`from_url`](Self::from_url),
    /// naming the variable instead of the parameter.
    pub fn from_env() -> Result<Self> {
        for var in env_vars() {
            if let Err(std::env::VarError::NotUnicode(_)) = std::env::var(var) {
                return Err(Error::InvalidConfig(format!(
                    "environment variable {var} is not valid UTF-8"
                )));
            }
        }
        Self::from_env_with(|var| std::env::var(var).ok())
    }

    /// [`from_env`](Self::from_env) with the variables read by `lookup`
    /// (`None` for an unset variable): for tests, or for settings kept in
    /// another store of names and values.
    ///
    /// ```
    /// # fn main() -> fairlock::Result<()> {
    /// let config = fairlock::ClientConfig::from_env_with(|var| match var {
    ///     "REDIS_URL" => Some("redis://127.0.0.1:6379?lease=20s".to_owned()),
    ///     "FAIRLOCK_LEASE" => Some("45s".to_owned()),
    ///     _ => None,
    /// })?;
    /// assert_eq!(config.get_lease(), std::time::Duration::from_secs(45));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`from_env`](Self::from_env).
    pub fn from_env_with(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let lookup = |var: &'static str| lookup(var).filter(|value| !value.is_empty());
        let [first, second] = URL_VARS;
        let url = lookup(first).or_else(|| lookup(second)).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "no Redis URL: set {first} or {second} (such as redis://127.0.0.1:6379/0)"
            ))
        })?;
        let config = Self::from_text(&url, &lookup)?;
        let config = sentinel_auth(config, &lookup)?;
        config.validate()?;
        Ok(config)
    }

    /// The URL, its parameters and the variables `lookup` finds, checked.
    pub(crate) fn from_text(
        url: &str,
        lookup: &dyn Fn(&'static str) -> Option<String>,
    ) -> Result<Self> {
        let split = split_url(url)?;
        let config = Self::defaults(Endpoint::parse(&split.url)?);
        let config = split.apply(config, lookup)?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_spelled_alike() {
        let params: Vec<&str> = SETTINGS.iter().map(|setting| setting.param).collect();
        assert_eq!(params, PARAMS);
        for (i, setting) in SETTINGS.iter().enumerate() {
            assert_eq!(
                setting.var,
                format!("FAIRLOCK_{}", setting.param.to_uppercase())
            );
            assert!(
                SETTINGS[..i]
                    .iter()
                    .all(|other| other.param != setting.param)
            );
        }
    }

    #[test]
    fn split_keeps_what_the_redis_client_reads() {
        let split = split_url("redis+unix:///tmp/r.sock?db=2&lease=5s&pass=x").unwrap();
        assert_eq!(split.url, "redis+unix:///tmp/r.sock?db=2&pass=x");
        assert_eq!(split.params, vec![(1, "5s".to_owned())]);
        let split = split_url("rediss://h:1/0?protocol=redisson#insecure").unwrap();
        assert_eq!(split.url, "rediss://h:1/0#insecure");
        assert_eq!(split_url("redis://h/0?").unwrap().url, "redis://h/0");
    }
}

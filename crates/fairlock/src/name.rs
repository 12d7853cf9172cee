//! Lock names and the Redis keys derived from them.

use crate::error::{Error, Result, truncate_name};

/// The longest lock name accepted, in bytes.
///
/// Redis itself allows much longer keys, but every lock name is repeated in
/// several keys and in every wake-up channel name; 1 KiB keeps those cheap
/// and catches names built from unbounded input by mistake.
pub const MAX_NAME_LEN: usize = 1024;

/// Check a lock name (under `redisson`, also [`validate_redisson`]).
///
/// Rules (each violation is an [`Error::InvalidName`]):
/// - not empty, at most [`MAX_NAME_LEN`] bytes, no ASCII control characters;
/// - braces follow Redisson's rule: a name without `{` gets its derived keys
///   wrapped as `prefix:{NAME}`; a name with `{` is used as it is
///   (`prefix:NAME`), so it must carry a proper cluster hash tag: its first
///   `{` must be followed by a non-empty tag and a `}`. Otherwise the lock key
///   and its queue keys would land in different cluster slots. A `}` without
///   any `{` is rejected for the same reason;
///
/// # Why no native name needs the last rule
///
/// Every native key and channel is `fairlock:{NAME}:SUFFIX`, SUFFIX one of
/// the lock's `lock`, `line`, `waiters` (and, of the layouts before version
/// 2, `labels`, `queue`, `alive`, `meta`, `leases`), `wake:OWNER`,
/// `release:REQUEST`, the read-write lock's `rw:holders`, `rw:hold:ID`,
/// `rw:line`, `rw:waiters`, `rw:meta` (and, before version 2, `rw:queue`,
/// `rw:alive`, `rw:leases`), `rw:wake:ID`, `rw:release:REQUEST`, the
/// semaphore's same with `sem:`, the election's `elect:log` and
/// `elect:changes` (`election.rs`), or the count-down latch's `latch`,
/// `latch:parties`, `latch:open`.
/// No SUFFIX holds a `}` (owner, holder and request ids do not), so a key's
/// last `}` ends NAME: stripping `fairlock:{` and the last `}:SUFFIX` gives
/// back NAME and SUFFIX, and two native names (or two kinds of one name)
/// never share a key. A native key never
/// equals a Redisson one either: Redisson's derived keys start with
/// `redisson_`, fairlock's labels of a Redisson lock with `fairlock:labels:`
/// (never `fairlock:{`), and its lock keys (bare names) may not start with
/// `fairlock:` (refused by [`validate_redisson`]). So that rule binds
/// `redisson` names only.
pub(crate) fn validate(name: &str) -> Result<()> {
    let invalid = |reason| Error::InvalidName {
        name: truncate_name(name),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("the name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(invalid("the name is longer than 1024 bytes"));
    }
    if name.chars().any(|c| c.is_ascii_control()) {
        return Err(invalid("the name contains a control character"));
    }
    match name.find('{') {
        None if name.contains('}') => {
            return Err(invalid(
                "a '}' without a '{': Redisson's keys for it would span cluster slots",
            ));
        }
        None => {}
        Some(open) => match name[open + 1..].find('}') {
            Some(0) => {
                return Err(invalid(
                    "an empty hash tag '{}': Redisson's keys for it would span cluster slots",
                ));
            }
            Some(_) => {}
            None => {
                return Err(invalid(
                    "a '{' without a closing '}': Redisson's keys for it would span cluster slots",
                ));
            }
        },
    }
    Ok(())
}

/// Under `redisson`, where a lock's key is its bare name: no name that
/// could be another lock's key (see [`foreign_key_reason`]), as an
/// [`Error::InvalidName`].
pub(crate) fn validate_redisson(name: &str) -> Result<()> {
    match foreign_key_reason(name) {
        Some(reason) => Err(Error::InvalidName {
            name: truncate_name(name),
            reason,
        }),
        None => Ok(()),
    }
}

/// The prefixes of the keys (and channels) Redisson derives from a name
/// (`prefix:{NAME}`), for its locks, fair locks, read-write locks and
/// semaphores (`/work/shared/PROTOCOL.md`, `PROTOCOL-KINDS.md`), and the
/// prefix of every native key.
const DERIVED_PREFIXES: [&str; 7] = [
    "fairlock:",
    "redisson_lock_queue:",
    "redisson_lock_timeout:",
    "redisson_lock__channel:",
    "redisson_unlock_latch:",
    "redisson_rwlock:",
    "redisson_sc:",
];

/// Why a `redisson` lock named `name` (its lock key is the bare name) could
/// be another lock's key, if it could: a native key (`fairlock:...`), a key
/// Redisson derives with a prefix (`redisson_lock_queue:{x}`, ...), or one
/// it derives with a suffix: the read-write lock's per-hold timeouts
/// (`{x}:OWNER:rwlock_timeout:N`) and the expirable semaphore's permits
/// (`{x}:timeout`). A lock taken under such a name would be deleted, or
/// taken over, by the other lock's scripts.
pub(crate) fn foreign_key_reason(name: &str) -> Option<&'static str> {
    if name.starts_with("fairlock:") {
        return Some(
            "under redisson the lock key is the name, and `fairlock:` keys are native locks' keys",
        );
    }
    if DERIVED_PREFIXES
        .iter()
        .any(|prefix| name.starts_with(prefix))
    {
        return Some(
            "the name is a key Redisson derives for another lock (`redisson_...:` prefix)",
        );
    }
    if name.contains(":rwlock_timeout") || name.ends_with(":timeout") {
        return Some(
            "the name is a key Redisson derives for another lock (`:rwlock_timeout` or `:timeout` suffix)",
        );
    }
    None
}

/// `prefix:{name}`, or `prefix:name` when the name carries its own hash tag
/// (Redisson's `prefixName`).
pub(crate) fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The keys of one lock under the `redisson` protocol.
#[derive(Debug, Clone)]
pub(crate) struct RedissonKeys {
    /// The lock hash: the raw name.
    pub(crate) lock: String,
    /// Fair lock wait queue (list).
    pub(crate) queue: String,
    /// Fair lock waiter deadlines (sorted set).
    pub(crate) timeouts: String,
    /// Channel prefix; the fair lock appends `:OWNER`, the non-fair lock uses it as is.
    pub(crate) channel: String,
    /// Prefix of the unlock result cache; `:REQUEST` is appended per call.
    pub(crate) unlock_latch: String,
    /// fairlock's own key, not Redisson's: the labels of the fairlock
    /// clients that hold or wait for the lock (hash, client id -> label),
    /// `fairlock:labels:{NAME}`, in the lock's slot. Redisson never reads
    /// it; no Redisson key changes for it.
    pub(crate) labels: String,
}

impl RedissonKeys {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            lock: name.to_owned(),
            queue: prefixed("redisson_lock_queue", name),
            timeouts: prefixed("redisson_lock_timeout", name),
            channel: prefixed("redisson_lock__channel", name),
            unlock_latch: prefixed("redisson_unlock_latch", name),
            labels: Self::labels_of(name),
        }
    }

    /// The labels key of the lock whose key (its name) is `lock_key`.
    pub(crate) fn labels_of(lock_key: &str) -> String {
        prefixed("fairlock:labels", lock_key)
    }

    /// The wake-up channel of one waiting owner of a fair lock.
    pub(crate) fn fair_channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.channel)
    }

    /// The unlock result cache key of one unlock call.
    pub(crate) fn unlock_latch(&self, request: &str) -> String {
        joined(&self.unlock_latch, request)
    }
}

/// `prefix:suffix`, built without the formatting machinery (it runs on
/// every release).
pub(crate) fn joined(prefix: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + 1 + suffix.len());
    key.push_str(prefix);
    key.push(':');
    key.push_str(suffix);
    key
}

/// The keys of one lock under the `native` protocol: `fairlock:{NAME}:...`.
/// Every key starts with the same `fairlock:{` prefix up to the name's first
/// `}`, so they all share one cluster slot whatever the name contains.
/// (Layout version 2, see `protocol/native/lock_prelude.lua`.)
#[derive(Debug, Clone)]
pub(crate) struct NativeKeys {
    /// KEYS[1..3] of every native lock script: the lock (a string), the
    /// line (arrival order), the waiters' records.
    pub(crate) all: [String; 3],
    /// Channel prefix: `fairlock:{NAME}:wake`; every waiter, fair or not,
    /// listens on `...:wake:OWNER`.
    pub(crate) channel: String,
    /// Prefix of the release result cache; `:REQUEST` is appended per call.
    pub(crate) release_cache: String,
}

impl NativeKeys {
    pub(crate) fn new(name: &str) -> Self {
        let key = |suffix: &str| format!("fairlock:{{{name}}}:{suffix}");
        Self {
            all: [key("lock"), key("line"), key("waiters")],
            channel: key("wake"),
            release_cache: key("release"),
        }
    }

    pub(crate) fn lock(&self) -> &str {
        &self.all[0]
    }
}

/// The keys of one object of the `native` protocol's weighted engine: a
/// read-write lock's, `fairlock:{NAME}:rw:...`, or a semaphore's,
/// `fairlock:{NAME}:sem:...` (see `protocol/native/weighted_prelude.lua`).
/// Apart from the lock's of the same name, and from each other: they are
/// different objects.
#[derive(Debug, Clone)]
pub(crate) struct NativeRwKeys {
    /// KEYS[1..4] of every script (layout version 2): holders, line,
    /// waiters' records, meta.
    pub(crate) all: [String; 4],
    /// Prefix of each holder's own key; its holder id is appended.
    pub(crate) hold: String,
    /// Channel prefix: each waiter listens on `...:wake:ID`.
    pub(crate) channel: String,
    /// Prefix of the release result cache; `:REQUEST` is appended per call.
    pub(crate) release_cache: String,
}

impl NativeRwKeys {
    /// A read-write lock's keys.
    pub(crate) fn new(name: &str) -> Self {
        Self::of_kind(name, "rw")
    }

    /// A semaphore's keys.
    pub(crate) fn semaphore(name: &str) -> Self {
        Self::of_kind(name, "sem")
    }

    fn of_kind(name: &str, kind: &str) -> Self {
        let key = |suffix: &str| format!("fairlock:{{{name}}}:{kind}:{suffix}");
        Self {
            all: [key("holders"), key("line"), key("waiters"), key("meta")],
            hold: key("hold"),
            channel: key("wake"),
            release_cache: key("release"),
        }
    }

    /// The holders set: the key every hold of the lock is registered and
    /// renewed under.
    pub(crate) fn holders(&self) -> &str {
        &self.all[0]
    }

    /// The key of holder `id`'s hold.
    pub(crate) fn hold_of(&self, id: &str) -> String {
        joined(&self.hold, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_get_braces() {
        let k = RedissonKeys::new("orders");
        assert_eq!(k.lock, "orders");
        assert_eq!(k.queue, "redisson_lock_queue:{orders}");
        assert_eq!(k.timeouts, "redisson_lock_timeout:{orders}");
        assert_eq!(k.fair_channel("u:1"), "redisson_lock__channel:{orders}:u:1");
        assert_eq!(k.channel, "redisson_lock__channel:{orders}");
        assert_eq!(k.unlock_latch("ab"), "redisson_unlock_latch:{orders}:ab");
        assert_eq!(k.labels, "fairlock:labels:{orders}");
        assert_eq!(RedissonKeys::new("job{7}").labels, "fairlock:labels:job{7}");
    }

    #[test]
    fn tagged_names_are_kept() {
        let k = RedissonKeys::new("job{7}");
        assert_eq!(k.queue, "redisson_lock_queue:job{7}");
        assert_eq!(k.channel, "redisson_lock__channel:job{7}");
    }

    #[test]
    fn native_read_write_keys_are_apart_from_the_locks() {
        let k = NativeRwKeys::new("orders");
        assert_eq!(k.holders(), "fairlock:{orders}:rw:holders");
        assert_eq!(
            k.hold_of("u:1:write"),
            "fairlock:{orders}:rw:hold:u:1:write"
        );
        assert_eq!(k.channel, "fairlock:{orders}:rw:wake");
        assert_eq!(k.all[1], "fairlock:{orders}:rw:line");
        assert_eq!(k.all[2], "fairlock:{orders}:rw:waiters");
        let lock = NativeKeys::new("orders");
        assert!(k.all.iter().all(|key| !lock.all.contains(key)));
        let sem = NativeRwKeys::semaphore("orders");
        assert_eq!(sem.holders(), "fairlock:{orders}:sem:holders");
        assert_eq!(sem.hold_of("u:1"), "fairlock:{orders}:sem:hold:u:1");
        assert!(
            sem.all
                .iter()
                .all(|key| !k.all.contains(key) && !lock.all.contains(key))
        );
    }

    #[test]
    fn native_keys_share_a_prefix() {
        let k = NativeKeys::new("orders");
        assert_eq!(k.lock(), "fairlock:{orders}:lock");
        assert_eq!(k.all[1], "fairlock:{orders}:line");
        assert_eq!(k.all[2], "fairlock:{orders}:waiters");
        assert_eq!(k.channel, "fairlock:{orders}:wake");
        let tagged = NativeKeys::new("a{b}c");
        assert!(
            tagged
                .all
                .iter()
                .all(|key| key.starts_with("fairlock:{a{b}"))
        );
    }

    #[test]
    fn validation() {
        assert!(validate("a").is_ok());
        assert!(validate("x{tag}y").is_ok());
        assert!(validate(&"n".repeat(MAX_NAME_LEN)).is_ok());
        for bad in ["", "a}b", "a{b", "{}x", "a\nb"] {
            let err = validate(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidName { .. }), "{bad:?}: {err}");
        }
        assert!(validate(&"n".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn redisson_names_that_are_other_locks_keys() {
        let native = NativeKeys::new("x");
        let redisson = RedissonKeys::new("x");
        let mut keys: Vec<String> = native.all.to_vec();
        keys.extend([
            native.release_cache.clone(),
            "fairlock:{x}:labels".to_owned(),
            redisson.labels.clone(),
            redisson.queue.clone(),
            redisson.timeouts.clone(),
            redisson.channel.clone(),
            redisson.fair_channel("u:1"),
            redisson.unlock_latch("ab"),
            "redisson_rwlock:{x}".to_owned(),
            "redisson_sc:{x}".to_owned(),
            "{x}:u:1:rwlock_timeout:1".to_owned(),
            "{x}:timeout".to_owned(),
            "a{b}:timeout".to_owned(),
        ]);
        for key in &keys {
            let err = validate_redisson(key).unwrap_err();
            assert!(matches!(err, Error::InvalidName { .. }), "{key:?}: {err}");
            // Under native the same names are fine: their keys are all
            // `fairlock:{NAME}:...`, which no other name shares.
            assert!(validate(key).is_ok(), "{key:?}");
        }
        for fine in [
            "fairlock",
            "orders:timeouts",
            "redisson",
            "user:1",
            "x{fairlock:}",
        ] {
            assert!(
                validate(fine).is_ok() && validate_redisson(fine).is_ok(),
                "{fine:?}"
            );
        }
    }
}

//! The count-down latch's scripts under both protocols, and their typed
//! replies: the `native` latch (`fairlock:{NAME}:latch`, its parties and
//! its channel, see `native/latch_prelude.lua`) and Redisson's
//! `RCountDownLatch` (the count under the name, the channel
//! `redisson_countdownlatch__channel__{NAME}`, see
//! `redisson/latch_prelude.lua`), byte for byte.

use std::sync::LazyLock;
use std::time::Duration;

use super::unexpected;
use crate::decimal::Decimal;
use crate::error::Result;
use crate::transport::{Connection, Script};

/// A latch script of `$dir`: the common prelude, the latch prelude of that
/// protocol, then the script itself.
macro_rules! latch_script {
    ($dir:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!($dir, "/", $file),
                concat!(
                    include_str!("common.lua"),
                    include_str!(concat!($dir, "/latch_prelude.lua")),
                    include_str!(concat!($dir, "/", $file))
                ),
            )
        })
    };
}

static NATIVE_SET: LazyLock<Script> = latch_script!("native", "latch_set.lua");
static NATIVE_DOWN: LazyLock<Script> = latch_script!("native", "latch_down.lua");
static NATIVE_STATE: LazyLock<Script> = latch_script!("native", "latch_state.lua");
static NATIVE_DELETE: LazyLock<Script> = latch_script!("native", "latch_delete.lua");
static REDISSON_SET: LazyLock<Script> = latch_script!("redisson", "latch_set.lua");
static REDISSON_DOWN: LazyLock<Script> = latch_script!("redisson", "latch_down.lua");
static REDISSON_STATE: LazyLock<Script> = latch_script!("redisson", "latch_state.lua");
static REDISSON_DELETE: LazyLock<Script> = latch_script!("redisson", "latch_delete.lua");

/// The latch's state as one read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LatchState {
    /// The count; 0 when open (absent). A Redisson latch set with a
    /// negative count reads as 0 (Redisson's `await` returns on it too).
    pub(crate) count: u64,
    /// The native latch's round (the id of its last setting); `None`
    /// under `redisson` or when open.
    pub(crate) round: Option<String>,
    /// How many parties counted down this round (native only).
    pub(crate) parties: u64,
    /// The time its keys live on, `None` for none (open, or a Redisson
    /// latch, which never expires).
    pub(crate) ttl: Option<Duration>,
}

/// One count-down's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountedDown {
    /// This call took one off the count (`false`: the latch was open, or
    /// the party had counted down already this round).
    pub(crate) counted: bool,
    /// The count after the call.
    pub(crate) count: u64,
}

/// A count-down latch's keys and channel under one protocol.
#[derive(Debug)]
pub(crate) enum LatchObject {
    /// `fairlock:{NAME}:latch`, `fairlock:{NAME}:latch:parties`, the
    /// channel `fairlock:{NAME}:latch:open`.
    Native { name: String, keys: [String; 3] },
    /// The name, the channel `redisson_countdownlatch__channel__{NAME}`.
    Redisson { name: String, keys: [String; 2] },
}

impl LatchObject {
    pub(crate) fn native(name: &str) -> Self {
        let key = |suffix: &str| format!("fairlock:{{{name}}}:{suffix}");
        Self::Native {
            name: name.to_owned(),
            keys: [key("latch"), key("latch:parties"), key("latch:open")],
        }
    }

    pub(crate) fn redisson(name: &str) -> Self {
        Self::Redisson {
            name: name.to_owned(),
            // Redisson wraps the raw name in braces whatever it holds (not
            // its usual `prefixName`).
            keys: [
                name.to_owned(),
                format!("redisson_countdownlatch__channel__{{{name}}}"),
            ],
        }
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Self::Native { name, .. } | Self::Redisson { name, .. } => name,
        }
    }

    /// The key that holds the count.
    pub(crate) fn key(&self) -> &str {
        match self {
            Self::Native { keys, .. } => &keys[0],
            Self::Redisson { keys, .. } => &keys[0],
        }
    }

    /// The channel its opening is published on.
    pub(crate) fn channel(&self) -> &str {
        match self {
            Self::Native { keys, .. } => &keys[2],
            Self::Redisson { keys, .. } => &keys[1],
        }
    }

    fn keys(&self) -> Vec<&str> {
        match self {
            Self::Native { keys, .. } => keys.iter().map(String::as_str).collect(),
            Self::Redisson { keys, .. } => keys.iter().map(String::as_str).collect(),
        }
    }

    /// Set the count when the latch is open. `round` is the native latch's
    /// new round id (hex); `expiry` the native keys' life after each set
    /// or count-down. `true` when set.
    pub(crate) async fn try_set(
        &self,
        conn: &Connection,
        count: u64,
        expiry: Duration,
        round: &str,
    ) -> Result<bool> {
        let n = Decimal::new(count);
        match self {
            Self::Native { name, .. } => {
                let ms = super::ms(expiry);
                let reply: Vec<i64> = conn
                    .script(&NATIVE_SET, name, &self.keys(), &[&n, &ms, round])
                    .await?;
                match reply[..] {
                    [1, _] => Ok(true),
                    [0, _] => Ok(false),
                    _ => Err(unexpected("latch set", &reply)),
                }
            }
            Self::Redisson { name, .. } => {
                let reply: i64 = conn
                    .script(&REDISSON_SET, name, &self.keys(), &[&n])
                    .await?;
                match reply {
                    1 => Ok(true),
                    0 => Ok(false),
                    _ => Err(unexpected("latch set", reply)),
                }
            }
        }
    }

    /// Count down once, as `party` (native only; `""` for none).
    pub(crate) async fn count_down(&self, conn: &Connection, party: &str) -> Result<CountedDown> {
        match self {
            Self::Native { name, .. } => {
                let reply: Vec<i64> = conn
                    .script(&NATIVE_DOWN, name, &self.keys(), &[party])
                    .await?;
                match reply[..] {
                    [counted @ (0 | 1), count] if count >= 0 => Ok(CountedDown {
                        counted: counted == 1,
                        count: count as u64,
                    }),
                    _ => Err(unexpected("latch count-down", &reply)),
                }
            }
            Self::Redisson { name, .. } => {
                let reply: Vec<i64> = conn.script(&REDISSON_DOWN, name, &self.keys(), &[]).await?;
                match reply[..] {
                    [counted @ (0 | 1), count] => Ok(CountedDown {
                        counted: counted == 1,
                        count: count.max(0) as u64,
                    }),
                    _ => Err(unexpected("latch count-down", &reply)),
                }
            }
        }
    }

    /// The latch's state (read only).
    pub(crate) async fn state(&self, conn: &Connection) -> Result<LatchState> {
        match self {
            Self::Native { name, .. } => {
                let reply: (i64, String, i64, i64) =
                    conn.script(&NATIVE_STATE, name, &self.keys(), &[]).await?;
                match reply {
                    (0, round, 0, -2) if round.is_empty() => Ok(LatchState {
                        count: 0,
                        round: None,
                        parties: 0,
                        ttl: None,
                    }),
                    (count @ 1.., round, parties @ 0.., ttl) if !round.is_empty() => {
                        Ok(LatchState {
                            count: count as u64,
                            round: Some(round),
                            parties: parties as u64,
                            ttl: ttl_of(ttl),
                        })
                    }
                    _ => Err(unexpected("latch state", &reply)),
                }
            }
            Self::Redisson { name, .. } => {
                let (count, ttl): (i64, i64) = conn
                    .script(&REDISSON_STATE, name, &self.keys(), &[])
                    .await?;
                Ok(LatchState {
                    count: count.max(0) as u64,
                    round: None,
                    parties: 0,
                    ttl: ttl_of(ttl),
                })
            }
        }
    }

    /// Delete the latch (which opens it); `true` when there was one.
    pub(crate) async fn delete(&self, conn: &Connection) -> Result<bool> {
        let (script, name) = match self {
            Self::Native { name, .. } => (&NATIVE_DELETE, name),
            Self::Redisson { name, .. } => (&REDISSON_DELETE, name),
        };
        let reply: i64 = conn.script(script, name, &self.keys(), &[]).await?;
        match reply {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(unexpected("latch delete", reply)),
        }
    }
}

/// A PTTL reply as a duration: `None` for no expiry (-1) or no key (-2).
fn ttl_of(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

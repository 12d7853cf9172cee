//! Client labels: who a client is, in words a person reads (`HOST:PID` by
//! default), stored next to a lock so that `inspect` can say who holds it
//! and who waits.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The longest client label accepted, in bytes.
///
/// A label is written next to every lock its client takes or waits for,
/// and shown on one line of `inspect`: 128 bytes holds a host name, a
/// process id and a service name, and keeps a lock's labels small.
pub const MAX_LABEL_LEN: usize = 128;

/// Why `label` cannot be a client label, if it cannot: empty, longer than
/// [`MAX_LABEL_LEN`], or with a control character (a label is printed on a
/// terminal as it is: no line breaks, no escape sequences).
pub(crate) fn problem(label: &str) -> Option<&'static str> {
    if label.is_empty() {
        Some("the label is empty")
    } else if label.len() > MAX_LABEL_LEN {
        Some("the label is longer than 128 bytes")
    } else if label.chars().any(char::is_control) {
        Some("the label contains a control character")
    } else {
        None
    }
}

/// Check a label set by the user, as an [`Error::InvalidConfig`].
pub(crate) fn validate(label: &str) -> Result<()> {
    match problem(label) {
        Some(reason) => {
            let shown: String = label.chars().take(40).collect();
            Err(Error::InvalidConfig(format!(
                "client label {shown:?} is not valid: {reason}"
            )))
        }
        None => Ok(()),
    }
}

/// A label read back from Redis, if it is one this library would write:
/// anything else (written by hand, or by anyone else allowed to write the
/// key) is not shown.
pub(crate) fn read_back(label: &str) -> Option<String> {
    problem(label).is_none().then(|| label.to_owned())
}

/// The default label, `HOST:PID`: the host name from
/// `/proc/sys/kernel/hostname` (Linux), else `$HOSTNAME`, else `unknown-host`;
/// read once per process.
pub(crate) fn default_label() -> &'static str {
    static DEFAULT: OnceLock<String> = OnceLock::new();
    DEFAULT.get_or_init(|| {
        let from_proc = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        let host = from_proc
            .into_iter()
            .chain(std::env::var("HOSTNAME").ok())
            .map(|name| host_part(&name))
            .find(|name| !name.is_empty())
            .unwrap_or_else(|| "unknown-host".to_owned());
        format!("{host}:{}", std::process::id())
    })
}

/// A host name as a label's first part: trimmed, without control
/// characters, at most 100 bytes (the rest of a label holds the `:PID`).
fn host_part(name: &str) -> String {
    let mut host = String::new();
    for c in name.trim().chars().filter(|c| !c.is_control()) {
        if host.len() + c.len_utf8() > 100 {
            break;
        }
        host.push(c);
    }
    host
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(problem("web-1:4242"), None);
        assert_eq!(problem(&"x".repeat(MAX_LABEL_LEN)), None);
        assert_eq!(problem("billing worker (eu)"), None);
        assert!(problem("").is_some());
        assert!(problem(&"x".repeat(MAX_LABEL_LEN + 1)).is_some());
        assert!(problem("a\nb").is_some());
        assert!(problem("a\u{1b}[31m").is_some());
        assert!(validate("").is_err());
        assert_eq!(read_back("a\tb"), None);
    }

    #[test]
    fn the_default_is_host_and_pid() {
        let label = default_label();
        assert_eq!(problem(label), None, "{label:?}");
        let (host, pid) = label.rsplit_once(':').unwrap();
        assert!(!host.is_empty());
        assert_eq!(pid, std::process::id().to_string());
        assert_eq!(host_part(" h\n"), "h");
        assert_eq!(host_part(&"h".repeat(300)).len(), 100);
    }
}

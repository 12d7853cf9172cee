//! Durations on the command line, read and shown with humantime: `500ms`,
//! `30s`, `5m`, `1h30m`, `1.5s`, `2days`. Each flag has its allowed range,
//! and a value outside it is refused with the range in the message.

use std::time::Duration;

/// The longest lease, wait or waiter setting: the library's ceiling.
const YEAR: Duration = fairlock::MAX_DURATION;

/// A duration; the unit is required (`5` alone is refused).
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e} (durations look like 500ms, 30s, 5m, 1h30m)"))
}

/// A duration within `min..=max`; `why` explains the bound, if it needs it.
/// A negative one is refused as such (its flag takes values that start
/// with `-`, so that clap hands them here instead of reading a flag).
pub(crate) fn within(
    text: &str,
    min: Duration,
    max: Duration,
    why: &str,
) -> Result<Duration, String> {
    let allowed = format!(
        "allowed: {} to {}{why}",
        format_bound(min),
        format_bound(max)
    );
    if let Some(rest) = text.trim().strip_prefix('-') {
        if rest.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Err(format!("durations cannot be negative; {allowed}"));
        }
        return Err(format!(
            "{text:?} is not a duration; durations look like 500ms, 30s, 5m, 1h30m; {allowed}"
        ));
    }
    let value = parse(text)?;
    if value < min || value > max {
        return Err(allowed);
    }
    Ok(value)
}

/// `--lease`: renewed every third of it, and each third must be 1 ms at least.
pub(crate) fn lease(text: &str) -> Result<Duration, String> {
    within(
        text,
        Duration::from_millis(3),
        YEAR,
        " (the lease is renewed every third of it)",
    )
}

/// `--waiter-ttl`: a waiter refreshes its place every third of it.
pub(crate) fn waiter_ttl(text: &str) -> Result<Duration, String> {
    within(
        text,
        Duration::from_millis(30),
        YEAR,
        " (a waiter refreshes its place every third of it)",
    )
}

/// `--waiter-slot` and `--wait`.
pub(crate) fn wait(text: &str) -> Result<Duration, String> {
    within(text, Duration::from_millis(1), YEAR, "")
}

/// `--grace`: zero sends SIGKILL right after SIGTERM.
pub(crate) fn grace(text: &str) -> Result<Duration, String> {
    within(text, Duration::ZERO, YEAR, "")
}

/// `bench --duration`: per implementation, round and scenario.
pub(crate) fn bench_round(text: &str) -> Result<Duration, String> {
    within(
        text,
        Duration::from_millis(10),
        Duration::from_secs(600),
        "",
    )
}

/// `demo --hold`.
pub(crate) fn hold(text: &str) -> Result<Duration, String> {
    within(text, Duration::ZERO, Duration::from_secs(60), "")
}

/// `torture --duration`.
pub(crate) fn run_time(text: &str) -> Result<Duration, String> {
    within(
        text,
        Duration::from_secs(1),
        Duration::from_secs(30 * 86_400),
        "",
    )
}

/// Short and readable, through humantime: `250ms`, `1s 500ms`, `2m 3s`.
/// Rounded to what a person reads: milliseconds below a minute, seconds
/// above.
pub(crate) fn format(duration: Duration) -> String {
    let rounded = if duration < Duration::from_millis(1) {
        duration
    } else if duration < Duration::from_secs(60) {
        Duration::from_millis(duration.as_millis() as u64)
    } else {
        Duration::from_secs(duration.as_secs())
    };
    humantime::format_duration(rounded).to_string()
}

/// A range bound: whole days as days (humantime would show 365 days as
/// months of 30.44 days), anything else as [`format`] does.
fn format_bound(duration: Duration) -> String {
    let day = 86_400;
    let secs = duration.as_secs();
    if secs >= day && secs.is_multiple_of(day) && duration.subsec_nanos() == 0 {
        format!("{}days", secs / day)
    } else {
        format(duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_humantime() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse("2days").unwrap(), Duration::from_secs(172_800));
        for bad in ["", "5", "s", "5x", "-1s", "1e400s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse("5").unwrap_err().contains("time unit needed"));
    }

    #[test]
    fn ranges_speak_the_users_terms() {
        let err = lease("1ms").unwrap_err();
        assert_eq!(
            err,
            "allowed: 3ms to 365days (the lease is renewed every third of it)"
        );
        assert_eq!(lease("3ms").unwrap(), Duration::from_millis(3));
        assert_eq!(lease("365days").unwrap(), YEAR);
        assert!(lease("366days").is_err());
        assert!(wait("99999999999h").unwrap_err().contains("365days"));
        assert!(waiter_ttl("20ms").unwrap_err().contains("30ms to 365days"));
        assert!(wait("0s").unwrap_err().contains("1ms to 365days"));
        assert_eq!(grace("0s").unwrap(), Duration::ZERO);
        assert!(run_time("500ms").unwrap_err().contains("1s to 30days"));
        assert_eq!(
            wait("-5s").unwrap_err(),
            "durations cannot be negative; allowed: 1ms to 365days"
        );
        assert!(
            grace("--json")
                .unwrap_err()
                .contains("\"--json\" is not a duration")
        );
    }

    #[test]
    fn formats() {
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::from_micros(1_500_400)), "1s 500ms");
        assert_eq!(format(Duration::from_millis(123_456)), "2m 3s");
        assert_eq!(format(Duration::from_secs(5400)), "1h 30m");
        assert_eq!(format(Duration::from_micros(333)), "333us");
    }
}

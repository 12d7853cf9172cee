//! Durations on the command line: `500ms`, `30s`, `5m`, `2h`, `1d`.

use std::time::Duration;

/// Parse `N` followed by a unit (`ms`, `s`, `m`, `h`, `d`); fractions such as
/// `1.5s` are allowed. A bare number is refused: the unit must be explicit.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit (use e.g. 500ms, 30s, 5m, 2h)"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (use e.g. 500ms, 30s, 5m, 2h)"))?;
    let seconds_per_unit = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (ms, s, m, h, d)"
            ));
        }
    };
    Duration::try_from_secs_f64(value * seconds_per_unit)
        .map_err(|_| format!("{text:?} is out of range"))
}

/// `1.5s`, `250ms`, `2m03s`: short and readable.
pub(crate) fn format(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        for bad in ["", "5", "s", "5x", "1e400s", "-1s"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formats() {
        assert_eq!(format(Duration::from_millis(250)), "250ms");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_secs(123)), "2m03s");
    }
}

//! Application data under a lock's key: the lock calls leave it intact.

use super::types::{Event, Report};

/// Application data. Rule: the data under a lock's key, compared byte for
/// byte after the lock calls on it, is intact (see [`Event::DataCheck`]).
pub(super) fn check_data(events: &[Event], report: &mut Report) {
    for event in events {
        if let Event::DataCheck { key, intact: false } = event {
            report.data_changed += 1;
            report.example(format!("{key}: the data under the lock's name changed"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;

    #[test]
    fn changed_data_is_a_violation() {
        let events = vec![Event::DataCheck {
            key: "k".into(),
            intact: false,
        }];
        let report = native_unqueued(&events);
        assert_eq!(report.violations(), 1);
    }
}

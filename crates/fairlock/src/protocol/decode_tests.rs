//! Property tests: every decoder of data read back from Redis or from a
//! channel answers a value or a typed error on arbitrary input, never a
//! panic (overflow checks are on in tests).

use std::time::Duration;

use proptest::prelude::*;

use super::{Labels, decode_position, native, redisson, waiters};

/// Strings shaped like the real ones, with numbers anywhere in range.
fn grant_like() -> impl Strategy<Value = String> {
    (
        any::<i128>(),
        any::<i128>(),
        any::<i128>(),
        "[0-9a-f]{0,40}",
        prop::bool::ANY,
    )
        .prop_map(|(t, at, exp, mac, extra)| {
            let mut s = format!("grant:{t}:{at}:{exp}:{mac}");
            if extra {
                s.push_str(":x");
            }
            s
        })
}

fn score() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<f64>().prop_map(|f| f.to_string()),
        any::<i64>().prop_map(|i| i.to_string()),
        Just("-inf".to_owned()),
        Just("inf".to_owned()),
        Just("nan".to_owned()),
        ".{0,12}",
    ]
}

proptest! {
    #[test]
    fn grant_messages(payload in prop_oneof![".{0,80}", grant_like()], nonce in ".{0,40}") {
        let _ = native::verify_grant(&payload, &nonce);
    }

    #[test]
    fn native_acquire_replies(
        reply in prop::collection::vec(any::<i64>(), 0..6),
        fair in any::<bool>(),
        ttl_ms in 1u64..10_000_000,
    ) {
        let _ = native::decode_acquire(fair, Duration::from_millis(ttl_ms), &reply);
    }

    #[test]
    fn redisson_acquire_replies(
        reply in prop::collection::vec(any::<i64>(), 0..5),
        fair in any::<bool>(),
        queue in any::<bool>(),
    ) {
        let _ = redisson::decode_acquire(fair, queue, &reply);
    }

    #[test]
    fn position_replies(reply in prop::collection::vec(any::<i64>(), 0..4)) {
        if let Ok((position, length)) = decode_position("test", &reply) {
            prop_assert!(position <= length);
        }
    }

    #[test]
    fn queue_views(
        queue in prop::collection::vec(".{0,8}", 0..20),
        deadlines in prop::collection::vec(prop_oneof![".{0,8}", score()], 0..41),
        now in any::<i64>(),
    ) {
        let view = waiters(queue.clone(), &deadlines, now, &Labels::from_fields(&[]));
        prop_assert_eq!(view.len(), queue.len());
    }
}

/// Decoding 20,000 waiters is linear (it was quadratic: `inspect` of a long
/// queue pinned a core). A generous bound that a quadratic scan misses by
/// far in a debug build.
#[test]
fn queue_view_is_linear() {
    let n = 20_000;
    let queue: Vec<String> = (0..n).map(|i| format!("owner:{i}")).collect();
    let deadlines: Vec<String> = queue
        .iter()
        .flat_map(|o| [o.clone(), "1000".to_owned()])
        .collect();
    let started = std::time::Instant::now();
    let view = waiters(queue, &deadlines, 0, &Labels::from_fields(&[]));
    assert_eq!(view.len(), n);
    assert_eq!(view[n - 1].expires_in, Some(Duration::from_secs(1)));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// Each owner's label is its client's (the owner id up to its last `:`);
/// labels this library would not write are left out; odd fields never
/// panic.
#[test]
fn labels_by_client() {
    let fields: Vec<String> = [
        "6cba2de7-fce5-4a88-9861-f3d26a633711",
        "build-7:31337",
        "8ecf17d2",
        "bad\u{1b}[31m",
        "odd-one-out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let labels = Labels::from_fields(&fields);
    assert_eq!(
        labels
            .of("6cba2de7-fce5-4a88-9861-f3d26a633711:1")
            .as_deref(),
        Some("build-7:31337")
    );
    assert_eq!(labels.of("6cba2de7-fce5-4a88-9861-f3d26a633711"), None);
    assert_eq!(labels.of("8ecf17d2:4"), None);
    assert_eq!(labels.of("odd-one-out:1"), None);
    assert_eq!(labels.of(""), None);
}

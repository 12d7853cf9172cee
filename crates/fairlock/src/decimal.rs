//! Numbers written in decimal without an allocation.

/// A number written in decimal, on the stack: the scripts' numeric
/// arguments (leases, ttls, counts, tokens, times) and owner ids without a
/// `String` and the formatting machinery each (docs/performance.md).
/// Dereferences to the `&str` a script call takes.
pub(crate) struct Decimal {
    /// The digits end the buffer (a sign before them); `start` is the first.
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    pub(crate) fn new(mut n: u64) -> Self {
        let mut digits = [0; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            // n % 10 < 10: the cast is exact.
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return Self { digits, start };
            }
        }
    }

    /// A signed number (19 digits and a sign fill the 20 bytes).
    pub(crate) fn signed(n: i64) -> Self {
        let mut written = Self::new(n.unsigned_abs());
        if n < 0 {
            written.start -= 1;
            written.digits[written.start] = b'-';
        }
        written
    }
}

impl std::ops::Deref for Decimal {
    type Target = str;

    fn deref(&self) -> &str {
        // ASCII digits and a sign only.
        std::str::from_utf8(&self.digits[self.start..]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Decimal;
    proptest! {
        /// The scripts' numbers written on the stack read as `Display` writes them.
        #[test]
        fn decimal_writes_numbers_as_display_does(n in any::<u64>(), m in any::<i64>()) {
            prop_assert_eq!(&*Decimal::new(n), n.to_string());
            prop_assert_eq!(&*Decimal::signed(m), m.to_string());
        }
    }

    #[test]
    fn decimal_writes_the_extremes() {
        for n in [0, 9, 10, u64::MAX] {
            assert_eq!(&*Decimal::new(n), n.to_string());
        }
        for m in [0, -1, i64::MIN, i64::MAX] {
            assert_eq!(&*Decimal::signed(m), m.to_string());
        }
    }
}

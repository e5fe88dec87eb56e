//! Time as the sans-IO core sees it: a point passed in by the caller.
//!
//! The core never reads a clock. Every entry point takes `now: Instant`, a
//! count of microseconds since an epoch the caller chooses (process start,
//! the first packet of a capture, zero in a simulation).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in microseconds since a caller-chosen epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// Return the instant `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant(micros)
    }

    /// Return the instant `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant(millis * 1000)
    }

    /// Return the microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// Return the time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0))
    }
}

/// Return `d` in whole microseconds, saturating at `u64::MAX`: `Duration::as_micros`
/// without its 128-bit arithmetic (timers are set on every segment; this is a multiply and
/// an add where that was a 128-bit multiply, a division and a compare).
#[inline]
fn micros(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_micros()))
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(micros(rhs)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(micros(rhs)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Return the elapsed time, saturating at zero.
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_is_as_micros_saturated() {
        let cases = [
            Duration::ZERO,
            Duration::from_nanos(999),
            Duration::from_nanos(1_999),
            Duration::from_micros(1),
            Duration::new(1, 999_999_999),
            Duration::new(18_446_744_073_709, 551_615_000),
            Duration::new(18_446_744_073_709, 551_616_000),
            Duration::new(u64::MAX / 1_000_000 + 1, 0),
            Duration::MAX,
        ];
        for d in cases {
            assert_eq!(micros(d), d.as_micros().min(u128::from(u64::MAX)) as u64, "{d:?}");
        }
    }

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_micros(6000));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(5));
        assert_eq!(t.to_string(), "0.005000s");
    }
}

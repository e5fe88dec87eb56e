//! Sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293 section 3.4).
//!
//! `a.before(b)` holds when `b - a`, taken as a signed 32-bit distance, is
//! positive: the comparison is valid while the two numbers are less than 2^31
//! apart, which TCP guarantees by keeping windows below 2^30 (RFC 7323 2.3).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A TCP sequence (or acknowledgment) number.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SeqNum(pub u32);

impl SeqNum {
    /// Return `self < other` in sequence space.
    #[inline]
    pub fn before(self, other: SeqNum) -> bool {
        (self.0.wrapping_sub(other.0) as i32) < 0
    }

    /// Return `self <= other` in sequence space.
    #[inline]
    pub fn before_eq(self, other: SeqNum) -> bool {
        !other.before(self)
    }

    /// Return `self > other` in sequence space.
    #[inline]
    pub fn after(self, other: SeqNum) -> bool {
        other.before(self)
    }

    /// Return `self >= other` in sequence space.
    #[inline]
    pub fn after_eq(self, other: SeqNum) -> bool {
        !self.before(other)
    }

    /// Return `start <= self < end` in sequence space (a half-open window).
    ///
    /// An empty window (`start == end`) contains nothing.
    #[inline]
    pub fn between(self, start: SeqNum, end: SeqNum) -> bool {
        self.0.wrapping_sub(start.0) < end.0.wrapping_sub(start.0)
    }

    /// Return the signed distance `self - other`.
    #[inline]
    pub fn diff(self, other: SeqNum) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Return the larger of two numbers in sequence space.
    #[inline]
    pub fn max(self, other: SeqNum) -> SeqNum {
        if self.after(other) { self } else { other }
    }

    /// Return the smaller of two numbers in sequence space.
    #[inline]
    pub fn min(self, other: SeqNum) -> SeqNum {
        if self.before(other) { self } else { other }
    }
}

impl Add<u32> for SeqNum {
    type Output = SeqNum;
    #[inline]
    fn add(self, rhs: u32) -> SeqNum {
        SeqNum(self.0.wrapping_add(rhs))
    }
}

impl Add<usize> for SeqNum {
    type Output = SeqNum;
    #[inline]
    fn add(self, rhs: usize) -> SeqNum {
        SeqNum(self.0.wrapping_add(rhs as u32))
    }
}

impl AddAssign<u32> for SeqNum {
    #[inline]
    fn add_assign(&mut self, rhs: u32) {
        self.0 = self.0.wrapping_add(rhs);
    }
}

impl Sub<u32> for SeqNum {
    type Output = SeqNum;
    #[inline]
    fn sub(self, rhs: u32) -> SeqNum {
        SeqNum(self.0.wrapping_sub(rhs))
    }
}

impl Sub<SeqNum> for SeqNum {
    type Output = u32;
    /// Return the forward distance from `rhs` to `self`, modulo 2^32.
    #[inline]
    fn sub(self, rhs: SeqNum) -> u32 {
        self.0.wrapping_sub(rhs.0)
    }
}

impl fmt::Debug for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for SeqNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ordering_across_the_wrap() {
        let a = SeqNum(u32::MAX - 10);
        let b = a + 20u32;
        assert_eq!(b, SeqNum(9));
        assert!(a.before(b) && b.after(a));
        assert!(a.before_eq(a) && a.after_eq(a) && !a.before(a));
        assert_eq!(b - a, 20);
        assert_eq!(a.diff(b), -20);
        assert!(SeqNum(0).between(a, b) && !b.between(a, b) && a.between(a, b));
        assert!(!a.between(a, a));
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }

    proptest! {
        #[test]
        fn before_after_are_consistent(x: u32, d in 1u32..(1 << 31)) {
            let a = SeqNum(x);
            let b = a + d;
            prop_assert!(a.before(b));
            prop_assert!(b.after(a));
            prop_assert!(!b.before(a));
            prop_assert_eq!(b - a, d);
            prop_assert_eq!(b.diff(a), d as i32);
        }

        #[test]
        fn between_matches_offsets(x: u32, len in 0u32..(1 << 30), off in 0u32..(1 << 31)) {
            let start = SeqNum(x);
            let end = start + len;
            prop_assert_eq!((start + off).between(start, end), off < len);
        }
    }
}

//! Out-of-order bookkeeping for the receive side (RFC 9293 section 3.10.7.4).
//!
//! RFC 9293 lets a receiver keep segments that arrive beyond RCV.NXT but inside
//! the window "for later processing". The bytes themselves go into the receive
//! [`RingBuffer`](crate::buffer::RingBuffer) at their offset; the [`Assembler`]
//! only remembers *which* byte ranges beyond the in-order point have arrived,
//! so that the connection knows when the hole at RCV.NXT is filled and which
//! SACK blocks to report (RFC 2018).
//!
//! Typical use, with offsets relative to RCV.NXT:
//!
//! ```
//! use bypass_tcp::Assembler;
//!
//! let mut asm = Assembler::new();
//! asm.add(100, 50).unwrap();        // out of order: a hole at [0, 100)
//! assert_eq!(asm.pop_front(), 0);   // nothing in order yet
//! asm.add(0, 100).unwrap();         // the hole is filled
//! assert_eq!(asm.pop_front(), 150); // RCV.NXT advances by 150
//! assert!(asm.is_empty());
//! ```

/// The assembler has no room for another disjoint range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {} disjoint out-of-order ranges", Assembler::MAX_RANGES)]
pub struct TooManyRanges;

/// The set of byte ranges received beyond RCV.NXT, in fixed-size storage.
///
/// Ranges are half-open `[start, end)` offsets relative to RCV.NXT, kept
/// sorted, disjoint and non-adjacent (touching ranges are merged).
///
/// Laid out in declaration order (`repr(C)`), the count first: whether anything is held
/// is asked for every segment, the ranges only for out-of-order data.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Assembler {
    /// Number of live ranges.
    count: usize,
    /// The bytes of the most recent non-empty [`add`](Self::add), if still held.
    last: Option<(u32, u32)>,
    /// Sorted, disjoint, non-adjacent ranges; only `ranges[..count]` is live.
    ///
    /// One slot more than [`MAX_RANGES`](Self::MAX_RANGES) so that a range at
    /// offset 0 (in-order data waiting for [`pop_front`](Self::pop_front))
    /// always fits.
    ranges: [(u32, u32); Assembler::MAX_RANGES + 1],
}

impl Default for Assembler {
    fn default() -> Self {
        Self::new()
    }
}

impl Assembler {
    /// The most disjoint ranges held beyond the in-order point.
    ///
    /// A range starting at offset 0 is in-order data about to be consumed
    /// with [`pop_front`](Self::pop_front) and does not count, so data at
    /// RCV.NXT is never refused: refusing it could stall the connection.
    pub const MAX_RANGES: usize = 32;

    /// Return an empty assembler.
    pub const fn new() -> Self {
        Assembler { ranges: [(0, 0); Self::MAX_RANGES + 1], count: 0, last: None }
    }

    /// Record that bytes `[offset, offset + len)` have arrived, merging with
    /// overlapping or adjacent ranges.
    ///
    /// An empty range records nothing. The end saturates at `u32::MAX` (so
    /// nothing at or past it is recorded); receive windows (below 2^30,
    /// RFC 7323 section 2.3) keep real offsets far from it.
    ///
    /// # Errors
    ///
    /// Return [`TooManyRanges`] and record nothing when the range touches no
    /// existing range, starts beyond offset 0, and
    /// [`MAX_RANGES`](Self::MAX_RANGES) ranges beyond offset 0 are already held.
    /// The caller then drops the segment, as RFC 9293 section 3.10.7.4 allows
    /// for any segment beyond RCV.NXT.
    pub fn add(&mut self, offset: u32, len: u32) -> Result<(), TooManyRanges> {
        let start = offset;
        let end = offset.saturating_add(len);
        if end == start {
            return Ok(());
        }
        let live = &self.ranges[..self.count];
        // First range that ends at or after `start` (may touch or overlap).
        let first = live.partition_point(|&(_, e)| e < start);
        // First range that starts strictly after `end` (cannot touch).
        let past = live.partition_point(|&(s, _)| s <= end);
        if first == past {
            // Touches nothing: insert a new range at `first`.
            let beyond_front = self.count - usize::from(self.count > 0 && self.ranges[0].0 == 0);
            if start > 0 && beyond_front >= Self::MAX_RANGES {
                return Err(TooManyRanges);
            }
            self.ranges.copy_within(first..self.count, first + 1);
            self.ranges[first] = (start, end);
            self.count += 1;
        } else {
            // Merge ranges first..past into one.
            let merged = (start.min(self.ranges[first].0), end.max(self.ranges[past - 1].1));
            self.ranges[first] = merged;
            self.ranges.copy_within(past..self.count, first + 1);
            self.count -= past - first - 1;
        }
        self.last = Some((start, end));
        Ok(())
    }

    /// If a range starts at offset 0, remove it, shift every remaining range
    /// down by its length and return that length; otherwise return 0.
    ///
    /// The returned count is how far RCV.NXT advances (RFC 9293 section
    /// 3.10.7.4): the in-order data plus any queued data it made contiguous.
    pub fn pop_front(&mut self) -> u32 {
        if self.count == 0 || self.ranges[0].0 != 0 {
            return 0;
        }
        let n = self.ranges[0].1;
        self.ranges.copy_within(1..self.count, 0);
        self.count -= 1;
        for r in &mut self.ranges[..self.count] {
            r.0 -= n;
            r.1 -= n;
        }
        self.last = match self.last {
            // Ranges are disjoint, so the last added bytes lie wholly inside
            // the popped range or wholly beyond it.
            Some((s, e)) if s >= n => Some((s - n, e - n)),
            _ => None,
        };
        n
    }

    /// Return whether no range is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Forget every range.
    pub fn clear(&mut self) {
        self.count = 0;
        self.last = None;
    }

    /// Return the held ranges as `(start, end)` pairs, half-open, ascending.
    pub fn ranges(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.ranges[..self.count].iter().copied()
    }

    /// Return the number of disjoint ranges held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Return the range containing the most recently added bytes, or `None`
    /// if those bytes were consumed by [`pop_front`](Self::pop_front) or
    /// forgotten by [`clear`](Self::clear).
    ///
    /// RFC 2018 section 4: the first SACK block MUST specify the block
    /// containing the segment that triggered the ACK.
    pub fn recent(&self) -> Option<(u32, u32)> {
        let (s, _) = self.last?;
        self.ranges().find(|&(rs, re)| rs <= s && s < re)
    }

    /// Return the total number of bytes held in all ranges.
    pub fn buffered(&self) -> u32 {
        self.ranges().fold(0u32, |sum, (s, e)| sum.saturating_add(e - s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ranges(asm: &Assembler) -> Vec<(u32, u32)> {
        asm.ranges().collect()
    }

    #[test]
    fn new_is_empty() {
        let mut asm = Assembler::default();
        assert!(asm.is_empty());
        assert_eq!(asm.len(), 0);
        assert_eq!(asm.buffered(), 0);
        assert_eq!(asm.recent(), None);
        assert_eq!(asm.pop_front(), 0);
        assert_eq!(ranges(&asm), []);
    }

    #[test]
    fn empty_add_records_nothing() {
        let mut asm = Assembler::new();
        asm.add(10, 5).unwrap();
        asm.add(50, 0).unwrap();
        assert_eq!(ranges(&asm), [(10, 15)]);
        assert_eq!(asm.recent(), Some((10, 15)), "empty add keeps the previous recent");
    }

    #[test]
    fn disjoint_ranges_stay_sorted() {
        let mut asm = Assembler::new();
        asm.add(30, 5).unwrap();
        asm.add(10, 5).unwrap();
        asm.add(20, 5).unwrap();
        assert_eq!(ranges(&asm), [(10, 15), (20, 25), (30, 35)]);
        assert_eq!(asm.buffered(), 15);
        assert_eq!(asm.recent(), Some((20, 25)));
    }

    #[test]
    fn adjacent_ranges_merge() {
        let mut asm = Assembler::new();
        asm.add(10, 5).unwrap();
        asm.add(15, 5).unwrap(); // touches the end
        asm.add(5, 5).unwrap(); // touches the start
        assert_eq!(ranges(&asm), [(5, 20)]);
    }

    #[test]
    fn overlapping_ranges_merge() {
        let mut asm = Assembler::new();
        asm.add(10, 10).unwrap();
        asm.add(15, 10).unwrap();
        assert_eq!(ranges(&asm), [(10, 25)]);
        asm.add(12, 3).unwrap(); // contained: no change
        assert_eq!(ranges(&asm), [(10, 25)]);
        asm.add(0, 100).unwrap(); // contains everything
        assert_eq!(ranges(&asm), [(0, 100)]);
        assert_eq!(asm.buffered(), 100);
    }

    #[test]
    fn one_range_bridges_several() {
        let mut asm = Assembler::new();
        for i in 0..5 {
            asm.add(10 + 10 * i, 5).unwrap();
        }
        assert_eq!(asm.len(), 5);
        asm.add(17, 20).unwrap(); // overlaps [20,25) and [30,35), touches nothing else
        assert_eq!(ranges(&asm), [(10, 15), (17, 37), (40, 45), (50, 55)]);
        asm.add(15, 2).unwrap(); // fills the gap exactly
        assert_eq!(ranges(&asm), [(10, 37), (40, 45), (50, 55)]);
        assert_eq!(asm.recent(), Some((10, 37)));
    }

    #[test]
    fn pop_front_only_at_zero() {
        let mut asm = Assembler::new();
        asm.add(1, 5).unwrap();
        assert_eq!(asm.pop_front(), 0);
        assert_eq!(ranges(&asm), [(1, 6)]);
        asm.add(0, 1).unwrap();
        assert_eq!(asm.pop_front(), 6);
        assert!(asm.is_empty());
        assert_eq!(asm.pop_front(), 0);
    }

    #[test]
    fn pop_front_shifts_the_rest() {
        let mut asm = Assembler::new();
        asm.add(20, 5).unwrap();
        asm.add(0, 10).unwrap();
        assert_eq!(asm.pop_front(), 10);
        assert_eq!(ranges(&asm), [(10, 15)]);
        assert_eq!(asm.recent(), None, "the recent bytes were consumed");
        asm.add(12, 10).unwrap();
        asm.add(0, 3).unwrap();
        asm.add(30, 1).unwrap();
        assert_eq!(asm.pop_front(), 3);
        assert_eq!(ranges(&asm), [(7, 19), (27, 28)]);
        assert_eq!(asm.recent(), Some((27, 28)), "recent shifts with the ranges");
    }

    #[test]
    fn recent_follows_merges() {
        let mut asm = Assembler::new();
        asm.add(10, 5).unwrap();
        asm.add(30, 5).unwrap();
        assert_eq!(asm.recent(), Some((30, 35)));
        asm.add(15, 15).unwrap();
        assert_eq!(asm.recent(), Some((10, 35)));
    }

    #[test]
    fn clear_forgets_everything() {
        let mut asm = Assembler::new();
        asm.add(5, 5).unwrap();
        asm.clear();
        assert!(asm.is_empty());
        assert_eq!(asm.recent(), None);
        assert_eq!(asm.buffered(), 0);
    }

    #[test]
    fn limit_refuses_a_new_range_and_records_nothing() {
        let mut asm = Assembler::new();
        for i in 0..Assembler::MAX_RANGES as u32 {
            asm.add(10 + 10 * i, 5).unwrap();
        }
        let before = asm.clone();
        assert_eq!(asm.add(1000, 5), Err(TooManyRanges));
        assert_eq!(asm.add(6, 2), Err(TooManyRanges), "between ranges, touching none");
        assert_eq!(ranges(&asm), ranges(&before));
        assert_eq!(asm.recent(), before.recent());
        // Ranges that merge still fit.
        asm.add(15, 5).unwrap();
        assert_eq!(asm.len(), Assembler::MAX_RANGES - 1);
        asm.add(1000, 5).unwrap();
        assert_eq!(asm.len(), Assembler::MAX_RANGES);
        assert_eq!(TooManyRanges.to_string(), "more than 32 disjoint out-of-order ranges");
    }

    #[test]
    fn in_order_data_is_accepted_when_full() {
        let mut asm = Assembler::new();
        for i in 0..Assembler::MAX_RANGES as u32 {
            asm.add(10 + 10 * i, 5).unwrap();
        }
        asm.add(0, 4).unwrap();
        assert_eq!(asm.len(), Assembler::MAX_RANGES + 1);
        assert_eq!(asm.recent(), Some((0, 4)));
        // Still full beyond the front.
        assert_eq!(asm.add(500, 1), Err(TooManyRanges));
        assert_eq!(asm.add(2, 4), Ok(()), "extends the front range");
        assert_eq!(asm.pop_front(), 6);
        assert_eq!(asm.len(), Assembler::MAX_RANGES);
        assert_eq!(asm.ranges().next(), Some((4, 9)));
    }

    #[test]
    fn end_saturates() {
        let mut asm = Assembler::new();
        asm.add(u32::MAX - 2, 10).unwrap();
        assert_eq!(ranges(&asm), [(u32::MAX - 2, u32::MAX)]);
        asm.clear();
        asm.add(u32::MAX, 1).unwrap(); // saturates to an empty range
        assert!(asm.is_empty());
    }

    const SPACE: u32 = 200;

    proptest! {
        /// Compare against a bitmap of received offsets.
        #[test]
        fn matches_bitmap(ops in proptest::collection::vec((0u32..SPACE, 0u32..40, any::<bool>()), 0..80)) {
            let mut asm = Assembler::new();
            let mut bits = vec![false; 2 * SPACE as usize];
            for (offset, len, pop) in ops {
                let before: Vec<_> = ranges(&asm);
                let before_recent = asm.recent();
                match asm.add(offset, len) {
                    Ok(()) => {
                        for b in &mut bits[offset as usize..(offset + len) as usize] {
                            *b = true;
                        }
                        if len > 0 {
                            let (s, e) = asm.recent().expect("recent after add");
                            prop_assert!(s <= offset && offset + len <= e);
                        }
                    }
                    Err(TooManyRanges) => {
                        prop_assert!(offset > 0);
                        prop_assert_eq!(ranges(&asm), before);
                        prop_assert_eq!(asm.recent(), before_recent);
                    }
                }
                if pop {
                    let n = asm.pop_front() as usize;
                    prop_assert!(bits[..n].iter().all(|&b| b));
                    prop_assert!(!bits[n]);
                    bits.drain(..n);
                    bits.resize(2 * SPACE as usize, false);
                }
                // The ranges are exactly the runs of the bitmap.
                let mut runs = Vec::new();
                let mut i = 0;
                while i < bits.len() {
                    if bits[i] {
                        let s = i;
                        while i < bits.len() && bits[i] { i += 1; }
                        runs.push((s as u32, i as u32));
                    } else {
                        i += 1;
                    }
                }
                prop_assert_eq!(ranges(&asm), runs);
                prop_assert_eq!(asm.buffered() as usize, bits.iter().filter(|&&b| b).count());
                let beyond = asm.ranges().filter(|&(s, _)| s > 0).count();
                prop_assert!(beyond <= Assembler::MAX_RANGES);
                if let Some((s, e)) = asm.recent() {
                    prop_assert!(asm.ranges().any(|r| r == (s, e)));
                }
            }
        }
    }
}

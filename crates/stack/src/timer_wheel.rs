//! A hierarchical timer wheel: the host's connection timers, O(1) to arm and to fire.
//!
//! The host keeps one entry per connection that has a timer (its earliest deadline, as
//! [`Connection::poll_timeout`](bypass_tcp::Connection::poll_timeout) says). A scan of the
//! whole table each time the earliest deadline passes costs O(connections) per timer event;
//! a binary heap O(log n). A wheel costs O(1) for both arming and firing, as in Varghese and
//! Lauck's "Hashed and Hierarchical Timing Wheels" (SOSP 1987), the scheme of Linux's
//! `kernel/time/timer.c` and of tokio's timer:
//!
//! ```text
//!  level 0: 64 slots of 64 µs        (the next 4 ms, one slot per tick)
//!  level 1: 64 slots of 4 ms         (the next 262 ms)
//!  level 2: 64 slots of 262 ms       (the next 16.8 s)
//!  level 3: 64 slots of 16.8 s       (the next 17.9 min)
//!  level 4: 64 slots of 17.9 min     (the next 19 h)
//!  level 5: 64 slots of 19 h         (the next 50 days)
//! ```
//!
//! An entry goes into the level whose slot width matches how far away it is. When time
//! reaches a slot of a higher level, its entries move down (each moves at most once per
//! level, so firing stays O(1) amortised); a level-0 slot fires. A bit mask per level names
//! its occupied slots, so an idle wheel skips empty slots with one `trailing_zeros`, and a
//! host with a thousand idle connections does nothing for them until one is due.
//!
//! Entries fire exactly: one is handed out by [`expire`](TimerWheel::expire) only once its
//! deadline is at or before `now`, never early, and [`next_deadline`](TimerWheel::next_deadline)
//! is never later than the earliest entry (it may be earlier by less than a higher level's
//! slot, to move that slot's entries down). Cancelling is the caller's business: it checks a
//! fired entry against the connection (a generation and the deadline it armed) and drops a
//! stale one, so moving a deadline later costs nothing until the old entry comes up.

use std::cell::Cell;

use bypass_tcp::Instant;

/// One tick is 2^6 = 64 µs.
const TICK_SHIFT: u32 = 6;
/// Slots per level, as a power of two: 64, one bit each in a `u64` mask.
const SLOT_BITS: u32 = 6;
const SLOTS: usize = 1 << SLOT_BITS;
const LEVELS: usize = 6;
/// The furthest an entry goes into the future, in ticks (about 50 days); a later deadline
/// waits in the slot of this one and moves on from there when it comes up.
const MAX_TICKS: u64 = (1 << (SLOT_BITS * LEVELS as u32)) - 1;

fn tick_of(t: Instant) -> u64 {
    t.as_micros() >> TICK_SHIFT
}

/// Ticks one slot of `level` spans.
fn slot_range(level: usize) -> u64 {
    1 << (SLOT_BITS * level as u32)
}

/// Ticks a whole `level` spans.
fn level_range(level: usize) -> u64 {
    1 << (SLOT_BITS * (level as u32 + 1))
}

/// The level for an entry due at tick `when`, seen from tick `elapsed`: the level of the
/// highest 6-bit digit in which they differ.
fn level_for(elapsed: u64, when: u64) -> usize {
    let masked = (elapsed ^ when) | (SLOTS as u64 - 1);
    let significant = 63 - masked.leading_zeros();
    ((significant / SLOT_BITS) as usize).min(LEVELS - 1)
}

fn slot_for(when: u64, level: usize) -> usize {
    ((when >> (SLOT_BITS * level as u32)) as usize) & (SLOTS - 1)
}

struct Level<K> {
    /// Bit `s` set: slot `s` holds entries.
    occupied: u64,
    slots: Vec<Vec<(Instant, K)>>,
}

/// Timers keyed by `K`; see the module docs.
pub(crate) struct TimerWheel<K> {
    /// Every slot due before this tick has been processed.
    elapsed: u64,
    levels: Vec<Level<K>>,
    len: usize,
    /// The slot being processed, swapped out so its storage is reused (no allocation once
    /// slots have grown to the host's load).
    scratch: Vec<(Instant, K)>,
    /// `next_deadline`'s answer, until an entry is added or fired (`None`: not known).
    next: Cell<Option<Option<Instant>>>,
}

impl<K: Copy> TimerWheel<K> {
    pub(crate) fn new() -> Self {
        let levels =
            (0..LEVELS).map(|_| Level { occupied: 0, slots: (0..SLOTS).map(|_| Vec::new()).collect() }).collect();
        TimerWheel { elapsed: 0, levels, len: 0, scratch: Vec::new(), next: Cell::new(Some(None)) }
    }

    /// Return how many entries the wheel holds (stale ones included).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Arm `key` for `when`; `now` is the current time (an entry already due fires at the
    /// next [`expire`](Self::expire)). Return when the wheel next needs an `expire` for it:
    /// `when` itself, or the earlier deadline of the higher level's slot it went into, whose
    /// entries then move down (what [`next_deadline`](Self::next_deadline) says, when no
    /// other entry comes first).
    pub(crate) fn insert(&mut self, now: Instant, when: Instant, key: K) -> Instant {
        if self.len == 0 {
            // Nothing is placed relative to the old tick: start from now.
            self.elapsed = self.elapsed.max(tick_of(now));
        }
        let (level, slot) = self.place(when, key);
        self.len += 1;
        let at = if level == 0 { when } else { Instant::from_micros(self.slot_deadline(level, slot) << TICK_SHIFT) };
        if let Some(next) = self.next.get() {
            self.next.set(Some(Some(next.map_or(at, |n| n.min(at)))));
        }
        at
    }

    fn place(&mut self, when: Instant, key: K) -> (usize, usize) {
        let tick = tick_of(when).clamp(self.elapsed, self.elapsed + MAX_TICKS);
        let level = level_for(self.elapsed, tick);
        let slot = slot_for(tick, level);
        let l = &mut self.levels[level];
        l.slots[slot].push((when, key));
        l.occupied |= 1 << slot;
        (level, slot)
    }

    /// The tick at which `slot` of `level` is due, seen from `elapsed`.
    fn slot_deadline(&self, level: usize, slot: usize) -> u64 {
        let level_start = self.elapsed & !(level_range(level) - 1);
        let deadline = level_start + slot as u64 * slot_range(level);
        if deadline < self.elapsed && level > 0 {
            // Only the top level wraps: its slots behind the current one are a lap ahead.
            deadline + level_range(level)
        } else {
            deadline
        }
    }

    /// The first occupied slot at `level` or above, as (level, slot, due tick).
    fn next_slot(&self, from_level: usize) -> Option<(usize, usize, u64)> {
        (from_level..LEVELS).find_map(|level| {
            let occupied = self.levels[level].occupied;
            if occupied == 0 {
                return None;
            }
            let now_slot = slot_for(self.elapsed, level);
            let slot = (now_slot + occupied.rotate_right(now_slot as u32).trailing_zeros() as usize) % SLOTS;
            Some((level, slot, self.slot_deadline(level, slot)))
        })
    }

    /// Return a time at or before the earliest entry (`None`: the wheel is empty). Cheap:
    /// remembered between changes, and inlined, for a host that asks on every poll.
    #[inline]
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        match self.next.get() {
            Some(next) => next,
            None => self.find_next_deadline(),
        }
    }

    /// [`next_deadline`](Self::next_deadline) when nothing is remembered: found, and
    /// remembered.
    #[inline(never)]
    fn find_next_deadline(&self) -> Option<Instant> {
        let next = self.next_slot(0).map(|(level, slot, deadline)| match level {
            0 => self.levels[0].slots[slot].iter().map(|&(when, _)| when).min().expect("occupied"),
            _ => Instant::from_micros(deadline << TICK_SHIFT),
        });
        self.next.set(Some(next));
        next
    }

    /// Move every entry due at or before `now` into `fired` (with the deadline it was armed
    /// for), in no particular order.
    ///
    /// When the remembered [`next_deadline`](Self::next_deadline) falls in a later tick
    /// than `now`, nothing can be due and no slot needs moving down (the first occupied
    /// slot is due after `now`): only the clock advances, and the answer stays remembered.
    /// A host polled far more often than its timers fire (every poll of a busy connection)
    /// pays a comparison instead of a walk over the levels.
    pub(crate) fn expire(&mut self, now: Instant, fired: &mut Vec<(Instant, K)>) {
        let now_tick = tick_of(now);
        if let Some(next) = self.next.get()
            && next.is_none_or(|t| tick_of(t) > now_tick)
        {
            self.elapsed = self.elapsed.max(now_tick);
            return;
        }
        self.next.set(None);
        while let Some((level, slot, deadline)) = self.next_slot(0) {
            if deadline > now_tick {
                break;
            }
            if level == 0 && deadline == now_tick {
                // The current tick: move down every higher slot due by now first, as its
                // entries may be due too, then fire only what is due; the rest stays.
                if let Some((level, slot, deadline)) = self.next_slot(1).filter(|&(_, _, d)| d <= now_tick) {
                    self.cascade(level, slot, deadline);
                    continue;
                }
                let entries = &mut self.levels[0].slots[slot];
                let before = entries.len();
                let mut k = 0;
                while k < entries.len() {
                    if entries[k].0 <= now {
                        fired.push(entries.swap_remove(k));
                    } else {
                        k += 1;
                    }
                }
                self.len -= before - entries.len();
                if entries.is_empty() {
                    self.levels[0].occupied &= !(1 << slot);
                }
                break;
            }
            self.elapsed = self.elapsed.max(deadline);
            if level == 0 {
                let entries = &mut self.levels[0].slots[slot];
                self.len -= entries.len();
                fired.append(entries);
                self.levels[0].occupied &= !(1 << slot);
            } else {
                self.cascade(level, slot, deadline);
            }
        }
        self.elapsed = self.elapsed.max(now_tick);
    }

    /// Keep only the entries for which `keep` says so (the caller's stale entries go), in
    /// one pass over the wheel: for a caller whose stale entries outnumber its live ones.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(Instant, K) -> bool) {
        self.len = 0;
        for level in &mut self.levels {
            for (slot, entries) in level.slots.iter_mut().enumerate() {
                entries.retain(|&(when, key)| keep(when, key));
                self.len += entries.len();
                if entries.is_empty() {
                    level.occupied &= !(1 << slot);
                }
            }
        }
        self.next.set(None);
    }

    /// Move the entries of `slot` at `level`, due at tick `deadline`, down the levels.
    fn cascade(&mut self, level: usize, slot: usize, deadline: u64) {
        self.elapsed = self.elapsed.max(deadline);
        std::mem::swap(&mut self.scratch, &mut self.levels[level].slots[slot]);
        self.levels[level].occupied &= !(1 << slot);
        let mut entries = std::mem::take(&mut self.scratch);
        for (when, key) in entries.drain(..) {
            self.place(when, key);
        }
        self.scratch = entries;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model: the wheel against a list, over random arms and expiries.
    fn check(ops: &[(u64, u64)]) {
        let mut wheel = TimerWheel::new();
        let mut model: Vec<(Instant, usize)> = Vec::new();
        let mut now = Instant::from_micros(1_000_000);
        let mut fired = Vec::new();
        for (k, &(advance, delay)) in ops.iter().enumerate() {
            if delay % 3 == 0 {
                now = Instant::from_micros(now.as_micros() + advance);
                fired.clear();
                wheel.expire(now, &mut fired);
                let mut due: Vec<(Instant, usize)> = model.iter().copied().filter(|&(w, _)| w <= now).collect();
                model.retain(|&(w, _)| w > now);
                due.sort();
                fired.sort();
                assert_eq!(fired, due, "at {now:?}");
            } else {
                let when = Instant::from_micros(now.as_micros() + delay);
                let before = wheel.next_deadline();
                let at = wheel.insert(now, when, k);
                // What the host lowers its timer floor to: never after the entry, and what
                // `next_deadline` says when it comes first.
                assert!(at <= when, "{at:?} after {when:?}");
                assert_eq!(wheel.next_deadline(), Some(before.map_or(at, |b| b.min(at))));
                model.push((when, k));
            }
            if k % 50 == 49 {
                // Drop every other entry, as a caller's compaction of stale ones would.
                wheel.retain(|_, key| key % 2 == 0);
                model.retain(|&(_, key)| key % 2 == 0);
            }
            assert_eq!(wheel.len(), model.len());
            let earliest = model.iter().map(|&(w, _)| w).min();
            match (wheel.next_deadline(), earliest) {
                (None, None) => {}
                (Some(next), Some(e)) => assert!(next <= e, "next {next:?} after the earliest {e:?}"),
                other => panic!("next_deadline and model disagree: {other:?}"),
            }
        }
    }

    #[test]
    fn entries_fire_exactly_at_their_deadline() {
        let mut wheel = TimerWheel::new();
        let t0 = Instant::from_micros(10_000);
        let mut fired = Vec::new();
        wheel.insert(t0, Instant::from_micros(10_100), 1);
        wheel.insert(t0, Instant::from_micros(10_130), 2);
        assert_eq!(wheel.next_deadline(), Some(Instant::from_micros(10_100)));
        wheel.expire(Instant::from_micros(10_099), &mut fired);
        assert!(fired.is_empty());
        wheel.expire(Instant::from_micros(10_100), &mut fired);
        assert_eq!(fired, [(Instant::from_micros(10_100), 1)]);
        assert_eq!(wheel.next_deadline(), Some(Instant::from_micros(10_130)));
        fired.clear();
        wheel.expire(Instant::from_micros(10_130), &mut fired);
        assert_eq!(fired, [(Instant::from_micros(10_130), 2)]);
        assert_eq!(wheel.next_deadline(), None);
    }

    #[test]
    fn far_deadlines_move_down_and_fire_on_time() {
        let mut wheel = TimerWheel::new();
        let t0 = Instant::from_micros(5);
        let mut fired = Vec::new();
        // TIME-WAIT (60 s), keepalive (2 h), a minute-long RTO, and past the wheel (60 days).
        for (k, secs) in [60u64, 7200, 61, 60 * 86_400].into_iter().enumerate() {
            wheel.insert(t0, t0 + std::time::Duration::from_secs(secs), k);
        }
        let mut now = t0;
        let mut order = Vec::new();
        while wheel.len() > 0 {
            now = wheel.next_deadline().expect("armed").max(now);
            wheel.expire(now, &mut fired);
            for (when, k) in fired.drain(..) {
                assert!(when <= now, "fired early");
                order.push((k, now));
            }
        }
        let keys: Vec<usize> = order.iter().map(|&(k, _)| k).collect();
        assert_eq!(keys, [0, 2, 1, 3]);
        assert_eq!(order[0].1, t0 + std::time::Duration::from_secs(60));
        assert_eq!(order[2].1, t0 + std::time::Duration::from_secs(7200));
        assert_eq!(order[3].1, t0 + std::time::Duration::from_secs(60 * 86_400));
    }

    #[test]
    fn agrees_with_a_list_on_random_schedules() {
        // A deterministic mix: short delays (delayed ACK, pacing), RTOs, and long timers.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let ops: Vec<(u64, u64)> = (0..300)
                .map(|_| {
                    let r = next();
                    let scale = [100u64, 5_000, 300_000, 20_000_000, 4_000_000_000][(r % 5) as usize];
                    (next() % scale, (next() % scale) + r % 3)
                })
                .collect();
            check(&ops);
        }
    }
}

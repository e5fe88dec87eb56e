//! Pacing: data segments spread over the round trip at a rate derived from the congestion
//! window, instead of a window's worth back to back.
//!
//! ACK clocking alone sends in bursts wherever ACKs bunch up: a stretch ACK or a batch of
//! ACKs read at once opens a window's worth, and so do the end of a recovery and a restart
//! after an application-limited spell. A burst larger than the bottleneck's queue is lost
//! at its tail. The pacer lets data out at `rate = 1.2 x cwnd / SRTT` (Linux's
//! `tcp_update_pacing_rate` ratio for congestion avoidance, a little ahead of the ACK
//! clock so that it never slows a sender the window allows), from a token bucket that holds
//! one quantum: the larger of two segments and a millisecond of the rate (Linux's
//! `sk_pacing_shift` of 10 sizes its bursts the same way). On a LAN, where SRTT is tens
//! of microseconds, the rate is far above the link and the pacer never waits; on a long
//! path it spreads each flight over the round trip.
//!
//! Slow start is not paced. Linux paces it at twice the rate, so that each round's flight
//! takes half the round trip; but then the bottleneck queue drains in the other half, and
//! HyStart++ (RFC 9406), which looks for the queue in the RTT of each round's first
//! samples, never sees it: slow start runs on until the queue overflows. Measured on the
//! `Pair` harness, pacing slow start that way cost 1.06 to 1.5 times the time and up to
//! seven times the retransmissions on seven of thirteen paths; pacing only after slow start
//! (`crates/tcp/tests/recovery.rs`, the table in docs/tcp.md, "Pacing") is faster on five of ten, neutral on
//! two, and 2-9% slower on three. Linux itself paces CUBIC only under the `fq` qdisc, which
//! is not its default.
//!
//! Measured again once HyStart++ had a sample per ACK (`tests/slow_start.rs`): pacing slow
//! start at twice the rate left the 100 Mbit/s x 20 ms path with a 1000-packet queue as it
//! was (same exit, same drops: once the bottleneck is full the ACK clock, not the pacer,
//! sets the pace), and cost a little on 1 Gbit/s x 50 ms with coalesced ACKs (771 against
//! 774 Mbit/s over the first 2 s). And once slow start also ended on HyStart's ACK train
//! (`hystart.rs`), with the train read over a full minimum RTT as Linux reads it for a paced
//! sender: 1.05 to 1.64 times the time on five of the ten paths of `tests/recovery.rs`.
//! Slow start stays unpaced.

use std::time::Duration;

use crate::time::Instant;

/// The burst the bucket holds, in time at the current rate.
const QUANTUM: Duration = Duration::from_millis(1);

/// The pacing state of a connection.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pacer {
    /// Bytes that may go out now, as of `at`.
    tokens: u64,
    at: Instant,
    /// The bucket was filled once (a new connection starts with one quantum).
    started: bool,
}

/// The pacing rate for a window of `cwnd` bytes over `srtt`, in bytes per second: 120%
/// of a window per round trip.
pub(crate) fn rate(cwnd: u32, srtt: Duration) -> u64 {
    let micros = srtt.as_micros().max(1);
    (u128::from(cwnd) * 1_200_000 / micros).min(u128::from(u64::MAX)) as u64
}

impl Pacer {
    /// Return when `len` bytes may be sent at `rate` bytes per second: `now` or later.
    /// `mss` bounds the quantum from below (two segments).
    pub(crate) fn when(&mut self, now: Instant, len: u32, rate: u64, mss: u32) -> Instant {
        let quantum = self.quantum(rate, mss);
        if !self.started {
            self.started = true;
            self.tokens = quantum;
            self.at = now;
        }
        self.refill(now, rate, quantum);
        let len = u64::from(len).min(quantum);
        if self.tokens >= len {
            return now;
        }
        let missing = u128::from(len - self.tokens);
        let wait = (missing * 1_000_000).div_ceil(u128::from(rate.max(1)));
        now + Duration::from_micros(wait.min(u128::from(u64::MAX)) as u64)
    }

    /// Take `len` bytes sent from the bucket.
    pub(crate) fn spend(&mut self, len: u32) {
        self.tokens = self.tokens.saturating_sub(u64::from(len));
    }

    fn quantum(&self, rate: u64, mss: u32) -> u64 {
        let per_quantum = u128::from(rate) * QUANTUM.as_micros() / 1_000_000;
        (per_quantum.min(u128::from(u64::MAX)) as u64).max(2 * u64::from(mss))
    }

    fn refill(&mut self, now: Instant, rate: u64, quantum: u64) {
        let elapsed = now.saturating_duration_since(self.at).as_micros();
        let earned = u128::from(rate) * elapsed / 1_000_000;
        if earned > 0 {
            self.tokens = (u128::from(self.tokens) + earned).min(u128::from(quantum)) as u64;
            self.at = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u32 = 1448;

    #[test]
    fn the_rate_is_a_little_more_than_a_window_per_round_trip() {
        // 1 MB over 100 ms: 10 MB/s, paced at 12 MB/s.
        assert_eq!(rate(1_000_000, Duration::from_millis(100)), 12_000_000);
        assert_eq!(rate(1448, Duration::from_micros(50)), 34_752_000);
    }

    #[test]
    fn a_quantum_goes_at_once_and_the_rest_at_the_rate() {
        let mut p = Pacer::default();
        let now = Instant::from_millis(1000);
        // 14.48 MB/s: a millisecond is 14,480 bytes, ten segments.
        let rate = 14_480_000;
        for _ in 0..10 {
            assert_eq!(p.when(now, MSS, rate, MSS), now);
            p.spend(MSS);
        }
        // The eleventh waits for one segment's worth of tokens: 100 µs.
        assert_eq!(p.when(now, MSS, rate, MSS), now + Duration::from_micros(100));
        let later = now + Duration::from_micros(100);
        assert_eq!(p.when(later, MSS, rate, MSS), later);
    }

    #[test]
    fn idle_time_earns_at_most_one_quantum() {
        let mut p = Pacer::default();
        let rate = 14_480_000;
        let start = Instant::from_millis(0);
        assert_eq!(p.when(start, MSS, rate, MSS), start);
        let idle = start + Duration::from_secs(10);
        for _ in 0..10 {
            assert_eq!(p.when(idle, MSS, rate, MSS), idle);
            p.spend(MSS);
        }
        assert!(p.when(idle, MSS, rate, MSS) > idle);
    }

    #[test]
    fn a_slow_rate_still_lets_two_segments_through() {
        let mut p = Pacer::default();
        let now = Instant::from_millis(5);
        // 100 kB/s: a millisecond is 100 bytes, under a segment.
        let rate = 100_000;
        for _ in 0..2 {
            assert_eq!(p.when(now, MSS, rate, MSS), now);
            p.spend(MSS);
        }
        assert_eq!(p.when(now, MSS, rate, MSS), now + Duration::from_micros(14_480));
    }
}

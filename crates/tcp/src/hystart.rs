//! HyStart++ (RFC 9406): leave the first slow start when the round-trip time starts to
//! rise, before the queue it measures overflows.
//!
//! [`HyStart`] only watches; the controller (`cubic.rs`) owns cwnd and asks it, on every
//! ACK of its initial slow start, how much of the ACK to turn into growth and whether to
//! move on to congestion avoidance ([`HyStartAck`]). The phases of RFC 9406 section 4.2:
//!
//! - **Slow start**: cwnd grows by the bytes delivered (no L: every byte, as Linux's
//!   `tcp_slow_start`; see `cubic.rs`). Per round, the smallest RTT sample is kept; once a round has N_RTT_SAMPLE samples and its
//!   minimum is at least `RttThresh` above the last round's, slow start gives way to
//!   Conservative Slow Start with that minimum as the baseline.
//! - **Conservative Slow Start (CSS)**: growth is divided by CSS_GROWTH_DIVISOR. If a round's
//!   minimum falls below the baseline again (N_RTT_SAMPLE samples seen), the exit was
//!   spurious and slow start resumes. After CSS_ROUNDS rounds (the one CSS began in counts),
//!   the controller enters congestion avoidance with ssthresh = cwnd.
//!
//! # The ACK train (Linux's HyStart)
//!
//! RFC 9406 has one exit signal, the delay. Linux's CUBIC (`tcp_cubic.c`,
//! `hystart_update`, `HYSTART_ACK_TRAIN`, on by default) has a second, from the original
//! HyStart paper: the ACKs of a round arrive spaced by the bottleneck, so once a round's
//! train of closely spaced ACKs (each within `hystart_ack_delta_us`, 2 ms, of the last)
//! lasts longer than half the minimum RTT, the window in flight fills half the path, and the
//! next doubling would fill it twice over. Linux then ends slow start on the spot
//! (ssthresh = cwnd), with cwnd between one and one and a half BDP; so does this, from a cwnd
//! of `hystart_low_window` (16 segments) up, half the RTT as Linux takes it for an unpaced
//! sender. The delay signal alone comes a round late on a deep queue, since a round's first
//! samples see the queue its predecessor built: on 100 Mbit/s x 20 ms with a 1000-packet
//! queue it fires at 4 BDP, and CSS's 1.25x a round then overflows the queue
//! (`tests/slow_start.rs`). The train fires at the BDP, before any queue.
//!
//! # Samples
//!
//! The connection gives one RTT sample per ACK that advances SND.UNA: the age of the newest
//! segment it newly acknowledges, none if that ACK covers a retransmission (Karn)
//! (`Recovery::on_ack`). One per flight, as the RFC 6298 estimator takes
//! them, would never reach N_RTT_SAMPLE in a round, and HyStart++ would never fire.
//!
//! What a round's samples see lags a round behind: its first ACKs acknowledge the first
//! segments of the round before, sent when the queue held what the round before that had
//! left (cwnd/2 - BDP). So the exit comes once cwnd/2 exceeds the BDP by RttThresh's worth
//! of queue, and CSS then grows cwnd 1.25x a round for CSS_ROUNDS rounds (about 3x): a
//! queue shallower than that overflows during CSS (`tests/slow_start.rs` measures one).
//!
//! # Rounds
//!
//! RFC 9406 delimits rounds by sequence number: a round ends when the ACK covers the
//! `SND.NXT` recorded when it began (`windowEnd`). The controller interface (`AckInfo`)
//! carries no sequence numbers, so the round is counted in bytes instead: the ACK that
//! begins a round notes the bytes still outstanding after it (`in_flight - delivered`,
//! exactly the data sent before the round began), and the round ends with the ACK that
//! brings the bytes delivered since then up to that amount; the next ACK begins a new round.
//! With cumulative, in-order delivery this is the same boundary as `windowEnd`; under
//! reordering or SACK it can end a round up to one ACK early or late.

use std::time::Duration;

use crate::time::Instant;

/// MIN_RTT_THRESH: the smallest delay increase that ends slow start (RFC 9406 section 4.3).
const MIN_RTT_THRESH: Duration = Duration::from_millis(4);
/// MAX_RTT_THRESH: the largest delay increase asked for (RFC 9406 section 4.3).
const MAX_RTT_THRESH: Duration = Duration::from_millis(16);
/// MIN_RTT_DIVISOR: the increase asked for, as a fraction of the last round's minimum RTT.
const MIN_RTT_DIVISOR: u32 = 8;
/// N_RTT_SAMPLE: RTT samples a round needs before its minimum is compared.
const N_RTT_SAMPLE: u32 = 8;
/// CSS_GROWTH_DIVISOR: how much slower CSS grows than slow start.
pub(crate) const CSS_GROWTH_DIVISOR: u32 = 4;
/// CSS_ROUNDS: the most rounds CSS lasts before congestion avoidance.
const CSS_ROUNDS: u32 = 5;
/// Linux's `hystart_ack_delta_us`: ACKs at most this far apart continue a train.
const ACK_DELTA: Duration = Duration::from_millis(2);
/// Linux's `hystart_low_window`, in segments: no ACK-train exit below this cwnd.
const LOW_WINDOW: u32 = 16;

/// Which growth rule of RFC 9406 section 4.2 is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Standard slow start (RFC 5681) with the delay check.
    SlowStart,
    /// Conservative Slow Start.
    Conservative {
        /// cssBaselineMinRtt: the round minimum that ended slow start.
        baseline: Duration,
        /// CSS rounds begun so far, the partial round CSS began in included.
        rounds: u32,
    },
}

/// What HyStart++ makes of one ACK in the initial slow start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HyStartAck {
    /// Divide this ACK's slow-start growth, N, by this: 1 in slow start,
    /// [`CSS_GROWTH_DIVISOR`] in CSS.
    pub(crate) growth_divisor: u32,
    /// CSS_ROUNDS rounds of CSS are complete, or the ACK train fills half the path: once
    /// this ACK's growth is applied, set ssthresh = cwnd and enter congestion avoidance.
    pub(crate) enter_avoidance: bool,
}

/// One ACK of the initial slow start, as HyStart++ reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlowStartAck {
    /// When it arrived.
    pub(crate) now: Instant,
    /// Bytes it newly delivered.
    pub(crate) delivered: u32,
    /// Bytes outstanding before it.
    pub(crate) in_flight: u32,
    /// Its RTT sample, if any.
    pub(crate) rtt: Option<Duration>,
    /// The smallest RTT seen on the connection (Linux's `delay_min`), if any.
    pub(crate) min_rtt: Option<Duration>,
    /// cwnd, in segments, before it.
    pub(crate) cwnd_segments: u32,
}

/// HyStart++ state of one connection (RFC 9406 section 4.2).
#[derive(Clone, Debug)]
pub(crate) struct HyStart {
    /// Bytes of the data outstanding when the current round began that are still to be
    /// delivered; 0 once that data is delivered, so that the next ACK begins a round.
    round_remaining: u32,
    /// lastRoundMinRTT (`None` for infinity).
    last_round_min: Option<Duration>,
    /// currentRoundMinRTT (`None` for infinity).
    current_round_min: Option<Duration>,
    /// rttSampleCount.
    samples: u32,
    /// Slow start or CSS.
    phase: Phase,
    /// When the current round's first ACK arrived (Linux's `round_start`).
    train_start: Instant,
    /// When the last ACK of the round's train arrived (Linux's `last_ack`).
    train_last: Instant,
}

impl Default for HyStart {
    fn default() -> Self {
        Self::new()
    }
}

impl HyStart {
    /// Return HyStart++ at the start of a connection: in slow start, with no RTT seen, and
    /// the first ACK beginning the first round.
    pub(crate) const fn new() -> Self {
        HyStart {
            round_remaining: 0,
            last_round_min: None,
            current_round_min: None,
            samples: 0,
            phase: Phase::SlowStart,
            train_start: Instant::ZERO,
            train_last: Instant::ZERO,
        }
    }

    /// Return whether CSS is in force.
    pub(crate) fn in_css(&self) -> bool {
        matches!(self.phase, Phase::Conservative { .. })
    }

    /// Let the next ACK begin a round, as after an idle period: the data outstanding before
    /// it is no measure of the round that follows.
    pub(crate) fn restart_round(&mut self) {
        self.round_remaining = 0;
    }

    /// Take one ACK of the initial slow start and return how to grow and whether to leave
    /// (RFC 9406 section 4.2, in its order: round bookkeeping, growth under the phase in
    /// force when the ACK arrived, then the RTT checks; then Linux's ACK train).
    pub(crate) fn on_ack(&mut self, ack: SlowStartAck) -> HyStartAck {
        if self.round_remaining == 0 {
            self.begin_round(ack.in_flight.saturating_sub(ack.delivered), ack.now);
        } else {
            self.round_remaining = self.round_remaining.saturating_sub(ack.delivered);
        }
        let growth_divisor = if self.in_css() { CSS_GROWTH_DIVISOR } else { 1 };

        // "Keep track of the minimum observed RTT": currentRoundMinRTT, rttSampleCount.
        if let Some(rtt) = ack.rtt {
            self.current_round_min = Some(self.current_round_min.map_or(rtt, |m| m.min(rtt)));
            self.samples = self.samples.saturating_add(1);
        }

        match self.phase {
            Phase::SlowStart => {
                // "check to see if delay increase triggers slow start exit".
                if self.samples >= N_RTT_SAMPLE
                    && let (Some(current), Some(last)) = (self.current_round_min, self.last_round_min)
                    && current >= last.saturating_add(rtt_thresh(last))
                {
                    self.phase = Phase::Conservative { baseline: current, rounds: 1 };
                }
            }
            Phase::Conservative { baseline, .. } => {
                // "the current round's minRTT drops below baseline ... indicating that
                // slow start exit was spurious": resume slow start.
                if self.samples >= N_RTT_SAMPLE && self.current_round_min.is_some_and(|current| current < baseline) {
                    self.phase = Phase::SlowStart;
                }
            }
        }

        // "If CSS_ROUNDS rounds are complete, enter congestion avoidance"; or the train of
        // this round's ACKs says the window fills half the path.
        let css_done = self.round_remaining == 0
            && matches!(self.phase, Phase::Conservative { rounds, .. } if rounds >= CSS_ROUNDS);
        let enter_avoidance = css_done || self.train_fills_half_the_path(&ack);
        if enter_avoidance {
            // HyStart++ is for the initial slow start only (RFC 9406 section 4.3); should a
            // later slow start consult it again, it starts afresh.
            self.phase = Phase::SlowStart;
        }
        HyStartAck { growth_divisor, enter_avoidance }
    }

    /// Extend the round's ACK train with `ack` if it comes within [`ACK_DELTA`] of the last,
    /// and return whether the train now lasts longer than half the minimum RTT (Linux's
    /// `hystart_update`, `HYSTART_ACK_TRAIN`, for a sender that does not pace slow start).
    fn train_fills_half_the_path(&mut self, ack: &SlowStartAck) -> bool {
        let Some(min_rtt) = ack.min_rtt else { return false };
        if ack.cwnd_segments < LOW_WINDOW || ack.now - self.train_last > ACK_DELTA {
            return false;
        }
        self.train_last = ack.now;
        ack.now - self.train_start > min_rtt / 2
    }

    /// Begin a round whose window is the `outstanding` bytes sent before it ("At the start
    /// of each round": lastRoundMinRTT = currentRoundMinRTT, currentRoundMinRTT = infinity,
    /// rttSampleCount = 0).
    fn begin_round(&mut self, outstanding: u32, now: Instant) {
        self.round_remaining = outstanding;
        self.train_start = now;
        self.train_last = now;
        self.last_round_min = self.current_round_min.take();
        self.samples = 0;
        if let Phase::Conservative { rounds, .. } = &mut self.phase {
            *rounds = rounds.saturating_add(1);
        }
    }
}

/// Return RttThresh = max(MIN_RTT_THRESH, min(lastRoundMinRTT / MIN_RTT_DIVISOR,
/// MAX_RTT_THRESH)) (RFC 9406 section 4.2).
fn rtt_thresh(last_round_min: Duration) -> Duration {
    (last_round_min / MIN_RTT_DIVISOR).clamp(MIN_RTT_THRESH, MAX_RTT_THRESH)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMSS: u32 = 1000;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Return an ACK without a minimum RTT (so no ACK train), at time zero.
    fn ack(delivered: u32, in_flight: u32, rtt: Option<Duration>) -> SlowStartAck {
        SlowStartAck { now: Instant::ZERO, delivered, in_flight, rtt, min_rtt: None, cwnd_segments: 10 }
    }

    /// Feed `hs` one round of `n` one-segment ACKs, each with RTT `rtt`, as an ACK-clocked
    /// sender with `n` segments outstanding at the round's start sees it; return each ACK's
    /// verdict.
    fn round(hs: &mut HyStart, n: u32, rtt: Option<Duration>) -> Vec<HyStartAck> {
        (0..n).map(|i| hs.on_ack(ack(SMSS, (n - i) * SMSS, rtt))).collect()
    }

    #[test]
    fn rtt_thresh_is_an_eighth_clamped_to_4_and_16_ms() {
        for (last, want_us) in [(1, 4000), (32, 4000), (40, 5000), (100, 12_500), (128, 16_000), (1000, 16_000)] {
            assert_eq!(rtt_thresh(ms(last)), Duration::from_micros(want_us), "lastRoundMinRTT {last} ms");
        }
    }

    #[test]
    fn a_rise_by_the_threshold_enters_css_and_less_does_not() {
        // lastRoundMinRTT 100 ms: RttThresh 12.5 ms.
        for (rise_us, css) in [(12_499, false), (12_500, true)] {
            let mut hs = HyStart::new();
            round(&mut hs, 10, Some(ms(100)));
            let verdicts = round(&mut hs, 10, Some(ms(100) + Duration::from_micros(rise_us)));
            assert_eq!(hs.in_css(), css, "rise {rise_us} us");
            // The exit happens on the eighth sample: the ACKs before it grow as slow start.
            let divisors: Vec<u32> = verdicts.iter().map(|v| v.growth_divisor).collect();
            let want: Vec<u32> = (0..10).map(|i| if css && i >= 8 { CSS_GROWTH_DIVISOR } else { 1 }).collect();
            assert_eq!(divisors, want, "rise {rise_us} us");
        }
    }

    #[test]
    fn fewer_than_n_rtt_samples_decide_nothing() {
        let mut hs = HyStart::new();
        round(&mut hs, 10, Some(ms(100)));
        // Seven samples of a much larger RTT, the rest of the ACKs without a sample.
        for i in 0..10u32 {
            hs.on_ack(ack(SMSS, (10 - i) * SMSS, (i < 7).then_some(ms(300))));
        }
        assert!(!hs.in_css());
    }

    #[test]
    fn a_round_without_samples_is_no_baseline() {
        // lastRoundMinRTT must be valid: after a round with no samples at all, even a large
        // rise is not compared with anything.
        let mut hs = HyStart::new();
        round(&mut hs, 10, None);
        round(&mut hs, 10, Some(ms(300)));
        assert!(!hs.in_css());
        round(&mut hs, 10, Some(ms(400)));
        assert!(hs.in_css(), "now 300 ms is the baseline");
    }

    #[test]
    fn rounds_end_when_the_data_outstanding_at_their_start_is_delivered() {
        let mut hs = HyStart::new();
        // First ACK: 10 segments outstanding, so the round is this ACK and nine more.
        hs.on_ack(ack(SMSS, 10 * SMSS, Some(ms(100))));
        assert_eq!(hs.round_remaining, 9 * SMSS);
        for _ in 0..9 {
            hs.on_ack(ack(SMSS, 20 * SMSS, Some(ms(100))));
        }
        assert_eq!(hs.round_remaining, 0, "the tenth ACK ends the round");
        assert_eq!(hs.last_round_min, None);
        // The eleventh begins the next round, with the 19 segments still outstanding.
        hs.on_ack(ack(SMSS, 20 * SMSS, Some(ms(150))));
        assert_eq!(hs.round_remaining, 19 * SMSS);
        assert_eq!(hs.last_round_min, Some(ms(100)));
        assert_eq!((hs.current_round_min, hs.samples), (Some(ms(150)), 1));
        // A stretch ACK covering more than the remainder ends the round too.
        hs.on_ack(ack(30 * SMSS, 40 * SMSS, None));
        assert_eq!(hs.round_remaining, 0);
        hs.on_ack(ack(SMSS, 5 * SMSS, Some(ms(80))));
        assert_eq!(hs.round_remaining, 4 * SMSS);
        // After an idle period the next ACK begins a round, whatever was outstanding.
        hs.restart_round();
        hs.on_ack(ack(SMSS, 8 * SMSS, None));
        assert_eq!(hs.round_remaining, 7 * SMSS);
        assert_eq!(hs.last_round_min, Some(ms(80)));
    }

    #[test]
    fn css_lasts_css_rounds_counting_the_one_it_began_in() {
        let mut hs = HyStart::new();
        round(&mut hs, 10, Some(ms(100)));
        let first = round(&mut hs, 10, Some(ms(120)));
        assert!(hs.in_css());
        assert!(first.iter().all(|v| !v.enter_avoidance));
        // Rounds 2, 3 and 4 of CSS: no exit.
        for r in 2..CSS_ROUNDS {
            let verdicts = round(&mut hs, 10, Some(ms(120)));
            assert!(verdicts.iter().all(|v| v.growth_divisor == CSS_GROWTH_DIVISOR && !v.enter_avoidance), "round {r}");
        }
        // The fifth: the exit comes with its last ACK, and only then.
        let last = round(&mut hs, 10, Some(ms(120)));
        let exits: Vec<bool> = last.iter().map(|v| v.enter_avoidance).collect();
        assert_eq!(exits, [false, false, false, false, false, false, false, false, false, true]);
        assert!(!hs.in_css());
    }

    #[test]
    fn a_fall_below_the_baseline_resumes_slow_start() {
        let mut hs = HyStart::new();
        round(&mut hs, 10, Some(ms(100)));
        round(&mut hs, 10, Some(ms(120)));
        assert!(hs.in_css());
        // Still at the baseline: CSS continues.
        round(&mut hs, 10, Some(ms(120)));
        assert!(hs.in_css());
        // Below it, once N_RTT_SAMPLE samples are in: back to slow start.
        let verdicts = round(&mut hs, 10, Some(ms(119)));
        assert!(!hs.in_css());
        let divisors: Vec<u32> = verdicts.iter().map(|v| v.growth_divisor).collect();
        assert_eq!(divisors, [4, 4, 4, 4, 4, 4, 4, 4, 1, 1]);
        assert!(verdicts.iter().all(|v| !v.enter_avoidance));
    }

    // ---- The ACK train (Linux's HyStart) ----

    /// Feed `hs` a round of `n` one-segment ACKs `gap` apart from `start`, with cwnd
    /// `cwnd_segments` and minimum RTT `min_rtt`; return the index of the ACK that ends slow
    /// start, if one does.
    fn train(
        hs: &mut HyStart,
        start: Instant,
        n: u32,
        gap: Duration,
        cwnd_segments: u32,
        min_rtt: Duration,
    ) -> Option<u32> {
        (0..n).find(|&i| {
            let now = start + gap * i;
            let a = SlowStartAck {
                now,
                delivered: SMSS,
                in_flight: (n - i) * SMSS,
                rtt: Some(min_rtt),
                min_rtt: Some(min_rtt),
                cwnd_segments,
            };
            hs.on_ack(a).enter_avoidance
        })
    }

    #[test]
    fn a_train_longer_than_half_the_min_rtt_ends_slow_start() {
        // 20 ms: the train must last over 10 ms. ACKs 1 ms apart: the twelfth (11 ms after
        // the first) is the first past it.
        let mut hs = HyStart::new();
        assert_eq!(train(&mut hs, Instant::from_millis(100), 20, ms(1), 20, ms(20)), Some(11));
        // A short round's train ends before it gets there.
        let mut hs = HyStart::new();
        assert_eq!(train(&mut hs, Instant::from_millis(100), 10, ms(1), 20, ms(20)), None);
    }

    #[test]
    fn a_gap_over_2_ms_ends_the_train_and_a_small_window_never_exits() {
        // ACKs 3 ms apart never continue a train (a slow path: the delay signal decides).
        let mut hs = HyStart::new();
        assert_eq!(train(&mut hs, Instant::from_millis(100), 20, ms(3), 20, ms(20)), None);
        // Below hystart_low_window (16 segments) the train is not consulted.
        let mut hs = HyStart::new();
        assert_eq!(train(&mut hs, Instant::from_millis(100), 20, ms(1), LOW_WINDOW - 1, ms(20)), None);
    }

    #[test]
    fn each_round_starts_a_new_train() {
        // Two rounds of 8 ACKs 1 ms apart: neither lasts 10 ms, though together they do.
        let mut hs = HyStart::new();
        assert_eq!(train(&mut hs, Instant::from_millis(100), 8, ms(1), 20, ms(20)), None);
        assert_eq!(train(&mut hs, Instant::from_millis(108), 8, ms(1), 20, ms(20)), None);
    }
}

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
    /// CSS_ROUNDS rounds of CSS are complete: once this ACK's growth is applied, set
    /// ssthresh = cwnd and enter congestion avoidance.
    pub(crate) enter_avoidance: bool,
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

    /// Take one ACK of the initial slow start that delivered `delivered` bytes, with
    /// `in_flight` bytes outstanding before it and RTT sample `rtt`, and return how to grow
    /// and whether to leave (RFC 9406 section 4.2, in its order: round bookkeeping, growth
    /// under the phase in force when the ACK arrived, then the RTT checks).
    pub(crate) fn on_ack(&mut self, delivered: u32, in_flight: u32, rtt: Option<Duration>) -> HyStartAck {
        if self.round_remaining == 0 {
            self.begin_round(in_flight.saturating_sub(delivered));
        } else {
            self.round_remaining = self.round_remaining.saturating_sub(delivered);
        }
        let growth_divisor = if self.in_css() { CSS_GROWTH_DIVISOR } else { 1 };

        // "Keep track of the minimum observed RTT": currentRoundMinRTT, rttSampleCount.
        if let Some(rtt) = rtt {
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

        // "If CSS_ROUNDS rounds are complete, enter congestion avoidance".
        let enter_avoidance = self.round_remaining == 0
            && matches!(self.phase, Phase::Conservative { rounds, .. } if rounds >= CSS_ROUNDS);
        if enter_avoidance {
            // HyStart++ is for the initial slow start only (RFC 9406 section 4.3); should a
            // later slow start consult it again, it starts afresh.
            self.phase = Phase::SlowStart;
        }
        HyStartAck { growth_divisor, enter_avoidance }
    }

    /// Begin a round whose window is the `outstanding` bytes sent before it ("At the start
    /// of each round": lastRoundMinRTT = currentRoundMinRTT, currentRoundMinRTT = infinity,
    /// rttSampleCount = 0).
    fn begin_round(&mut self, outstanding: u32) {
        self.round_remaining = outstanding;
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

    /// Feed `hs` one round of `n` one-segment ACKs, each with RTT `rtt`, as an ACK-clocked
    /// sender with `n` segments outstanding at the round's start sees it; return each ACK's
    /// verdict.
    fn round(hs: &mut HyStart, n: u32, rtt: Option<Duration>) -> Vec<HyStartAck> {
        (0..n).map(|i| hs.on_ack(SMSS, (n - i) * SMSS, rtt)).collect()
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
            hs.on_ack(SMSS, (10 - i) * SMSS, (i < 7).then_some(ms(300)));
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
        hs.on_ack(SMSS, 10 * SMSS, Some(ms(100)));
        assert_eq!(hs.round_remaining, 9 * SMSS);
        for _ in 0..9 {
            hs.on_ack(SMSS, 20 * SMSS, Some(ms(100)));
        }
        assert_eq!(hs.round_remaining, 0, "the tenth ACK ends the round");
        assert_eq!(hs.last_round_min, None);
        // The eleventh begins the next round, with the 19 segments still outstanding.
        hs.on_ack(SMSS, 20 * SMSS, Some(ms(150)));
        assert_eq!(hs.round_remaining, 19 * SMSS);
        assert_eq!(hs.last_round_min, Some(ms(100)));
        assert_eq!((hs.current_round_min, hs.samples), (Some(ms(150)), 1));
        // A stretch ACK covering more than the remainder ends the round too.
        hs.on_ack(30 * SMSS, 40 * SMSS, None);
        assert_eq!(hs.round_remaining, 0);
        hs.on_ack(SMSS, 5 * SMSS, Some(ms(80)));
        assert_eq!(hs.round_remaining, 4 * SMSS);
        // After an idle period the next ACK begins a round, whatever was outstanding.
        hs.restart_round();
        hs.on_ack(SMSS, 8 * SMSS, None);
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
}

//! Retransmission timeout estimation (RFC 6298).
//!
//! [`RttEstimator`] turns round-trip samples into SRTT, RTTVAR and the RTO,
//! and applies the exponential backoff of section 5. It never reads a clock:
//! the caller measures each sample (Karn's algorithm, RFC 6298 section 3:
//! never from a retransmitted segment unless timestamps disambiguate it) and
//! passes it to [`sample`](RttEstimator::sample).
//!
//! Arithmetic is in integer microseconds. SRTT is stored scaled by 8 and
//! RTTVAR by 4, so the gains alpha = 1/8 and beta = 1/4 lose at most a
//! microsecond per sample and `K * RTTVAR` (K = 4) is exact.

use crate::time::Instant;
use std::time::Duration;

/// The RTO before the first RTT sample (RFC 6298 section 2.1: 1 s); the default of
/// [`Config::initial_rto`](crate::Config::initial_rto).
pub(crate) const INITIAL_RTO: Duration = Duration::from_secs(1);

/// The lower bound on the RTO: 200 ms, as Linux (`TCP_RTO_MIN`; FreeBSD uses 30 ms),
/// deviating from RFC 6298 2.4, which asks for 1 s "to avoid spurious retransmissions":
/// that bound dates from coarse timers, and with the RTT measured on every flight
/// (timestamps) and the peer's delayed ACK capped at 200 ms, a second-long floor only makes
/// every lost segment with nothing behind it cost a second. The default of
/// [`Config::min_rto`](crate::Config::min_rto); set that to 1 s for RFC 6298 exactly.
pub(crate) const MIN_RTO: Duration = Duration::from_millis(200);

/// The upper bound on the RTO (RFC 6298 2.5: at least 60 s): 120 s, as Linux's
/// `TCP_RTO_MAX`, the default of [`Config::max_rto`](crate::Config::max_rto).
pub(crate) const MAX_RTO: Duration = Duration::from_secs(120);

/// Clock granularity G (RFC 6298 section 2): 1 ms.
const GRANULARITY_US: u64 = 1_000;

/// Largest sample considered, in microseconds (about 71 minutes); longer
/// samples are clamped so the scaled sums cannot overflow.
const MAX_SAMPLE_US: u64 = u32::MAX as u64;

/// The RTO that RFC 6298 section 5.7 restores after a SYN timed out: 3 s.
const SYN_FALLBACK_US: u64 = 3_000_000;

/// An RFC 6298 round-trip time estimator and retransmission timeout.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    /// Lower bound on the RTO, microseconds (RFC 6298 2.4).
    min_us: u64,
    /// Upper bound on the RTO, microseconds (RFC 6298 2.5).
    max_us: u64,
    /// 8 * SRTT in microseconds; meaningful once `has_sample`.
    srtt_x8: u64,
    /// 4 * RTTVAR in microseconds; meaningful once `has_sample`.
    rttvar_x4: u64,
    /// Whether a first measurement has been made (RFC 6298 2.2).
    has_sample: bool,
    /// The RTO before backoff, clamped to `[min_us, max_us]`.
    base_us: u64,
    /// Timer expirations since the last sample (RFC 6298 5.5).
    backoffs: u32,
    /// The RTO now, `base_us` backed off and capped ([`backed_off`](Self::backed_off)),
    /// worked out whenever either changes: the connection reads it on every segment it
    /// sends after idle (RFC 5681 4.1's test) and whenever it arms the retransmission
    /// timer, several times an exchange, and the two change only on an RTT sample or a
    /// timeout.
    rto_us: u64,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl RttEstimator {
    /// Return an estimator with no samples yet whose RTO is `initial_rto`
    /// (RFC 6298 section 2.1 recommends 1 s).
    ///
    /// Every RTO, the initial one included, is clamped to
    /// `[min_rto, max_rto]` (RFC 6298 sections 2.4 and 2.5); if
    /// `min_rto > max_rto`, `max_rto` wins.
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        let max_us = micros(max_rto);
        let min_us = micros(min_rto).min(max_us);
        let base_us = micros(initial_rto).clamp(min_us, max_us);
        RttEstimator {
            min_us,
            max_us,
            srtt_x8: 0,
            rttvar_x4: 0,
            has_sample: false,
            base_us,
            backoffs: 0,
            rto_us: base_us,
        }
    }

    /// Return the RTO worked out from its parts: the computed value doubled once per
    /// [`backoff`](Self::backoff), capped at `max_rto`.
    fn backed_off(&self) -> u64 {
        1u64.checked_shl(self.backoffs)
            .and_then(|factor| self.base_us.checked_mul(factor))
            .map_or(self.max_us, |rto| rto.min(self.max_us))
    }

    /// [`sample_us`](Self::sample_us) with a `Duration`, as the tests give it.
    #[cfg(test)]
    pub fn sample(&mut self, rtt: Duration) {
        self.sample_us(micros(rtt));
    }

    /// Take a round-trip time measurement of `rtt_us` microseconds and recompute the RTO;
    /// clear the backoff.
    ///
    /// The first sample R sets SRTT = R and RTTVAR = R/2 (RFC 6298 section
    /// 2.2); later ones set RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R| and then
    /// SRTT = 7/8 SRTT + 1/8 R (section 2.3). Both set
    /// RTO = SRTT + max(G, 4 * RTTVAR) with G = 1 ms, clamped to the bounds.
    /// A new measurement "collapses" a backed-off RTO (the note after RFC
    /// 6298 section 5.7).
    ///
    /// In microseconds, as the connection takes it from two
    /// [`Instant`](crate::time::Instant)s on every ACK that ends a timed flight: no
    /// `Duration` on the way there and back (a division by a million and a 128-bit
    /// multiplication).
    pub fn sample_us(&mut self, rtt_us: u64) {
        let r = rtt_us.min(MAX_SAMPLE_US);
        if self.has_sample {
            let err_x8 = self.srtt_x8.abs_diff(8 * r);
            self.rttvar_x4 = self.rttvar_x4 - self.rttvar_x4 / 4 + err_x8 / 8;
            self.srtt_x8 = self.srtt_x8 - self.srtt_x8 / 8 + r;
        } else {
            self.srtt_x8 = 8 * r;
            self.rttvar_x4 = 2 * r;
            self.has_sample = true;
        }
        let rto = self.srtt_x8 / 8 + self.rttvar_x4.max(GRANULARITY_US);
        self.base_us = rto.clamp(self.min_us, self.max_us);
        self.backoffs = 0;
        self.rto_us = self.backed_off();
    }

    /// Return the current RTO: the computed value doubled once per
    /// [`backoff`](Self::backoff), capped at `max_rto`.
    pub fn rto(&self) -> Duration {
        Duration::from_micros(self.rto_us())
    }

    /// Return [`rto`](Self::rto) in microseconds (kept up to date by every change of its
    /// parts: a load).
    #[inline]
    pub fn rto_us(&self) -> u64 {
        debug_assert_eq!(self.rto_us, self.backed_off());
        self.rto_us
    }

    /// Return `now + rto()`, in microseconds throughout: the timers count in them, and a
    /// `Duration` on the way (made of seconds and nanoseconds) cost a division and a
    /// multiplication each time the retransmission timer is armed.
    #[inline]
    pub fn rto_deadline(&self, now: Instant) -> Instant {
        Instant::from_micros(now.as_micros().saturating_add(self.rto_us()))
    }

    /// Double the RTO after the retransmission timer expired (RFC 6298 section 5.5), capped at `max_rto`.
    pub fn backoff(&mut self) {
        self.backoffs = self.backoffs.saturating_add(1);
        self.rto_us = self.backed_off();
    }

    /// Return how many times the RTO was doubled since the last sample (for the tests).
    #[cfg(test)]
    pub fn backoffs(&self) -> u32 {
        self.backoffs
    }

    /// Return the smoothed round-trip time, or `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt_us().map(Duration::from_micros)
    }

    /// Return [`srtt`](Self::srtt) in microseconds.
    #[inline]
    pub fn srtt_us(&self) -> Option<u64> {
        self.has_sample.then_some(self.srtt_x8 / 8)
    }

    /// Return the round-trip time variation (zero before the first sample).
    pub fn rttvar(&self) -> Duration {
        Duration::from_micros(self.rttvar_x4 / 4)
    }

    /// Apply RFC 6298 section 5.7 once the handshake completes after a SYN
    /// (or SYN-ACK) timed out: if the RTO is below 3 s, set it to 3 s (within
    /// the bounds) and clear the backoff.
    pub fn syn_timed_out_fallback(&mut self) {
        if self.base_us < SYN_FALLBACK_US {
            self.base_us = SYN_FALLBACK_US.clamp(self.min_us, self.max_us);
        }
        self.backoffs = 0;
        self.rto_us = self.backed_off();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// Bounds loose enough not to hide the formula.
    fn loose() -> RttEstimator {
        RttEstimator::new(ms(1000), Duration::ZERO, Duration::from_secs(120))
    }

    #[test]
    fn initial_state() {
        let est = RttEstimator::new(ms(1000), ms(200), Duration::from_secs(60));
        assert_eq!(est.rto(), ms(1000));
        assert_eq!(est.srtt(), None);
        assert_eq!(est.rttvar(), Duration::ZERO);
        assert_eq!(est.backoffs(), 0);
    }

    #[test]
    fn first_sample_rfc6298_2_2() {
        let mut est = loose();
        est.sample(ms(100));
        assert_eq!(est.srtt(), Some(ms(100)));
        assert_eq!(est.rttvar(), ms(50));
        assert_eq!(est.rto(), ms(300), "SRTT + 4 * RTTVAR");
    }

    #[test]
    fn later_sample_rfc6298_2_3() {
        let mut est = loose();
        est.sample(ms(100));
        est.sample(ms(200));
        // RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 62.5; SRTT = 7/8 * 100 + 1/8 * 200 = 112.5.
        assert_eq!(est.rttvar(), Duration::from_micros(62_500));
        assert_eq!(est.srtt(), Some(Duration::from_micros(112_500)));
        assert_eq!(est.rto(), Duration::from_micros(112_500 + 250_000));
        // A sample below SRTT uses the absolute difference.
        est.sample(ms(50));
        // RTTVAR = 3/4 * 62.5 + 1/4 * 62.5 = 62.5; SRTT = 7/8 * 112.5 + 1/8 * 50 = 104.6875.
        assert_eq!(est.rttvar(), Duration::from_micros(62_500));
        assert_eq!(est.srtt(), Some(Duration::from_nanos(104_687_000)));
    }

    #[test]
    fn granularity_floor() {
        let mut est = loose();
        for _ in 0..100 {
            est.sample(ms(10));
        }
        assert_eq!(est.srtt(), Some(ms(10)));
        assert!(est.rttvar() < Duration::from_micros(250));
        assert_eq!(est.rto(), ms(11), "SRTT + G when 4 * RTTVAR < G");
        let mut est = loose();
        est.sample(Duration::ZERO);
        assert_eq!(est.rto(), ms(1));
    }

    #[test]
    fn converges_to_a_constant_rtt() {
        let mut est = loose();
        est.sample(ms(500));
        for _ in 0..200 {
            est.sample(ms(40));
        }
        assert_eq!(est.srtt(), Some(ms(40)));
        assert_eq!(est.rttvar(), Duration::ZERO);
    }

    #[test]
    fn clamped_to_min_and_max() {
        let mut est = RttEstimator::new(ms(1000), ms(1000), ms(5000));
        est.sample(ms(10));
        assert_eq!(est.rto(), ms(1000), "RFC 6298 2.4 minimum");
        est.sample(Duration::from_secs(10));
        assert_eq!(est.rto(), ms(5000), "RFC 6298 2.5 maximum");
        let est = RttEstimator::new(ms(10), ms(200), ms(5000));
        assert_eq!(est.rto(), ms(200), "initial RTO clamped too");
        let est = RttEstimator::new(ms(1000), ms(900), ms(300));
        assert_eq!(est.rto(), ms(300), "min above max: max wins");
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut est = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        let expected = [1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000];
        for (i, &want) in expected.iter().enumerate() {
            assert_eq!(est.backoffs(), i as u32);
            assert_eq!(est.rto(), ms(want));
            est.backoff();
        }
        for _ in 0..200 {
            est.backoff();
        }
        assert_eq!(est.rto(), ms(60_000), "huge shift counts saturate at max");
        let mut est = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        est.backoffs = u32::MAX;
        est.backoff();
        assert_eq!(est.backoffs(), u32::MAX);
        assert_eq!(est.rto(), ms(60_000));
    }

    #[test]
    fn sample_clears_backoff() {
        let mut est = loose();
        est.sample(ms(100));
        est.backoff();
        est.backoff();
        assert_eq!(est.rto(), ms(1200));
        est.sample(ms(100));
        assert_eq!(est.backoffs(), 0);
        assert!(est.rto() < ms(400));
    }

    #[test]
    fn huge_samples_do_not_overflow() {
        let mut est = RttEstimator::new(ms(1000), Duration::ZERO, Duration::MAX);
        est.sample(Duration::MAX);
        est.sample(Duration::MAX);
        est.sample(Duration::ZERO);
        assert!(est.srtt().is_some());
        est.backoff();
        let _ = est.rto();
    }

    #[test]
    fn syn_timeout_fallback_rfc6298_5_7() {
        let mut est = RttEstimator::new(ms(1000), ms(200), ms(60_000));
        est.backoff();
        est.syn_timed_out_fallback();
        assert_eq!(est.rto(), ms(3000));
        assert_eq!(est.backoffs(), 0);
        let mut est = RttEstimator::new(ms(1000), ms(200), ms(2000));
        est.syn_timed_out_fallback();
        assert_eq!(est.rto(), ms(2000), "capped at max");
        let mut est = loose();
        est.sample(ms(2000)); // RTO 6 s already
        est.syn_timed_out_fallback();
        assert_eq!(est.rto(), ms(6000));
    }

    proptest! {
        #[test]
        fn rto_stays_within_bounds(
            samples in proptest::collection::vec(0u64..10_000_000, 1..50),
            backoffs in 0u32..70,
        ) {
            let (min, max) = (ms(200), ms(60_000));
            let mut est = RttEstimator::new(ms(1000), min, max);
            for &s in &samples {
                est.sample(Duration::from_micros(s));
                let rto = est.rto();
                prop_assert!(min <= rto && rto <= max);
                let srtt = est.srtt().unwrap();
                prop_assert!(srtt <= Duration::from_micros(*samples.iter().max().unwrap()));
                prop_assert!(srtt >= Duration::from_micros(*samples.iter().min().unwrap()).saturating_sub(Duration::from_micros(1)));
            }
            let before = est.rto();
            for _ in 0..backoffs {
                est.backoff();
            }
            prop_assert!(est.rto() >= before && est.rto() <= max);
        }

        #[test]
        fn microsecond_forms_agree_with_the_durations(
            samples in proptest::collection::vec(0u64..10_000_000, 0..20),
            backoffs in 0u32..70,
            now in 0u64..u64::MAX,
        ) {
            let mut est = RttEstimator::new(ms(1000), ms(200), Duration::from_secs(1 << 40));
            for &s in &samples {
                est.sample(Duration::from_micros(s));
            }
            for _ in 0..backoffs {
                est.backoff();
            }
            let now = Instant::from_micros(now);
            prop_assert_eq!(est.rto_deadline(now), now + est.rto(), "saturating alike");
            prop_assert_eq!(est.srtt_us().map(Duration::from_micros), est.srtt());
        }

        /// The RTO kept up to date is the one worked out from its parts after any sequence of
        /// samples, timeouts and SYN fallbacks, with any bounds.
        #[test]
        fn the_rto_kept_is_the_rto_worked_out(
            initial in 0u64..5_000_000,
            min in 0u64..2_000_000,
            max in 0u64..200_000_000,
            steps in proptest::collection::vec((0u8..3, 0u64..u64::MAX), 0..40),
        ) {
            let mut est = RttEstimator::new(Duration::from_micros(initial), Duration::from_micros(min), Duration::from_micros(max));
            prop_assert_eq!(est.rto_us(), est.backed_off());
            for (op, v) in steps {
                match op {
                    0 => est.sample_us(v % 10_000_000),
                    1 => est.backoff(),
                    _ => est.syn_timed_out_fallback(),
                }
                prop_assert_eq!(est.rto_us(), est.backed_off());
            }
        }
    }
}

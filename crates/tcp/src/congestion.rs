//! NewReno's window arithmetic (RFC 5681 with RFC 3465 byte counting), and the choice
//! between the congestion controllers ([`CongestionControl`]).
//!
//! Loss detection and the fast recovery itself (which segments to resend, and the
//! proportional rate reduction that walks cwnd down to ssthresh, RFC 6937) live in
//! `recovery.rs`; see `controller.rs` for the calls a controller answers.
//!
//! Window growth:
//! - Slow start (cwnd < ssthresh): cwnd = min(cwnd + delivered, ssthresh), every byte the
//!   ACK newly covers, as Linux's `tcp_slow_start` does; what takes cwnd past ssthresh counts
//!   in congestion avoidance. RFC 3465 section 2.2 caps the growth at L = 2 SMSS per ACK,
//!   which throttles slow start wherever ACKs are coalesced (GRO, LRO, ACK thinning: one ACK
//!   for tens of segments); Linux has no such cap, nor the L = SMSS of RFC 3465 section 2.3
//!   after a timeout (`tcp_cong_avoid` runs in the Loss state too), and neither has this.
//!   The cap at ssthresh bounds the burst an ACK covering data sent before a timeout may
//!   release.
//! - Congestion avoidance (cwnd >= ssthresh): byte counting, the way RFC 5681 section 3.1
//!   recommends (RFC 3465 section 2.1): delivered bytes accumulate in `bytes_acked`; when
//!   they reach cwnd, cwnd grows by one SMSS and `bytes_acked` drops by cwnd. This gives one
//!   SMSS per window of data, whatever the ACK pattern.
//! - Neither while the sender is application-limited (RFC 7661 section 4.3: a window the
//!   sender does not fill has not been validated by the network).

use crate::controller::{AckInfo, Algorithm, Controller, initial_window};
use crate::time::Instant;
use std::time::Duration;

/// NewReno congestion window state for one connection.
///
/// `repr(C)`, its first three fields those of [`Cubic`](crate::cubic::Cubic) in the same
/// order: see [`CongestionControl`].
#[derive(Debug, Clone)]
#[repr(C)]
pub struct NewReno {
    /// Sender maximum segment size.
    smss: u32,
    /// Congestion window, bytes.
    cwnd: u32,
    /// Slow start threshold, bytes.
    ssthresh: u32,
    /// Congestion-avoidance byte counter (RFC 3465 section 2.1).
    bytes_acked: u32,
    /// Whether any data has been delivered (freezes the IW for `set_mss`).
    delivered_any: bool,
    /// Whether the SYN or SYN-ACK was retransmitted (RFC 5681 section 3.1: IW = 1 SMSS).
    syn_lost: bool,
    /// Whether the timer fired and nothing was delivered since (RFC 5681 section 3.1:
    /// ssthresh is only reduced on the first timeout of a segment).
    timer_retransmitting: bool,
    /// cwnd and ssthresh before the last reduction, to restore if it was needless.
    before_reduction: Option<(u32, u32)>,
}

impl NewReno {
    /// Return a controller for a sender with maximum segment size `smss`: cwnd = IW (RFC
    /// 6928) and ssthresh "arbitrarily high" (`u32::MAX`, RFC 5681 section 3.1).
    ///
    /// An `smss` of 0 is treated as 1.
    pub fn new(smss: u32) -> Self {
        let smss = smss.max(1);
        NewReno {
            smss,
            cwnd: initial_window(smss, false),
            ssthresh: u32::MAX,
            bytes_acked: 0,
            delivered_any: false,
            syn_lost: false,
            timer_retransmitting: false,
            before_reduction: None,
        }
    }

    /// Return max(FlightSize / 2, 2 * SMSS) (RFC 5681 section 3.1, eq. 4).
    fn loss_ssthresh(&self, flight_size: u32) -> u32 {
        (flight_size / 2).max(self.smss.saturating_mul(2))
    }
}

impl Controller for NewReno {
    fn cwnd(&self) -> u32 {
        self.cwnd
    }

    fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    fn set_mss(&mut self, smss: u32) {
        self.smss = smss.max(1);
        if !self.delivered_any {
            self.cwnd = initial_window(self.smss, self.syn_lost);
        }
    }

    // Inlined into the ACK paths' dispatch (`CongestionControl::on_ack`): the `AckInfo`
    // then stays where they built it, and the fields NewReno does not read are not made.
    #[inline]
    fn on_ack(&mut self, ack: &AckInfo) {
        if ack.delivered == 0 {
            return;
        }
        self.delivered_any = true;
        self.timer_retransmitting = false;
        if ack.app_limited {
            return;
        }
        let mut delivered = ack.delivered;
        if self.cwnd < self.ssthresh {
            // Slow start, RFC 5681 section 3.1, crediting every byte the ACK covers up to
            // ssthresh; the rest goes to congestion avoidance (Linux's tcp_slow_start).
            let grown = self.cwnd.saturating_add(delivered).min(self.ssthresh);
            delivered -= grown - self.cwnd;
            self.cwnd = grown;
        }
        if delivered > 0 {
            // Congestion avoidance, RFC 3465 section 2.1.
            self.bytes_acked = self.bytes_acked.saturating_add(delivered);
            if self.bytes_acked >= self.cwnd {
                self.bytes_acked -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(self.smss);
            }
        }
    }

    fn on_loss(&mut self, _now: Instant, in_flight: u32) -> u32 {
        self.before_reduction = Some((self.cwnd, self.ssthresh));
        self.ssthresh = self.loss_ssthresh(in_flight);
        self.bytes_acked = 0;
        self.ssthresh
    }

    fn set_cwnd(&mut self, cwnd: u32) {
        self.cwnd = cwnd.max(self.smss);
    }

    fn on_recovery_end(&mut self, _now: Instant) {
        self.cwnd = self.ssthresh.max(self.smss);
        self.bytes_acked = 0;
    }

    fn on_rto(&mut self, _now: Instant, in_flight: u32) {
        if !self.timer_retransmitting {
            self.before_reduction = Some((self.cwnd, self.ssthresh));
            self.ssthresh = self.loss_ssthresh(in_flight);
        }
        self.cwnd = self.smss;
        self.bytes_acked = 0;
        self.timer_retransmitting = true;
    }

    fn on_syn_timeout(&mut self) {
        self.syn_lost = true;
        if !self.delivered_any {
            self.cwnd = self.smss;
        }
    }

    fn on_idle_restart(&mut self, _now: Instant) {
        self.cwnd = self.cwnd.min(initial_window(self.smss, false));
        self.bytes_acked = 0;
    }

    fn on_spurious(&mut self, _now: Instant) {
        if let Some((cwnd, ssthresh)) = self.before_reduction.take() {
            self.cwnd = self.cwnd.max(cwnd);
            self.ssthresh = ssthresh;
            self.timer_retransmitting = false;
        }
    }

    fn on_mss_change(&mut self, smss: u32) {
        self.smss = smss.max(1);
        self.cwnd = self.cwnd.max(self.smss);
        if self.ssthresh != u32::MAX {
            self.ssthresh = self.ssthresh.max(self.smss.saturating_mul(2));
        }
    }
}

/// The controller of one connection, as [`Algorithm`] chose.
///
/// Inline, not boxed, though CUBIC's state is the larger: one per connection, read on every
/// ACK, where an indirection would cost more than the bytes.
///
/// `repr(C, u8)`, a tag and then either controller at the same offset, and both `repr(C)`
/// with `smss`, `cwnd` and `ssthresh` first: the two arms of `cwnd()` and `ssthresh()`
/// (asked several times on every segment sent and every ACK) then read the same address,
/// and the compiler makes one load of them instead of choosing between two places.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
#[repr(C, u8)]
pub(crate) enum CongestionControl {
    NewReno(NewReno),
    Cubic(crate::cubic::Cubic),
}

impl CongestionControl {
    /// Return a controller of `algorithm` for segments of `smss` bytes.
    pub fn new(algorithm: Algorithm, smss: u32) -> Self {
        match algorithm {
            Algorithm::NewReno => CongestionControl::NewReno(NewReno::new(smss)),
            Algorithm::Cubic => CongestionControl::Cubic(crate::cubic::Cubic::new(smss)),
        }
    }
}

/// Call `$method` on the controller inside, by a `match` rather than through a `&dyn
/// Controller`: the getters (`cwnd`, `ssthresh`) and NewReno's small methods then inline
/// into the ACK and send paths, which call them several times a segment, instead of costing
/// a match, an indirect call and a return each.
macro_rules! dispatch {
    ($self:ident, $method:ident($($arg:expr),*)) => {
        match $self {
            CongestionControl::NewReno(c) => c.$method($($arg),*),
            CongestionControl::Cubic(c) => c.$method($($arg),*),
        }
    };
}

impl CongestionControl {
    /// [`Controller::on_ack`] for an ACK that delivered `delivered` bytes with
    /// `in_flight` in flight before it, its RTT sample `rtt_us` and the connection's
    /// min_RTT `min_rtt_us` in microseconds, the [`AckInfo`] made inside the controller's
    /// arm: NewReno's growth, inlined, reads only what the ACK delivered and whether it was
    /// application-limited, so the RTTs' `Duration`s (a division by a million each) and the
    /// rest of the value are made only for CUBIC, which reads them.
    #[inline(always)]
    pub fn on_ack_parts(
        &mut self,
        now: Instant,
        delivered: u32,
        in_flight: u32,
        rtt_us: u64,
        min_rtt_us: Option<u64>,
        app_limited: bool,
    ) {
        // Inlined into each arm, so that NewReno's, which reads neither RTT, leaves their
        // conversions out.
        let info = || AckInfo {
            now,
            delivered,
            in_flight,
            rtt: Some(Duration::from_micros(rtt_us)),
            min_rtt: min_rtt_us.map(Duration::from_micros),
            app_limited,
        };
        match self {
            CongestionControl::NewReno(c) => c.on_ack(&info()),
            CongestionControl::Cubic(c) => c.on_ack(&info()),
        }
    }
}

impl Controller for CongestionControl {
    #[inline]
    fn cwnd(&self) -> u32 {
        dispatch!(self, cwnd())
    }
    #[inline]
    fn ssthresh(&self) -> u32 {
        dispatch!(self, ssthresh())
    }
    fn set_mss(&mut self, smss: u32) {
        dispatch!(self, set_mss(smss))
    }
    // Inlined (forced) into both copies of the connection's ACK path (see
    // `Recovery::on_sole_ack`), NewReno's growth with it.
    #[inline(always)]
    fn on_ack(&mut self, ack: &AckInfo) {
        dispatch!(self, on_ack(ack))
    }
    fn on_loss(&mut self, now: Instant, in_flight: u32) -> u32 {
        dispatch!(self, on_loss(now, in_flight))
    }
    fn set_cwnd(&mut self, cwnd: u32) {
        dispatch!(self, set_cwnd(cwnd))
    }
    fn on_recovery_end(&mut self, now: Instant) {
        dispatch!(self, on_recovery_end(now))
    }
    fn on_rto(&mut self, now: Instant, in_flight: u32) {
        dispatch!(self, on_rto(now, in_flight))
    }
    fn on_syn_timeout(&mut self) {
        dispatch!(self, on_syn_timeout())
    }
    fn on_idle_restart(&mut self, now: Instant) {
        dispatch!(self, on_idle_restart(now))
    }
    fn on_spurious(&mut self, now: Instant) {
        dispatch!(self, on_spurious(now))
    }
    fn on_mss_change(&mut self, smss: u32) {
        dispatch!(self, on_mss_change(smss))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SMSS: u32 = 1000;

    fn ack(delivered: u32) -> AckInfo {
        AckInfo { now: Instant::ZERO, delivered, in_flight: 10 * SMSS, rtt: None, min_rtt: None, app_limited: false }
    }

    #[test]
    fn initial_window_is_rfc_6928() {
        // min(10*MSS, max(2*MSS, 14600)).
        for (smss, iw) in
            [(536u32, 5360u32), (1000, 10_000), (1460, 14_600), (1448, 14_480), (4000, 14_600), (9000, 18_000)]
        {
            assert_eq!(NewReno::new(smss).cwnd(), iw, "smss {smss}");
        }
    }

    #[test]
    fn set_mss_recomputes_iw_until_data_is_delivered() {
        let mut cc = NewReno::new(536);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 14_600);
        cc.on_ack(&ack(1460));
        cc.set_mss(536);
        assert_eq!(cc.cwnd(), 14_600 + 1460, "frozen once data is delivered");
    }

    #[test]
    fn lost_syn_gives_one_segment_iw() {
        let mut cc = NewReno::new(SMSS);
        cc.on_syn_timeout();
        assert_eq!(cc.cwnd(), SMSS);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 1460);
    }

    #[test]
    fn slow_start_credits_every_byte_up_to_ssthresh() {
        let mut cc = NewReno::new(SMSS);
        let iw = cc.cwnd();
        cc.on_ack(&ack(500));
        cc.on_ack(&ack(5000));
        assert_eq!(cc.cwnd(), iw + 500 + 5000, "a stretch ACK credits all it covers (Linux's tcp_slow_start)");
        // Up to ssthresh; the rest counts in congestion avoidance.
        cc.on_loss(Instant::ZERO, 40 * SMSS);
        cc.on_recovery_end(Instant::ZERO);
        cc.on_rto(Instant::ZERO, 40 * SMSS);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (SMSS, 20 * SMSS));
        cc.on_ack(&ack(25 * SMSS));
        assert_eq!((cc.cwnd(), cc.bytes_acked), (20 * SMSS, 6 * SMSS));
    }

    #[test]
    fn congestion_avoidance_one_smss_per_window() {
        let mut cc = NewReno::new(SMSS);
        cc.on_loss(Instant::ZERO, 20 * SMSS);
        cc.on_recovery_end(Instant::ZERO);
        assert_eq!(cc.cwnd(), 10 * SMSS);
        for _ in 0..10 {
            cc.on_ack(&ack(SMSS));
        }
        assert_eq!(cc.cwnd(), 11 * SMSS, "one SMSS after a window's worth");
    }

    #[test]
    fn application_limited_acks_do_not_grow_the_window() {
        let mut cc = NewReno::new(SMSS);
        let iw = cc.cwnd();
        cc.on_ack(&AckInfo { app_limited: true, ..ack(SMSS) });
        assert_eq!(cc.cwnd(), iw, "RFC 7661");
    }

    #[test]
    fn loss_halves_and_recovery_end_sets_cwnd_to_ssthresh() {
        let mut cc = NewReno::new(SMSS);
        assert_eq!(cc.on_loss(Instant::ZERO, 30 * SMSS), 15 * SMSS);
        cc.set_cwnd(20 * SMSS);
        assert_eq!(cc.cwnd(), 20 * SMSS);
        cc.on_recovery_end(Instant::ZERO);
        assert_eq!(cc.cwnd(), 15 * SMSS);
        assert_eq!(cc.on_loss(Instant::ZERO, SMSS), 2 * SMSS, "at least two segments");
    }

    #[test]
    fn timeout_sets_the_loss_window_and_reduces_ssthresh_once_per_series() {
        let mut cc = NewReno::new(SMSS);
        cc.on_rto(Instant::ZERO, 20 * SMSS);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (SMSS, 10 * SMSS));
        cc.on_rto(Instant::ZERO, SMSS);
        assert_eq!(cc.ssthresh(), 10 * SMSS, "the same segment timed out again");
        // Slow start after a timeout credits the whole ACK too, as Linux (not RFC 3465 2.3's
        // L = SMSS).
        cc.on_ack(&ack(3 * SMSS));
        assert_eq!(cc.cwnd(), 4 * SMSS);
        cc.on_rto(Instant::ZERO, 4 * SMSS);
        assert_eq!(cc.ssthresh(), 2 * SMSS, "delivery in between starts a new series");
    }

    #[test]
    fn a_needless_reduction_is_undone() {
        let mut cc = NewReno::new(SMSS);
        cc.set_cwnd(40 * SMSS);
        cc.on_rto(Instant::ZERO, 40 * SMSS);
        cc.on_spurious(Instant::ZERO);
        assert_eq!((cc.cwnd(), cc.ssthresh()), (40 * SMSS, u32::MAX));
    }

    #[test]
    fn idle_restart_caps_at_iw() {
        let mut cc = NewReno::new(SMSS);
        cc.set_cwnd(50 * SMSS);
        cc.on_idle_restart(Instant::ZERO);
        assert_eq!(cc.cwnd(), 10 * SMSS);
    }

    #[derive(Debug, Clone)]
    enum Event {
        Ack(u32, bool),
        Loss(u32),
        RecoveryEnd,
        Rto(u32),
        Idle,
        Spurious,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (0u32..100_000, any::<bool>()).prop_map(|(n, l)| Event::Ack(n, l)),
            (0u32..1_000_000).prop_map(Event::Loss),
            Just(Event::RecoveryEnd),
            (0u32..1_000_000).prop_map(Event::Rto),
            Just(Event::Idle),
            Just(Event::Spurious),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold(smss in 1u32..9000, events in proptest::collection::vec(event(), 0..200)) {
            let mut cc = NewReno::new(smss);
            let mut lost = false;
            for e in events {
                match e {
                    Event::Ack(n, app_limited) => cc.on_ack(&AckInfo { delivered: n, app_limited, ..ack(n) }),
                    Event::Loss(f) => { cc.on_loss(Instant::ZERO, f); lost = true; }
                    Event::RecoveryEnd => cc.on_recovery_end(Instant::ZERO),
                    Event::Rto(f) => { cc.on_rto(Instant::ZERO, f); lost = true; }
                    Event::Idle => cc.on_idle_restart(Instant::ZERO),
                    Event::Spurious => cc.on_spurious(Instant::ZERO),
                }
                prop_assert!(cc.cwnd() >= smss.min(cc.cwnd()).max(1));
                prop_assert!(cc.cwnd() >= 1);
                if lost && cc.ssthresh() != u32::MAX {
                    prop_assert!(cc.ssthresh() >= 2 * smss);
                }
            }
        }
    }
}

//! NewReno congestion control: RFC 5681 with the RFC 6582 fast-recovery
//! modification and RFC 3465 byte counting.
//!
//! [`NewReno`] only keeps the window arithmetic; the connection decides what
//! an ACK is (new, duplicate per RFC 5681 section 2, or neither), does the
//! sending and the timers, and acts on the returned [`AckOutcome`] and
//! [`DupAckOutcome`].
//!
//! Call order, per connection:
//!
//! 1. [`NewReno::new`] with the default SMSS, [`set_recover`](NewReno::set_recover)
//!    with the ISS (RFC 6582 section 3.2 step 1), and
//!    [`set_mss`](NewReno::set_mss) once the peer's MSS option is known
//!    (before the first [`on_ack`](NewReno::on_ack); the handshake's ACK of
//!    the SYN carries no data and need not be passed to `on_ack`).
//! 2. For every ACK that advances SND.UNA: [`on_ack`](NewReno::on_ack).
//!    For every duplicate ACK: [`on_dup_ack`](NewReno::on_dup_ack).
//! 3. When the retransmission timer expires for a data segment:
//!    [`on_timeout`](NewReno::on_timeout); for a SYN:
//!    [`on_syn_timeout`](NewReno::on_syn_timeout).
//! 4. Before sending after an idle period longer than the RTO:
//!    [`on_idle_restart`](NewReno::on_idle_restart).
//!
//! Window growth:
//! - Slow start (cwnd < ssthresh): cwnd += min(acked, L) with L = 2 * SMSS
//!   (RFC 3465 section 2.2), or L = SMSS in the slow start that follows a
//!   retransmission timeout (RFC 3465 section 2.3), where one ACK may cover
//!   data sent before the timeout.
//! - Congestion avoidance (cwnd >= ssthresh): byte counting, the way RFC 5681
//!   section 3.1 recommends (RFC 3465 section 2.1): acknowledged bytes
//!   accumulate in `bytes_acked`; when they reach cwnd, cwnd grows by one SMSS
//!   and `bytes_acked` drops by cwnd. This gives one SMSS per window of data,
//!   whatever the ACK pattern.

use crate::seq::SeqNum;

/// Duplicate ACKs that trigger fast retransmit (RFC 5681 section 3.2).
const DUP_ACK_THRESHOLD: u32 = 3;

/// What the connection must do after a cumulative ACK (RFC 6582 section 3.2 step 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Nothing beyond ordinary processing: send new data if the window allows.
    Normal,
    /// A partial ACK in fast recovery (the ACK does not cover `recover`):
    /// retransmit the first unacknowledged segment, and reset the
    /// retransmission timer at least on the first partial ACK (RFC 6582
    /// sections 3.2 and 4). Fast recovery continues.
    PartialAck,
    /// A full ACK covered `recover`: fast recovery is over and cwnd is deflated.
    RecoveryExited,
}

/// What the connection must do after a duplicate ACK (RFC 5681 section 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DupAckOutcome {
    /// No window change (the first or second duplicate, or a third one that
    /// RFC 6582 section 3.2 step 2 refuses because it does not cover
    /// `recover`). The caller may apply limited transmit (RFC 3042).
    None,
    /// The third duplicate ACK started fast recovery: retransmit the segment
    /// at SND.UNA (RFC 5681 section 3.2 steps 2 and 3).
    FastRetransmit,
    /// A further duplicate ACK in fast recovery inflated cwnd by SMSS: send
    /// new data if the window allows (RFC 5681 section 3.2 steps 4 and 5).
    WindowInflated,
}

/// NewReno congestion window state for one connection.
#[derive(Debug, Clone)]
pub struct NewReno {
    /// Sender maximum segment size.
    smss: u32,
    /// Congestion window, bytes.
    cwnd: u32,
    /// Slow start threshold, bytes.
    ssthresh: u32,
    /// RFC 6582 `recover`: the highest sequence number sent when the last
    /// loss episode began. `None` once a cumulative ACK has passed it outside
    /// fast recovery, so that it cannot go stale across the 2^31 wrap of
    /// sequence-space comparisons.
    recover: Option<SeqNum>,
    /// Whether fast recovery is in progress.
    in_recovery: bool,
    /// Consecutive duplicate ACKs.
    dup_acks: u32,
    /// Congestion-avoidance byte counter (RFC 3465 section 2.1).
    bytes_acked: u32,
    /// Whether any ACK of new data has been seen (freezes the IW for `set_mss`).
    acked_any: bool,
    /// Whether the SYN or SYN-ACK was retransmitted (RFC 5681 section 3.1: IW = 1 SMSS).
    syn_lost: bool,
    /// Whether the timer fired and no new data has been acknowledged since
    /// (RFC 5681 section 3.1: ssthresh is only reduced on the first timeout
    /// of a segment).
    timer_retransmitting: bool,
    /// Whether this slow start follows a timeout (RFC 3465 section 2.3: L = SMSS).
    slow_start_after_rto: bool,
}

/// Return the initial window for `smss`: min(4*SMSS, max(2*SMSS, 4380)) (RFC 5681 section 3.1, eq. 1).
fn initial_window(smss: u32) -> u32 {
    smss.saturating_mul(4).min(smss.saturating_mul(2).max(4380))
}

impl NewReno {
    /// Return a controller for a sender with maximum segment size `smss`:
    /// cwnd = IW (RFC 5681 section 3.1, eq. 1) and ssthresh "arbitrarily high" (`u32::MAX`).
    ///
    /// An `smss` of 0 is treated as 1.
    pub fn new(smss: u32) -> Self {
        let smss = smss.max(1);
        NewReno {
            smss,
            cwnd: initial_window(smss),
            ssthresh: u32::MAX,
            recover: None,
            in_recovery: false,
            dup_acks: 0,
            bytes_acked: 0,
            acked_any: false,
            syn_lost: false,
            timer_retransmitting: false,
            slow_start_after_rto: false,
        }
    }

    /// Set the sender maximum segment size after MSS negotiation (RFC 9293
    /// section 3.7.1); recompute the initial window if no data has been acknowledged yet.
    ///
    /// An `smss` of 0 is treated as 1.
    pub fn set_mss(&mut self, smss: u32) {
        self.smss = smss.max(1);
        if !self.acked_any {
            self.cwnd = if self.syn_lost { self.smss } else { initial_window(self.smss) };
        }
    }

    /// Initialise `recover` to the initial send sequence number (RFC 6582 section 3.2 step 1).
    pub fn set_recover(&mut self, seq: SeqNum) {
        self.recover = Some(seq);
    }

    /// Return the congestion window in bytes.
    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }

    /// Return the slow start threshold in bytes.
    pub fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    /// Return the sender maximum segment size in use.
    pub fn smss(&self) -> u32 {
        self.smss
    }

    /// Return whether fast recovery (RFC 6582 section 3.2) is in progress.
    pub fn in_recovery(&self) -> bool {
        self.in_recovery
    }

    /// Return the number of consecutive duplicate ACKs seen.
    pub fn dup_acks(&self) -> u32 {
        self.dup_acks
    }

    /// Return RFC 6582 `recover` (the highest sequence number sent when the
    /// last loss episode began), or `None` once every ACK covers it.
    pub fn recover(&self) -> Option<SeqNum> {
        self.recover
    }

    /// Process a cumulative ACK that advanced SND.UNA by `acked` bytes to
    /// `ack`; `flight_size` is the data outstanding before this ACK.
    ///
    /// Outside fast recovery, grow cwnd (RFC 5681 section 3.1, RFC 3465). In
    /// fast recovery (RFC 6582 section 3.2 step 3):
    /// - a full ACK (covering `recover`) sets cwnd to
    ///   min(ssthresh, max(FlightSize, SMSS) + SMSS), option (1), with
    ///   FlightSize the data still outstanding after this ACK, and ends recovery;
    /// - a partial ACK deflates cwnd by `acked` and adds back SMSS if
    ///   `acked >= SMSS`.
    ///
    /// Either way the duplicate ACK counter is reset. An `acked` of 0 changes nothing else.
    pub fn on_ack(&mut self, ack: SeqNum, acked: u32, flight_size: u32) -> AckOutcome {
        self.dup_acks = 0;
        if acked == 0 {
            return AckOutcome::Normal;
        }
        self.acked_any = true;
        self.timer_retransmitting = false;
        let covers_recover = self.recover.is_none_or(|recover| ack.after(recover));
        if self.in_recovery {
            if covers_recover {
                let flight_after = flight_size.saturating_sub(acked);
                self.cwnd = self.ssthresh.min(flight_after.max(self.smss).saturating_add(self.smss));
                self.in_recovery = false;
                self.bytes_acked = 0;
                return AckOutcome::RecoveryExited;
            }
            self.cwnd = self.cwnd.saturating_sub(acked);
            if acked >= self.smss {
                self.cwnd = self.cwnd.saturating_add(self.smss);
            }
            return AckOutcome::PartialAck;
        }
        if covers_recover {
            self.recover = None;
        }
        self.grow(acked);
        AckOutcome::Normal
    }

    /// Grow cwnd for `acked` newly acknowledged bytes outside fast recovery.
    fn grow(&mut self, acked: u32) {
        if self.cwnd < self.ssthresh {
            // Slow start, RFC 5681 section 3.1 eq. 2 with RFC 3465 byte counting.
            let limit = if self.slow_start_after_rto { self.smss } else { self.smss.saturating_mul(2) };
            self.cwnd = self.cwnd.saturating_add(acked.min(limit));
        } else {
            // Congestion avoidance, RFC 3465 section 2.1.
            self.slow_start_after_rto = false;
            self.bytes_acked = self.bytes_acked.saturating_add(acked);
            if self.bytes_acked >= self.cwnd {
                self.bytes_acked -= self.cwnd;
                self.cwnd = self.cwnd.saturating_add(self.smss);
            }
        }
    }

    /// Process a duplicate ACK (as RFC 5681 section 2 defines one); `snd_una`
    /// and `snd_nxt` are SND.UNA and SND.NXT now, `flight_size` the data outstanding.
    ///
    /// On the third duplicate, enter fast recovery only if the ACK covers more
    /// than `recover` (RFC 6582 section 3.2 step 2): set `recover` to the
    /// highest sequence number sent (SND.NXT - 1), ssthresh to
    /// max(FlightSize / 2, 2 * SMSS) (RFC 5681 eq. 4) and cwnd to
    /// ssthresh + 3 * SMSS. In fast recovery, inflate cwnd by SMSS per
    /// duplicate (RFC 5681 section 3.2 step 4).
    pub fn on_dup_ack(&mut self, snd_una: SeqNum, snd_nxt: SeqNum, flight_size: u32) -> DupAckOutcome {
        self.dup_acks = self.dup_acks.saturating_add(1);
        if self.in_recovery {
            self.cwnd = self.cwnd.saturating_add(self.smss);
            return DupAckOutcome::WindowInflated;
        }
        if self.dup_acks != DUP_ACK_THRESHOLD {
            return DupAckOutcome::None;
        }
        if !self.recover.is_none_or(|recover| snd_una.after(recover)) {
            // RFC 6582 section 3.2 step 2: no fast retransmit, ssthresh unchanged.
            return DupAckOutcome::None;
        }
        self.recover = Some(snd_nxt - 1u32);
        self.ssthresh = self.loss_ssthresh(flight_size);
        self.cwnd = self.ssthresh.saturating_add(self.smss.saturating_mul(3));
        self.in_recovery = true;
        self.bytes_acked = 0;
        self.slow_start_after_rto = false;
        DupAckOutcome::FastRetransmit
    }

    /// Return max(FlightSize / 2, 2 * SMSS) (RFC 5681 section 3.1, eq. 4).
    fn loss_ssthresh(&self, flight_size: u32) -> u32 {
        (flight_size / 2).max(self.smss.saturating_mul(2))
    }

    /// Process an expiry of the retransmission timer for a data segment;
    /// `snd_nxt` is SND.NXT and `flight_size` the data outstanding.
    ///
    /// Set ssthresh to max(FlightSize / 2, 2 * SMSS) (RFC 5681 eq. 4) unless
    /// the timer already fired with no new data acknowledged since (the
    /// segment "has already been resent by way of the retransmission timer",
    /// RFC 5681 section 3.1); set cwnd to the loss window LW = 1 SMSS; leave
    /// fast recovery and set `recover` to the highest sequence number sent,
    /// SND.NXT - 1 (RFC 6582 section 4).
    pub fn on_timeout(&mut self, snd_nxt: SeqNum, flight_size: u32) {
        if !self.timer_retransmitting {
            self.ssthresh = self.loss_ssthresh(flight_size);
        }
        self.cwnd = self.smss;
        self.recover = Some(snd_nxt - 1u32);
        self.in_recovery = false;
        self.dup_acks = 0;
        self.bytes_acked = 0;
        self.timer_retransmitting = true;
        self.slow_start_after_rto = true;
    }

    /// Process an expiry of the retransmission timer for a SYN or SYN-ACK:
    /// the window used once the connection is established is one SMSS
    /// (RFC 5681 section 3.1, last paragraph). ssthresh is unchanged.
    pub fn on_syn_timeout(&mut self) {
        self.syn_lost = true;
        if !self.acked_any {
            self.cwnd = self.smss;
        }
    }

    /// Shrink cwnd to the restart window RW = min(IW, cwnd) before sending
    /// after an idle period longer than the RTO (RFC 5681 section 4.1).
    pub fn on_idle_restart(&mut self) {
        self.cwnd = self.cwnd.min(initial_window(self.smss));
        self.bytes_acked = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SMSS: u32 = 1000;
    const ISS: SeqNum = SeqNum(u32::MAX - 5000);

    /// A controller past the handshake, with `recover` at the ISS.
    fn reno() -> NewReno {
        let mut cc = NewReno::new(SMSS);
        cc.set_recover(ISS);
        cc
    }

    /// Put `cc` in fast recovery: 3 dup ACKs at `una` with `flight` outstanding.
    fn enter_recovery(cc: &mut NewReno, una: SeqNum, flight: u32) {
        assert_eq!(cc.on_dup_ack(una, una + flight, flight), DupAckOutcome::None);
        assert_eq!(cc.on_dup_ack(una, una + flight, flight), DupAckOutcome::None);
        assert_eq!(cc.on_dup_ack(una, una + flight, flight), DupAckOutcome::FastRetransmit);
    }

    // ---- initial window, RFC 5681 section 3.1 ----

    #[test]
    fn initial_window_eq1() {
        for (smss, iw) in
            [(536, 2144), (1000, 4000), (1095, 4380), (1460, 4380), (2190, 4380), (4000, 8000), (9000, 18000)]
        {
            let cc = NewReno::new(smss);
            assert_eq!(cc.cwnd(), iw, "smss {smss}");
            assert_eq!(cc.ssthresh(), u32::MAX);
            assert!(!cc.in_recovery());
            assert_eq!(cc.dup_acks(), 0);
        }
        assert_eq!(NewReno::new(u32::MAX).cwnd(), u32::MAX, "saturates");
        assert_eq!(NewReno::new(0).smss(), 1);
    }

    #[test]
    fn set_mss_recomputes_iw_until_data_is_acked() {
        let mut cc = NewReno::new(536);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 4380);
        assert_eq!(cc.smss(), 1460);
        cc.on_ack(ISS + 1461u32, 1460, 1460);
        let cwnd = cc.cwnd();
        cc.set_mss(536);
        assert_eq!(cc.cwnd(), cwnd, "cwnd kept once data is acked");
        assert_eq!(cc.smss(), 536);
    }

    #[test]
    fn lost_syn_gives_one_segment_iw() {
        let mut cc = NewReno::new(536);
        cc.on_syn_timeout();
        assert_eq!(cc.cwnd(), 536);
        cc.set_mss(1460);
        assert_eq!(cc.cwnd(), 1460);
        assert_eq!(cc.ssthresh(), u32::MAX);
    }

    // ---- slow start and congestion avoidance ----

    #[test]
    fn slow_start_counts_bytes_up_to_two_smss() {
        let mut cc = reno();
        let iw = cc.cwnd();
        assert_eq!(cc.on_ack(ISS + 101u32, 100, 4000), AckOutcome::Normal);
        assert_eq!(cc.cwnd(), iw + 100, "a small ACK grows cwnd by what it acks");
        cc.on_ack(ISS + 5101u32, 5000, 4000);
        assert_eq!(cc.cwnd(), iw + 100 + 2 * SMSS, "a stretch ACK is capped at L = 2 SMSS");
    }

    #[test]
    fn congestion_avoidance_one_smss_per_window() {
        let mut cc = reno();
        cc.on_timeout(ISS + 20_001u32, 20_000); // ssthresh 10 000, cwnd 1 SMSS
        assert_eq!(cc.ssthresh(), 10_000);
        let mut una = ISS + 1u32;
        // Slow start to ssthresh.
        while cc.cwnd() < cc.ssthresh() {
            una += SMSS;
            cc.on_ack(una, SMSS, cc.cwnd());
        }
        assert_eq!(cc.cwnd(), 10_000);
        // Congestion avoidance: a full window of ACKs adds exactly one SMSS.
        for i in 0..10 {
            una += SMSS;
            cc.on_ack(una, SMSS, cc.cwnd());
            let want = if i < 9 { 10_000 } else { 11_000 };
            assert_eq!(cc.cwnd(), want, "ack {i}");
        }
        // Leftover bytes carry into the next window (RFC 3465 section 2.1).
        una += 11_500u32;
        cc.on_ack(una, 11_500, 11_000);
        assert_eq!(cc.cwnd(), 12_000);
        una += 11_500u32;
        cc.on_ack(una, 11_500, 12_000);
        assert_eq!(cc.cwnd(), 13_000, "500 + 11 500 >= 12 000");
    }

    #[test]
    fn slow_start_after_timeout_counts_one_smss() {
        let mut cc = reno();
        cc.on_timeout(ISS + 40_001u32, 40_000);
        assert_eq!(cc.cwnd(), SMSS);
        cc.on_ack(ISS + 10_001u32, 10_000, 40_000);
        assert_eq!(cc.cwnd(), 2 * SMSS, "L = 1 SMSS after an RTO");
        // Reaching congestion avoidance ends the restriction.
        while cc.cwnd() < cc.ssthresh() {
            cc.on_ack(ISS + 20_001u32, SMSS, cc.cwnd());
        }
        cc.on_ack(ISS + 45_001u32, 5000, 20_000);
        assert!(!cc.slow_start_after_rto);
    }

    #[test]
    fn ack_of_nothing_changes_nothing() {
        let mut cc = reno();
        cc.on_dup_ack(ISS + 1u32, ISS + 1001u32, 1000);
        let cwnd = cc.cwnd();
        assert_eq!(cc.on_ack(ISS + 1u32, 0, 1000), AckOutcome::Normal);
        assert_eq!(cc.cwnd(), cwnd);
        assert_eq!(cc.dup_acks(), 0);
        cc.set_mss(2000);
        assert_eq!(cc.cwnd(), 4380, "a zero-byte ACK does not freeze the IW");
    }

    // ---- fast retransmit and fast recovery, RFC 5681 3.2 / RFC 6582 3.2 ----

    #[test]
    fn third_dup_ack_enters_fast_recovery() {
        let mut cc = reno();
        let una = ISS + 1u32;
        enter_recovery(&mut cc, una, 20_000);
        assert!(cc.in_recovery());
        assert_eq!(cc.dup_acks(), 3);
        assert_eq!(cc.ssthresh(), 10_000, "FlightSize / 2");
        assert_eq!(cc.cwnd(), 13_000, "ssthresh + 3 SMSS");
        assert_eq!(cc.recover(), Some(una + 19_999u32), "highest sequence number sent");
        assert_eq!(cc.on_dup_ack(una, una + 20_000u32, 20_000), DupAckOutcome::WindowInflated);
        assert_eq!(cc.cwnd(), 14_000);
        assert_eq!(cc.dup_acks(), 4);
    }

    #[test]
    fn ssthresh_at_least_two_smss() {
        let mut cc = reno();
        enter_recovery(&mut cc, ISS + 1u32, 3000);
        assert_eq!(cc.ssthresh(), 2 * SMSS);
        assert_eq!(cc.cwnd(), 5 * SMSS);
    }

    #[test]
    fn new_ack_resets_the_dup_ack_count() {
        let mut cc = reno();
        let una = ISS + 1u32;
        let nxt = una + 10_000u32;
        cc.on_dup_ack(una, nxt, 10_000);
        cc.on_dup_ack(una, nxt, 10_000);
        cc.on_ack(una + 1000u32, 1000, 10_000);
        assert_eq!(cc.dup_acks(), 0);
        let una = una + 1000u32;
        assert_eq!(cc.on_dup_ack(una, nxt, 9000), DupAckOutcome::None);
        assert_eq!(cc.on_dup_ack(una, nxt, 9000), DupAckOutcome::None);
        assert!(!cc.in_recovery());
        assert_eq!(cc.on_dup_ack(una, nxt, 9000), DupAckOutcome::FastRetransmit);
        // Fourth and later duplicates outside recovery never re-enter.
    }

    #[test]
    fn partial_ack_deflates() {
        let mut cc = reno();
        let una = ISS + 1u32;
        enter_recovery(&mut cc, una, 20_000); // cwnd 13 000, recover una + 19 999
        cc.on_dup_ack(una, una + 20_000u32, 20_000); // 14 000
        // Acks 3 SMSS: deflate by 3000, add back SMSS.
        assert_eq!(cc.on_ack(una + 3000u32, 3000, 20_000), AckOutcome::PartialAck);
        assert_eq!(cc.cwnd(), 12_000);
        assert!(cc.in_recovery());
        assert_eq!(cc.dup_acks(), 0);
        // Acks less than SMSS: deflate only.
        assert_eq!(cc.on_ack(una + 3500u32, 500, 17_000), AckOutcome::PartialAck);
        assert_eq!(cc.cwnd(), 11_500);
        // Still in recovery: any duplicate inflates, no third-duplicate rule.
        assert_eq!(cc.on_dup_ack(una + 3500u32, una + 20_000u32, 16_500), DupAckOutcome::WindowInflated);
        assert_eq!(cc.cwnd(), 12_500);
        // An ACK exactly at recover is still partial (it does not cover recover).
        assert_eq!(cc.on_ack(una + 19_999u32, 16_499, 16_500), AckOutcome::PartialAck);
        assert_eq!(cc.cwnd(), SMSS, "deflation saturates at zero, then SMSS is added back");
    }

    #[test]
    fn full_ack_exits_with_option_one() {
        let mut cc = reno();
        let una = ISS + 1u32;
        enter_recovery(&mut cc, una, 20_000); // ssthresh 10 000
        // Everything through recover acked, 5000 new bytes still outstanding.
        let flight = 25_000;
        assert_eq!(cc.on_ack(una + 20_000u32, 20_000, flight), AckOutcome::RecoveryExited);
        assert!(!cc.in_recovery());
        assert_eq!(cc.cwnd(), 6000, "min(ssthresh, max(5000, SMSS) + SMSS)");
        // Growth resumes: slow start while cwnd < ssthresh.
        assert_eq!(cc.on_ack(una + 21_000u32, 1000, 5000), AckOutcome::Normal);
        assert_eq!(cc.cwnd(), 7000);
    }

    #[test]
    fn full_ack_with_little_outstanding_and_with_much() {
        let mut cc = reno();
        let una = ISS + 1u32;
        enter_recovery(&mut cc, una, 20_000);
        cc.on_ack(una + 20_000u32, 20_000, 20_000);
        assert_eq!(cc.cwnd(), 2 * SMSS, "max(0, SMSS) + SMSS");
        let mut cc = reno();
        enter_recovery(&mut cc, una, 20_000);
        cc.on_ack(una + 20_000u32, 20_000, 60_000);
        assert_eq!(cc.cwnd(), 10_000, "capped at ssthresh");
    }

    #[test]
    fn no_fast_retransmit_unless_ack_covers_recover() {
        let mut cc = NewReno::new(SMSS);
        cc.set_recover(ISS);
        // Duplicate ACKs of the ISS itself (nothing acknowledged past it) do not qualify.
        for _ in 0..3 {
            assert_eq!(cc.on_dup_ack(ISS, ISS + 1u32, 0), DupAckOutcome::None);
        }
        assert!(!cc.in_recovery());
        assert_eq!(cc.ssthresh(), u32::MAX);
    }

    #[test]
    fn dup_acks_after_timeout_do_not_trigger_fast_retransmit() {
        // RFC 6582 section 4: after an RTO, recover = SND.NXT - 1; duplicates
        // caused by go-back-N retransmissions must not halve ssthresh again.
        let mut cc = reno();
        let una = ISS + 1u32;
        let nxt = una + 20_000u32;
        cc.on_timeout(nxt, 20_000);
        assert_eq!(cc.recover(), Some(nxt - 1u32));
        let ssthresh = cc.ssthresh();
        cc.on_ack(una + 5000u32, 5000, 20_000);
        for _ in 0..5 {
            assert_eq!(cc.on_dup_ack(una + 5000u32, nxt, 15_000), DupAckOutcome::None);
        }
        assert_eq!(cc.ssthresh(), ssthresh);
        assert!(!cc.in_recovery());
        // Once an ACK covers recover, the next loss is handled by fast retransmit.
        cc.on_ack(nxt + 1000u32, 16_000, 16_000);
        assert_eq!(cc.recover(), None);
        let una = nxt + 1000u32;
        enter_recovery(&mut cc, una, 8000);
        assert_eq!(cc.recover(), Some(una + 7999u32));
    }

    #[test]
    fn fast_recovery_works_without_set_recover() {
        let mut cc = NewReno::new(SMSS);
        enter_recovery(&mut cc, SeqNum(0x9000_0000), 10_000);
        assert!(cc.in_recovery());
    }

    #[test]
    fn recover_does_not_go_stale_across_the_wrap() {
        let mut cc = reno();
        let mut una = ISS + 1u32;
        // Move 3 GiB without loss: more than 2^31 past ISS.
        for _ in 0..3 {
            una += 1u32 << 30;
            cc.on_ack(una, 1 << 30, 1 << 30);
        }
        assert!(!una.after(ISS), "the comparison with ISS has wrapped");
        enter_recovery(&mut cc, una, 50_000);
    }

    // ---- retransmission timeout, RFC 5681 section 3.1 eq. 4 ----

    #[test]
    fn timeout_sets_loss_window() {
        let mut cc = reno();
        let una = ISS + 1u32;
        cc.on_ack(una + 1000u32, 1000, 1000);
        cc.on_timeout(una + 30_000u32, 29_000);
        assert_eq!(cc.ssthresh(), 14_500);
        assert_eq!(cc.cwnd(), SMSS);
        assert_eq!(cc.dup_acks(), 0);
        // Repeated expiry for the same segment keeps ssthresh.
        cc.on_timeout(una + 30_000u32, 29_000);
        assert_eq!(cc.ssthresh(), 14_500);
        assert_eq!(cc.cwnd(), SMSS);
        // After new data is acknowledged, a new timeout recomputes it.
        cc.on_ack(una + 2000u32, 1000, 29_000);
        cc.on_timeout(una + 30_000u32, 6000);
        assert_eq!(cc.ssthresh(), 3000);
        let mut cc = reno();
        cc.on_timeout(una, 0);
        assert_eq!(cc.ssthresh(), 2 * SMSS, "at least 2 SMSS");
    }

    #[test]
    fn timeout_ends_fast_recovery() {
        let mut cc = reno();
        let una = ISS + 1u32;
        enter_recovery(&mut cc, una, 20_000);
        cc.on_timeout(una + 24_000u32, 20_000);
        assert!(!cc.in_recovery());
        assert_eq!(cc.cwnd(), SMSS);
        assert_eq!(cc.recover(), Some(una + 23_999u32));
        assert_eq!(cc.on_ack(una + 1000u32, 1000, 20_000), AckOutcome::Normal);
    }

    // ---- restart after idle, RFC 5681 section 4.1 ----

    #[test]
    fn idle_restart_caps_at_iw() {
        let mut cc = reno();
        let mut una = ISS + 1u32;
        for _ in 0..10 {
            una += 2000u32;
            cc.on_ack(una, 2000, cc.cwnd());
        }
        assert!(cc.cwnd() > 4000);
        let ssthresh = cc.ssthresh();
        cc.on_idle_restart();
        assert_eq!(cc.cwnd(), 4000);
        assert_eq!(cc.ssthresh(), ssthresh);
        cc.on_timeout(una + 1000u32, 1000);
        cc.on_idle_restart();
        assert_eq!(cc.cwnd(), SMSS, "RW = min(IW, cwnd)");
    }

    // ---- properties ----

    #[derive(Debug, Clone)]
    enum Event {
        Ack(u32),
        Dup,
        Timeout,
        Idle,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            4 => (1u32..20_000).prop_map(Event::Ack),
            3 => Just(Event::Dup),
            1 => Just(Event::Timeout),
            1 => Just(Event::Idle),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold(smss in 1u32..9000, iss: u32, events in proptest::collection::vec(event(), 0..200)) {
            let mut cc = NewReno::new(smss);
            let iss = SeqNum(iss);
            cc.set_recover(iss);
            let mut una = iss + 1u32;
            let mut nxt = una;
            for ev in events {
                // Keep a window's worth of data in flight.
                let target = cc.cwnd().min(1 << 24);
                if nxt - una < target {
                    nxt = una + target;
                }
                let flight = nxt - una;
                match ev {
                    Event::Ack(n) => {
                        let n = n.min(flight);
                        let was = cc.in_recovery();
                        let out = cc.on_ack(una + n, n, flight);
                        if n > 0 {
                            una += n;
                            prop_assert_eq!(out == AckOutcome::Normal, !was);
                        }
                        prop_assert_eq!(cc.dup_acks(), 0);
                    }
                    Event::Dup => {
                        let was = cc.in_recovery();
                        let out = cc.on_dup_ack(una, nxt, flight);
                        if was {
                            prop_assert_eq!(out, DupAckOutcome::WindowInflated);
                        }
                        if out == DupAckOutcome::FastRetransmit {
                            prop_assert_eq!(cc.dup_acks(), DUP_ACK_THRESHOLD);
                            prop_assert_eq!(cc.recover(), Some(nxt - 1u32));
                            prop_assert_eq!(cc.cwnd(), cc.ssthresh() + 3 * smss);
                        }
                    }
                    Event::Timeout => {
                        cc.on_timeout(nxt, flight);
                        prop_assert_eq!(cc.cwnd(), smss);
                        prop_assert!(!cc.in_recovery());
                    }
                    Event::Idle => {
                        let before = cc.cwnd();
                        cc.on_idle_restart();
                        prop_assert!(cc.cwnd() <= before);
                    }
                }
                prop_assert!(cc.ssthresh() >= 2 * smss);
                prop_assert!(!cc.in_recovery() || cc.recover().is_some());
            }
        }
    }
}

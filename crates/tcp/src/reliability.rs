//! Reliability: the round-trip estimate, loss recovery with its congestion controller,
//! and the counts that decide when a silent peer is given up (RFC 6298, RFC 8985, RFC
//! 6675, RFC 5681, RFC 9293 3.8.3).

use std::time::Duration;

use crate::config::Config;
use crate::congestion::CongestionControl;
use crate::controller::Controller;
use crate::pacing::{self, Pacer};
use crate::recovery::Recovery;
use crate::rtt::RttEstimator;
use crate::seq::SeqNum;
use crate::time::Instant;

/// The reliability state of a connection.
///
/// The estimator, the congestion controller, loss recovery and the pacer are parts with
/// methods of their own; the counts that decide when to give up, and the RTT timing, are
/// kept behind the methods below.
///
/// Laid out in declaration order (`repr(C)`): the pacer, which only a paced connection
/// touches, then loss recovery (whose fields every ACK reads come last in it), so that both
/// join the receive space's reassembly ranges in the connection's cold lines; the
/// estimator and the counts; then the congestion controller, whose CUBIC state NewReno
/// leaves unused at the end (see `Connection`'s layout).
#[repr(C)]
pub(crate) struct Reliability {
    pub pacer: Pacer,
    /// Loss detection and recovery (RACK-TLP, duplicate ACKs, PRR).
    pub recovery: Recovery,
    pub rtt: RttEstimator,
    /// The segment being timed: (sequence number whose ACK ends it, send time). Karn's rule
    /// clears it on any retransmission (RFC 6298 section 3).
    rtt_probe: Option<(SeqNum, Instant)>,
    /// When the oldest unacknowledged octet was first sent (user timeout, RFC 5482).
    unacked_since: Option<Instant>,
    /// The RTT sample the ACK being processed gave (the timed segment's, else the timestamp
    /// echo), for the controller where the scoreboard gives none; in microseconds (see
    /// `sample_rtt`).
    last_rtt_sample_us: Option<u64>,
    /// When the last acceptable ACK arrived (or the connection was synchronized).
    last_ack_at: Instant,
    /// Consecutive retransmission timeouts without progress.
    rto_count: u32,
    /// Backoff exponent of the persist timer.
    persist_backoff: u32,
    /// Zero-window probes sent since the last acceptable ACK.
    probes_unanswered: u32,
    /// Keep-alive probes sent without an answer.
    keepalive_sent: u32,
    pub cc: CongestionControl,
}

/// Every field but the buffer's bytes (its length and capacity instead), for the tests
/// that compare two connections' states.
#[cfg(test)]
impl std::fmt::Debug for Reliability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reliability")
            .field("pacer", &self.pacer)
            .field("recovery", &self.recovery)
            .field("rtt", &self.rtt)
            .field("rtt_probe", &self.rtt_probe)
            .field("unacked_since", &self.unacked_since)
            .field("last_rtt_sample_us", &self.last_rtt_sample_us)
            .field("last_ack_at", &self.last_ack_at)
            .field("rto_count", &self.rto_count)
            .field("persist_backoff", &self.persist_backoff)
            .field("probes_unanswered", &self.probes_unanswered)
            .field("keepalive_sent", &self.keepalive_sent)
            .field("cc", &self.cc)
            .finish()
    }
}

impl Reliability {
    pub(crate) fn new(config: &Config, mss: u16) -> Self {
        Reliability {
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            rtt_probe: None,
            cc: CongestionControl::new(config.congestion, u32::from(mss)),
            recovery: Recovery::default(),
            last_rtt_sample_us: None,
            rto_count: 0,
            unacked_since: None,
            last_ack_at: Instant::ZERO,
            persist_backoff: 0,
            probes_unanswered: 0,
            keepalive_sent: 0,
            pacer: Pacer::default(),
        }
    }

    /// Time the segment ending at `end`, sent at `now`, unless one is being timed (one
    /// sample per flight, RFC 7323 Appendix G).
    pub(crate) fn time_segment(&mut self, end: SeqNum, now: Instant) {
        if self.rtt_probe.is_none() {
            self.rtt_probe = Some((end, now));
        }
    }

    /// Time our SYN (or SYN-ACK), whose ACK is `end`, sent at `now`.
    pub(crate) fn time_syn(&mut self, end: SeqNum, now: Instant) {
        self.rtt_probe = Some((end, now));
    }

    /// Stop timing: a retransmission went out (Karn's rule, RFC 6298 section 3).
    pub(crate) fn stop_timing(&mut self) {
        self.rtt_probe = None;
    }

    /// Take the RTT sample the ACK being processed gave, for the controller.
    pub(crate) fn take_rtt_sample(&mut self) -> Option<Duration> {
        self.last_rtt_sample_us.take().map(Duration::from_micros)
    }

    /// Return the retransmission timeouts in a row without progress.
    pub(crate) fn rto_count(&self) -> u32 {
        self.rto_count
    }

    /// Count a retransmission timeout.
    pub(crate) fn count_rto(&mut self) {
        self.rto_count += 1;
    }

    /// The peer made progress (or said it is alive): the timeouts in a row start again.
    pub(crate) fn reset_rto_count(&mut self) {
        self.rto_count = 0;
    }

    /// Return since when the oldest unacknowledged octet has waited, if any.
    pub(crate) fn unacked_since(&self) -> Option<Instant> {
        self.unacked_since
    }

    /// Note since when the oldest unacknowledged octet has waited (`None`: nothing waits).
    pub(crate) fn set_unacked_since(&mut self, since: Option<Instant>) {
        self.unacked_since = since;
    }

    /// Note that an acceptable ACK arrived at `now` (or the connection was synchronized).
    pub(crate) fn note_ack(&mut self, now: Instant) {
        self.last_ack_at = now;
    }

    /// Return when the last acceptable ACK arrived.
    pub(crate) fn last_ack_at(&self) -> Instant {
        self.last_ack_at
    }

    /// Return the persist timer's interval: the RTO, doubled per unanswered probe up to
    /// 2^10 times, and at most `max_rto` (RFC 9293 3.8.6.1).
    pub(crate) fn persist_interval(&self, max_rto: Duration) -> Duration {
        self.rtt.rto().saturating_mul(1 << self.persist_backoff.min(10)).min(max_rto)
    }

    /// The window opened: the persist timer's backoff starts again.
    pub(crate) fn reset_persist_backoff(&mut self) {
        self.persist_backoff = 0;
    }

    /// Return the zero-window probes sent since the last acceptable ACK.
    pub(crate) fn probes_unanswered(&self) -> u32 {
        self.probes_unanswered
    }

    /// Count a zero-window probe: it backs the persist timer off.
    pub(crate) fn count_window_probe(&mut self) {
        self.probes_unanswered += 1;
        self.persist_backoff = self.persist_backoff.saturating_add(1);
    }

    /// An acceptable ACK answered the probes.
    pub(crate) fn reset_window_probes(&mut self) {
        self.probes_unanswered = 0;
    }

    /// Return the keep-alive probes sent without an answer.
    pub(crate) fn keepalives_sent(&self) -> u32 {
        self.keepalive_sent
    }

    /// Count a keep-alive probe.
    pub(crate) fn count_keepalive(&mut self) {
        self.keepalive_sent += 1;
    }

    /// The peer answered: the keep-alive probes start again.
    pub(crate) fn reset_keepalives(&mut self) {
        self.keepalive_sent = 0;
    }

    /// Take the RTT sample an ACK of `ack` gives, with SND.UNA at `una` before it (RFC 6298
    /// 2-3, Karn's rule): the timed segment's age by the host's clock once its ACK comes.
    /// One sample per timed flight feeds the RFC 6298 estimator, so that its gains keep
    /// their meaning (RFC 7323 Appendix G) and the RTO behaves as before.
    ///
    /// The sample is the age by the host's clock (microseconds): our timestamps tick in
    /// milliseconds, too coarse for a LAN, where a millisecond clock reads every round trip
    /// as 0 and RACK's reordering window with it (Linux likewise prefers its own send
    /// times, `tcp_ack_update_rtt`). The timestamp echo `echo` (RTTM, RFC 7323 4.1) times
    /// what Karn's rule cannot: the ACK of a retransmission after a timeout, whose echo
    /// says which transmission it answers.
    ///
    /// For the congestion controller and RACK's minimum, the connection takes a sample on
    /// every ACK that advances SND.UNA (`Recovery::on_ack`, from the scoreboard's send
    /// times, [`Delivery::rtt_sample`](crate::sent::Delivery::rtt_sample)), this one
    /// ([`take_rtt_sample`](Self::take_rtt_sample)) standing in where Karn's rule leaves
    /// that ACK without one. The echo stands in only after a timeout, as before: a
    /// millisecond echo on every ACK that covers a retransmission would read a LAN's round
    /// trip as 0 and take RACK's minimum, and its reordering window, with it.
    ///
    /// The timed flight's sample is taken in microseconds, as the two `Instant`s give it,
    /// and made a `Duration` only if the ACK path asks for it: the estimator counts in
    /// microseconds too.
    pub(crate) fn sample_rtt(&mut self, now: Instant, ack: SeqNum, una: SeqNum, echo: Option<Duration>) {
        let sample_us = match self.rtt_probe {
            Some((end, sent)) if ack.after_eq(end) => {
                self.rtt_probe = None;
                Some(now.as_micros().saturating_sub(sent.as_micros()))
            }
            // A whole number of milliseconds: exact in microseconds, and back.
            None if self.rto_count > 0 && ack.after(una) => {
                echo.map(|echo| u64::try_from(echo.as_micros()).unwrap_or(u64::MAX))
            }
            _ => None,
        };
        if let Some(sample_us) = sample_us {
            self.rtt.sample_us(sample_us);
        }
        self.last_rtt_sample_us = sample_us;
    }

    /// Return the rate the pacer sends at, bytes per second: `None` without an RTT estimate
    /// and in slow start, which go unpaced (see [`pacing`]).
    pub(crate) fn pacing_rate(&self) -> Option<u64> {
        let srtt = self.rtt.srtt()?;
        (self.cc.cwnd() >= self.cc.ssthresh()).then(|| pacing::rate(self.cc.cwnd(), srtt))
    }

    /// Return when the pacer lets `len` bytes of data out (see [`pacing`]): `now` without
    /// an RTT estimate yet, and in slow start.
    pub(crate) fn pace(&mut self, now: Instant, len: u32, mss: u32) -> Instant {
        // Slow start goes unpaced: see the module docs of `pacing`.
        let Some(rate) = self.pacing_rate() else { return now };
        self.pacer.when(now, len, rate, mss)
    }

    /// Return whether retransmissions have run out: `limit` timeouts in a row, or nothing
    /// acknowledged for the user timeout (RFC 9293 3.8.3 R2, RFC 5482).
    pub(crate) fn exhausted(&self, now: Instant, limit: u32, user_timeout: Option<Duration>) -> bool {
        let waited = match (user_timeout, self.unacked_since) {
            (Some(limit), Some(since)) => now.saturating_duration_since(since) >= limit,
            _ => false,
        };
        self.rto_count >= limit || waited
    }
}

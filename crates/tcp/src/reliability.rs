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
pub(crate) struct Reliability {
    pub rtt: RttEstimator,
    /// The segment being timed: (sequence number whose ACK ends it, send time). Karn's rule
    /// clears it on any retransmission (RFC 6298 section 3).
    pub rtt_probe: Option<(SeqNum, Instant)>,
    pub cc: CongestionControl,
    /// Loss detection and recovery (RACK-TLP, duplicate ACKs, PRR).
    pub recovery: Recovery,
    /// The RTT sample the ACK being processed gave, for the controller.
    pub last_rtt_sample: Option<Duration>,
    /// Consecutive retransmission timeouts without progress.
    pub rto_count: u32,
    /// When the oldest unacknowledged octet was first sent (user timeout, RFC 5482).
    pub unacked_since: Option<Instant>,
    /// When the last acceptable ACK arrived (or the connection was synchronized).
    pub last_ack_at: Instant,
    /// Backoff exponent of the persist timer.
    pub persist_backoff: u32,
    /// Zero-window probes sent since the last acceptable ACK.
    pub probes_unanswered: u32,
    /// Keep-alive probes sent without an answer.
    pub keepalive_sent: u32,
    pub pacer: Pacer,
}

impl Reliability {
    pub(crate) fn new(config: &Config, mss: u16) -> Self {
        Reliability {
            rtt: RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto),
            rtt_probe: None,
            cc: CongestionControl::new(config.congestion, u32::from(mss)),
            recovery: Recovery::default(),
            last_rtt_sample: None,
            rto_count: 0,
            unacked_since: None,
            last_ack_at: Instant::ZERO,
            persist_backoff: 0,
            probes_unanswered: 0,
            keepalive_sent: 0,
            pacer: Pacer::default(),
        }
    }

    /// Take the RTT sample an ACK of `ack` gives, with SND.UNA at `una` before it (RFC 6298
    /// 2-3, Karn's rule): the timed segment's age by the host's clock once its ACK comes.
    /// One sample per timed flight, so that RFC 6298's gains keep their meaning (RFC 7323
    /// Appendix G).
    ///
    /// The sample is the age by the host's clock (microseconds): our timestamps tick in
    /// milliseconds, too coarse for a LAN, where a millisecond clock reads every round trip
    /// as 0 and RACK's reordering window with it (Linux likewise prefers its own send
    /// times, `tcp_ack_update_rtt`). The timestamp echo `echo` (RTTM, RFC 7323 4.1) times
    /// what Karn's rule cannot: the ACK of a retransmission after a timeout, whose echo
    /// says which transmission it answers.
    pub(crate) fn sample_rtt(&mut self, now: Instant, ack: SeqNum, una: SeqNum, echo: Option<Duration>) {
        let sample = match self.rtt_probe {
            Some((end, sent)) if ack.after_eq(end) => {
                self.rtt_probe = None;
                Some(now.saturating_duration_since(sent))
            }
            None if self.rto_count > 0 && ack.after(una) => echo,
            _ => None,
        };
        if let Some(sample) = sample {
            self.rtt.sample(sample);
            self.last_rtt_sample = Some(sample);
        }
    }

    /// Return when the pacer lets `len` bytes of data out (see [`pacing`]): `now` without
    /// an RTT estimate yet, and in slow start.
    pub(crate) fn pace(&mut self, now: Instant, len: u32, mss: u32) -> Instant {
        let Some(srtt) = self.rtt.srtt() else { return now };
        // Slow start goes unpaced: see the module docs of `pacing`.
        if self.cc.cwnd() < self.cc.ssthresh() {
            return now;
        }
        let rate = pacing::rate(self.cc.cwnd(), srtt);
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

//! Congestion controllers: how much data may be in flight, and how that changes as data is
//! delivered, lost, or not sent at all.
//!
//! A controller only answers; it neither detects loss nor chooses what to resend. Loss
//! detection and recovery (which segments are lost, what to retransmit, and the
//! proportional rate reduction that walks cwnd down during a recovery, RFC 6937) live in
//! `recovery.rs` and call the controller at these points:
//!
//! 1. [`Controller::set_mss`] once the peer's MSS is known, before any data is acknowledged.
//! 2. [`Controller::on_ack`] for every ACK that delivers data (cumulatively or by SACK)
//!    outside a recovery: slow start and congestion avoidance grow cwnd here.
//! 3. [`Controller::on_loss`] when a recovery begins (loss detected by SACK, RACK or
//!    duplicate ACKs): the controller returns the new ssthresh (its multiplicative
//!    decrease); the recovery then sets cwnd through [`Controller::set_cwnd`] on every ACK
//!    until [`Controller::on_recovery_end`], where cwnd becomes ssthresh.
//! 4. [`Controller::on_rto`] when the retransmission timer expires for data, and
//!    [`Controller::on_syn_timeout`] when it expires for a SYN.
//! 5. [`Controller::on_idle_restart`] before sending after an idle period longer than the
//!    RTO (RFC 5681 section 4.1, RFC 7661).
//! 6. [`Controller::on_spurious`] when a recovery or timeout turns out to have been
//!    needless (a D-SACK, RFC 2883, or the timestamps of RFC 7323 show the original arrived):
//!    the controller restores what it had before.
//! 7. [`Controller::on_mss_change`] when the path MTU changes the segment size of an open
//!    connection (a Packet Too Big, RFC 1191, RFC 8201; or the host's estimate): no
//!    congestion signal, so cwnd and ssthresh keep their bytes.
//!
//! Which controller a connection uses is [`Algorithm`], chosen in `Config`.

use std::time::Duration;

use crate::time::Instant;

/// The congestion control algorithms on offer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// NewReno: RFC 5681 slow start and congestion avoidance, halving on loss.
    NewReno,
    /// CUBIC (RFC 9438) with HyStart++ (RFC 9406): Linux's default.
    #[default]
    Cubic,
}

/// What a controller is told about one ACK that delivered data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckInfo {
    /// When the ACK arrived.
    pub now: Instant,
    /// Bytes newly delivered by this ACK: the cumulative advance plus bytes newly SACKed.
    pub delivered: u32,
    /// Bytes in flight before this ACK.
    pub in_flight: u32,
    /// The RTT sample this ACK gave, if any: one per ACK that advances SND.UNA, the age of
    /// the newest segment it newly acknowledges, none if it covers a retransmission (Karn,
    /// RFC 6298 section 3), else after a timeout the timestamp echo (RFC 7323 4.1); as Linux passes
    /// `ca_rtt_us` to its congestion control (`tcp_clean_rtx_queue`). HyStart++ needs
    /// several a round (RFC 9406 4.2).
    pub rtt: Option<Duration>,
    /// The smallest RTT seen on the connection, if any.
    pub min_rtt: Option<Duration>,
    /// Whether the sender was limited by the application rather than by cwnd when it sent
    /// what this ACK acknowledges: cwnd must then not grow (RFC 7661).
    pub app_limited: bool,
}

/// The interface every congestion controller implements (see the module docs for when each
/// call comes).
pub(crate) trait Controller {
    /// Return the congestion window in bytes.
    fn cwnd(&self) -> u32;

    /// Return the slow-start threshold in bytes (`u32::MAX` until the first loss).
    fn ssthresh(&self) -> u32;

    /// Set the sender maximum segment size (payload of a full segment). Before any data is
    /// acknowledged this also recomputes the initial window (RFC 6928: min(10*MSS,
    /// max(2*MSS, 14600))).
    fn set_mss(&mut self, smss: u32);

    /// Grow cwnd for data delivered outside a recovery.
    fn on_ack(&mut self, ack: &AckInfo);

    /// A recovery begins at `now` with `in_flight` bytes outstanding: reduce ssthresh and
    /// return it. cwnd is left to the recovery (PRR) from here.
    fn on_loss(&mut self, now: Instant, in_flight: u32) -> u32;

    /// Set cwnd during a recovery (PRR's pipe + sndcnt).
    fn set_cwnd(&mut self, cwnd: u32);

    /// The recovery is over: cwnd = ssthresh, and growth starts again from there.
    fn on_recovery_end(&mut self, now: Instant);

    /// The retransmission timer expired for data with `in_flight` bytes outstanding: reduce
    /// ssthresh (only on the first expiry of a series, RFC 5681 section 3.1) and set cwnd to
    /// the loss window of one segment.
    fn on_rto(&mut self, now: Instant, in_flight: u32);

    /// The retransmission timer expired for a SYN: the initial window becomes one segment
    /// (RFC 5681 section 3.1).
    fn on_syn_timeout(&mut self);

    /// Sending resumes after an idle period longer than the RTO: cwnd = min(cwnd, initial
    /// window) (RFC 5681 section 4.1; RFC 7661 for the rate-based view).
    fn on_idle_restart(&mut self, now: Instant);

    /// The last reduction (recovery or timeout) was needless: restore cwnd and ssthresh as
    /// they were before it.
    fn on_spurious(&mut self, now: Instant);

    /// The sender's segment size became `smss` mid-connection (the path MTU changed): grow
    /// in units of it from now on, and keep cwnd and ssthresh in bytes, the data the network
    /// holds (RFC 1191 section 6.4: a Packet Too Big "should not change the congestion
    /// window"; the initial window is not recomputed either), held to at least one and two
    /// segments of the new size.
    fn on_mss_change(&mut self, smss: u32);
}

/// Return the initial window for `smss`: min(10*SMSS, max(2*SMSS, 14600)) (RFC 6928
/// section 2), or one segment after a lost SYN.
pub(crate) fn initial_window(smss: u32, syn_lost: bool) -> u32 {
    if syn_lost { smss } else { smss.saturating_mul(10).min(smss.saturating_mul(2).max(14_600)) }
}

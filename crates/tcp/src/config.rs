//! Per-connection settings, with defaults that follow the RFCs and Linux practice.

use std::time::Duration;

use crate::ecn::Ecn;
use crate::rtt;
use crate::wire::Checksum;

/// Keep-alive settings (RFC 9293 section 3.8.4). Off unless set in [`Config::keepalive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Keepalive {
    /// Idle time before the first probe (RFC 9293: no less than two hours by default).
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection is aborted.
    pub probes: u32,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive { idle: Duration::from_secs(7200), interval: Duration::from_secs(75), probes: 9 }
    }
}

/// Settings for one connection. Cheap to clone; a listener hands a copy to each child.
///
/// Laid out in declaration order (`repr(C)`): the settings read only when a connection
/// opens, times out or closes first, those read for every segment (the delayed-ACK and
/// user timeouts, keep-alive, the buffers' limits, Nagle, pacing, the checksum) after
/// them, together (with the MSS and, at the end, two settings read at the opening: they
/// fill the last word), because each connection holds a copy among its hot state (see
/// [`Connection`](crate::Connection)'s layout).
#[derive(Clone, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Config {
    /// Override timeout of sender-side SWS avoidance (RFC 9293 3.8.6.2.1, RFC 1122 4.2.3.4:
    /// 0.1 to 1 s): how long queued data waits, with nothing in flight, for a window that is
    /// open but too small to use (under a full segment and under half the largest window the
    /// peer has offered) before what fits is sent anyway.
    ///
    /// 200 ms by default, near the low end of the range: as long as a receiver may hold back
    /// the delayed ACK that would carry a window update (we cap ours at 200 ms, Linux at
    /// TCP_DELACK_MAX, 200 ms), so an update on its way normally arrives first; and as long as
    /// Linux waits in the same case (its sender keeps a segment that does not fit the window
    /// for the probe timer, at least TCP_RTO_MIN, 200 ms). Far below the 1 s RTO that the
    /// override used to share with the zero-window persist timer, which keeps the RTO with
    /// backoff (RFC 9293 3.8.6.1); this one has no backoff.
    pub sws_override: Duration,
    /// RTO before the first RTT sample (RFC 6298 2.1: 1 s by default).
    pub initial_rto: Duration,
    /// Lower bound on the RTO (RFC 6298 2.4). 200 ms by default, as Linux's `TCP_RTO_MIN`,
    /// below RFC 6298's 1 s: `rtt.rs` defines the default and says why. Set it to 1 s for
    /// RFC 6298 exactly.
    pub min_rto: Duration,
    /// Upper bound on the RTO (RFC 6298 2.5: at least 60 s; 120 s by default, as Linux's
    /// `TCP_RTO_MAX`).
    pub max_rto: Duration,
    /// Maximum segment lifetime; TIME-WAIT lasts twice this (RFC 9293 3.4.2).
    pub msl: Duration,
    /// How long a released connection (see [`Connection::release`](crate::Connection::release))
    /// waits in FIN-WAIT-2 for the peer's FIN before it is removed; `None` waits for ever.
    ///
    /// RFC 9293 sets no limit: FIN-WAIT-2 ends when the peer closes. A peer that vanishes
    /// after acknowledging our FIN would then hold the connection for ever, with nobody left
    /// to notice. 60 s by default, as Linux's `net.ipv4.tcp_fin_timeout`; like Linux, only a
    /// connection the application has let go of is timed out (one that only half-closed may
    /// still be read from, and its owner decides).
    pub fin_wait2_timeout: Option<Duration>,
    /// At most one ACK per this interval answers segments that are not acceptable: out of
    /// the window (RFC 9293 3.10.7.4), failing PAWS (RFC 7323 5.3) or drawing an RFC 5961
    /// challenge ACK, so that two endpoints that disagree cannot feed an ACK loop and junk
    /// cannot draw an ACK storm. Segments carrying data or FIN (without SYN) are answered
    /// every time: they are not part of an ACK loop, and a retransmission needs its ACK.
    /// 500 ms by default, as Linux's `net.ipv4.tcp_invalid_ratelimit`
    /// (`tcp_oow_rate_limited`, net/ipv4/tcp_input.c); zero answers every one.
    pub invalid_ack_interval: Duration,
    /// Bytes the application may queue for sending (sent-but-unacknowledged included), to
    /// begin with: autotuning grows it up to [`send_buffer_max`](Config::send_buffer_max).
    pub send_buffer: usize,
    /// Bytes of received data held for the application, to begin with; bounds the advertised
    /// window and the memory kept for out-of-order segments. Autotuning grows it up to
    /// [`recv_buffer_max`](Config::recv_buffer_max).
    pub recv_buffer: usize,
    /// Secret key for initial sequence numbers (RFC 6528). Fill it from a random source.
    pub isn_secret: [u8; 16],
    /// Retransmissions of a SYN before the open fails (RFC 9293 3.8.3, R2 for SYN).
    pub syn_retries: u32,
    /// Retransmissions of the same data before the connection is aborted (RFC 9293 3.8.3,
    /// R2). 15 by default, as Linux's `net.ipv4.tcp_retries2`: from a 200 ms RTO, doubling
    /// up to `max_rto`, a silent peer is given up after about 924 s (Linux's
    /// `tcp_model_timeout` gives the same 924.6 s), so an outage of a few minutes does not
    /// kill a connection.
    pub max_retransmissions: u32,
    /// Most challenge ACKs sent per second (RFC 5961 section 7).
    pub challenge_ack_limit: u32,
    /// Offer window scaling (RFC 7323 section 2). Needed for windows above 64 KiB.
    pub window_scaling: bool,
    /// Offer SACK-permitted and report out-of-order data in SACK blocks (RFC 2018).
    pub sack: bool,
    /// Offer the timestamps option (RFC 7323 section 3): round-trip samples from every
    /// acknowledgment (RTTM, section 4) and protection against wrapped sequence numbers
    /// (PAWS, section 5), at 12 bytes of every segment. On by default, as in Linux.
    pub timestamps: bool,
    /// The congestion controller ([`Algorithm`](crate::Algorithm)).
    pub congestion: crate::Algorithm,
    /// Delay for delayed ACKs (RFC 9293 3.8.6.3, RFC 5681 4.2: at most 500 ms; we cap at 200 ms).
    /// `None` acknowledges every segment at once.
    pub delayed_ack: Option<Duration>,
    /// Abort when sent data stays unacknowledged this long (RFC 9293 3.10.8, RFC 5482). Off
    /// by default, as Linux's `TCP_USER_TIMEOUT`: `max_retransmissions` bounds the wait.
    pub user_timeout: Option<Duration>,
    /// Keep-alive probing; `None` (the default) is off.
    pub keepalive: Option<Keepalive>,
    /// Most bytes send-buffer autotuning may grow the send buffer to (Linux's `tcp_wmem[2]`);
    /// it grows to twice the congestion window while the application keeps it full.
    pub send_buffer_max: usize,
    /// Most bytes receive-buffer autotuning may grow the receive buffer to (Linux's
    /// `tcp_rmem[2]`); equal to `recv_buffer`, it stays fixed. The window scale we offer is
    /// chosen for this size.
    ///
    /// 16 MiB by default, above Linux's 6 MiB, so that one connection can fill 1 Gbit/s over
    /// 100 ms (a 12.5 MB bandwidth-delay product); a host bounds the sum over its
    /// connections (`StackConfig::buffer_memory` in bypass-stack).
    pub recv_buffer_max: usize,
    /// The MSS we advertise: the largest segment payload we accept (RFC 9293 3.7.1, RFC 6691).
    pub mss: u16,
    /// Nagle's algorithm (RFC 9293 3.7.4); `false` is TCP_NODELAY.
    pub nagle: bool,
    /// Pace data segments at `ratio x cwnd / SRTT` instead of sending a window's worth back to
    /// back (Linux's `tcp_update_pacing_rate`; ratio 2 in slow start, 1.2 after), in bursts
    /// of at most a millisecond of that rate or two segments. Pure ACKs, SYNs, probes and
    /// resets are never held. docs/tcp.md ("Pacing") has what it measures.
    pub pacing: bool,
    /// What goes in the checksum field of the segments sent: the checksum
    /// ([`Checksum::Full`], the default), or only the pseudo-header sum when the device
    /// completes it as it sends ([`Checksum::PseudoHeader`]: TX checksum offload). A host
    /// sets it from its device's capabilities.
    pub tx_checksum: Checksum,
    /// Ignore RST in TIME-WAIT (RFC 1337 section 3, "TIME-WAIT assassination"): the wait then
    /// runs its full 2 MSL whatever arrives. `false` (the default) follows RFC 9293 3.10.7.4,
    /// which closes on an acceptable RST, as Linux does unless `net.ipv4.tcp_rfc1337` is set.
    pub rfc1337: bool,
    /// Explicit Congestion Notification (RFC 3168): [`Ecn::Accept`] by default, as Linux's
    /// `net.ipv4.tcp_ecn=2` (accept when the peer's SYN asks, do not ask);
    /// [`Ecn::Request`] asks as well (`tcp_ecn=1`).
    pub ecn: Ecn,
}

impl Config {
    /// Return the window a SYN or SYN-ACK advertises (unscaled, RFC 7323 2.2): ten segments,
    /// within the receive buffer and 16 bits.
    pub fn initial_recv_window(&self) -> u32 {
        crate::recv_space::initial_recv_window(self)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mss: 1460,
            send_buffer: 256 * 1024,
            recv_buffer: 256 * 1024,
            recv_buffer_max: 16 << 20,
            send_buffer_max: 16 << 20,
            window_scaling: true,
            sack: true,
            timestamps: true,
            nagle: true,
            congestion: crate::Algorithm::default(),
            pacing: true,
            sws_override: Duration::from_millis(200),
            delayed_ack: Some(Duration::from_millis(40)),
            initial_rto: rtt::INITIAL_RTO,
            min_rto: rtt::MIN_RTO,
            max_rto: rtt::MAX_RTO,
            msl: Duration::from_secs(30),
            syn_retries: 6,
            max_retransmissions: 15,
            user_timeout: None,
            keepalive: None,
            fin_wait2_timeout: Some(Duration::from_secs(60)),
            rfc1337: false,
            isn_secret: [0; 16],
            challenge_ack_limit: 1000,
            invalid_ack_interval: Duration::from_millis(500),
            tx_checksum: Checksum::Full,
            ecn: Ecn::Accept,
        }
    }
}

//! What a connection tells its user: events, statistics, and the trace of its state changes.

use core::fmt;
use std::time::Duration;

use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::wire::Flags;

/// Something the application should know about, returned by `Connection::poll_event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// The three-way handshake completed (ESTABLISHED).
    Established,
    /// Data (or the peer's FIN) is ready for `recv`.
    Readable,
    /// Space opened in the send buffer.
    Writable,
    /// The peer sent FIN: no more data will arrive (`recv` returns `Ok(0)` once drained).
    PeerClosed,
    /// The connection finished normally and is CLOSED (after TIME-WAIT or LAST-ACK).
    Closed,
    /// The peer reset the connection, or it was refused.
    Reset,
    /// Retransmissions, the user timeout or keep-alive probes ran out; the connection was
    /// aborted. Where an ICMP error about it arrived since the last acknowledgment,
    /// [`Connection::error`](crate::Connection::error) names it: the likelier reason (a host
    /// unreachable, say) than the timeout itself.
    TimedOut,
    /// An ICMP error ended the handshake (SYN-SENT or SYN-RECEIVED; RFC 1122 4.2.3.9, RFC
    /// 5461): the destination network or host is unreachable, it refused the port (port
    /// unreachable, the ICMP form of a reset) or the protocol, a filter prohibited the
    /// connection, or the path failed it (time exceeded, parameter problem). The connection
    /// is CLOSED; [`Connection::error`](crate::Connection::error) says which error it was.
    Unreachable,
}

impl Event {
    /// Every kind, in the order a connection hands them out (`Connection::poll_event`).
    pub const ALL: [Event; 8] = [
        Event::Established,
        Event::Readable,
        Event::Writable,
        Event::PeerClosed,
        Event::Closed,
        Event::Reset,
        Event::TimedOut,
        Event::Unreachable,
    ];

    /// Return this kind's bit in an [`Events`] set: its place in [`Event::ALL`].
    #[inline]
    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of kinds of [`Event`], as a connection keeps what it has to tell: each kind at most
/// once, however many times it happened since the user last asked
/// ([`Connection::take_events`](crate::Connection::take_events)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Events(u8);

impl Events {
    /// The empty set.
    pub const NONE: Events = Events(0);

    /// Return the set of `event` alone.
    #[inline]
    pub const fn of(event: Event) -> Events {
        Events(event.bit())
    }

    /// Return the set as bits, one per kind in the order of [`Event::ALL`]: for a host that
    /// keeps such sets itself.
    #[inline]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Return the set of the kinds whose bits are set in `bits` (see [`bits`](Events::bits)).
    #[inline]
    pub const fn from_bits(bits: u8) -> Events {
        Events(bits)
    }

    /// Return whether the set holds no kind.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Return whether the set holds `event`.
    #[inline]
    pub const fn contains(self, event: Event) -> bool {
        self.0 & event.bit() != 0
    }

    /// Return the set with `event` added.
    #[inline]
    pub const fn with(self, event: Event) -> Events {
        Events(self.0 | event.bit())
    }

    /// Return the kinds of this set that are not in `other`.
    #[inline]
    pub const fn without(self, other: Events) -> Events {
        Events(self.0 & !other.0)
    }

    /// Return the kinds of this set and of `other`.
    #[inline]
    pub const fn union(self, other: Events) -> Events {
        Events(self.0 | other.0)
    }

    /// Return the kinds of the set in the order of [`Event::ALL`] (the order
    /// `Connection::poll_event` hands them out).
    pub fn iter(self) -> impl Iterator<Item = Event> {
        let mut bits = self.0;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let event = Event::ALL[bits.trailing_zeros() as usize];
            bits &= bits - 1;
            Some(event)
        })
    }
}

/// What made a connection change state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A segment arrived.
    Segment {
        /// Its control bits.
        flags: Flags,
        /// Its sequence number.
        seq: SeqNum,
        /// Its acknowledgment number.
        ack: SeqNum,
        /// Its payload length.
        len: u32,
    },
    /// A timer fired.
    Timer(crate::timer::Timer),
    /// The application called an operation.
    User(UserCall),
    /// An ICMP error arrived about one of our segments.
    Icmp(crate::icmp::IcmpError),
}

impl Cause {
    /// Return the cause a segment gives.
    pub fn of(seg: &crate::wire::Segment<'_>) -> Cause {
        Cause::Segment { flags: seg.flags, seq: seg.seq, ack: seg.ack, len: seg.payload.len() as u32 }
    }
}

/// Application operations that change state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UserCall {
    /// Active open.
    Connect,
    /// Passive open.
    Listen,
    /// Close (half-close: our FIN).
    Close,
    /// Abort (RST).
    Abort,
}

/// One state change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// When it happened.
    pub at: Instant,
    /// State before.
    pub from: State,
    /// State after.
    pub to: State,
    /// What caused it.
    pub cause: Cause,
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} -> {} on ", self.at, self.from, self.to)?;
        match self.cause {
            Cause::Segment { flags, seq, ack, len } => {
                write!(f, "segment [{flags}] seq={seq} ack={ack} len={len}")
            }
            Cause::Timer(t) => write!(f, "{t:?} timer"),
            Cause::User(u) => write!(f, "user {u:?}"),
            Cause::Icmp(e) => write!(f, "ICMP {e}"),
        }
    }
}

/// Per-connection statistics (a snapshot).
///
/// Laid out in declaration order (`repr(C)`): a connection keeps its counters in one, and
/// the four it counts on every segment come first, together (see
/// [`Connection`](crate::Connection)'s layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Stats {
    /// Segments received and accepted for processing.
    pub segs_in: u64,
    /// Segments sent.
    pub segs_out: u64,
    /// Payload bytes received in order and delivered to the receive buffer.
    pub bytes_in: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_out: u64,
    /// Segments retransmitted (timeouts, fast retransmit, partial ACKs).
    pub retransmits: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// Fast recoveries begun (loss detected by RACK or three duplicate ACKs).
    pub fast_retransmits: u64,
    /// Duplicate ACKs received.
    pub dup_acks: u64,
    /// Segments dropped as unacceptable or invalid.
    pub segs_dropped: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// ACKs not sent for unacceptable segments (out of window, failing PAWS, or drawing a
    /// challenge ACK) because of [`Config::invalid_ack_interval`](crate::Config::invalid_ack_interval).
    pub invalid_acks_limited: u64,
    /// Zero-window probes sent.
    pub window_probes: u64,
    /// Tail-loss probes sent (RFC 8985 7).
    pub loss_probes: u64,
    /// Resets sent because received data was lost: the application let go of the
    /// connection with data unread, or data arrived after it did (RFC 9293 3.6.1).
    pub resets_for_lost_data: u64,
    /// ICMP errors ignored (`IcmpOutcome::Ignored`: stale, forged, or changing nothing).
    pub icmp_ignored: u64,
    /// Soft ICMP errors taken (RFC 1122 4.2.3.9): kept for `Connection::error`.
    pub icmp_soft_errors: u64,
    /// Packet Too Big messages acted on: the path MTU fell, or segments sent too large were
    /// resent (RFC 1191, RFC 8201).
    pub mtu_reductions: u64,
    /// ECN was negotiated on the connection (RFC 3168 6.1.1).
    pub ecn: bool,
    /// Accepted segments that arrived marked Congestion Experienced (RFC 3168 6.1.3).
    pub ce_received: u64,
    /// Reductions of cwnd in answer to ECE (RFC 3168 6.1.2): at most one per window.
    pub ece_reductions: u64,
    /// Smoothed round-trip time, once measured.
    pub srtt: Option<Duration>,
    /// Round-trip time variation (RFC 6298's RTTVAR).
    pub rttvar: Duration,
    /// The smallest RTT seen, any sample (RACK's min_RTT, RFC 8985; Linux's
    /// `tcpi_min_rtt` without its 5-minute window), once measured.
    pub min_rtt: Option<Duration>,
    /// The largest RTT sample of an ACK that advanced SND.UNA: the base RTT plus the most
    /// queueing the connection saw (`max_rtt - min_rtt` is the deepest queue delay), once
    /// measured.
    pub max_rtt: Option<Duration>,
    /// RTT samples taken from ACKs that advanced SND.UNA (one per such ACK, Karn's rule
    /// aside).
    pub rtt_samples: u64,
    /// The receiver's estimate of the round trip, which autotuning uses (Linux's
    /// `tcpi_rcv_rtt`), once measured.
    pub rcv_rtt: Option<Duration>,
    /// Sequence space the peer has acknowledged, SYN and FIN included (Linux's
    /// `tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Current retransmission timeout (with backoff).
    pub rto: Duration,
    /// Congestion window, bytes.
    pub cwnd: u32,
    /// Slow-start threshold, bytes.
    pub ssthresh: u32,
    /// The peer's advertised receive window, scaled, bytes.
    pub peer_window: u32,
    /// Bytes sent and not yet acknowledged.
    pub bytes_in_flight: u32,
    /// Effective send MSS: the data of a full segment, within the peer's MSS and the path
    /// MTU (less the IP and TCP headers and the timestamps, where in use).
    pub mss: u16,
    /// Bytes acknowledged per second over about the latest round trip (Linux's
    /// `tcpi_delivery_rate`); 0 before the first sample.
    pub delivery_rate: u64,
    /// The rate the pacer lets data out at, bytes per second (Linux's `tcpi_pacing_rate`);
    /// 0 while unpaced (slow start, no RTT estimate yet, or pacing off).
    pub pacing_rate: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_bit_in_the_order_of_all() {
        for (i, event) in Event::ALL.into_iter().enumerate() {
            assert_eq!(Events::of(event).bits(), 1 << i, "{event:?}");
        }
    }

    #[test]
    fn a_set_lists_each_of_its_kinds_once_in_the_order_of_all() {
        for bits in 0..=u8::MAX {
            let set = Events::from_bits(bits);
            let listed: Vec<Event> = set.iter().collect();
            let expected: Vec<Event> = Event::ALL.into_iter().filter(|&e| bits & Events::of(e).bits() != 0).collect();
            assert_eq!(listed, expected);
            assert_eq!(set.is_empty(), bits == 0);
            let rebuilt = listed.iter().fold(Events::NONE, |set, &e| set.with(e));
            assert_eq!(rebuilt, set);
        }
    }
}

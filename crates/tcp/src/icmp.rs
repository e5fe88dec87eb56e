//! ICMP errors about a connection's segments, and the path MTU (RFC 792, RFC 1122 4.2.3.9,
//! RFC 4443, RFC 9293 3.9.2.2; RFC 1191, RFC 8201).
//!
//! The host parses an ICMPv4 or ICMPv6 error, finds the connection by the 4-tuple of the TCP
//! header it quotes, maps type and code with [`IcmpError::from_icmpv4`] or
//! [`IcmpError::from_icmpv6`], and calls [`Connection::handle_icmp`] with the quoted
//! sequence number (then `poll_transmit` and `poll_event`, as after a segment). What the
//! connection does, in order:
//!
//! 1. **Validation** (RFC 5927 section 4.1; Linux's `tcp_v4_err`): an error counts only in a
//!    state with something sent outstanding (not CLOSED, LISTEN or TIME-WAIT), and only if
//!    the quoted sequence number is one of ours in flight, SND.UNA =< SEG.SEQ < SND.NXT: in
//!    SYN-SENT and SYN-RECEIVED, our ISS. A blind attacker must then guess the window, as
//!    for an RST (RFC 5961). Our SND.NXT here is SND.MAX, the highest sent (after a timeout
//!    SND.NXT goes back). Errors about pure ACKs (SEG.SEQ = SND.NXT) are ignored.
//! 2. **Packet Too Big** (IPv4 type 3 code 4, RFC 1191; ICMPv6 type 2, RFC 8201) in any of
//!    those states: the path MTU falls to what the message reports (see `path.rs` for
//!    old-style messages and the floors), never rises (RFC 1191 section 3), and the send
//!    MSS with it, never above the peer's MSS. Then, as Linux's `tcp_simple_retransmit`,
//!    the segments in flight larger than the new MSS are marked lost and resent at once,
//!    in segments of the new size, with cwnd and ssthresh untouched: the bounce was not
//!    congestion (RFC 1191 section 6.4: "should not change the congestion window"). Unlike
//!    Linux, only those sent no earlier than the one the message names: the router drops
//!    in order, so the ones before it had passed (or bring their own message; or RACK finds
//!    them), and resending them would resend a window for nothing (RFC 1191 section 6.2:
//!    retransmit "only those packets that are known to be dropped"). Until
//!    SND.UNA passes what had been sent, no recovery begins, so that those losses draw no
//!    reduction (Linux enters TCP_CA_Loss without one). A message that lowers nothing and
//!    finds no segment too large is ignored (RFC 1191 section 6.4: a burst of oversized
//!    segments brings one message each, and each must not resend the flight again).
//!    RFC 1191 suggests resending one segment until ACKs return; like Linux, we send what
//!    cwnd allows.
//! 3. **Other errors during the handshake** (SYN-SENT, SYN-RECEIVED): the connection is
//!    aborted, [`Event::Unreachable`](crate::Event::Unreachable), without a reset. For the
//!    hard errors (protocol and port unreachable) that is RFC 1122 4.2.3.9 and RFC 9293
//!    3.9.2.2; for the soft ones it is the widely deployed behaviour RFC 5461 section 4
//!    describes, Linux's since 2.0 (`tcp_v4_err`, `tcp_v6_err`: every error aborts a
//!    connection in SYN-SENT or SYN-RECV): a connect to an unreachable host fails at once
//!    instead of after the SYN retries, and an application with other addresses to try
//!    moves on.
//! 4. **Other errors in the synchronized states** are soft, hard ones included (RFC 9293
//!    3.9.2.2 MUST-56; RFC 5927 section 5.2 against blind resets by forged hard errors;
//!    Linux without IP_RECVERR): kept as the connection's [`error`](Connection::error),
//!    nothing else changes (no timer, no window). An acceptable ACK clears it (Linux's
//!    `tcp_ack` clears `sk_err_soft`: "something worked"). If the connection later times
//!    out, the application finds the error there after [`Event::TimedOut`]: the likelier
//!    reason than the timeout itself (Linux reports `sk_err_soft`, EHOSTUNREACH say, for
//!    ETIMEDOUT).
//!
//! The host may also apply a path MTU it learnt otherwise (from another connection to the
//! same destination, or an aged-out estimate going back up, RFC 1191 section 6.3) with
//! [`Connection::set_path_mtu`]; that changes the MSS for what is sent next and resends
//! nothing (RFC 1191 section 6.2: only what a Packet Too Big says was dropped).
//!
//! Not done: packetization-layer PMTUD (RFC 4821, RFC 8899), which finds a path that drops
//! large segments without saying so (an ICMP black hole) by probing; such a path shows only
//! as retransmission timeouts. Nor TCP-LD (RFC 6069), which undoes the RTO backoff on
//! unreachable errors. Source quench is ignored (RFC 6633), redirects are IP's business.
//!
//! [`Event::TimedOut`]: crate::Event::TimedOut

use crate::connection::{Connection, Failure};
use crate::controller::Controller;
use crate::event::Cause;
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;

/// An ICMP error about one of our segments, as a connection understands it. Each variant
/// lists the ICMPv4 (RFC 792, RFC 1122, RFC 1812) and ICMPv6 (RFC 4443) type/code pairs
/// that map to it; [`from_icmpv4`](IcmpError::from_icmpv4) and
/// [`from_icmpv6`](IcmpError::from_icmpv6) apply the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum IcmpError {
    /// The segment was larger than a link on the path takes: IPv4 "fragmentation needed and
    /// DF set" (type 3 code 4, RFC 1191), ICMPv6 "packet too big" (type 2, RFC 8201).
    #[error("packet too big for the path (next-hop MTU {mtu})")]
    PacketTooBig {
        /// The next hop's IP MTU in bytes; 0 where the router did not say (an IPv4 router
        /// older than RFC 1191, section 5).
        mtu: u32,
    },
    /// No route to the destination network: IPv4 type 3 codes 0 (net unreachable), 6
    /// (destination network unknown) and 11 (network unreachable for TOS); ICMPv6 type 1
    /// code 0 (no route to destination).
    #[error("network unreachable")]
    NetUnreachable,
    /// The destination host cannot be reached: IPv4 type 3 codes 1 (host unreachable), 7
    /// (destination host unknown), 8 (source host isolated) and 12 (host unreachable for
    /// TOS); ICMPv6 type 1 codes 2 (beyond scope of source address) and 3 (address
    /// unreachable).
    #[error("host unreachable")]
    HostUnreachable,
    /// The destination does not run TCP: IPv4 type 3 code 2; ICMPv6 type 4 code 1
    /// (unrecognized Next Header: we send TCP right behind the IPv6 header, so the header
    /// not recognized is TCP's, RFC 8200 section 4). A hard error (RFC 1122 4.2.3.9).
    #[error("protocol unreachable")]
    ProtocolUnreachable,
    /// Nothing listens on the port (the ICMP form of a refusal): IPv4 type 3 code 3; ICMPv6
    /// type 1 code 4. A hard error (RFC 1122 4.2.3.9).
    #[error("port unreachable (connection refused)")]
    PortUnreachable,
    /// A filter refused the segment: IPv4 type 3 codes 9 and 10 (network, host
    /// administratively prohibited), 13 (communication administratively prohibited, RFC
    /// 1812), 14 (host precedence violation) and 15 (precedence cutoff in effect); ICMPv6
    /// type 1 codes 1 (administratively prohibited), 5 (source address failed
    /// ingress/egress policy) and 6 (reject route to destination).
    #[error("communication administratively prohibited")]
    AdminProhibited,
    /// A source route failed: IPv4 type 3 code 5; ICMPv6 type 1 code 7 (error in source
    /// routing header, RFC 6554).
    #[error("source route failed")]
    SourceRouteFailed,
    /// The hop limit ran out in transit, or reassembly timed out: IPv4 type 11, ICMPv6 type
    /// 3, either with code 0 or 1.
    #[error("time to live exceeded")]
    TimeExceeded,
    /// A router or the destination found a header field it could not process: IPv4 type 12
    /// (any code); ICMPv6 type 4, any code but 1 (see
    /// [`ProtocolUnreachable`](IcmpError::ProtocolUnreachable)), and type 1 code 8 (headers
    /// too long, RFC 8883).
    #[error("parameter problem")]
    ParameterProblem,
}

impl IcmpError {
    /// Return the error an ICMPv4 message of `icmp_type` and `code` reports, with the
    /// Next-Hop MTU field of a "fragmentation needed" message (RFC 1191 section 4; 0 from
    /// older routers). `None` for messages a connection ignores: source quench (RFC 6633:
    /// silently discarded, RFC 9293 MUST-55), redirect (IP's business), queries and
    /// replies, and codes not assigned.
    pub fn from_icmpv4(icmp_type: u8, code: u8, next_hop_mtu: u16) -> Option<IcmpError> {
        use IcmpError::*;
        match (icmp_type, code) {
            (3, 0 | 6 | 11) => Some(NetUnreachable),
            (3, 1 | 7 | 8 | 12) => Some(HostUnreachable),
            (3, 2) => Some(ProtocolUnreachable),
            (3, 3) => Some(PortUnreachable),
            (3, 4) => Some(PacketTooBig { mtu: u32::from(next_hop_mtu) }),
            (3, 5) => Some(SourceRouteFailed),
            (3, 9 | 10 | 13..=15) => Some(AdminProhibited),
            (11, 0 | 1) => Some(TimeExceeded),
            (12, _) => Some(ParameterProblem),
            _ => None,
        }
    }

    /// Return the error an ICMPv6 message of `icmp_type` and `code` reports (RFC 4443
    /// section 3), with the MTU field of a Packet Too Big (RFC 4443 3.2; the code is ignored
    /// there). `None` for informational messages (types 128 and up), error types a TCP
    /// connection has no use for, and codes not assigned.
    pub fn from_icmpv6(icmp_type: u8, code: u8, mtu: u32) -> Option<IcmpError> {
        use IcmpError::*;
        match (icmp_type, code) {
            (1, 0) => Some(NetUnreachable),
            (1, 1 | 5 | 6) => Some(AdminProhibited),
            (1, 2 | 3) => Some(HostUnreachable),
            (1, 4) => Some(PortUnreachable),
            (1, 7) => Some(SourceRouteFailed),
            (1, 8) => Some(ParameterProblem),
            (2, _) => Some(PacketTooBig { mtu }),
            (3, 0 | 1) => Some(TimeExceeded),
            (4, 1) => Some(ProtocolUnreachable),
            (4, _) => Some(ParameterProblem),
            _ => None,
        }
    }

    /// Return whether RFC 1122 4.2.3.9 (RFC 9293 3.9.2.2) calls this a hard error: the
    /// destination was reached and will not take TCP or this port. The rest are soft: a
    /// route may come back. (Packet Too Big is neither: it lowers the path MTU.)
    pub fn is_hard(self) -> bool {
        matches!(self, IcmpError::ProtocolUnreachable | IcmpError::PortUnreachable)
    }
}

/// What [`Connection::handle_icmp`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IcmpOutcome {
    /// Nothing, for this reason (counted in `Stats::icmp_ignored` and logged).
    Ignored(IcmpIgnored),
    /// A Packet Too Big was taken: the path MTU is now `mtu` octets (for the host to cache
    /// for the destination, RFC 1191 section 6.2) and the send MSS `mss`; the segments in
    /// flight larger than that go again at once, in pieces of `mss`.
    MtuLowered {
        /// The path MTU in use now.
        mtu: u32,
        /// The send MSS now: the data of a full segment (as `Stats::mss`). Before the
        /// handshake completes it still is the default; the new MTU applies once the
        /// peer's MSS is known.
        mss: u16,
    },
    /// A soft error, kept for [`Connection::error`]; the connection goes on.
    SoftError,
    /// The error ended a handshake: the connection is CLOSED, and reports
    /// [`Event::Unreachable`](crate::Event::Unreachable).
    Aborted,
}

/// Why [`Connection::handle_icmp`] ignored an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IcmpIgnored {
    /// The connection is CLOSED, LISTEN or TIME-WAIT: nothing it sent is outstanding.
    NotOpen,
    /// The quoted sequence number is not one of ours in flight: outside SND.UNA..SND.NXT
    /// (RFC 5927 section 4.1), or other than the ISS during the handshake. Stale, or forged.
    OutOfWindow,
    /// A Packet Too Big reporting a path MTU no lower than the one in use, with no segment in
    /// flight too large for it (RFC 1191 sections 3 and 6.4: never raise the estimate, and
    /// act once per reduction).
    MtuNotLower,
    /// An ICMPv6 Packet Too Big reporting less than the IPv6 minimum link MTU, 1280 (RFC
    /// 8201 section 4: "it must discard it").
    BelowMinimumMtu,
}

impl Connection {
    /// Take an ICMP error about one of our segments, whose TCP header (quoted in the ICMP
    /// payload) carried `quoted_seq`, and return what it did (see the module docs). Call
    /// `poll_transmit` and `poll_event` after it.
    pub fn handle_icmp(&mut self, now: Instant, quoted_seq: SeqNum, error: IcmpError) -> IcmpOutcome {
        let outcome = self.react_to_icmp(now, quoted_seq, error);
        match outcome {
            IcmpOutcome::Ignored(reason) => {
                self.stats.icmp_ignored += 1;
                log::debug!(
                    "ignore ICMP {error:?} (seq {quoted_seq}) on {} ({}): {reason:?}",
                    self.tuple().map_or_else(|| self.local.to_string(), |t| t.to_string()),
                    self.state
                );
            }
            IcmpOutcome::MtuLowered { mtu, mss } => {
                self.stats.mtu_reductions += 1;
                log::debug!("{:?}: path MTU {mtu}, send MSS {mss}", self.tuple());
            }
            IcmpOutcome::SoftError => {
                self.stats.icmp_soft_errors += 1;
                log::debug!("{:?} {}: soft error {error:?}", self.tuple(), self.state);
            }
            IcmpOutcome::Aborted => log::debug!("{:?}: handshake aborted on {error:?}", self.tuple()),
        }
        outcome
    }

    fn react_to_icmp(&mut self, now: Instant, quoted_seq: SeqNum, error: IcmpError) -> IcmpOutcome {
        if matches!(self.state, State::Closed | State::Listen | State::TimeWait) {
            return IcmpOutcome::Ignored(IcmpIgnored::NotOpen);
        }
        // RFC 5927 4.1: SND.UNA =< SEG.SEQ < SND.NXT (SND.MAX here).
        if !(self.snd.una.before_eq(quoted_seq) && quoted_seq.before(self.snd.max)) {
            return IcmpOutcome::Ignored(IcmpIgnored::OutOfWindow);
        }
        if let IcmpError::PacketTooBig { mtu } = error {
            return self.packet_too_big(quoted_seq, mtu);
        }
        self.path.error = Some(error);
        if matches!(self.state, State::SynSent | State::SynReceived) {
            // RFC 1122 4.2.3.9 for hard errors, RFC 5461 for soft ones.
            self.fail(now, Failure::Unreachable, Cause::Icmp(error));
            return IcmpOutcome::Aborted;
        }
        IcmpOutcome::SoftError
    }

    /// A Packet Too Big about the segment at `quoted_seq`, reporting `reported` octets.
    fn packet_too_big(&mut self, quoted_seq: SeqNum, reported: u32) -> IcmpOutcome {
        let option_len = self.ts.option_len();
        let fin = self.snd.fin_seq();
        let bounced = self.snd.sent.containing(quoted_seq);
        let dropped = bounced.map(|s| self.path.datagram_len(s.data_len(fin), option_len));
        let mtu = match self.path.mtu_from_report(reported, dropped) {
            Ok(mtu) => mtu,
            Err(reason) => return IcmpOutcome::Ignored(reason),
        };
        let lowered = mtu < self.path.mtu;
        if lowered {
            self.path.mtu = mtu;
            self.sync_mss();
        }
        // Linux's tcp_simple_retransmit: what no longer fits was dropped; resend it now, cut
        // to the new size, without a congestion response.
        let marked = self.snd.sent.mark_larger_lost(u32::from(self.snd.mss), fin, bounced);
        if !lowered && marked == 0 {
            return IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower);
        }
        if marked > 0 {
            self.rel.recovery.on_mtu_reduced(self.snd.max);
            self.timers.stop(Timer::LossProbe);
        }
        IcmpOutcome::MtuLowered { mtu: self.path.mtu, mss: self.snd.mss }
    }

    /// Apply a path MTU the host learnt for the destination (from another connection's
    /// Packet Too Big, or its estimate aging back up, RFC 1191 section 6.3): the send MSS
    /// follows, up or down, never above the peer's MSS, from the next segment on. Nothing
    /// is resent (RFC 1191 sections 6.2 and 6.3); a segment already sent too large brings
    /// its own Packet Too Big, and [`handle_icmp`](Connection::handle_icmp) resends it.
    ///
    /// Pass the `mtu` of an [`IcmpOutcome::MtuLowered`], which has the floors and RFC 1191's
    /// search for old-style messages applied; a raw report is held to the same floors (552
    /// for IPv4, Linux's `min_pmtu`; 1280 for IPv6), but a 0 is not searched. Before the
    /// handshake completes it applies once the peer's MSS is known.
    pub fn set_path_mtu(&mut self, now: Instant, mtu: u32) {
        self.path.mtu = mtu.max(self.path.floor());
        self.sync_mss();
        log::trace!("{:?} at {now}: path MTU set to {}, send MSS {}", self.tuple(), self.path.mtu, self.snd.mss);
    }

    /// Return the path MTU in use: what our own MSS implies until a Packet Too Big or
    /// [`set_path_mtu`](Connection::set_path_mtu) says otherwise.
    pub fn path_mtu(&self) -> u32 {
        self.path.mtu
    }

    /// Return the ICMP error that aborted the handshake ([`Event::Unreachable`]), or else the
    /// latest soft error no acknowledgment has cleared since (RFC 1122 4.2.3.9: made
    /// available to the application). After [`Event::TimedOut`] it is the likelier reason
    /// than the timeout itself: Linux reports it (`sk_err_soft`) in place of ETIMEDOUT.
    ///
    /// [`Event::Unreachable`]: crate::Event::Unreachable
    /// [`Event::TimedOut`]: crate::Event::TimedOut
    pub fn error(&self) -> Option<IcmpError> {
        self.path.error
    }

    /// Recompute the send MSS from the path MTU (Linux's `tcp_sync_mss`) once the peer's
    /// MSS is known, and tell the controller of a change: cwnd and ssthresh stay as they
    /// are in bytes, only the unit of growth changes.
    fn sync_mss(&mut self) {
        let Some(mss) = self.path.send_mss(self.ts.option_len()) else { return };
        if mss != self.snd.mss {
            self.snd.mss = mss;
            self.rel.cc.on_mss_change(u32::from(mss));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn icmpv4_types_and_codes_map_to_errors() {
        use IcmpError::*;
        let table: &[(u8, u8, Option<IcmpError>)] = &[
            (3, 0, Some(NetUnreachable)),
            (3, 1, Some(HostUnreachable)),
            (3, 2, Some(ProtocolUnreachable)),
            (3, 3, Some(PortUnreachable)),
            (3, 4, Some(PacketTooBig { mtu: 1400 })),
            (3, 5, Some(SourceRouteFailed)),
            (3, 6, Some(NetUnreachable)),
            (3, 7, Some(HostUnreachable)),
            (3, 8, Some(HostUnreachable)),
            (3, 9, Some(AdminProhibited)),
            (3, 10, Some(AdminProhibited)),
            (3, 11, Some(NetUnreachable)),
            (3, 12, Some(HostUnreachable)),
            (3, 13, Some(AdminProhibited)),
            (3, 14, Some(AdminProhibited)),
            (3, 15, Some(AdminProhibited)),
            (3, 16, None),
            (4, 0, None),
            (5, 1, None),
            (0, 0, None),
            (8, 0, None),
            (11, 0, Some(TimeExceeded)),
            (11, 1, Some(TimeExceeded)),
            (11, 2, None),
            (12, 0, Some(ParameterProblem)),
            (12, 2, Some(ParameterProblem)),
        ];
        for &(t, c, want) in table {
            assert_eq!(IcmpError::from_icmpv4(t, c, 1400), want, "type {t} code {c}");
        }
    }

    #[test]
    fn icmpv6_types_and_codes_map_to_errors() {
        use IcmpError::*;
        let table: &[(u8, u8, Option<IcmpError>)] = &[
            (1, 0, Some(NetUnreachable)),
            (1, 1, Some(AdminProhibited)),
            (1, 2, Some(HostUnreachable)),
            (1, 3, Some(HostUnreachable)),
            (1, 4, Some(PortUnreachable)),
            (1, 5, Some(AdminProhibited)),
            (1, 6, Some(AdminProhibited)),
            (1, 7, Some(SourceRouteFailed)),
            (1, 8, Some(ParameterProblem)),
            (1, 9, None),
            (2, 0, Some(PacketTooBig { mtu: 1280 })),
            (2, 1, Some(PacketTooBig { mtu: 1280 })),
            (3, 0, Some(TimeExceeded)),
            (3, 1, Some(TimeExceeded)),
            (4, 0, Some(ParameterProblem)),
            (4, 1, Some(ProtocolUnreachable)),
            (4, 2, Some(ParameterProblem)),
            (128, 0, None),
            (135, 0, None),
            (137, 0, None),
        ];
        for &(t, c, want) in table {
            assert_eq!(IcmpError::from_icmpv6(t, c, 1280), want, "type {t} code {c}");
        }
    }

    #[test]
    fn only_protocol_and_port_unreachable_are_hard() {
        use IcmpError::*;
        assert!(ProtocolUnreachable.is_hard() && PortUnreachable.is_hard());
        for soft in
            [NetUnreachable, HostUnreachable, AdminProhibited, SourceRouteFailed, TimeExceeded, ParameterProblem]
        {
            assert!(!soft.is_hard(), "{soft:?}");
        }
        assert!(!PacketTooBig { mtu: 1400 }.is_hard());
    }
}

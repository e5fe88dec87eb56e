//! ICMP errors about a connection's segments as values (RFC 792, RFC 1122 4.2.3.9, RFC 4443,
//! RFC 1191, RFC 8201): what an error is ([`IcmpError`], with the type/code tables of
//! [`IcmpError::from_icmpv4`] and [`IcmpError::from_icmpv6`]) and what taking it did
//! ([`IcmpOutcome`], [`IcmpIgnored`]).
//!
//! What a connection does with one (validation, Packet Too Big, aborts, soft errors) is
//! `connection/icmp.rs`, behind [`Connection::handle_icmp`](crate::Connection::handle_icmp).
//! This file holds values only and imports nothing of the connection.

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

/// What [`Connection::handle_icmp`](crate::Connection::handle_icmp) did.
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
    /// A soft error, kept for [`Connection::error`](crate::Connection::error); the connection goes on.
    SoftError,
    /// The error ended a handshake: the connection is CLOSED, and reports
    /// [`Event::Unreachable`](crate::Event::Unreachable).
    Aborted,
}

/// Why [`Connection::handle_icmp`](crate::Connection::handle_icmp) ignored an error.
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

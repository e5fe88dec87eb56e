//! ICMP (RFC 792) and ICMPv6 (RFC 4443) as a host reads and writes them: the fixed header
//! of a message ([`IcmpMessage`]), the checksums, echo replies made from their requests, and
//! the start of a TCP segment an error quotes ([`QuotedTcp`]).

use std::net::IpAddr;

use etherparse::IpNumber;
use etherparse::checksum::Sum16BitWords;

use super::ndp;

/// An ICMP or ICMPv6 message: type, code, the four octets whose meaning depends on the type
/// (RFC 792; RFC 4443 2.1), and the rest. The checksum is checked apart
/// ([`checksum_ok_v4`], [`checksum_ok_v6`]), as a device may have verified it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcmpMessage<'a> {
    /// The type.
    pub kind: u8,
    /// The code.
    pub code: u8,
    /// The octets after the checksum: identifier and sequence number of an echo, the
    /// next-hop MTU of "fragmentation needed", the MTU of "packet too big", unused otherwise.
    pub rest: [u8; 4],
    /// What follows the fixed header: an echo's data, or what an error quotes.
    pub body: &'a [u8],
}

impl<'a> IcmpMessage<'a> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 8;

    /// Parse a whole message; `None` if it is shorter than its fixed header.
    pub fn parse(message: &'a [u8]) -> Option<Self> {
        let (header, body) = message.split_first_chunk::<8>()?;
        let [kind, code, _, _, a, b, c, d] = *header;
        Some(IcmpMessage { kind, code, rest: [a, b, c, d], body })
    }

    /// Return the next-hop MTU of an ICMP "fragmentation needed" (RFC 1191 4: the low 16
    /// bits of the otherwise unused field; 0 from routers older than it).
    pub fn next_hop_mtu(&self) -> u16 {
        u16::from_be_bytes([self.rest[2], self.rest[3]])
    }

    /// Return the MTU of an ICMPv6 "packet too big" (RFC 4443 3.2).
    pub fn mtu(&self) -> u32 {
        u32::from_be_bytes(self.rest)
    }
}

/// Return whether the checksum of the ICMP message `message` verifies (RFC 792: the ones'
/// complement sum over the message, checksum included, is all ones).
pub fn checksum_ok_v4(message: &[u8]) -> bool {
    Sum16BitWords::new().add_slice(message).ones_complement() == 0
}

/// Return whether the checksum of the ICMPv6 message `message` (at least 4 bytes) from
/// `src` to `dst` verifies (RFC 4443 2.3, with the pseudo-header of RFC 8200 8.1).
pub fn checksum_ok_v6(src: std::net::Ipv6Addr, dst: std::net::Ipv6Addr, message: &[u8]) -> bool {
    ndp::checksum(src, dst, message) == u16::from_be_bytes([message[2], message[3]])
}

/// Turn `reply`, a copy of an echo request (at least 4 bytes) to our `ours` from `theirs`,
/// into its echo reply: the same identifier, sequence number and data (RFC 792; RFC 4443
/// 4.2), the reply's type and checksum. Return the IP protocol that carries it.
pub fn make_echo_reply(reply: &mut [u8], ours: IpAddr, theirs: IpAddr) -> IpNumber {
    reply[2..4].fill(0);
    match (ours, theirs) {
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            reply[0] = 129;
            let sum = ndp::checksum(s, d, reply);
            reply[2..4].copy_from_slice(&sum.to_be_bytes());
            IpNumber::IPV6_ICMP
        }
        _ => {
            reply[0] = 0;
            // The sum is of native-endian words, so it is stored native-endian (RFC 1071 2(B)).
            let sum = Sum16BitWords::new().add_slice(reply).ones_complement();
            reply[2..4].copy_from_slice(&sum.to_ne_bytes());
            IpNumber::ICMP
        }
    }
}

/// The start of a TCP segment an ICMP error quotes: RFC 792's "64 bits of the original
/// datagram", the ports and the sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotedTcp {
    /// The source port: ours, as we sent the segment.
    pub src_port: u16,
    /// The destination port.
    pub dst_port: u16,
    /// The sequence number.
    pub seq: u32,
}

impl QuotedTcp {
    /// Parse the quoted start of a segment; `None` if fewer than 8 octets are quoted.
    pub fn parse(tcp: &[u8]) -> Option<Self> {
        let [a, b, c, d, e, f, g, h] = *tcp.first_chunk::<8>()?;
        Some(QuotedTcp {
            src_port: u16::from_be_bytes([a, b]),
            dst_port: u16::from_be_bytes([c, d]),
            seq: u32::from_be_bytes([e, f, g, h]),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn short_messages_and_quotes_are_rejected() {
        assert_eq!(IcmpMessage::parse(&[8, 0, 0, 0, 0, 0, 0]), None);
        let msg = IcmpMessage::parse(&[3, 4, 0xaa, 0xbb, 0, 0, 0x05, 0xdc, 1]).unwrap();
        assert_eq!((msg.kind, msg.code, msg.next_hop_mtu(), msg.mtu(), msg.body), (3, 4, 1500, 1500, &[1][..]));
        assert_eq!(QuotedTcp::parse(&[0; 7]), None);
        let quoted = QuotedTcp::parse(&[0x1f, 0x90, 0xc0, 0x00, 0, 0, 1, 2]).unwrap();
        assert_eq!(quoted, QuotedTcp { src_port: 8080, dst_port: 49152, seq: 258 });
    }

    #[test]
    fn echo_replies_verify() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let mut reply = [8, 0, 0xff, 0xff, 0x12, 0x34, 0, 1, 0xa5];
        assert_eq!(make_echo_reply(&mut reply, a.into(), b.into()), IpNumber::ICMP);
        assert_eq!(reply[0], 0);
        assert!(checksum_ok_v4(&reply));
        let (a6, b6) = (Ipv6Addr::LOCALHOST, "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        let mut reply = [128, 0, 0xff, 0xff, 0x12, 0x34, 0, 1, 0xa5];
        assert_eq!(make_echo_reply(&mut reply, a6.into(), b6.into()), IpNumber::IPV6_ICMP);
        assert_eq!(reply[0], 129);
        assert!(checksum_ok_v6(a6, b6, &reply));
    }
}

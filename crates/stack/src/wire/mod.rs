//! The wire formats the host reads and writes, apart from TCP's own (in `bypass-tcp`):
//! the Ethernet, IPv4 and IPv6 headers in front of everything we send, and the codecs of the
//! messages that belong to no connection.
//!
//! | module | what |
//! |---|---|
//! | this one | [`write_ethernet`], [`write_ipv4`], [`write_ipv6`], [`write_ip_headers`]: the one writer of each header; [`HeaderTemplate`]: a connection's headers, written once by them and patched per segment |
//! | [`arp`] | ARP requests and replies for Ethernet/IPv4 (RFC 826) |
//! | [`ndp`] | Neighbour Discovery messages (RFC 4861 4), the ICMPv6 checksum, NDP addresses |
//! | [`icmp`] | ICMP and ICMPv6 messages: the fixed header, echo replies, quoted TCP, fragments |
//! | `sum` | the TCP checksum of a segment received over IPv4, checked with the IPv4 header in hand |
//!
//! Each codec is a parsed value (the "representation": [`arp::ArpMessage`],
//! [`ndp::NdpMessage`], [`icmp::IcmpMessage`]) with a `parse` from bytes and writers that
//! emit it into the caller's buffer. Headers are parsed and built with `etherparse`; only
//! what it has no type for is read by offset here.
//!
//! # No panics on bytes from the wire
//!
//! Every `parse` here takes any bytes, of any length, and returns a value or a typed
//! rejection (`None` or an error naming the rule broken); none panics, whatever the input.
//! The host turns each rejection into a drop with its reason (`crate::Drop`) and a counter.
//! The writers write into a buffer the caller sized: each says how long that buffer must
//! be, and may panic only if it is shorter, which is the caller's bug, never the peer's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bypass_tcp::IpEcn;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header};

pub mod arp;
pub mod icmp;
pub mod ndp;
pub(crate) mod sum;

/// Length of an Ethernet II header (no VLAN tag).
pub const ETH_LEN: usize = Ethernet2Header::LEN;
/// Length of an IPv4 header without options (we send none).
pub const IPV4_LEN: usize = Ipv4Header::MIN_LEN;
/// Length of the fixed IPv6 header.
pub const IPV6_LEN: usize = Ipv6Header::LEN;
/// Length of the Ethernet and IPv4 headers in front of an IPv4 payload we send.
pub const HEADERS4: usize = ETH_LEN + IPV4_LEN;
/// Length of the Ethernet and IPv6 headers in front of an IPv6 payload we send.
pub const HEADERS6: usize = ETH_LEN + IPV6_LEN;
/// The Ethernet broadcast address.
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// The TTL of the IPv4 datagrams we send (Linux's `net.ipv4.ip_default_ttl`).
pub const TTL: u8 = 64;
/// The hop limit of the IPv6 packets we send but Neighbour Discovery's (Linux's
/// `net.ipv6.conf.*.hop_limit` default, as IPv4's TTL).
pub const IPV6_HOP_LIMIT: u8 = 64;

/// Write an Ethernet II header from `src` to `dst` carrying `ether_type` into the first
/// [`ETH_LEN`] bytes of `frame` (at least that long).
pub fn write_ethernet(frame: &mut [u8], src: [u8; 6], dst: [u8; 6], ether_type: EtherType) {
    let eth = Ethernet2Header { source: src, destination: dst, ether_type };
    frame[..ETH_LEN].copy_from_slice(&eth.to_bytes());
}

/// Write an IPv4 header (no options, TTL [`TTL`], the header checksum filled in) for a
/// payload of `len` bytes carrying `proto` into the first [`IPV4_LEN`] bytes of `header`:
/// whole with DF (`fragment` `None`: our TCP segments fit the path MTU and are never
/// fragmented, RFC 1191 3), or one fragment `(id, offset, more)` with DF clear, its
/// `offset` in octets a multiple of 8 (RFC 791 2.3, 3.2). `len` is at most 65,515. `ecn` is
/// the ECN field, the TOS byte's two low bits (RFC 3168 5): ECT(0) for an ECN-capable TCP
/// segment, Not-ECT for everything else.
pub fn write_ipv4(
    header: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: IpNumber,
    len: usize,
    fragment: Option<(u16, usize, bool)>,
    ecn: IpEcn,
) {
    // `Ipv4Header::new` sets DF.
    let mut ip = Ipv4Header::new(len as u16, TTL, proto, src.octets(), dst.octets()).expect("payload fits IPv4");
    ip.ecn = etherparse::IpEcn::try_new(ecn.bits()).expect("two bits");
    if let Some((id, offset, more)) = fragment {
        ip.identification = id;
        ip.dont_fragment = false;
        ip.more_fragments = more;
        ip.fragment_offset = etherparse::IpFragOffset::try_new((offset / 8) as u16).expect("offset below 65,536");
    }
    ip.header_checksum = ip.calc_header_checksum();
    header[..IPV4_LEN].copy_from_slice(&ip.to_bytes());
}

/// Write an IPv6 header (flow label zero, the traffic class zero but for its two ECN bits,
/// `ecn`, RFC 3168 5) for a payload of `len` bytes whose first header is `next`, sent with
/// `hop_limit`, into the first [`IPV6_LEN`] bytes of `header`.
pub fn write_ipv6(
    header: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: IpNumber,
    len: usize,
    hop_limit: u8,
    ecn: IpEcn,
) {
    let ip = Ipv6Header {
        traffic_class: ecn.bits(),
        flow_label: Ipv6FlowLabel::ZERO,
        payload_length: len as u16,
        next_header: next,
        hop_limit,
        source: src.octets(),
        destination: dst.octets(),
    };
    header[..IPV6_LEN].copy_from_slice(&ip.to_bytes());
}

/// Length of an IPv6 Fragment header (RFC 8200 4.5).
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// Write an IPv6 Fragment header (RFC 8200 4.5) into the first [`FRAGMENT_HEADER_LEN`] bytes
/// of `header`: the fragmentable part's first header `next`, the fragment's `offset` in
/// octets (a multiple of 8), whether `more` follow, and the datagram's `id`.
pub fn write_ipv6_fragment(header: &mut [u8], next: IpNumber, offset: usize, more: bool, id: u32) {
    let fragment = [u8::from(next), 0, ((offset >> 8) as u8), (offset as u8 & 0xf8) | u8::from(more)];
    header[..4].copy_from_slice(&fragment);
    header[4..FRAGMENT_HEADER_LEN].copy_from_slice(&id.to_be_bytes());
}

/// Return the length of the Ethernet and IP headers in front of an IP payload to `dst`.
pub fn headers_len(dst: IpAddr) -> usize {
    match dst {
        IpAddr::V4(_) => HEADERS4,
        IpAddr::V6(_) => HEADERS6,
    }
}

/// Write the Ethernet and IP headers (of `src`'s family: IPv4 with DF, IPv6 with hop limit
/// [`IPV6_HOP_LIMIT`]) at the front of `frame` for an IP payload of `len` bytes carrying
/// `proto`, with the ECN field `ecn` (RFC 3168 5: ECT(0) where the connection marks a
/// segment ECN-capable, `Transmit::ect`); `frame` is at least `headers_len(dst)` long.
#[allow(clippy::too_many_arguments)]
pub fn write_ip_headers(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    proto: IpNumber,
    len: usize,
    ecn: IpEcn,
) {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            write_ethernet(frame, src_mac, dst_mac, EtherType::IPV4);
            write_ipv4(&mut frame[ETH_LEN..], s, d, proto, len, None, ecn);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            write_ethernet(frame, src_mac, dst_mac, EtherType::IPV6);
            write_ipv6(&mut frame[ETH_LEN..], s, d, proto, len, IPV6_HOP_LIMIT, ecn);
        }
        _ => unreachable!("a packet's addresses are of one family"),
    }
}

/// The Ethernet and IP headers in front of one connection's segments, written once by
/// [`write_ip_headers`] for an empty payload and copied in front of each segment with its
/// length and ECN field patched in: the IPv4 header checksum follows by RFC 1624's
/// incremental update (eqn. 3, `HC' = ~(~HC + ~m + m')`), here an addition of the length
/// and the ECN bits to the template's sum, since neither field can carry out of its word.
/// What changes per connection only (addresses, MACs, TTL, DF, protocol) is written by
/// `etherparse` once; a segment costs a copy, two stores and a fold instead of building
/// and checksumming the header (about 240 instructions a segment, docs/performance.md).
#[derive(Clone, Debug)]
pub struct HeaderTemplate {
    /// The headers as written for an empty payload, Not-ECT; the first `len` bytes count.
    bytes: [u8; HEADERS6],
    len: u8,
    /// IPv4: the one's complement sum of the header's words but the checksum (the
    /// complement of the checksum written); unused for IPv6, which has no header checksum.
    sum: u16,
}

impl HeaderTemplate {
    /// Return the headers from `src_mac` to `dst_mac` and from `src` to `dst` (one family)
    /// for payloads carrying `proto`.
    pub fn new(src_mac: [u8; 6], dst_mac: [u8; 6], src: IpAddr, dst: IpAddr, proto: IpNumber) -> Self {
        let mut bytes = [0u8; HEADERS6];
        write_ip_headers(&mut bytes, src_mac, dst_mac, src, dst, proto, 0, IpEcn::NotEct);
        let len = headers_len(dst);
        let sum = if len == HEADERS4 { !u16::from_be_bytes([bytes[ETH_LEN + 10], bytes[ETH_LEN + 11]]) } else { 0 };
        HeaderTemplate { bytes, len: len as u8, sum }
    }

    /// Return the destination MAC address the headers carry.
    pub fn dst_mac(&self) -> [u8; 6] {
        self.bytes[..6].try_into().expect("six bytes")
    }

    /// Return the length of the headers.
    pub fn header_len(&self) -> usize {
        usize::from(self.len)
    }

    /// Write the headers at the front of `frame` (at least
    /// [`header_len`](Self::header_len) long) for an IP payload of `len` bytes with the ECN
    /// field `ecn`: the same bytes as [`write_ip_headers`] with this template's addresses.
    pub fn write(&self, frame: &mut [u8], len: usize, ecn: IpEcn) {
        // Each family copies a constant length: a few moves, not a call to `memcpy`.
        if self.header_len() == HEADERS4 {
            let frame = &mut frame[..HEADERS4];
            frame.copy_from_slice(&self.bytes[..HEADERS4]);
            let ip = &mut frame[ETH_LEN..];
            // The template has total length IPV4_LEN and TOS 0: the length adds `len` to the
            // second word, the ECN bits add to the first word's low byte (RFC 3168 5).
            let total = (IPV4_LEN + len) as u16;
            ip[1] |= ecn.bits();
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            let sum = u32::from(self.sum) + len as u32 + u32::from(ecn.bits());
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        } else {
            let frame = &mut frame[..HEADERS6];
            frame.copy_from_slice(&self.bytes);
            let ip = &mut frame[ETH_LEN..];
            // The traffic class is zero but for its two ECN bits, the high nibble of byte 1.
            ip[1] |= ecn.bits() << 4;
            ip[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ECN field goes in the TOS byte's low bits (IPv4, checksum still right) and the
    /// traffic class's (IPv6), and nowhere else (RFC 3168 5).
    #[test]
    fn the_ecn_field_is_written_for_both_families() {
        let (mac_a, mac_b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let (a4, b4) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        for ecn in [IpEcn::NotEct, IpEcn::Ect0] {
            let mut frame = [0xa5u8; HEADERS4];
            write_ip_headers(&mut frame, mac_a, mac_b, a4, b4, IpNumber::TCP, 20, ecn);
            let ip = etherparse::Ipv4HeaderSlice::from_slice(&frame[ETH_LEN..]).unwrap();
            assert_eq!(ip.ecn().value(), ecn.bits());
            assert_eq!(ip.dcp().value(), 0);
            assert_eq!(ip.to_header().calc_header_checksum(), ip.header_checksum());
            let (a6, b6) = (IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 1]), IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, 2]));
            let mut frame = [0xa5u8; HEADERS6];
            write_ip_headers(&mut frame, mac_a, mac_b, a6, b6, IpNumber::TCP, 20, ecn);
            let ip = etherparse::Ipv6HeaderSlice::from_slice(&frame[ETH_LEN..]).unwrap();
            assert_eq!(ip.traffic_class(), ecn.bits());
        }
    }

    /// A template writes what `write_ip_headers` writes, for every payload length an IPv4
    /// datagram can carry and every ECN field, in both families, and for addresses whose
    /// header sums carry (the incremental checksum must fold as a full one does).
    #[test]
    fn a_header_template_writes_what_write_ip_headers_writes() {
        let (mac_a, mac_b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let pairs: [(IpAddr, IpAddr); 4] = [
            ([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
            ([255, 255, 255, 254].into(), [255, 255, 255, 255].into()),
            ([0, 0, 0, 0].into(), [0, 0, 0, 1].into()),
            ([0xfd00, 0, 0, 0, 0, 0, 0, 1].into(), [0xfd00, 0, 0, 0, 0, 0, 0xffff, 2].into()),
        ];
        for (src, dst) in pairs {
            let template = HeaderTemplate::new(mac_a, mac_b, src, dst, IpNumber::TCP);
            assert_eq!(template.header_len(), headers_len(dst));
            assert_eq!(template.dst_mac(), mac_b);
            for len in 0..=65_515 {
                for ecn in [IpEcn::NotEct, IpEcn::Ect1, IpEcn::Ect0, IpEcn::Ce] {
                    let (mut expected, mut written) = ([0xa5u8; HEADERS6], [0xa5u8; HEADERS6]);
                    write_ip_headers(&mut expected, mac_a, mac_b, src, dst, IpNumber::TCP, len, ecn);
                    template.write(&mut written, len, ecn);
                    assert_eq!(written, expected, "{src} -> {dst}, {len} bytes, {ecn:?}");
                }
            }
        }
    }
}

//! IPv6 (RFC 8200) and ICMPv6 (RFC 4443): the checks a host makes on a packet, its
//! extension headers, echo, errors for TCP, and Neighbour Discovery's messages handed on.
//! The headers in front of what we send are written by [`crate::wire`].

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv6Addr};

use bypass_tcp::{Instant, IpEcn};
use etherparse::{IpNumber, Ipv6HeaderSlice};

use super::*;
use crate::counters::Drop;
use crate::fragments::{Fragment, FragmentKey};
use crate::wire::icmp::{self, IcmpMessage};

/// Where an IPv6 packet's upper-layer payload is, once its extension headers are walked.
enum Payload<'a> {
    /// The whole upper-layer payload, `protocol` (RFC 8200 4: the last Next Header).
    Whole(IpNumber, &'a [u8]),
    /// One fragment of it (RFC 8200 4.5): the Fragment header's fields and its data.
    Fragment { protocol: IpNumber, offset: usize, more: bool, id: u32, data: &'a [u8] },
    /// Nothing for us: No Next Header (59), or a header we drop (the reason).
    Nothing(Option<(Drop, &'static str)>),
}

impl Interface {
    pub(super) fn receive_ipv6(&mut self, now: Instant, src_mac: [u8; 6], packet: &[u8]) {
        let Ok(ip) = Ipv6HeaderSlice::from_slice(packet) else {
            return self.drop(Drop::BadIpv6Header, "IPv6 header");
        };
        // A payload length of 0 would be a jumbogram (RFC 2675), which no Ethernet carries.
        let end = IPV6_LEN + usize::from(ip.payload_length());
        if ip.payload_length() == 0 && ip.next_header() != IpNumber::IPV6_NO_NEXT_HEADER || end > packet.len() {
            return self.drop(Drop::BadIpv6Header, "IPv6 payload length");
        }
        let (src, dst) = (ip.source_addr(), ip.destination_addr());
        if dst.is_multicast() {
            if !self.addrs.joined(dst) {
                return self.drop(Drop::Ipv6NotForUs, "IPv6 to a multicast group we did not join");
            }
        } else if !self.addrs.is_ours_v6(dst) {
            return self.drop(Drop::Ipv6NotForUs, "IPv6 for another host");
        }
        // The unspecified source is only for duplicate address detection (RFC 4861 7.1.1),
        // which the Neighbour Discovery checks look at.
        if !src.is_unspecified()
            && let Some(why) = self.addrs.martian_v6(src)
        {
            self.counters.drop(Drop::MartianSource);
            log::debug!("drop {}: {src} -> {dst}: source is {why}", Drop::MartianSource.name());
            if self.notes.is_some() {
                let _ = write!(self.note, "dropped: {} (source {src} is {why})", Drop::MartianSource.name());
            }
            return;
        }
        let hop_limit = ip.hop_limit();
        // The ECN field, the traffic class's two low bits, goes up to TCP (RFC 3168 5).
        let ecn = IpEcn::from_tos(ip.traffic_class());
        match walk_extension_headers(ip.next_header(), &packet[IPV6_LEN..end]) {
            Payload::Whole(protocol, body) => {
                self.receive_ipv6_payload(now, src_mac, src, dst, hop_limit, protocol, body, ecn)
            }
            Payload::Fragment { protocol, offset, more, id, data } => {
                if dst.is_multicast() {
                    return self.drop(Drop::FragmentDropped, "IPv6 fragment to a multicast group");
                }
                // Only the first fragment's Next Header counts (RFC 8200 4.5): it is kept as
                // the "header" the reassembler returns.
                let key = FragmentKey::ipv6(src, dst, id);
                let first = [protocol.0];
                let frag = Fragment::new(offset, more, data).with_header(&first).with_ecn(ecn);
                self.reassemble(now, key, frag, |host, datagram| {
                    let protocol = IpNumber(datagram.header.first().copied().unwrap_or(59));
                    if is_ndp(protocol, datagram.payload) {
                        return host.drop(Drop::BadNdp, FRAGMENTED_NDP);
                    }
                    let (payload, ecn) = (datagram.payload, datagram.ecn);
                    host.receive_ipv6_payload(now, src_mac, src, dst, hop_limit, protocol, payload, ecn);
                });
            }
            Payload::Nothing(None) => {}
            Payload::Nothing(Some((reason, what))) => self.drop(reason, what),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_ipv6_payload(
        &mut self,
        now: Instant,
        src_mac: [u8; 6],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        protocol: IpNumber,
        body: &[u8],
        ecn: IpEcn,
    ) {
        match protocol {
            // Only Neighbour Discovery comes from :: (RFC 4861 7.1.1); an error's source is
            // the unicast address of the node that sends it (RFC 4443 2.2).
            IpNumber::IPV6_ICMP if !src.is_unspecified() || is_ndp(protocol, body) => {
                self.receive_icmpv6(now, src_mac, src, dst, hop_limit, body)
            }
            _ if src.is_unspecified() => self.drop(Drop::MartianSource, "IPv6 from :: that is not NDP"),
            IpNumber::TCP if dst.is_multicast() => self.drop(Drop::Ipv6NotForUs, "TCP to a multicast group"),
            IpNumber::TCP => self.receive_tcp(now, src_mac, src.into(), dst.into(), body, ecn, self.rx_verified),
            _ => self.drop(Drop::UnknownProtocol, "IPv6 next header"),
        }
    }

    /// ICMPv6 (RFC 4443): echo, errors about our TCP segments, and Neighbour Discovery.
    fn receive_icmpv6(
        &mut self,
        now: Instant,
        src_mac: [u8; 6],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        body: &[u8],
    ) {
        let message = IcmpMessage::parse(body).filter(|_| self.rx_verified || icmp::checksum_ok_v6(src, dst, body));
        let Some(message) = message else {
            return self.drop(Drop::BadIcmpv6, "ICMPv6 checksum or length");
        };
        match message.kind {
            // Echo request (RFC 4443 4.1). Those to a multicast group are not answered (Linux
            // answers them unless `icmp.echo_ignore_multicast`; a host that serves TCP has
            // no need to, and an answer would come from a unicast address anyway).
            128 if dst.is_multicast() => self.drop(Drop::IcmpIgnored, "echo request to a multicast group"),
            128 => self.reply_echo(src_mac, IpAddr::V6(dst), IpAddr::V6(src), body),
            // Destination unreachable, packet too big, time exceeded, parameter problem: as
            // much of the packet we sent as fits (RFC 4443 2.4 (c), 3).
            1..=4 => {
                let Ok(inner) = Ipv6HeaderSlice::from_slice(message.body) else {
                    return self.drop(Drop::BadIcmpv6, "ICMPv6 error quoting no IPv6 header");
                };
                let (ours, theirs) = (inner.source_addr(), inner.destination_addr());
                if inner.next_header() != IpNumber::TCP || !self.addrs.is_ours_v6(ours) {
                    return self.drop(Drop::IcmpIgnored, "ICMPv6 error about no TCP segment of ours");
                }
                let Some(error) = bypass_tcp::IcmpError::from_icmpv6(message.kind, message.code, message.mtu()) else {
                    return self.drop(Drop::IcmpIgnored, "ICMPv6 error TCP does not act on");
                };
                let tcp = &message.body[IPV6_LEN..];
                self.icmp_error_for_tcp(now, IpAddr::V6(ours), IpAddr::V6(theirs), tcp, error);
            }
            133..=137 => self.receive_ndp(now, src_mac, src, dst, hop_limit, body),
            _ => self.drop(Drop::IcmpIgnored, "ICMPv6 type we do not act on"),
        }
    }

    /// Return the next hop towards IPv6 `dst`: `dst` itself when on-link (link-local, one of
    /// our prefixes, or a prefix a router advertised), else the configured gateway or the
    /// default router (RFC 4861 5.2), else `dst` itself as if on-link.
    pub(super) fn next_hop6(&self, now: Instant, dst: Ipv6Addr) -> Ipv6Addr {
        if self.addrs.on_link_v6(dst) || self.ndp.on_link(dst, now) {
            return dst;
        }
        self.config.gateway6.or_else(|| self.ndp.default_router(now)).unwrap_or(dst)
    }
}

/// Walk the extension headers after the fixed header, from `next` over `rest` (RFC 8200 4.1
/// order), to the upper-layer payload or a fragment of it.
fn walk_extension_headers(mut next: IpNumber, mut rest: &[u8]) -> Payload<'_> {
    const BAD: Payload<'static> = Payload::Nothing(Some((Drop::BadIpv6Header, "IPv6 extension header")));
    let mut atomic = false;
    for i in 0..8 {
        match next {
            // RFC 8200 4.1: Hop-by-Hop Options only right after the IPv6 header; Next Header 0
            // anywhere else is no header we recognise (4: discard).
            IpNumber::IPV6_HEADER_HOP_BY_HOP if i > 0 => return BAD,
            IpNumber::IPV6_HEADER_HOP_BY_HOP | IpNumber::IPV6_DESTINATION_OPTIONS => {
                let Some(len) = rest.get(1).map(|&l| (usize::from(l) + 1) * 8) else { return BAD };
                if len > rest.len() || !options_skippable(&rest[2..len]) {
                    return BAD;
                }
                next = IpNumber(rest[0]);
                rest = &rest[len..];
            }
            IpNumber::IPV6_ROUTE_HEADER => {
                // RFC 8200 4.4: with segments left, a host is not the final destination and
                // has nothing to route; with none left, it is skipped.
                let Some(len) = rest.get(1).map(|&l| (usize::from(l) + 1) * 8) else { return BAD };
                if len > rest.len() || rest[3] != 0 {
                    return BAD;
                }
                next = IpNumber(rest[0]);
                rest = &rest[len..];
            }
            IpNumber::IPV6_FRAGMENTATION_HEADER => {
                if rest.len() < 8 {
                    return BAD;
                }
                let offset = usize::from(u16::from_be_bytes([rest[2], rest[3]]) & !7);
                let more = rest[3] & 1 == 1;
                let id = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                let protocol = IpNumber(rest[0]);
                if offset == 0 && !more {
                    // An atomic fragment (RFC 6946 4): the whole packet, no reassembly.
                    atomic = true;
                    next = protocol;
                    rest = &rest[8..];
                    continue;
                }
                return Payload::Fragment { protocol, offset, more, id, data: &rest[8..] };
            }
            IpNumber::IPV6_NO_NEXT_HEADER => return Payload::Nothing(None),
            protocol if atomic && is_ndp(protocol, rest) => {
                return Payload::Nothing(Some((Drop::BadNdp, FRAGMENTED_NDP)));
            }
            protocol => return Payload::Whole(protocol, rest),
        }
    }
    Payload::Nothing(Some((Drop::BadIpv6Header, "more than 8 IPv6 extension headers")))
}

/// Why a Neighbour Discovery message behind a Fragment header, atomic or not, is dropped:
/// RFC 6980 5 (a host MUST silently ignore it; Linux's `suppress_frag_ndisc`).
const FRAGMENTED_NDP: &str = "Neighbour Discovery in a fragment (RFC 6980)";

/// Return whether `body`, carried as `protocol`, is a Neighbour Discovery message (ICMPv6
/// types 133 to 137, RFC 4861 4).
fn is_ndp(protocol: IpNumber, body: &[u8]) -> bool {
    protocol == IpNumber::IPV6_ICMP && body.first().is_some_and(|kind| (133..=137).contains(kind))
}

/// Return whether every option in a Hop-by-Hop or Destination Options header may be skipped
/// (RFC 8200 4.2): Pad1, PadN, and any whose type's two high bits are 00 ("skip over this
/// option"), such as Router Alert on MLD reports. Others ask to discard the packet.
fn options_skippable(mut options: &[u8]) -> bool {
    while let Some(&kind) = options.first() {
        if kind == 0 {
            options = &options[1..];
            continue;
        }
        let Some(&len) = options.get(1) else { return false };
        let end = 2 + usize::from(len);
        if end > options.len() || kind >> 6 != 0 {
            return false;
        }
        options = &options[end..];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extension_headers_are_walked_or_refused() {
        // Hop-by-hop with Router Alert (type 5, high bits 00) and PadN, then TCP.
        let hbh = [6, 0, 5, 2, 0, 0, 1, 0, 0xaa];
        assert!(matches!(
            walk_extension_headers(IpNumber::IPV6_HEADER_HOP_BY_HOP, &hbh),
            Payload::Whole(IpNumber::TCP, [0xaa])
        ));
        // An option whose type says "discard" (high bits 01).
        let bad = [6, 0, 0x45, 2, 0, 0, 1, 0];
        assert!(matches!(walk_extension_headers(IpNumber::IPV6_HEADER_HOP_BY_HOP, &bad), Payload::Nothing(Some(_))));
        // A routing header with segments left.
        let route = [6, 0, 4, 1, 0, 0, 0, 0];
        assert!(matches!(walk_extension_headers(IpNumber::IPV6_ROUTE_HEADER, &route), Payload::Nothing(Some(_))));
        // A truncated header.
        assert!(matches!(walk_extension_headers(IpNumber::IPV6_DESTINATION_OPTIONS, &[6]), Payload::Nothing(Some(_))));
        // A fragment, and an atomic fragment.
        let frag = [58, 0, 0x05, 0x01, 0, 0, 0, 9, 1, 2];
        assert!(matches!(
            walk_extension_headers(IpNumber::IPV6_FRAGMENTATION_HEADER, &frag),
            Payload::Fragment { offset: 1280, more: true, id: 9, data: [1, 2], .. }
        ));
        let atomic = [6, 0, 0, 0, 0, 0, 0, 9, 7];
        assert!(matches!(
            walk_extension_headers(IpNumber::IPV6_FRAGMENTATION_HEADER, &atomic),
            Payload::Whole(IpNumber::TCP, [7])
        ));
        assert!(matches!(walk_extension_headers(IpNumber::IPV6_NO_NEXT_HEADER, &[]), Payload::Nothing(None)));
        // Hop-by-hop behind another header (RFC 8200 4.1), NDP in an atomic fragment (RFC 6980).
        let late = [0, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0];
        assert!(matches!(walk_extension_headers(IpNumber::IPV6_DESTINATION_OPTIONS, &late), Payload::Nothing(Some(_))));
        let ndp = [58, 0, 0, 0, 0, 0, 0, 9, 135, 0];
        assert!(matches!(
            walk_extension_headers(IpNumber::IPV6_FRAGMENTATION_HEADER, &ndp),
            Payload::Nothing(Some((Drop::BadNdp, _)))
        ));
    }
}

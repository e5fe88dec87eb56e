//! IPv4 (RFC 791) and ICMP (RFC 792): the checks a host makes on a datagram, echo, and
//! routing to the next hop. The headers in front of what we send are written by
//! [`crate::wire`].

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use bypass_tcp::{Instant, IpEcn};
use etherparse::{IpNumber, Ipv4HeaderSlice};

use super::*;
use crate::counters::Drop;
use crate::fragments::{Fragment, FragmentKey};
use crate::wire::icmp::{self, IcmpMessage};

impl Interface {
    pub(super) fn receive_ipv4(&mut self, now: Instant, src_mac: [u8; 6], payload: &[u8]) {
        let Ok(ip) = Ipv4HeaderSlice::from_slice(payload) else {
            return self.drop(Drop::BadIpv4Header, "IPv4 header");
        };
        let header = ip.slice();
        if !self.rx_verified && !checksum_ok(header) {
            return self.drop(Drop::BadIpv4Checksum, "IPv4 header checksum");
        }
        let dst = ip.destination_addr();
        if !self.addrs.is_ours_v4(dst) {
            return self.drop(Drop::WrongIpAddress, "IPv4 for another host");
        }
        let src = ip.source_addr();
        if let Some(why) = self.martian(src) {
            // RFC 1122 3.2.1.3: a host MUST silently discard a datagram from a source
            // address that is invalid by the rules of that section.
            self.counters.drop(Drop::MartianSource);
            let proto = ip.protocol().0;
            log::debug!("drop {}: {src} -> {dst} (IP protocol {proto}): source is {why}", Drop::MartianSource.name(),);
            if self.notes.is_some() {
                let _ = write!(self.note, "dropped: {} (source {src} is {why})", Drop::MartianSource.name());
            }
            return;
        }
        let total = ip.total_len() as usize;
        if total < header.len() || total > payload.len() {
            return self.drop(Drop::BadIpv4Header, "IPv4 total length");
        }
        let body = &payload[header.len()..total];
        let protocol = ip.protocol();
        if ip.more_fragments() || ip.fragments_offset().value() != 0 {
            return self.receive_ipv4_fragment(now, src_mac, ip, body);
        }
        // The ECN field goes up to TCP with the segment (RFC 3168 5).
        let ecn = IpEcn::from_tos(ip.ecn().value());
        if protocol == IpNumber::TCP {
            // `receive_ipv4_payload`'s first arm, called from here: a segment (nearly every
            // datagram) goes to TCP without passing through a second call's arguments. Its
            // checksum is checked here, the pseudo-header's addresses read from the header
            // in hand; one that fails goes to `Segment::parse`, which says why.
            let checked = self.rx_verified || crate::wire::sum::tcp_ok_v4(header, body);
            return self.receive_tcp(now, src_mac, src.into(), dst.into(), body, ecn, checked);
        }
        self.receive_ipv4_payload(now, src_mac, src, dst, protocol, body, ecn);
    }

    /// A fragment of a datagram (RFC 791 3.2), `body` the data behind its header `ip`:
    /// to the reassembler, and the datagram it completes to its protocol. Out of line: the
    /// reassembly's code and locals would otherwise weigh on every datagram's path.
    #[inline(never)]
    fn receive_ipv4_fragment(&mut self, now: Instant, src_mac: [u8; 6], ip: Ipv4HeaderSlice<'_>, body: &[u8]) {
        let (src, dst, protocol) = (ip.source_addr(), ip.destination_addr(), ip.protocol());
        let key = FragmentKey::ipv4(src, dst, ip.identification(), protocol.0);
        let offset = usize::from(ip.fragments_offset().value()) * 8;
        // The reassembler keeps RFC 3168 5.3's rule for the fragments' ECN fields.
        let frag = Fragment::new(offset, ip.more_fragments(), body).with_ecn(IpEcn::from_tos(ip.ecn().value()));
        self.reassemble(now, key, frag, |host, datagram| {
            host.receive_ipv4_payload(now, src_mac, src, dst, protocol, datagram.payload, datagram.ecn)
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn receive_ipv4_payload(
        &mut self,
        now: Instant,
        src_mac: [u8; 6],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: IpNumber,
        body: &[u8],
        ecn: IpEcn,
    ) {
        match protocol {
            IpNumber::TCP => self.receive_tcp(now, src_mac, src.into(), dst.into(), body, ecn, self.rx_verified),
            IpNumber::ICMP => self.receive_icmp(now, src_mac, src, dst, body),
            _ => self.drop(Drop::UnknownProtocol, "IP protocol"),
        }
    }

    /// Return why no datagram may come from `src`, if none may: RFC 1122 3.2.1.3 allows
    /// no broadcast or multicast source ("the IP source address ... MUST be one of its own
    /// IP addresses (but not a broadcast or multicast address)"), {0, 0} and {0, host}
    /// only while a host learns its address (BOOTP/DHCP, which we do not serve), and no
    /// 127/8 outside a host. Our own address from the wire is spoofed or a loop (Linux's
    /// `fib_validate_source` treats a local source as martian unless `accept_local`).
    pub(super) fn martian(&self, src: Ipv4Addr) -> Option<&'static str> {
        let ours = self.addrs.ipv4?;
        let directed = self.directed_broadcast;
        if src == ours.addr {
            Some("our own address")
        } else if src.is_broadcast() {
            Some("the limited broadcast address (RFC 1122 3.2.1.3 (c))")
        } else if directed == Some(src) {
            Some("our subnet's directed broadcast address (RFC 1122 3.2.1.3 (d), (e))")
        } else if src.octets()[0] == 0 {
            Some("in this network, 0.0.0.0/8 (RFC 1122 3.2.1.3 (a), (b))")
        } else if src.is_loopback() {
            Some("loopback, 127.0.0.0/8 (RFC 1122 3.2.1.3 (g))")
        } else if src.is_multicast() {
            Some("multicast, 224.0.0.0/4")
        } else {
            None
        }
    }

    /// ICMP (RFC 792): answer an echo request with an echo reply, and pass the errors that
    /// quote one of our TCP segments to its connection (RFC 1122 3.2.2, 4.2.3.9).
    pub(super) fn receive_icmp(&mut self, now: Instant, src_mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr, body: &[u8]) {
        let message = IcmpMessage::parse(body).filter(|_| self.rx_verified || icmp::checksum_ok_v4(body));
        let Some(message) = message else {
            return self.drop(Drop::BadIcmp, "ICMP checksum or length");
        };
        match (message.kind, message.code) {
            (8, 0) => self.reply_echo(src_mac, IpAddr::V4(dst), IpAddr::V4(src), body),
            (3 | 11 | 12, _) => {
                // Destination unreachable, time exceeded, parameter problem: the payload
                // quotes the IPv4 header of what we sent and at least 8 octets of it (RFC 792;
                // RFC 1812 4.3.2.3 lets routers quote more).
                let quoted = message.body;
                let Ok(inner) = Ipv4HeaderSlice::from_slice(quoted) else {
                    return self.drop(Drop::BadIcmp, "ICMP error quoting no IPv4 header");
                };
                let error = bypass_tcp::IcmpError::from_icmpv4(message.kind, message.code, message.next_hop_mtu());
                let (ours, theirs) = (inner.source_addr(), inner.destination_addr());
                if inner.protocol() != IpNumber::TCP || !self.addrs.is_ours_v4(ours) {
                    return self.drop(Drop::IcmpIgnored, "ICMP error about no TCP segment of ours");
                }
                let Some(error) = error else {
                    return self.drop(Drop::IcmpIgnored, "ICMP error TCP does not act on");
                };
                let tcp = &quoted[inner.slice().len()..];
                self.icmp_error_for_tcp(now, IpAddr::V4(ours), IpAddr::V4(theirs), tcp, error);
            }
            (4, _) => self.drop(Drop::IcmpIgnored, "source quench (ignored, RFC 6633)"),
            _ => self.drop(Drop::IcmpIgnored, "not an echo request or an error"),
        }
    }

    /// Return the directed broadcast address of our IPv4 subnet, if it has one: a /31 has
    /// no broadcast address (RFC 3021), and a /32 has no other host.
    pub(super) fn directed_broadcast(addrs: &Addresses) -> Option<Ipv4Addr> {
        let ours = addrs.ipv4?;
        let prefix = ours.prefix_len.min(32);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        (prefix <= 30).then(|| Ipv4Addr::from((u32::from(ours.addr) & mask) | !mask))
    }

    /// Return the next hop towards IPv4 `dst`: `dst` itself in our subnet, else the gateway
    /// (`dst` itself without one, as if on-link).
    pub(super) fn next_hop(&self, dst: Ipv4Addr) -> Ipv4Addr {
        let on_link = self.addrs.ipv4.is_some_and(|c| c.contains(dst));
        match self.config.gateway {
            Some(gw) if !on_link => gw,
            _ => dst,
        }
    }
}

/// Return whether the IPv4 header `header` has the right checksum: its 16-bit words sum to
/// all ones in one's complement (RFC 791 3.1, RFC 1071). A header without options (20
/// bytes: nearly every one) is summed in a fixed form, five 32-bit words in a `u64`
/// (about a third of etherparse's loop, which walks any length); any other by etherparse.
///
/// The fixed form: a one's complement sum of 16-bit words is their sum `s` modulo 0xffff
/// (2^16 = 1 there, so 32-bit words, in either byte order, give the same residue: RFC 1071
/// 2 (A), (B)), and folded with end-around carries it is all ones exactly when `s` is a
/// nonzero multiple of 0xffff (a nonzero sum never folds to 0).
#[inline]
fn checksum_ok(header: &[u8]) -> bool {
    match <&[u8; 20]>::try_from(header) {
        Ok(h) => {
            let word = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            let sum = word(0) + word(4) + word(8) + word(12) + word(16);
            sum != 0 && sum % 0xffff == 0
        }
        Err(_) => etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement() == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etherparse's verdict, which `checksum_ok` takes for headers with options (its sums are
    /// of native-endian words: a checksum it returns is written with `to_ne_bytes`).
    fn etherparse_ok(header: &[u8]) -> bool {
        etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement() == 0
    }

    /// The fixed form agrees with etherparse on random headers, on the same headers with
    /// their checksum set right (either form of zero: 0x0000 and 0xffff sum alike), with a
    /// bit flipped after that, and on the edge cases of all zeros and all ones.
    #[test]
    fn a_header_without_options_is_checked_as_etherparse_checks_it() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut cases: Vec<[u8; 20]> = vec![[0; 20], [0xff; 20]];
        for _ in 0..20_000 {
            let mut h = [0u8; 20];
            for chunk in h.chunks_mut(8) {
                let bytes = next().to_ne_bytes();
                chunk.copy_from_slice(&bytes[..chunk.len()]);
            }
            cases.push(h);
            // The same header with its checksum set right, then a bit flipped.
            h[10..12].copy_from_slice(&[0, 0]);
            let sum = etherparse::checksum::Sum16BitWords::new().add_slice(&h).ones_complement();
            h[10..12].copy_from_slice(&sum.to_ne_bytes());
            cases.push(h);
            if sum == 0 {
                let mut other = h;
                other[10..12].copy_from_slice(&[0xff, 0xff]);
                cases.push(other);
            }
            let bit = next() as usize % 160;
            let mut flipped = h;
            flipped[bit / 8] ^= 1 << (bit % 8);
            cases.push(flipped);
        }
        let mut right = 0;
        for h in &cases {
            assert_eq!(checksum_ok(h), etherparse_ok(h), "{h:02x?}");
            right += usize::from(checksum_ok(h));
        }
        assert!(right >= 20_000, "the cases include headers with a right checksum ({right})");
        // Longer headers (options) go to etherparse.
        let mut long = [0x46u8; 24];
        long[10..12].copy_from_slice(&[0, 0]);
        let sum = etherparse::checksum::Sum16BitWords::new().add_slice(&long).ones_complement();
        long[10..12].copy_from_slice(&sum.to_ne_bytes());
        assert!(checksum_ok(&long));
        long[0] ^= 1;
        assert!(!checksum_ok(&long));
    }
}

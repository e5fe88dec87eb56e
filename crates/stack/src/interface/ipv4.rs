//! IPv4 (RFC 791) and ICMP (RFC 792): the checks a host makes on a datagram, echo, routing
//! to the next hop, and the headers in front of what we send.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use bypass_tcp::Instant;
use etherparse::{EtherType, Ethernet2Header, IpNumber, Ipv4Header, Ipv4HeaderSlice};

use super::*;
use crate::counters::Drop;

impl Interface {
    pub(super) fn receive_ipv4(&mut self, now: Instant, src_mac: [u8; 6], payload: &[u8]) {
        let Ok(ip) = Ipv4HeaderSlice::from_slice(payload) else {
            return self.drop(Drop::BadIpv4Header, "IPv4 header");
        };
        let header = ip.slice();
        if etherparse::checksum::Sum16BitWords::new().add_slice(header).ones_complement() != 0 {
            return self.drop(Drop::BadIpv4Checksum, "IPv4 header checksum");
        }
        if ip.more_fragments() || ip.fragments_offset().value() != 0 {
            return self.drop(Drop::Ipv4Fragment, "IPv4 fragment");
        }
        if ip.destination_addr() != self.config.ip {
            return self.drop(Drop::WrongIpAddress, "IPv4 for another host");
        }
        let src = ip.source_addr();
        if let Some(why) = self.martian(src) {
            // RFC 1122 3.2.1.3: a host MUST silently discard a datagram from a source
            // address that is invalid by the rules of that section.
            self.counters.drop(Drop::MartianSource);
            let proto = ip.protocol().0;
            log::debug!(
                "drop {}: {src} -> {} (IP protocol {proto}): source is {why}",
                Drop::MartianSource.name(),
                self.config.ip
            );
            if self.capture.is_some() {
                let _ = write!(self.note, "dropped: {} (source {src} is {why})", Drop::MartianSource.name());
            }
            return;
        }
        let total = ip.total_len() as usize;
        if total < header.len() || total > payload.len() {
            return self.drop(Drop::BadIpv4Header, "IPv4 total length");
        }
        let body = &payload[header.len()..total];
        match ip.protocol() {
            IpNumber::TCP => self.receive_tcp(now, src_mac, src, body),
            IpNumber::ICMP => self.receive_icmp(src_mac, src, body),
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
        let prefix = self.config.prefix_len.min(32);
        let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - prefix) };
        // A /31 has no broadcast address (RFC 3021), and a /32 has no other host.
        let directed = (prefix <= 30).then(|| Ipv4Addr::from((u32::from(self.config.ip) & mask) | !mask));
        if src == self.config.ip {
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

    /// ICMP echo request: answer with an echo reply (RFC 792).
    pub(super) fn receive_icmp(&mut self, src_mac: [u8; 6], src: Ipv4Addr, body: &[u8]) {
        if body.len() < 8 || etherparse::checksum::Sum16BitWords::new().add_slice(body).ones_complement() != 0 {
            return self.drop(Drop::BadIcmp, "ICMP checksum or length");
        }
        if body[0] != 8 || body[1] != 0 {
            return self.drop(Drop::IcmpIgnored, "not an echo request");
        }
        let len = HEADERS + body.len();
        if len > self.mtu + ETH_LEN {
            return self.drop(Drop::BadIcmp, "echo request larger than our MTU");
        }
        let mut buf = self.buffer();
        buf.resize(len, 0);
        buf[HEADERS..].copy_from_slice(body);
        buf[HEADERS] = 0; // echo reply
        buf[HEADERS + 2..HEADERS + 4].fill(0);
        // The sum is of native-endian words, so it is stored native-endian (RFC 1071 2(B)).
        let sum = etherparse::checksum::Sum16BitWords::new().add_slice(&buf[HEADERS..]).ones_complement();
        buf[HEADERS + 2..HEADERS + 4].copy_from_slice(&sum.to_ne_bytes());
        self.write_headers(&mut buf, src_mac, src, IpNumber::ICMP, body.len());
        self.queue_control(buf, || format!("ICMP echo reply to {src}"));
        if self.capture.is_some() {
            let _ = write!(self.note, "ICMP echo request from {src}: answered");
        }
        self.counters.icmp_echo_replies += 1;
    }

    pub(super) fn next_hop(&self, dst: Ipv4Addr) -> Ipv4Addr {
        let mask = if self.config.prefix_len == 0 { 0 } else { u32::MAX << (32 - self.config.prefix_len.min(32)) };
        let same_subnet = (u32::from(dst) & mask) == (u32::from(self.config.ip) & mask);
        match self.config.gateway {
            Some(gw) if !same_subnet => gw,
            _ => dst,
        }
    }

    /// Write the Ethernet and IPv4 headers in front of an IP payload of `len` bytes.
    pub(super) fn write_headers(&self, frame: &mut [u8], dst_mac: [u8; 6], dst: Ipv4Addr, proto: IpNumber, len: usize) {
        write_headers(frame, self.mac, dst_mac, self.config.ip, dst, proto, len);
    }
}
/// Write Ethernet and IPv4 headers at the front of `frame` for an IP payload of `len` bytes.
pub(super) fn write_headers(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: IpNumber,
    len: usize,
) {
    let eth = Ethernet2Header { source: src_mac, destination: dst_mac, ether_type: EtherType::IPV4 };
    frame[..ETH_LEN].copy_from_slice(&eth.to_bytes());
    let mut ip = Ipv4Header::new(len as u16, 64, proto, src.octets(), dst.octets()).expect("payload fits IPv4");
    ip.dont_fragment = true;
    ip.header_checksum = ip.calc_header_checksum();
    frame[ETH_LEN..HEADERS].copy_from_slice(&ip.to_bytes());
}

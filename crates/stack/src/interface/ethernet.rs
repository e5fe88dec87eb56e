//! Ethernet (IEEE 802.3, RFC 894): the demux by ethertype, drops with their reasons, and
//! the frames that belong to no connection.

use std::fmt::Write as _;

use std::net::IpAddr;

use bypass_tcp::Instant;
use etherparse::{EtherType, Ethernet2Header, IpNumber};

use super::*;
use crate::counters::Drop;

impl Interface {
    pub(super) fn receive_frame(&mut self, now: Instant, frame: &[u8]) {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += frame.len() as u64;
        let Ok((eth, payload)) = Ethernet2Header::from_slice(frame) else {
            return self.drop(Drop::Truncated, "frame shorter than an Ethernet header");
        };
        // IPv6 multicast goes to 33:33 and the group's low 32 bits (RFC 2464 7); the IPv6
        // layer checks the group is one we joined.
        let multicast6 = eth.destination[..2] == [0x33, 0x33] && self.addrs.has_ipv6();
        if eth.destination != self.mac && eth.destination != BROADCAST && !multicast6 {
            return self.drop(Drop::WrongMac, "not our MAC");
        }
        match eth.ether_type {
            EtherType::ARP if self.addrs.ipv4.is_some() => self.receive_arp(now, payload),
            EtherType::IPV4 if self.addrs.ipv4.is_some() => self.receive_ipv4(now, eth.source, payload),
            EtherType::IPV6 if self.addrs.has_ipv6() => self.receive_ipv6(now, eth.source, payload),
            _ => self.drop(Drop::UnknownEthertype, "ethertype"),
        }
    }

    pub(super) fn drop(&mut self, reason: Drop, what: &str) {
        self.counters.drop(reason);
        log::debug!("drop {}: {what}", reason.name());
        if self.notes.is_some() {
            let _ = write!(self.note, "dropped: {} ({what})", reason.name());
        }
    }

    /// Queue a frame that belongs to no connection, noting `what` when capturing.
    pub(super) fn queue_control(&mut self, frame: Vec<u8>, what: impl FnOnce() -> String) {
        let note = if self.notes.is_some() { what() } else { String::new() };
        self.control.push_back((frame, note));
    }

    pub(super) fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(128));
        b.clear();
        b
    }
}

/// Return the length of the Ethernet and IP headers in front of an IP payload to `dst`.
pub(super) fn headers_len(dst: IpAddr) -> usize {
    match dst {
        IpAddr::V4(_) => HEADERS,
        IpAddr::V6(_) => HEADERS6,
    }
}

/// Write the Ethernet and IP headers (of `src`'s family) at the front of `frame` for an IP
/// payload of `len` bytes carrying `proto`; `frame` is at least `headers_len(dst)` long.
pub(super) fn write_ip_headers(
    frame: &mut [u8],
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
    proto: IpNumber,
    len: usize,
) {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => ipv4::write_headers(frame, src_mac, dst_mac, s, d, proto, len),
        (IpAddr::V6(s), IpAddr::V6(d)) => ipv6::write_headers(frame, src_mac, dst_mac, s, d, proto, len),
        _ => unreachable!("a packet's addresses are of one family"),
    }
}

pub(super) fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

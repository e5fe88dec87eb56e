//! Ethernet (IEEE 802.3, RFC 894): the demux by ethertype, drops with their reasons, and
//! the frames that belong to no connection.

use std::fmt::Write as _;

use std::net::{Ipv4Addr, Ipv6Addr};

use bypass_tcp::{Checksum, FourTuple, Instant, Segment};
use etherparse::{ArpOperation, EtherType, Ethernet2Header, IpNumber};

use super::*;
use crate::counters::Drop;
use crate::wire::arp;
use crate::wire::ndp::{self, NaFlags, Solicit};

impl Interface {
    pub(super) fn receive_frame(&mut self, now: Instant, frame: &[u8]) {
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += frame.len() as u64;
        let Ok((eth, payload)) = Ethernet2Header::from_slice(frame) else {
            return self.drop(Drop::Truncated, "frame shorter than an Ethernet header");
        };
        // IPv6 multicast goes to 33:33 and the group's low 32 bits (RFC 2464 7); the IPv6
        // layer checks the group is one we joined. Asked only of a frame not to our MAC.
        let multicast6 = |eth: &Ethernet2Header| eth.destination[..2] == [0x33, 0x33] && self.addrs.has_ipv6();
        if eth.destination != self.mac && eth.destination != BROADCAST && !multicast6(&eth) {
            return self.drop(Drop::WrongMac, "not our MAC");
        }
        match eth.ether_type {
            EtherType::ARP if self.addrs.ipv4.is_some() => self.receive_arp(now, payload),
            EtherType::IPV4 if self.addrs.ipv4.is_some() => self.receive_ipv4(now, eth.source, payload),
            EtherType::IPV6 if self.addrs.has_ipv6() => self.receive_ipv6(now, eth.source, payload),
            _ => self.drop(Drop::UnknownEthertype, "ethertype"),
        }
    }

    /// Count a frame dropped for `reason`, log it and note it. Cold and out of line: the
    /// receive path's many drop sites would otherwise each carry its logging code.
    #[cold]
    #[inline(never)]
    pub(super) fn drop(&mut self, reason: Drop, what: &str) {
        self.counters.drop(reason);
        log::debug!("drop {}: {what}", reason.name());
        if self.notes.is_some() {
            let _ = write!(self.note, "dropped: {} ({what})", reason.name());
        }
    }

    /// Queue a frame that belongs to no connection, noting `what` when capturing.
    pub(super) fn queue_control(&mut self, frame: Vec<u8>, what: impl FnOnce() -> String) {
        self.queue_reply(Reply::Frame(frame), what);
    }

    /// Queue a reply that belongs to no connection, to be written at transmit straight into
    /// the device's frame; note `what` when capturing.
    pub(super) fn queue_reply(&mut self, reply: Reply, what: impl FnOnce() -> String) {
        let note = if self.notes.is_some() { what() } else { String::new() };
        self.control.push_back((reply, note));
    }

    pub(super) fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(128));
        b.clear();
        b
    }
}

/// A frame that belongs to no connection, waiting for a transmit buffer: the few fields it is
/// written from rather than the written frame, so that it is written once, straight into the
/// device's buffer at transmit. Only echo replies (their data) and frames held for address
/// resolution keep bytes of their own.
pub(super) enum Reply {
    /// An ARP request or reply from our IPv4 address `src_ip` (RFC 826).
    Arp { op: ArpOperation, src_ip: Ipv4Addr, dst_mac: [u8; 6], dst_ip: Ipv4Addr },
    /// A Neighbour Advertisement of our `target` (RFC 4861 7.2.4).
    Advertisement { dst_mac: [u8; 6], dst_ip: Ipv6Addr, target: Ipv6Addr, flags: NaFlags },
    /// A Neighbour Solicitation for `target` from our `src` (RFC 4861 7.2.2, 7.3.3).
    Solicitation { src: Ipv6Addr, target: Ipv6Addr, dst: Solicit },
    /// A TCP segment for no connection (an RST, or a SYN-ACK carrying a cookie), from
    /// `tuple.local` to `tuple.remote` at `dst_mac`.
    Segment { dst_mac: [u8; 6], tuple: FourTuple, segment: Segment<'static> },
    /// A whole frame.
    Frame(Vec<u8>),
}

impl Reply {
    /// Write the frame from `our_mac` into `buf` (at least a full frame), a segment's
    /// checksum field as `tx_checksum` says; return its length, 0 if it cannot be written.
    pub(super) fn write(&self, buf: &mut [u8], our_mac: [u8; 6], tx_checksum: Checksum) -> usize {
        match *self {
            Reply::Arp { op, src_ip, dst_mac, dst_ip } => {
                arp::write_frame(&mut buf[..arp::ARP_FRAME_LEN], op, our_mac, src_ip, dst_mac, dst_ip);
                arp::ARP_FRAME_LEN
            }
            Reply::Advertisement { dst_mac, dst_ip, target, flags } => {
                ndp::write_advertisement(buf, our_mac, target, dst_mac, dst_ip, target, flags)
            }
            Reply::Solicitation { src, target, dst } => ndp::write_solicitation(buf, our_mac, src, target, dst),
            Reply::Segment { dst_mac, tuple, ref segment } => {
                let (src, dst) = (tuple.local.ip(), tuple.remote.ip());
                let headers = headers_len(dst);
                let Ok(n) = segment.emit_as(tx_checksum, src, dst, &mut buf[headers..]) else { return 0 };
                write_ip_headers(buf, our_mac, dst_mac, src, dst, IpNumber::TCP, n, bypass_tcp::IpEcn::NotEct);
                headers + n
            }
            Reply::Frame(ref frame) => {
                let len = frame.len().min(buf.len());
                buf[..len].copy_from_slice(&frame[..len]);
                len
            }
        }
    }
}

pub(super) fn mac_string(mac: [u8; 6]) -> String {
    let [a, b, c, d, e, f] = mac;
    format!("{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{f:02x}")
}

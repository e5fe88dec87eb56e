//! ICMP for both families: echo replies (RFC 792, RFC 4443 4.2), errors passed to the TCP
//! connection they quote (RFC 1122 4.2.3.9, RFC 5927, RFC 1191, RFC 8201), and datagrams too
//! large for the link cut into fragments (RFC 791 2.3, RFC 8200 4.5).

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use bypass_tcp::{FourTuple, IcmpError, IcmpIgnored, IcmpOutcome, Instant, IpEcn, SeqNum};
use etherparse::{EtherType, IpNumber};

use super::*;
use crate::counters::Drop;
use crate::wire::icmp::{self, QuotedTcp};
use crate::wire::{self, FRAGMENT_HEADER_LEN};

/// How long a learnt path MTU holds for new connections (RFC 1191 6.3: "no less than 10
/// minutes"; Linux `net.ipv4.route.mtu_expires`, 10 minutes).
const PATH_MTU_AGE: std::time::Duration = std::time::Duration::from_secs(600);
/// Most destinations with a learnt path MTU.
const PATH_MTU_ENTRIES: usize = 4096;

impl Interface {
    /// Answer the echo request `request` (the ICMP or ICMPv6 message) from `theirs` to our
    /// `ours`: the same identifier, sequence number and data back (RFC 792; RFC 4443 4.2),
    /// in fragments if it came in fragments.
    pub(super) fn reply_echo(&mut self, dst_mac: [u8; 6], ours: IpAddr, theirs: IpAddr, request: &[u8]) {
        let mut reply = self.buffer();
        reply.extend_from_slice(request);
        let proto = icmp::make_echo_reply(&mut reply, ours, theirs);
        if self.queue_datagram(dst_mac, ours, theirs, proto, &reply, "echo reply") {
            if self.notes.is_some() {
                let _ = write!(self.note, "echo request from {theirs}: answered");
            }
            self.counters.icmp_echo_replies += 1;
        }
        self.spare.push(reply);
    }

    /// Queue an IP datagram carrying `payload` from `src` to `dst` at `dst_mac`, cut into
    /// fragments when it does not fit the MTU: IPv4 without DF, every fragment but the last
    /// a multiple of 8 octets (RFC 791 2.3, 3.2); IPv6 with a Fragment header (RFC 8200 4.5).
    /// Return whether it was queued (a datagram beyond 65,535 octets is not).
    pub(super) fn queue_datagram(
        &mut self,
        dst_mac: [u8; 6],
        src: IpAddr,
        dst: IpAddr,
        proto: IpNumber,
        payload: &[u8],
        what: &str,
    ) -> bool {
        let headers = headers_len(dst);
        let room = self.mtu + ETH_LEN - headers;
        if payload.len() <= room {
            let mut frame = self.buffer();
            frame.resize(headers + payload.len(), 0);
            frame[headers..].copy_from_slice(payload);
            write_ip_headers(&mut frame, self.mac, dst_mac, src, dst, proto, payload.len(), IpEcn::NotEct);
            self.queue_control(frame, || format!("{what} to {dst}"));
            return true;
        }
        // IPv4's Total Length counts its header (RFC 791 3.1); IPv6's fragmentable part may
        // reach 65,535 octets (RFC 8200 4.5).
        let largest = usize::from(u16::MAX) - if dst.is_ipv6() { 0 } else { IPV4_LEN };
        if payload.len() > largest {
            self.drop(Drop::BadIcmp, "reply larger than an IP datagram");
            return false;
        }
        self.fragment_id = self.fragment_id.wrapping_add(1);
        let id = self.fragment_id;
        let frag_header = if dst.is_ipv6() { FRAGMENT_HEADER_LEN } else { 0 };
        let chunk = (room - frag_header) & !7;
        let count = payload.len().div_ceil(chunk);
        for (i, part) in payload.chunks(chunk).enumerate() {
            let offset = i * chunk;
            let more = i + 1 < count;
            let mut frame = self.buffer();
            frame.resize(headers + frag_header + part.len(), 0);
            frame[headers + frag_header..].copy_from_slice(part);
            let len = frag_header + part.len();
            match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    // DF clear, so a router on a narrower link may cut it further (RFC 791 2.3).
                    wire::write_ethernet(&mut frame, self.mac, dst_mac, EtherType::IPV4);
                    let fragment = Some((id as u16, offset, more));
                    wire::write_ipv4(&mut frame[ETH_LEN..], s, d, proto, len, fragment, IpEcn::NotEct);
                }
                _ => {
                    wire::write_ipv6_fragment(&mut frame[headers..], proto, offset, more, id);
                    let next = IpNumber::IPV6_FRAGMENTATION_HEADER;
                    write_ip_headers(&mut frame, self.mac, dst_mac, src, dst, next, len, IpEcn::NotEct);
                }
            }
            self.queue_control(frame, || format!("{what} to {dst}, fragment {} of {count}", i + 1));
        }
        true
    }

    /// Pass an ICMP error from `theirs` about the TCP segment quoted in `tcp` (at least its
    /// ports and sequence number, RFC 792's "64 bits of the original datagram") that we sent
    /// from `ours`, to its connection. TCP checks the quoted sequence number is in the window
    /// (RFC 5927 4.1); a "packet too big" lowers the path MTU of every connection to the
    /// destination (RFC 1191 section 6, RFC 8201 section 4: the path MTU is per destination).
    pub(super) fn icmp_error_for_tcp(
        &mut self,
        now: Instant,
        ours: IpAddr,
        theirs: IpAddr,
        tcp: &[u8],
        error: IcmpError,
    ) {
        let Some(QuotedTcp { src_port, dst_port, seq }) = QuotedTcp::parse(tcp) else {
            return self.drop(Drop::BadIcmp, "ICMP error quoting fewer than 8 octets of TCP");
        };
        let seq = SeqNum(seq);
        let tuple = FourTuple { local: SocketAddr::new(ours, src_port), remote: SocketAddr::new(theirs, dst_port) };
        let Some(&index) = self.conns.table.get(&tuple) else {
            return self.drop(Drop::IcmpOutOfWindow, "ICMP error for no connection of ours");
        };
        let sock = self.conns.slots[index as usize].sock.as_mut().expect("table points at live slots");
        let outcome = sock.conn.handle_icmp(now, seq, error);
        if self.notes.is_some() {
            let _ = write!(self.note, "ICMP error from {theirs} about {tuple}: {error:?} -> {outcome:?}");
        }
        match outcome {
            IcmpOutcome::Ignored(why) => {
                // Out of the window (RFC 5927), or for a connection not open: what a blind
                // attack looks like. A report that lowers nothing (the router's errors
                // about the rest of a window already resent smaller) is only ignored.
                let reason = match why {
                    IcmpIgnored::OutOfWindow | IcmpIgnored::NotOpen => Drop::IcmpOutOfWindow,
                    IcmpIgnored::MtuNotLower | IcmpIgnored::BelowMinimumMtu => Drop::IcmpIgnored,
                };
                self.counters.drop(reason);
                log::debug!("drop {}: {error:?} about {tuple}: {why:?}", reason.name());
                return;
            }
            IcmpOutcome::MtuLowered { mtu, .. } => {
                // The MTU TCP took: the report with its floors and RFC 1191 5's plateaus.
                self.counters.path_mtu_lowered += 1;
                self.lower_path_mtu(now, theirs, mtu, index);
            }
            _ => {}
        }
        self.counters.icmp_errors += 1;
        self.conns.mark_dirty(index);
    }

    /// Return the path MTU learnt for `dst`, if one was in the last 10 minutes (RFC 1191
    /// 6.3 and RFC 8201 4: an estimate ages so that a larger one is tried again).
    pub(super) fn known_path_mtu(&mut self, now: Instant, dst: IpAddr) -> Option<u32> {
        let &(mtu, when) = self.path_mtu.get(&dst)?;
        if now.saturating_duration_since(when) > PATH_MTU_AGE {
            self.path_mtu.remove(&dst);
            return None;
        }
        Some(mtu)
    }

    /// Apply a path MTU learnt for `dst` to its other connections, and keep it for new ones.
    fn lower_path_mtu(&mut self, now: Instant, dst: IpAddr, mtu: u32, except: u32) {
        if self.path_mtu.len() >= PATH_MTU_ENTRIES {
            // Bounded: the oldest estimates go first (ICMP from many routers cannot grow it).
            self.path_mtu.retain(|_, &mut (_, when)| now.saturating_duration_since(when) <= PATH_MTU_AGE / 2);
        }
        if self.path_mtu.len() < PATH_MTU_ENTRIES {
            self.path_mtu.insert(dst, (mtu, now));
        }
        let others: Vec<u32> =
            self.conns.table.iter().filter(|&(t, &i)| t.remote.ip() == dst && i != except).map(|(_, &i)| i).collect();
        for index in others {
            if let Some(sock) = self.conns.slots[index as usize].sock.as_mut() {
                sock.conn.set_path_mtu(now, mtu);
                self.conns.mark_dirty(index);
            }
        }
    }
}

//! Transmission: each connection's segments written straight into the device's frames behind
//! their headers, or held while the next hop is resolved.

use std::net::{Ipv4Addr, SocketAddr};

use bypass_tcp::{FourTuple, Instant, Segment};
use etherparse::IpNumber;

use super::*;
use crate::capture::Direction;
use crate::counters::Drop;
use crate::device::Device;

impl Interface {
    /// Drain one connection's output into the device, then settle its events and
    /// lifecycle. `None` when the device ran out of buffers.
    pub(super) fn transmit_one(
        &mut self,
        now: Instant,
        index: u32,
        device: &mut dyn Device,
    ) -> std::io::Result<Option<usize>> {
        self.apply_budgets(index);
        let Some(sock) = self.slots[index as usize].sock.as_mut() else { return Ok(Some(0)) };
        let Some(FourTuple { remote: SocketAddr::V4(remote), .. }) = sock.conn.tuple() else {
            // Back in LISTEN after an RST in SYN-RECEIVED: nothing to send; settle removes it.
            sock.dirty = false;
            self.settle(now, index);
            return Ok(Some(0));
        };
        let dst = *remote.ip();
        let fallback = sock.peer_mac;
        let mac = self.next_hop_mac(now, dst, fallback);
        let max_frame = self.mtu + ETH_LEN;
        let (our_mac, our_ip) = (self.mac, self.config.ip);
        let mut sent = 0;
        loop {
            let sock = self.slots[index as usize].sock.as_mut().expect("live");
            let mut produced = None;
            let (capture, note) = (&mut self.capture, &mut self.note);
            match mac {
                Some(mac) => {
                    let ok = device.send(&mut |buf: &mut [u8]| {
                        let end = buf.len().min(max_frame);
                        let before = sock.conn.state();
                        let t = sock.conn.poll_transmit(now, &mut buf[HEADERS..end]);
                        produced = t;
                        match t {
                            Some(t) => {
                                write_headers(buf, our_mac, mac, our_ip, dst, IpNumber::TCP, t.len);
                                if let Some(capture) = capture.as_mut() {
                                    note.clear();
                                    if let Ok(seg) = Segment::parse_unchecked(&buf[HEADERS..HEADERS + t.len]) {
                                        note_segment(note, &seg, &sock.conn, Direction::Out, before);
                                        note_send(note, &sock.conn, t.kind);
                                    }
                                    capture.frame(now, Direction::Out, &buf[..HEADERS + t.len], note);
                                }
                                HEADERS + t.len
                            }
                            None => 0,
                        }
                    })?;
                    if !ok {
                        self.counters.drop(Drop::TxRingFull);
                        return Ok(None);
                    }
                }
                None => {
                    // Unresolved: hold the frame in the ARP queue (RFC 1122 2.3.2.2).
                    let mut buf = self.spare.pop().unwrap_or_default();
                    buf.resize(max_frame, 0);
                    if let Some(t) = sock.conn.poll_transmit(now, &mut buf[HEADERS..]) {
                        write_headers(&mut buf, our_mac, [0; 6], our_ip, dst, IpNumber::TCP, t.len);
                        buf.truncate(HEADERS + t.len);
                        produced = Some(t);
                        let hop = self.next_hop(dst);
                        if let Err(frame) = self.arp.hold(hop, buf, now) {
                            self.counters.drop(Drop::ArpQueueDrop);
                            self.spare.push(frame);
                        }
                    } else {
                        self.spare.push(buf);
                    }
                }
            }
            let Some(t) = produced else { break };
            sent += 1;
            self.counters.tcp_segments_out += 1;
            self.counters.bytes_copied += t.payload_len as u64;
            if mac.is_some() {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += (HEADERS + t.len) as u64;
            }
        }
        if let Some(sock) = self.slots[index as usize].sock.as_mut() {
            sock.dirty = false;
        }
        self.settle(now, index);
        Ok(Some(sent))
    }

    /// Return the next hop's MAC for a connection's peer, resolving it if needed.
    pub(super) fn next_hop_mac(&mut self, now: Instant, dst: Ipv4Addr, fallback: Option<[u8; 6]>) -> Option<[u8; 6]> {
        let hop = self.next_hop(dst);
        if let Some(mac) = self.arp.lookup(hop, now) {
            return Some(mac);
        }
        if fallback.is_none() {
            self.arp.resolve(hop, now);
        }
        fallback
    }
}

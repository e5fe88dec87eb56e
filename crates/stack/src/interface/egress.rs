//! Transmission: each connection's segments written straight into the device's frames behind
//! their headers, or held while the next hop is resolved.

use bypass_device::Device;
use bypass_device::capture::Direction;
use bypass_tcp::{Instant, IpEcn, Segment, Transmit};
use etherparse::IpNumber;

use super::*;
use crate::counters::Drop;
use crate::wire::HeaderTemplate;

impl Interface {
    /// Drain one connection's output into the device, then settle its events and
    /// lifecycle. `None` when the device ran out of buffers. Each segment is asked for only
    /// while the connection may have one ([`Connection::nothing_to_transmit`]): after the
    /// last, and when there is none, no frame is taken from the device to find out.
    ///
    /// [`Connection::nothing_to_transmit`]: bypass_tcp::Connection::nothing_to_transmit
    pub(super) fn transmit_one(
        &mut self,
        now: Instant,
        index: u32,
        device: &mut dyn Device,
    ) -> std::io::Result<Option<usize>> {
        self.reset_if_orphaned_child(now, index);
        self.apply_budgets(index);
        let Some(sock) = self.conns.slots[index as usize].sock.as_mut() else { return Ok(Some(0)) };
        if sock.conn.remote_addr().is_none() {
            // Back in LISTEN after an RST in SYN-RECEIVED: nothing to send; settle removes it.
            sock.dirty = false;
            self.settle(now, index, true);
            return Ok(Some(0));
        }
        let max_frame = self.mtu + ETH_LEN;
        // The headers' length and the next hop's MAC (with how long the ARP cache's answer
        // stands, `Sock::hop`), taken before the first segment: a connection that has
        // nothing to send (it received a segment that needs no answer yet, or the
        // application read) takes no frame from the device, and looks nothing up.
        let mut hop: Option<Hop> = None;
        let mut sent = 0;
        loop {
            let sock = self.conns.slots[index as usize].sock.as_mut().expect("live");
            if sock.conn.nothing_to_transmit(now) {
                break;
            }
            if hop.is_none() {
                let version = self.arp.version();
                hop = match &sock.headers {
                    // The template carries the ARP cache's answer for the next hop, which
                    // stands while the cache is unchanged and the entry unexpired: the
                    // lookup would return the same MAC (`next_hop_mac_until`).
                    Some(template) if sock.hop.is_some_and(|(v, expires)| v == version && expires > now) => {
                        Some((template.header_len(), Some(template.dst_mac()), sock.hop, true))
                    }
                    _ => {
                        // Bound (checked above): nothing between there and here unbinds it.
                        let Some(remote) = sock.conn.remote_addr() else { break };
                        let (dst, fallback) = (remote.ip(), sock.peer_mac);
                        let (mac, until) = self.next_hop_mac_until(now, dst, fallback);
                        Some((headers_len(dst), mac, until, false))
                    }
                };
            }
            let Some((headers, mac, until, templated)) = hop else { break };
            let sock = self.conns.slots[index as usize].sock.as_mut().expect("live");
            let mut produced = None;
            let (notes, note) = (&self.notes, &mut self.note);
            match mac {
                Some(mac) => {
                    // The headers come from the connection's template, made again when the
                    // next hop's address has changed since it was made. A hop taken from the
                    // template (`templated`) is the template's, and `until` is `sock.hop`
                    // already: nothing to check or note.
                    if !templated {
                        if sock.headers.as_ref().is_none_or(|h| h.dst_mac() != mac) {
                            let Some((src, dst)) = addresses(&sock.conn) else { break };
                            sock.headers = Some(HeaderTemplate::new(self.mac, mac, src, dst, IpNumber::TCP));
                        }
                        sock.hop = until;
                    }
                    let Sock { conn, headers: template, .. } = &mut **sock;
                    let template = template.as_ref().expect("made above");
                    // By value where a copy is all it needs (the time, the lengths), so the
                    // frame's closure reads them without a pointer each.
                    let out = &mut produced;
                    let ok = device.send(&mut move |buf: &mut [u8]| {
                        let end = buf.len().min(max_frame);
                        let before = conn.state();
                        let t = conn.poll_transmit(now, &mut buf[headers..end]);
                        *out = t;
                        match t {
                            Some(t) => {
                                template.write(buf, t.len, ect(&t));
                                if let Some(board) = notes {
                                    note.clear();
                                    if let Ok(seg) = Segment::parse_unchecked(&buf[headers..headers + t.len]) {
                                        note_segment(note, &seg, conn, Direction::Out, before);
                                        note_send(note, conn, t.kind);
                                    }
                                    board.write(now, note);
                                }
                                headers + t.len
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
                    // Unresolved: hold the frame until the next hop is (RFC 1122 2.3.2.2,
                    // RFC 4861 7.2.2).
                    let Some((src, dst)) = addresses(&sock.conn) else { break };
                    let mut buf = self.spare.pop().unwrap_or_default();
                    buf.resize(max_frame, 0);
                    if let Some(t) = sock.conn.poll_transmit(now, &mut buf[headers..]) {
                        write_ip_headers(&mut buf, self.mac, [0; 6], src, dst, IpNumber::TCP, t.len, ect(&t));
                        buf.truncate(headers + t.len);
                        produced = Some(t);
                        self.hold_for_resolution(now, dst, buf);
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
                self.counters.tx_bytes += (headers + t.len) as u64;
            }
        }
        if let Some(sock) = self.conns.slots[index as usize].sock.as_mut() {
            sock.dirty = false;
        }
        // A pass that asked for no segment (`nothing_to_transmit` said so first: the hop is
        // taken before the first `poll_transmit`) left the window and the flight as
        // `apply_budgets` counted them at its start.
        self.settle(now, index, hop.is_none());
        Ok(Some(sent))
    }

    /// The pass of `transmit_one` over connection `index`, the one connection touched
    /// since the last delivery, made after a receive because it has nothing to send: its
    /// budgets applied, its events passed on, its timer noted, and unmarked. The caller
    /// ([`deliver_events_settling`](Self::deliver_events_settling)) has checked that it is
    /// a bound connection the user holds and that `nothing_to_transmit` says so.
    ///
    /// `nothing_to_transmit` was asked before `apply_budgets`, where `transmit_one` asks
    /// it after: its answer reads none of what `apply_budgets` sets (the window and flight
    /// caps, the permission to grow the buffers), and what it does when it answers `true`
    /// (stopping the persist and SWS override timers) changes none of what
    /// `apply_budgets` counts (the window offered, the data in flight, the buffers).
    #[inline(never)]
    pub(super) fn settle_quiet(&mut self, now: Instant, index: u32) {
        if let Some(sock) = self.conns.slots[index as usize].sock.as_mut() {
            sock.dirty = false;
        }
        self.conns.dirty.clear();
        self.apply_budgets(index);
        // The window and the data in flight as `apply_budgets` just counted them; never
        // closed (`nothing_to_transmit` answers `true` only from ESTABLISHED to LAST-ACK),
        // so `settle`'s removal has nothing to do.
        self.settle_running(now, index, true);
    }
}

/// A connection's headers' length, its next hop's MAC (`None`: unresolved), how long the
/// ARP cache's answer stands, if it is one (`Sock::hop`), and whether all three came from
/// the connection's header template (while `Sock::hop` stands).
type Hop = (usize, Option<[u8; 6]>, Option<(u64, Instant)>, bool);

/// Return a bound connection's local and remote addresses (`None` while it has no peer).
fn addresses(conn: &bypass_tcp::Connection) -> Option<(IpAddr, IpAddr)> {
    Some((conn.local_addr().ip(), conn.remote_addr()?.ip()))
}

/// Return the ECN field for a segment: ECT(0) where the connection marks it ECN-capable
/// (RFC 3168 6.1.5: new data of an ECN connection), Not-ECT otherwise.
fn ect(t: &Transmit) -> IpEcn {
    if t.ect { IpEcn::Ect0 } else { IpEcn::NotEct }
}

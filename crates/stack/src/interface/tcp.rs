//! The TCP demux: segments to their connection, to a listener (with SYN cookies), or
//! answered with RST.

use std::fmt::Write as _;
use std::net::SocketAddr;

use bypass_device::capture::Direction;
use bypass_tcp::{Connection, FourTuple, Instant, IpEcn, Segment, State};

use super::*;
use crate::counters::Drop;

impl Interface {
    /// Take a TCP segment from `src` to our address `dst`, with the ECN field `ecn` of its
    /// IP header (RFC 3168 5), which its connection sees
    /// ([`Connection::handle_segment_ecn`]). Its checksum is checked against both
    /// addresses unless `checked` (the device or the IPv4 layer found it right).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive_tcp(
        &mut self,
        now: Instant,
        src_mac: [u8; 6],
        src: IpAddr,
        dst: IpAddr,
        body: &[u8],
        ecn: IpEcn,
        checked: bool,
    ) {
        let parsed = if checked { Segment::parse_unchecked(body) } else { Segment::parse(body, src, dst) };
        // Borrowed where it was parsed: moving the 96-byte segment out of the `Result`
        // costs a copy per segment.
        let seg = match &parsed {
            Ok(seg) => seg,
            Err(e) => {
                self.counters.drop(Drop::BadTcp);
                log::debug!("drop bad_tcp from {src}: {e}");
                return;
            }
        };
        self.counters.tcp_segments_in += 1;
        self.counters.bytes_copied += seg.payload.len() as u64;
        let tuple = FourTuple { local: SocketAddr::new(dst, seg.dst_port), remote: SocketAddr::new(src, seg.src_port) };
        if let Some(index) = self.conns.find(&tuple) {
            // One lookup of its slot for all the connection's work here, but for a SYN that
            // may reopen a connection in TIME-WAIT (only one the application let go of).
            let mut sock = self.conns.slots[index as usize].sock.as_deref_mut().expect("table points at live slots");
            if sock.owner == Owner::Released {
                if self.reopen_time_wait(now, index, seg) {
                    return;
                }
                sock = self.conns.slots[index as usize].sock.as_deref_mut().expect("live");
            }
            if !seg.payload.is_empty() {
                // The receive buffer's storage, lent with the connection in hand.
                let sizes = (self.config.tcp.send_buffer, self.config.tcp.recv_buffer);
                let side = Some(bypass_tcp::Side::Recv);
                super::table::lend(&mut sock.conn, sizes, &mut self.conns.storage_pool, &mut self.counters, side);
            }
            let before = sock.conn.state();
            let acked_before = sock.conn.snd_una();
            // From the peer it is bound to, with the ECN field; a connection back in LISTEN
            // takes the segment as before. A bound connection was found by its 4-tuple, so
            // its peer's address is the segment's source: no need to copy it out. A
            // segment not marked CE (RFC 3168 5) goes straight to `handle_segment_from`,
            // which takes every segment as unmarked: what `handle_segment_ecn` does for
            // it, without the call around.
            let outcome = if sock.conn.remote_addr().is_some() {
                if ecn == IpEcn::Ce {
                    sock.conn.handle_segment_ecn(now, src, seg, ecn)
                } else {
                    sock.conn.handle_segment_from(now, src, seg)
                }
            } else {
                sock.conn.handle_segment(now, seg)
            };
            sock.peer_mac = Some(src_mac);
            let acked = sock.conn.snd_una() != acked_before;
            if self.notes.is_some() {
                note_segment(&mut self.note, seg, &sock.conn, Direction::In, before);
                if let Some(reason) = outcome.drop_reason() {
                    let _ = write!(self.note, " | dropped by TCP: {reason:?}");
                }
            }
            // `Connections::mark_dirty`, with the connection in hand.
            if !sock.dirty {
                sock.dirty = true;
                self.conns.dirty.push(index);
            }
            // New data acknowledged is proof the neighbour (or the router towards the peer)
            // is reachable: RFC 4861 7.3.1's upper-layer confirmation, which keeps a neighbour
            // in use REACHABLE instead of probing it every ReachableTime.
            if let IpAddr::V6(peer) = src
                && acked
            {
                let hop = self.next_hop6(now, peer);
                self.ndp.confirm(hop, now);
            }
            return;
        }
        if self.conns.listeners.contains_key(&seg.dst_port) {
            return self.receive_for_listener(now, src_mac, tuple, seg);
        }
        if let Some(owner) = self.sibling_owner(seg.dst_port)
            && self.foreign.len() < MAX_FOREIGN
        {
            // A reply to a sibling's active open that the device steered to our queue.
            self.misrouted = Some(owner);
            if self.notes.is_some() {
                let _ = write!(self.note, "for a connection of shard {owner}: handed over");
            }
            return;
        }
        self.reply_reset(src_mac, tuple, seg, Drop::NoListener);
    }

    /// Let a SYN that finds a closed connection in TIME-WAIT open a new one through the port's
    /// listener (RFC 9293 3.10.7.4, RFC 6191, RFC 1122 4.2.2.13; see
    /// [`Connection::time_wait_accepts`]); return whether it did.
    ///
    /// Only a connection the application has let go of is reused: one it still holds keeps
    /// its handle's meaning, and the SYN is only acknowledged, as RFC 9293 also allows.
    pub(super) fn reopen_time_wait(&mut self, now: Instant, index: u32, seg: &Segment<'_>) -> bool {
        let sock = self.conns.slots[index as usize].sock.as_ref().expect("table points at live slots");
        if sock.owner != Owner::Released || !sock.conn.time_wait_accepts(seg) {
            return false;
        }
        let Some(listener) = self.conns.listeners.get(&seg.dst_port) else { return false };
        if listener.queued >= self.config.accept_backlog || listener.half_open >= self.config.syn_queue {
            return false;
        }
        let epoch = listener.epoch;
        let sock = self.conns.slots[index as usize].sock.as_mut().expect("live");
        let before = sock.conn.state();
        sock.conn.reopen(now, seg);
        if sock.conn.state() != State::SynReceived {
            return false;
        }
        sock.owner = Owner::Listener(seg.dst_port, epoch);
        if let Some(bytes) = sock.orphan.take() {
            self.conns.orphans -= 1;
            self.conns.orphan_bytes -= bytes;
        }
        if self.notes.is_some() {
            let _ = write!(self.note, "new SYN in TIME-WAIT: a new connection (RFC 6191) | ");
            note_segment(&mut self.note, seg, &sock.conn, Direction::In, before);
        }
        self.conns.listeners.get_mut(&seg.dst_port).expect("listener").half_open += 1;
        self.counters.time_wait_reopened += 1;
        self.conns.mark_dirty(index);
        true
    }

    /// A segment for a listening port with no connection (RFC 9293 3.10.7.2, RFC 4987).
    /// Out of line: the new connection it may build on the stack (2.3 KiB) would otherwise
    /// make the demux's frame that large for every segment.
    #[inline(never)]
    pub(super) fn receive_for_listener(&mut self, now: Instant, src_mac: [u8; 6], tuple: FourTuple, seg: &Segment<'_>) {
        let port = seg.dst_port;
        let flags = seg.flags;
        if flags.rst() {
            return;
        }
        let listener = self.conns.listeners.get(&port).expect("checked by the caller");
        let epoch = listener.epoch;
        if flags.syn() && !flags.ack() {
            if listener.queued >= self.config.accept_backlog {
                // Like Linux: drop, the client's retransmission tries again later.
                return self.drop(Drop::BacklogFull, "accept backlog full");
            }
            if self.conns.table.len() >= self.config.max_connections {
                return self.drop(Drop::TableFull, "connection table full");
            }
            if listener.half_open >= self.config.syn_queue {
                // The overflow opens (or extends) the window in which ACKs are checked as
                // cookies (Linux: `tcp_synq_overflow`).
                self.conns.listeners.get_mut(&port).expect("listener").overflow.record(now);
                let iss = self.cookies.make(&tuple, seg.seq, seg.options.mss, now);
                let reply = Connection::syn_cookie_reply(self.tcp_config(tuple.local.ip()), &tuple, seg, iss, now);
                self.queue_segment(src_mac, tuple, reply, || "SYN-ACK carrying a SYN cookie (RFC 4987)".into());
                if self.notes.is_some() {
                    let _ = write!(self.note, "SYN to port {port}: SYN queue full, answered with a SYN cookie");
                }
                self.counters.syn_cookies_sent += 1;
                return;
            }
            let buffers = self.take_buffers();
            let owner = Owner::Listener(port, epoch);
            // Built in the box of a removed connection where one is kept (no allocation,
            // no move into a box), else built and boxed.
            let sock = match self.conns.take_spare() {
                Some(mut sock) => {
                    if sock.conn.accept_in(self.tcp_config(tuple.local.ip()), tuple, seg, now, buffers) {
                        sock.renew(tuple, owner, Some(src_mac), now);
                        Some(sock)
                    } else {
                        self.conns.recycle(sock);
                        None
                    }
                }
                None => Connection::accept_with(self.tcp_config(tuple.local.ip()), tuple, seg, now, buffers)
                    .map(|conn| Self::boxed(now, tuple, conn, owner, Some(src_mac))),
            };
            if let Some(sock) = sock {
                if self.notes.is_some() {
                    note_segment(&mut self.note, seg, &sock.conn, Direction::In, State::Listen);
                }
                self.conns.listeners.get_mut(&port).expect("listener").half_open += 1;
                self.insert_sock(now, sock);
            }
            return;
        }
        if flags.ack() && !flags.syn() {
            if !self.config.syn_cookies_from_device && !listener.overflow.recent(now, self.config.syn_cookie_valid) {
                // No cookie can be outstanding, so this ACK is no handshake's last step:
                // RFC 9293 3.10.7.2 (LISTEN, second: an ACK is bad, send <SEQ=SEG.ACK><CTL=RST>).
                // Linux checks cookies only after a recent overflow likewise
                // (`tcp_synq_no_recent_overflow`), or every stray ACK would be a guess.
                return self.reply_reset(src_mac, tuple, seg, Drop::StrayAck);
            }
            if let Some((iss, mss)) = self.cookies.check(&tuple, seg.seq, seg.ack, now) {
                if listener.queued >= self.config.accept_backlog
                    || self.conns.table.len() >= self.config.max_connections
                {
                    return self.drop(Drop::BacklogFull, "accept backlog full (cookie)");
                }
                let buffers = self.take_buffers();
                let conn = Connection::from_syn_cookie_with(
                    self.tcp_config(tuple.local.ip()),
                    tuple,
                    iss,
                    mss,
                    seg,
                    now,
                    buffers,
                );
                if self.notes.is_some() {
                    let _ = write!(self.note, "valid SYN cookie: connection rebuilt | ");
                    note_segment(&mut self.note, seg, &conn, Direction::In, State::Listen);
                }
                let id = self.insert(now, tuple, conn, Owner::Listener(port, epoch), Some(src_mac));
                self.conns.enqueue_child(port, id);
                self.counters.syn_cookies_accepted += 1;
                return;
            }
            return self.reply_reset(src_mac, tuple, seg, Drop::BadSynCookie);
        }
        if flags.ack() {
            // A SYN-ACK: an ACK is bad in LISTEN (RFC 9293 3.10.7.2, second).
            return self.reply_reset(src_mac, tuple, seg, Drop::StrayAck);
        }
        // Fourth: any other control or text without SYN is dropped, and answered with
        // nothing (a FIN, or data, alone).
        self.drop(Drop::ListenNoSyn, "neither SYN nor ACK to a listener")
    }

    /// Answer `seg`, which came on `tuple` and matched no connection, with RST (RFC 9293
    /// 3.10.7.1), counting it as dropped for `reason`.
    pub(super) fn reply_reset(&mut self, src_mac: [u8; 6], tuple: FourTuple, seg: &Segment<'_>, reason: Drop) {
        let src = tuple.remote;
        self.counters.drop(reason);
        log::debug!("drop {}: {src} -> port {} [{}]", reason.name(), seg.dst_port, seg.flags);
        if self.notes.is_some() {
            let _ = write!(
                self.note,
                "{src} -> port {} [{}]: dropped: {} (answered with RST, RFC 9293 3.10.7.1)",
                seg.dst_port,
                seg.flags,
                reason.name()
            );
        }
        if let Some(rst) = bypass_tcp::reset_for(seg) {
            self.queue_segment(src_mac, tuple, rst, || "RST for a segment that matched no connection".into());
            self.counters.tcp_resets_out += 1;
        }
    }

    /// Queue a segment that belongs to no connection, from `tuple.local` to `tuple.remote`
    /// at `dst_mac`.
    pub(super) fn queue_segment(
        &mut self,
        dst_mac: [u8; 6],
        tuple: FourTuple,
        segment: Segment<'static>,
        what: impl FnOnce() -> String,
    ) {
        self.queue_reply(super::ethernet::Reply::Segment { dst_mac, tuple, segment }, what);
    }
}

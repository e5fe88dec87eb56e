//! Segment output: what to send next, and writing it into the caller's buffer.
//!
//! Order of precedence in [`Connection::poll_transmit`]: a pending reset; our SYN or
//! SYN-ACK; a retransmission from SND.UNA (RTO, fast retransmit, partial ACK); new data
//! and FIN as the windows, Nagle and SWS avoidance allow; what an open but small window
//! holds once the SWS override timeout passed; a zero-window or keep-alive probe; a pure ACK.

use std::time::Duration;

use super::timeouts::Due;
use super::{Connection, PendingReset, Transmit, TransmitKind};
use crate::controller::Controller;
use crate::ecn::Ecn;
use crate::recv_space::initial_recv_window;
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;
use crate::wire;
use crate::wire::{Flags, PlainHeader, Segment};
use crate::wire::{TcpOptions, Timestamps};

/// A TCP header without options.
const BASE_HEADER: usize = 20;
/// The most option bytes a TCP header holds.
const MAX_OPTIONS: usize = 40;

impl Connection {
    /// Write the next segment to send into `buf` (TCP header and payload, checksum
    /// filled), and describe it. Call until it returns `None`.
    ///
    /// `buf` should hold at least 60 bytes plus the MSS; a smaller buffer limits the payload.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(rst) = self.pending_reset.take() {
            return self.write_reset(*rst, buf);
        }
        let t = self.next_transmit(now, buf);
        if t.is_none() {
            self.update_persist(now);
        }
        t
    }

    /// Return `true` when [`poll_transmit`](Connection::poll_transmit) would write nothing
    /// now, having done what it does then (stopping the persist and SWS override timers), so
    /// that the caller may skip it, and the frame it would have taken from the device for
    /// it; `false` when it may write something.
    ///
    /// A few comparisons, for a host that would otherwise take a frame and call
    /// `poll_transmit` once more after every burst it sends, and once after every segment
    /// it receives that needs no answer yet. It answers `false` (call `poll_transmit`) in
    /// every case it does not decide for certain: outside the states that send data, and
    /// while anything is queued, lost, due or owed (data or a FIN not yet sent, a reset, a
    /// segment marked lost, a probe or override timeout that fired, an ACK to send now).
    /// Each is a condition under which a branch of `poll_transmit` may send; with none of
    /// them, every branch returns nothing.
    #[inline]
    pub fn nothing_to_transmit(&mut self, now: Instant) -> bool {
        // Data queued first: a sender with more to send stops at the first comparison.
        let due = &self.due;
        let nothing = self.snd.unsent() == 0
            && !self.snd.fin_seq().is_some_and(|f| self.snd.max().before_eq(f))
            && !self.rcv.ack_now_due()
            && matches!(
                self.state,
                State::Established
                    | State::FinWait1
                    | State::FinWait2
                    | State::CloseWait
                    | State::Closing
                    | State::LastAck
            )
            && self.remote.is_some()
            && self.pending_reset.is_none()
            && self.snd.sent.lost() == 0
            // No probe or override due: the four flags compared as one.
            && *due == Due::default();
        if nothing {
            // `update_persist` with no data waiting: with nothing queued beyond SND.MAX
            // (no data, and any FIN sent), data waits only behind a rewind (SND.NXT before
            // SND.MAX), which needs something in flight (SND.UNA =< SND.NXT =< SND.MAX).
            debug_assert!(!(self.state.is_synchronized() && self.snd.max() == self.snd.una() && self.snd.has_unsent()));
            let _ = now; // for the persist timer, which nothing waiting never arms
            self.stop_persist();
        }
        nothing
    }

    fn next_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.remote?;
        match self.state {
            State::Closed | State::Listen => return None,
            State::SynSent | State::SynReceived => {
                if self.snd.nxt() == self.snd.iss() {
                    return self.send_syn(now, buf);
                }
                if self.state == State::SynReceived && self.rcv.ack_now_due() {
                    return self.send_ack(now, buf, self.snd.max(), TransmitKind::Ack);
                }
                return None;
            }
            State::TimeWait => {
                if self.rcv.ack_now_due() {
                    return self.send_ack(now, buf, self.snd.max(), TransmitKind::Ack);
                }
                return None;
            }
            _ => {}
        }
        // New data in ESTABLISHED with nothing unusual pending: what `send_new` and
        // `send_segment` would send, on a straight path.
        if self.state == State::Established
            && self.snd.unsent() > 0
            && let Some(t) = self.send_predicted(now, buf)
        {
            return Some(t);
        }
        // Segments detected lost go first (RFC 6675 5, NextSeg rule 1; RFC 8985 6.3).
        if let Some(t) = self.retransmit_lost(now, buf) {
            return Some(t);
        }
        if let Some(t) = self.send_new(now, buf, false) {
            return Some(t);
        }
        if self.due.sws_override {
            self.due.sws_override = false;
            // RFC 9293 3.8.6.2.1 (4): the override timeout passed; send what the window holds.
            // Not if data went out meanwhile: its ACK brings the next decision.
            if self.snd.max() == self.snd.una()
                && let Some(t) = self.send_new(now, buf, true)
            {
                return Some(t);
            }
        }
        if self.due.loss_probe {
            self.due.loss_probe = false;
            if let Some(t) = self.send_loss_probe(now, buf) {
                return Some(t);
            }
        }
        if (self.due.window_probe || self.due.keepalive) && self.rcv.ack_owed() {
            // A probe is out of the peer's window on purpose, and a peer drops such a segment
            // without reading its acknowledgment (RFC 9293 3.10.7.4: only an acceptable
            // segment's ACK field is processed; Linux drops it whole, and with its receive
            // queue not empty drops even one at its RCV.NXT that carries data). An ACK owed
            // goes first, in a segment the peer accepts; the probe follows at the next call.
            // Else the data we took would stay unacknowledged until the peer's own probe drew
            // an ACK from us (seen with a kernel client that stopped reading: hundreds of ms).
            return self.send_ack(now, buf, self.ack_seq(), TransmitKind::Ack);
        }
        if self.due.window_probe {
            self.due.window_probe = false;
            if let Some(t) = self.send_new(now, buf, true) {
                return Some(t);
            }
            self.stats.window_probes += 1;
            // Out of window on purpose: the peer answers with its current window.
            return self.send_ack(now, buf, self.snd.una() - 1, TransmitKind::WindowProbe);
        }
        if self.due.keepalive {
            self.due.keepalive = false;
            // RFC 9293 3.8.4: SEG.SEQ = SND.NXT - 1, no data, to elicit an ACK.
            return self.send_ack(now, buf, self.snd.una() - 1, TransmitKind::KeepAlive);
        }
        if self.rcv.ack_now_due() {
            return self.send_ack(now, buf, self.ack_seq(), TransmitKind::Ack);
        }
        None
    }

    /// Return the sequence number of a pure ACK: one the peer accepts (RFC 9293 3.10.7.4,
    /// first), so that it takes our acknowledgment and window.
    ///
    /// SND.MAX, not SND.NXT: after a timeout rewinds SND.NXT, a lower number would fall below
    /// the peer's RCV.NXT and the ACK would be dropped as out of window. But never beyond the
    /// right edge of the peer's window, SND.UNA + SND.WND: a peer whose window is shut
    /// accepts an empty segment only at exactly its RCV.NXT, and data we sent that it then
    /// dropped leaves SND.MAX above that (Linux's `tcp_acceptable_seq`). An ACK it drops
    /// carries no window update, and two shut windows wait on each other for ever.
    fn ack_seq(&self) -> SeqNum {
        let edge = self.snd.una() + self.snd.wnd();
        if self.snd.max().after(edge) { edge } else { self.snd.max() }
    }

    /// Resend the first segment marked lost, if the congestion window has room for it
    /// (RFC 6675's `pipe` below cwnd) and the peer's window is open. With the window shut,
    /// nothing: the retransmission timer probes it instead (`on_retransmit_timeout`).
    ///
    /// The segment covers the first run of lost records up to the MSS, not one record: lost
    /// records smaller than the MSS go again together, and larger ones (sent before a Packet
    /// Too Big lowered the MSS) are cut to it, each piece full.
    fn retransmit_lost(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mss = u32::from(self.snd.mss());
        let (start, end) = self.snd.sent.first_lost_run(mss)?;
        // F-RTO's step 2b: new data goes first (RFC 5682).
        if self.snd.wnd() == 0 || self.rel.recovery.frto_holds() {
            return None;
        }
        if self.rel.recovery.pipe(&self.snd.sent, mss) >= self.rel.cc.cwnd() {
            return None;
        }
        let len = end - start;
        if !self.paced(now, len.min(mss)) {
            return None;
        }
        let with_fin = self.snd.fin_seq().is_some_and(|f| end == f + 1u32);
        self.send_from(now, start, (len - u32::from(with_fin)) as usize, with_fin, buf)
    }

    /// Return whether the pacer lets `len` bytes of data out now ([`Config::pacing`]); if
    /// not, arm the timer for when it will.
    ///
    /// [`Config::pacing`]: crate::Config::pacing
    fn paced(&mut self, now: Instant, len: u32) -> bool {
        if !self.config.pacing {
            return true;
        }
        let at = self.rel.pace(now, len, u32::from(self.snd.mss()));
        if at > now {
            self.timers.set(Timer::Pacing, at);
            return false;
        }
        true
    }

    /// Send the tail-loss probe (RFC 8985 7.3): one new segment if there is one and the
    /// peer's window takes it, whatever cwnd says; else the last segment again.
    fn send_loss_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let recovery = &self.rel.recovery;
        if self.snd.una() == self.snd.max() || recovery.probe_outstanding() || recovery.in_recovery() {
            return None;
        }
        self.stats.loss_probes += 1;
        let data_end = self.snd.data_end();
        let window_room = (self.snd.una() + self.snd.wnd()).after(self.snd.max());
        let t = if self.snd.max().before(data_end) && window_room {
            let room = (self.snd.una() + self.snd.wnd()) - self.snd.max();
            let len = (data_end - self.snd.max()).min(room);
            let t = self.send_from(now, self.snd.max(), len as usize, true, buf)?;
            self.rel.recovery.on_probe_sent(self.snd.max(), false);
            t
        } else {
            let last = *self.snd.sent.last()?;
            let with_fin = self.snd.fin_seq().is_some_and(|f| last.end == f + 1u32);
            let t = self.send_from(now, last.start, (last.len() - u32::from(with_fin)) as usize, with_fin, buf)?;
            self.rel.recovery.on_probe_sent(last.end, true);
            t
        };
        // The retransmission timer runs from the probe (RFC 8985 7.3); no second probe
        // until an ACK.
        self.timers.set(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
        self.timers.stop(Timer::LossProbe);
        Some(t)
    }

    /// Arm the tail-loss probe after progress or a transmission (RFC 8985 7.2).
    pub(super) fn arm_loss_probe(&mut self, now: Instant) {
        self.arm_loss_probe_inline(now);
    }

    /// [`arm_loss_probe`](Self::arm_loss_probe), inlined (forced) into the output side's
    /// prediction, where the compiler would call it.
    #[inline(always)]
    fn arm_loss_probe_inline(&mut self, now: Instant) {
        let flight = self.snd.in_flight();
        let rto_at = self.timers.get(Timer::Retransmit);
        match self.rel.recovery.probe_deadline(
            now,
            self.sack_enabled,
            self.rel.rtt.srtt_us(),
            flight,
            self.snd.mss() as u32,
            rto_at,
        ) {
            Some(at) => self.timers.set(Timer::LossProbe, at),
            None => self.timers.stop(Timer::LossProbe),
        }
    }

    /// Send new data (and FIN) from SND.MAX as the windows, Nagle (RFC 9293 3.7.4) and
    /// sender-side SWS avoidance (RFC 9293 3.8.6.2.1) allow. `forced` is the SWS override
    /// timeout (or a zero-window probe finding the window open): send whatever the window
    /// holds.
    fn send_new(&mut self, now: Instant, buf: &mut [u8], forced: bool) -> Option<Transmit> {
        if !self.snd.syn_acked() {
            return None;
        }
        let next = self.snd.max();
        let data_end = self.snd.data_end();
        let fin_unsent = self.snd.fin_seq().is_some_and(|f| next.before_eq(f));
        let unsent = self.snd.unsent();
        if unsent == 0 && !fin_unsent {
            return None;
        }
        // RFC 5681 4.1: after an idle period longer than the RTO, restart from the restart
        // window rather than send a window's worth into a network that may have changed.
        if self.snd.una() == self.snd.max()
            && self
                .snd
                .last_data_at()
                .is_some_and(|at| now.as_micros().saturating_sub(at.as_micros()) > self.rel.rtt.rto_us())
        {
            self.rel.cc.on_idle_restart(now);
            self.snd.note_data_sent(now);
        }
        // The peer's window counts from SND.UNA; the congestion window limits what is in the
        // network (RFC 6675's pipe: not what is SACKed or lost); the host's flight cap, what
        // is unacknowledged.
        let flight = next - self.snd.una();
        let peer_room = self.snd.wnd().min(self.flight_cap).saturating_sub(flight);
        let cc_room = self.rel.cc.cwnd().saturating_sub(self.rel.recovery.pipe(&self.snd.sent, self.snd.mss() as u32));
        let usable = peer_room.min(cc_room);
        // A segment is full when it fills the MSS or the caller's buffer, whichever is less.
        let full = (self.snd.mss() as usize).min(self.payload_room(buf)) as u32;
        let len = unsent.min(full).min(usable);
        let with_fin = fin_unsent && next + len == data_end;
        if len == 0 && !(with_fin && usable > 0) {
            return None;
        }
        // RFC 9293 3.8.6.2.1 (3) and RFC 1122 4.2.3.4: Fs = 1/2 of Max(SND.WND), the largest
        // window offered after the SYN; until the peer has sent one, the SYN's own.
        let max_wnd = if self.snd.sws_max_wnd() > 0 { self.snd.sws_max_wnd() } else { self.snd.wnd() };
        // (1) a full segment, (2) all queued data (with Nagle's condition), (3) half the
        // largest window; (4), the override, is `forced`.
        let send = forced
            || with_fin
            || len == full
            || (max_wnd > 0 && len >= max_wnd / 2)
            || (len == unsent && (!self.config.nagle || self.snd.max() == self.snd.una()));
        if !send || (!forced && !self.paced(now, len.max(1))) {
            return None;
        }
        // What `send_from` would work out again from SND.MAX: the length already fits the
        // data, the MSS and the buffer, and the FIN goes where the data ends.
        self.send_segment(now, next, len as usize, with_fin, data_end, buf)
    }

    /// Send new data from SND.MAX in ESTABLISHED, as [`send_new`](Self::send_new) and
    /// `send_segment` would, on a straight path for the segment nearly every segment sent
    /// is (an exchange's request or reply, a bulk sender's data): the output side's header
    /// prediction. Return `None`, having changed nothing, unless all of this holds, and the
    /// general path then decides as before: data queued and no FIN (so no FIN to place);
    /// nothing marked lost (`retransmit_lost` would find nothing); no pacing (the pacer
    /// lets everything out); no restart after idle due (RFC 5681 4.1); no SACK blocks to
    /// send (the header carries the timestamps at most, and the payload room is the
    /// general path's); a segment the windows, Nagle and SWS avoidance let out now
    /// (RFC 9293 3.7.4, 3.8.6.2.1, rules 1 to 3: the override, 4, is the general path's);
    /// and a pseudo-header sum for the connection's addresses, with the segment short
    /// enough for IPv4's length field (so that neither writing nor the checksum can fail).
    ///
    /// The test `input::tests::sends_what_the_general_path_sends` holds it to the general
    /// path.
    ///
    /// Inlined (forced) into `poll_transmit`, its one caller: no call, and the `Transmit`
    /// built where `poll_transmit` returns it.
    #[inline(always)]
    fn send_predicted(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        #[cfg(test)]
        if super::input::tests::general_send_only() {
            return None;
        }
        let unsent = self.snd.unsent();
        if unsent == 0 || self.snd.fin_queued() || self.snd.sent.lost() != 0 || self.config.pacing {
            return None;
        }
        let (next, una) = (self.snd.max(), self.snd.una());
        if !self.snd.syn_acked()
            || (una == next
                && self
                    .snd
                    .last_data_at()
                    .is_some_and(|at| now.as_micros().saturating_sub(at.as_micros()) > self.rel.rtt.rto_us()))
            || (self.sack_enabled && self.rcv.has_sack_blocks())
        {
            return None;
        }
        let remote = self.remote.as_ref()?;
        let dst_port = self.remote_port;
        let pseudo = wire::PseudoSum::of(&self.local, remote).ok()?;
        // `send_new`'s decision, for a segment from SND.MAX without FIN, unforced.
        let smss = u32::from(self.snd.mss());
        let peer_room = self.snd.wnd().min(self.flight_cap).saturating_sub(next - una);
        let pipe = self.rel.recovery.pipe(&self.snd.sent, smss);
        let usable = peer_room.min(self.rel.cc.cwnd().saturating_sub(pipe));
        let timestamps = self.ts.option(now);
        let hlen = BASE_HEADER + self.ts.option_len();
        let full = (smss as usize).min(buf.len().saturating_sub(hlen)) as u32;
        let len = unsent.min(full).min(usable);
        if len == 0 || hlen + len as usize > usize::from(u16::MAX) {
            return None;
        }
        let max_wnd = if self.snd.sws_max_wnd() > 0 { self.snd.sws_max_wnd() } else { self.snd.wnd() };
        let send = len == full
            || (max_wnd > 0 && len >= max_wnd / 2)
            || (len == unsent && (!self.config.nagle || next == una));
        if !send {
            return None;
        }
        // `send_segment` and `write_segment` for new data (RFC 3168 6.1.5 and 6.1.3 for
        // ECT, CWR and ECE, as there).
        let seq = next;
        let mut flags = Flags::ACK;
        if len == unsent {
            flags |= Flags::PSH;
        }
        let ect = self.ecn.ok;
        if ect && self.ecn.queue_cwr {
            self.ecn.queue_cwr = false;
            flags |= Flags::CWR;
        }
        let window = self.rcv.advertise_window();
        if self.ecn.ok && self.ecn.echo {
            flags |= Flags::ECE;
        }
        if self.sack_enabled {
            // None to send (`has_sack_blocks` above): `sack_blocks_due` would find none and
            // forget the blocks last reported; this does the second without the first.
            debug_assert!(!self.rcv.has_sack_blocks());
            self.rcv.forget_sack_reported();
        }
        let ack = self.rcv.nxt();
        let header = PlainHeader { src_port: self.local_port, dst_port, seq, ack, flags, window, timestamps };
        // Neither fails: `buf` holds the header and `len` bytes, fewer than 65,536.
        let hlen = header.write(buf).ok()?;
        let offset = (seq - self.snd.buf_seq()) as usize;
        let payload_len = self.snd.buf.peek(offset, &mut buf[hlen..hlen + len as usize]);
        let total = hlen + payload_len;
        wire::fill_checksum(self.config.tx_checksum, pseudo, &mut buf[..total]).ok()?;
        self.stats.segs_out += 1;
        self.stats.bytes_out += payload_len as u64;
        self.ts.ack_sent(ack);
        self.rcv.ack_sent();
        self.timers.stop(Timer::DelayedAck);
        if log::log_enabled!(log::Level::Trace)
            && let Ok(seg) = Segment::parse_unchecked(&buf[..total])
        {
            log::trace!("{:?} {}: out {:?}", self.tuple(), self.state, seg);
        }
        // The record of new data, as `send_segment` keeps it.
        let end = seq + len;
        self.rel.time_segment(end, now);
        let app_limited = len == unsent && pipe + len < self.rel.cc.cwnd();
        self.snd.sent.push(seq, end, now, app_limited);
        self.snd.sent_new(end);
        self.rel.recovery.on_sent(seq, len, false, self.ts.tsval(now));
        self.after_data_sent(now, smss);
        self.arm_loss_probe_inline(now);
        #[cfg(test)]
        super::input::tests::count_predicted_send();
        Some(Transmit { len: total, kind: TransmitKind::Data, flags, seq, payload_len, ect })
    }

    /// Write the segment starting at `seq` with up to `max_len` bytes of data (and the FIN
    /// if it falls at the end and `fin_allowed`), record it in the scoreboard (new, or
    /// resent), and advance SND.MAX past it.
    fn send_from(
        &mut self,
        now: Instant,
        seq: SeqNum,
        max_len: usize,
        fin_allowed: bool,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let data_end = self.snd.data_end();
        let available = if seq.before(data_end) { (data_end - seq) as usize } else { 0 };
        let len = available.min(self.snd.mss() as usize).min(max_len).min(self.payload_room(buf));
        let fin = fin_allowed && self.snd.fin_seq().is_some_and(|f| seq + len == f);
        if len == 0 && !fin {
            return None;
        }
        self.send_segment(now, seq, len, fin, data_end, buf)
    }

    /// Write the segment starting at `seq` with `len` bytes of data (which the send buffer
    /// holds, and which fit the MSS and `buf`) and the FIN if `fin` (where the data ends,
    /// at `data_end`, with the FIN queued); record it, and advance SND.MAX past it.
    fn send_segment(
        &mut self,
        now: Instant,
        seq: SeqNum,
        len: usize,
        fin: bool,
        data_end: SeqNum,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let end = seq + len + fin as usize;
        let retransmission = seq.before(self.snd.max());
        let mut flags = Flags::ACK;
        if len > 0 && seq + len == data_end {
            flags |= Flags::PSH;
        }
        if fin {
            flags |= Flags::FIN;
        }
        // RFC 3168 6.1.5 (Linux's `tcp_ecn_send`): new data of an ECN connection goes
        // ECN-capable, and the first such segment after a reduction carries CWR (6.1.2).
        let ect = self.ecn.ok && len > 0 && !retransmission;
        if ect && self.ecn.queue_cwr {
            self.ecn.queue_cwr = false;
            flags |= Flags::CWR;
        }
        let offset = (seq - self.snd.buf_seq()) as usize;
        let kind = if retransmission { TransmitKind::Retransmission } else { TransmitKind::Data };
        let t = self.write_segment(now, buf, seq, flags, None, Some((offset, len)), kind, ect);
        // Nothing written, nothing to record.
        t?;
        let seg_len = (len + fin as usize) as u32;
        if retransmission {
            self.stats.retransmits += 1;
            // Karn's rule (RFC 6298 3): no sample from a retransmitted range.
            self.rel.stop_timing();
            self.snd.sent.resent(seq, seg_len, now);
        } else {
            self.rel.time_segment(end, now);
            // Application-limited (RFC 7661): nothing left to send, room left in cwnd.
            let pipe_after = self.rel.recovery.pipe(&self.snd.sent, self.snd.mss() as u32) + seg_len;
            let app_limited = end == data_end + u32::from(self.snd.fin_queued()) && pipe_after < self.rel.cc.cwnd();
            self.snd.sent.push(seq, end, now, app_limited);
            self.snd.sent_new(end);
        }
        self.rel.recovery.on_sent(seq, seg_len, retransmission, self.ts.tsval(now));
        // The bucket counts only for a paced connection (`paced`): without pacing, its line
        // stays untouched.
        if self.config.pacing {
            self.rel.pacer.spend(seg_len);
        }
        self.after_data_sent(now, self.snd.mss() as u32);
        // RFC 8985 7.2: restart the probe timer after new data, so that it counts from the
        // flight's last segment (a flight of one more segment than when it was armed may
        // also drop the worst-case delayed-ACK allowance).
        if !retransmission || !self.timers.is_armed(Timer::LossProbe) {
            self.arm_loss_probe(now);
        }
        t
    }

    /// Return the payload that fits in `buf` behind the header a data segment will carry:
    /// the timestamps where in use, and SACK blocks while out-of-order data is held.
    fn payload_room(&self, buf: &[u8]) -> usize {
        let blocks = self.sack_enabled && self.rcv.has_sack_blocks();
        let options = if blocks { MAX_OPTIONS } else { self.ts.option_len() };
        buf.len().saturating_sub(BASE_HEADER + options)
    }

    /// Send our SYN (active open) or SYN-ACK (passive or simultaneous open), with options.
    fn send_syn(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        let mut options = TcpOptions { mss: Some(self.config.mss), ..TcpOptions::NONE };
        let passive_reply = self.state == State::SynReceived;
        // In a SYN-ACK, offer only what the peer offered (RFC 7323 2.2, RFC 2018 2).
        if self.config.window_scaling && (!passive_reply || self.wscale_ok) {
            options.window_scale = Some(self.rcv.wscale_offer());
        }
        options.sack_permitted = self.config.sack && (!passive_reply || self.sack_enabled);
        // RFC 7323 3.2: offer timestamps in the SYN; in a SYN-ACK only if the SYN did, with
        // its TSval echoed.
        if self.config.timestamps && (!passive_reply || self.ts.enabled()) {
            let tsecr = if passive_reply { self.ts.recent() } else { 0 };
            options.timestamps = Some(Timestamps { tsval: self.ts.clock(now), tsecr });
        }
        let mut flags = Flags::SYN;
        if passive_reply {
            flags |= Flags::ACK;
        }
        let retransmission = self.snd.max().after(self.snd.iss());
        // RFC 3168 6.1.1: an ECN-setup SYN carries ECE and CWR, an ECN-setup SYN-ACK ECE
        // alone. A retransmitted SYN goes without them, in case a middlebox drops ECN-setup
        // SYNs (Linux's `tcp_ecn_clear_syn`, `tcp_ecn_fallback`); a SYN-ACK answering one
        // keeps ECE (Linux's `tcp_ecn_make_synack`).
        if passive_reply && self.passive {
            if self.ecn.ok {
                flags |= Flags::ECE;
            }
        } else if !passive_reply && !retransmission && self.config.ecn == Ecn::Request {
            self.ecn.requested = true;
            flags |= Flags::ECE | Flags::CWR;
        }
        let kind = if retransmission { TransmitKind::Retransmission } else { TransmitKind::Syn };
        let t = self.write_segment(now, buf, self.snd.iss(), flags, Some(&options), None, kind, false);
        // Nothing written, nothing to record.
        t?;
        self.snd.syn_sent();
        if retransmission {
            self.stats.retransmits += 1;
            self.rel.stop_timing();
        } else {
            self.rel.time_syn(self.snd.nxt(), now);
        }
        self.timers.set_if_idle(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
        t
    }

    /// Send a segment with no data: an ACK, a window update, or a probe with `seq`.
    fn send_ack(&mut self, now: Instant, buf: &mut [u8], seq: SeqNum, kind: TransmitKind) -> Option<Transmit> {
        self.write_segment(now, buf, seq, Flags::ACK, None, None, kind, false)
    }

    /// Write one segment from this connection. ACK-bearing segments carry RCV.NXT, the
    /// window and (with SACK) the out-of-order blocks; sending one settles any owed ACK.
    ///
    /// The `Transmit` is described whole here, `kind` and `ect` from the caller, so that
    /// the callers return it as it is rather than copy it into another with those fields.
    /// `syn_options` are a SYN's options (`None` for any other segment, whose options are
    /// filled in here, in the segment itself rather than in a copy passed in).
    ///
    /// Inlined into each of its three callers (`send_segment`, `send_ack`, `send_syn`): its
    /// eight arguments are then where the caller has them, not stored for a call, and the
    /// constants each caller passes (no SYN options, no data, the kind) fold away.
    /// `#[inline]` alone left it out of line.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn write_segment(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        seq: SeqNum,
        mut flags: Flags,
        syn_options: Option<&TcpOptions>,
        data: Option<(usize, usize)>,
        kind: TransmitKind,
        ect: bool,
    ) -> Option<Transmit> {
        let remote = self.remote.as_ref()?;
        let window = if flags.syn() {
            self.rcv.advertise_syn_window(initial_recv_window(&self.config))
        } else {
            self.rcv.advertise_window()
        };
        // RFC 3168 6.1.3: ECE on every ACK from a CE mark until the peer's CWR.
        if flags.ack() && !flags.syn() && self.ecn.ok && self.ecn.echo {
            flags |= Flags::ECE;
        }
        let (src_port, dst_port) = (self.local_port, self.remote_port);
        let ack = if flags.ack() { self.rcv.nxt() } else { SeqNum(0) };
        // RFC 7323 3.2: once negotiated, on every segment but RST (the SYN's come with it).
        let timestamps = if flags.syn() { None } else { self.ts.option(now) };
        let blocks = flags.ack() && self.sack_enabled && !flags.syn() && self.rcv.sack_blocks_due();
        // A header whose only option is the timestamps (every segment but a SYN and one
        // with SACK blocks) is written from these values as they are, without a `Segment`.
        let written = if syn_options.is_none() && !blocks {
            PlainHeader { src_port, dst_port, seq, ack, flags, window, timestamps }.write(buf)
        } else {
            let mut options = syn_options.copied().unwrap_or(TcpOptions::NONE);
            if blocks {
                self.rcv.fill_sack_blocks(&mut options, self.ts.enabled());
            }
            if !flags.syn() {
                options.timestamps = timestamps;
            }
            Segment { src_port, dst_port, seq, ack, flags, window, urgent: 0, options, payload: &[] }.write_header(buf)
        };
        let hlen = match written {
            Ok(n) => n,
            Err(e) => {
                log::error!("{:?}: cannot write a segment: {e}", self.tuple());
                return None;
            }
        };
        let payload_len = match data {
            Some((offset, len)) => self.snd.buf.peek(offset, &mut buf[hlen..hlen + len]),
            None => 0,
        };
        let len = hlen + payload_len;
        // `write_header` left the checksum field zero: the whole segment is summed in one pass.
        let filled = wire::PseudoSum::of(&self.local, remote)
            .and_then(|pseudo| wire::fill_checksum(self.config.tx_checksum, pseudo, &mut buf[..len]));
        if let Err(e) = filled {
            log::error!("{:?}: cannot checksum a segment: {e}", self.tuple());
            return None;
        }
        self.stats.segs_out += 1;
        self.stats.bytes_out += payload_len as u64;
        if flags.ack() {
            self.ts.ack_sent(self.rcv.nxt());
            self.rcv.ack_sent();
            self.timers.stop(Timer::DelayedAck);
        }
        if log::log_enabled!(log::Level::Trace)
            && let Ok(seg) = Segment::parse_unchecked(&buf[..len])
        {
            log::trace!("{:?} {}: out {:?}", self.tuple(), self.state, seg);
        }
        Some(Transmit { len, kind, flags, seq, payload_len, ect })
    }

    /// Write a reset that does not follow from the send sequence.
    fn write_reset(&mut self, rst: PendingReset, buf: &mut [u8]) -> Option<Transmit> {
        let mut flags = Flags::RST;
        if rst.ack.is_some() {
            flags |= Flags::ACK;
        }
        let seg = Segment {
            src_port: rst.src_port,
            dst_port: rst.dst.port(),
            seq: rst.seq,
            ack: rst.ack.unwrap_or(SeqNum(0)),
            flags,
            ..Segment::EMPTY
        };
        let src = std::net::SocketAddr::new(self.local.ip(), rst.src_port);
        let len = match seg.emit_as(self.config.tx_checksum, src.ip(), rst.dst.ip(), buf) {
            Ok(n) => n,
            Err(e) => {
                log::error!("cannot write a reset to {}: {e}", rst.dst);
                return None;
            }
        };
        self.stats.segs_out += 1;
        Some(Transmit { len, kind: TransmitKind::Reset, flags, seq: rst.seq, payload_len: 0, ect: false })
    }

    /// What sending data leaves to do, on the general path and the predicted one alike: the
    /// most in flight this round trip (for whether cwnd was what limited the sender), the
    /// send position back at SND.MAX, the time data last went out, and the retransmission
    /// timer started if it is not running (RFC 6298 5.1; its deadline computed only then: a
    /// sender with data in flight finds it running on every segment).
    #[inline(always)]
    fn after_data_sent(&mut self, now: Instant, smss: u32) {
        self.snd.raise_pipe_high(self.rel.recovery.pipe(&self.snd.sent, smss));
        self.snd.resume_at_max();
        self.snd.note_data_sent(now);
        if self.rel.unacked_since().is_none() {
            self.set_unacked_since(Some(now));
        }
        if !self.timers.is_armed(Timer::Retransmit) {
            self.timers.set(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
        }
    }

    /// Arm a timer when data waits and nothing is in flight to bring an ACK: with the window
    /// shut, the persist timer (RFC 9293 3.8.6.1: the RTO, backed off); with it open but too
    /// small for SWS avoidance to use, the override timer (3.8.6.2.1: a short fixed time).
    /// Either stays armed, not pushed back, while the wait goes on.
    ///
    /// Inlined down to the case of no data waiting (every poll that finds nothing to send
    /// asks, several times an exchange): a few stores, without a call.
    #[inline(always)]
    fn update_persist(&mut self, now: Instant) {
        let waiting = self.state.is_synchronized() && self.snd.max() == self.snd.una() && self.snd.has_unsent();
        if !waiting {
            self.stop_persist();
        } else {
            self.arm_persist(now);
        }
    }

    /// [`update_persist`](Self::update_persist) with no data waiting: neither timer is
    /// needed, and an open window ends the persist backoff.
    #[inline(always)]
    fn stop_persist(&mut self) {
        self.timers.stop(Timer::Persist);
        self.timers.stop(Timer::SwsOverride);
        if self.snd.wnd() > 0 {
            self.rel.reset_persist_backoff();
        }
    }

    /// [`update_persist`](Self::update_persist) with data waiting.
    #[inline(never)]
    fn arm_persist(&mut self, now: Instant) {
        if self.snd.wnd() == 0 {
            self.timers.stop(Timer::SwsOverride);
            if !self.timers.is_armed(Timer::Persist) {
                let mut at = now + self.rel.persist_interval(self.config.max_rto);
                // With a user timeout, the probe that finds it expired comes no later than
                // the timeout (Linux's tcp_clamp_probe0_to_user_timeout; its floor of
                // TCP_TIMEOUT_MIN, 2 ms, too).
                if let Some(limit) = self.config.user_timeout {
                    at = at.min((self.rel.last_ack_at() + limit).max(now + Duration::from_millis(2)));
                }
                self.timers.set(Timer::Persist, at);
            }
        } else {
            self.timers.stop(Timer::Persist);
            // Data the pacer holds back is not waiting for the window.
            if !self.timers.is_armed(Timer::Pacing) {
                self.timers.set_if_idle(Timer::SwsOverride, now + self.config.sws_override);
            }
        }
    }
}

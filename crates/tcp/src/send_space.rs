//! The send sequence space (RFC 9293 3.3.1, Figure 3): what we have sent, what the peer
//! has acknowledged, the window it offers, the data queued behind it, and the scoreboard
//! of segments in flight.
//!
//! Invariants, in sequence order: `iss < una <= nxt <= max`, where `una` passes `iss`
//! once the SYN is acknowledged; `buf` holds the octets from `buf_seq` on (the first
//! unacknowledged one once the SYN is acknowledged); the FIN, once queued, takes the
//! sequence number after the last of them. `sent` records every segment in `una..max`.

use crate::buffer::{RingBuffer, Storage};
use crate::sent::SentQueue;
use crate::seq::SeqNum;
use crate::time::Instant;
use crate::wire::Segment;

/// The largest window a shift of `wscale` can express (RFC 7323 2.3).
pub(crate) fn max_window(wscale: u8) -> u32 {
    65535u32 << wscale
}

/// The send half of a connection.
///
/// Laid out in declaration order (`repr(C)`), the buffer last: a connection puts the
/// receive space's buffer right after it, and the host asks both whether they hold storage
/// on every pass (see `Connection`'s layout).
#[repr(C)]
pub(crate) struct SendSpace {
    /// Sequence space acknowledged so far, SYN and FIN included (RFC 4898's
    /// `tcpEStatsAppHCThruOctetsAcked`, Linux's `tcpi_bytes_acked`): 64 bits, no wrap.
    acked_total: u64,
    /// When data was last sent (RFC 5681 4.1's idle test).
    last_data_at: Option<Instant>,
    /// The segments in flight: the SACK scoreboard and RACK's transmit record.
    pub sent: SentQueue,
    /// The ISS must lie above this (a new incarnation from TIME-WAIT, RFC 1122 4.2.2.13).
    iss_floor: Option<SeqNum>,
    /// Initial send sequence number.
    iss: SeqNum,
    /// SND.UNA: the oldest unacknowledged sequence number.
    una: SeqNum,
    /// Next sequence number to send; moved back to SND.UNA by a retransmission timeout.
    nxt: SeqNum,
    /// Highest sequence number sent plus one (RFC 9293's SND.NXT for ACK validation).
    max: SeqNum,
    /// SND.WND: the peer's window, scaled, in bytes.
    wnd: u32,
    /// SND.WL1 and SND.WL2: the segment that last updated the window.
    wl1: SeqNum,
    wl2: SeqNum,
    /// Largest window the peer has offered, its SYN's included: MAX.SND.WND of the ACK
    /// acceptability check (RFC 5961 5.2), where a larger value only accepts older ACKs.
    max_wnd: u32,
    /// Max(SND.WND) of sender-side SWS avoidance (RFC 9293 3.8.6.2.1, RFC 1122 4.2.3.4), the
    /// estimate of the peer's receive buffer: the largest window offered in a segment
    /// without SYN; 0 until one arrives.
    ///
    /// Not the SYN's window: that one is unscaled (RFC 7323 2.2), sent before scaling is in
    /// effect, and need not describe the buffer the peer goes on to offer (Linux sends 64240
    /// from its default buffer; one made smaller before the handshake completes shows only
    /// in the scaled windows after it). Counted, it would hold back every segment under half
    /// of it until the override timer. Linux, too, starts `max_window` on a passive open
    /// from the scaled window of the ACK that completes the handshake.
    sws_max_wnd: u32,
    /// Sequence number of the first byte held in `buf`.
    buf_seq: SeqNum,
    /// The most bytes in flight since SND.UNA last passed `pipe_high_until` (about a round
    /// trip): whether cwnd, not the peer's window or the application, held the sender back
    /// (RFC 7661; Linux's `tcp_is_cwnd_limited`).
    pipe_high: u32,
    pipe_high_until: SeqNum,
    /// Effective send MSS (RFC 9293 3.7.1), the fixed options taken off.
    mss: u16,
    /// Our SYN has been acknowledged. A flag, not `SND.UNA > ISS`: that comparison is
    /// modular and turns false again after 2 GiB have been sent.
    syn_acked: bool,
    /// The user closed: a FIN follows the last byte of `buf`.
    fin_queued: bool,
    /// The application offered more than the send buffer took since the last growth.
    limited: bool,
    /// The shift applied to the peer's window field.
    wscale: u8,
    pub buf: RingBuffer,
}

/// Every field but the buffer's bytes (its length and capacity instead), for the tests
/// that compare two connections' states.
#[cfg(test)]
impl std::fmt::Debug for SendSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendSpace")
            .field("acked_total", &self.acked_total)
            .field("last_data_at", &self.last_data_at)
            .field("sent", &self.sent)
            .field("iss_floor", &self.iss_floor)
            .field("iss", &self.iss)
            .field("una", &self.una)
            .field("nxt", &self.nxt)
            .field("max", &self.max)
            .field("wnd", &self.wnd)
            .field("wl1", &self.wl1)
            .field("wl2", &self.wl2)
            .field("max_wnd", &self.max_wnd)
            .field("sws_max_wnd", &self.sws_max_wnd)
            .field("buf_seq", &self.buf_seq)
            .field("pipe_high", &self.pipe_high)
            .field("pipe_high_until", &self.pipe_high_until)
            .field("mss", &self.mss)
            .field("syn_acked", &self.syn_acked)
            .field("fin_queued", &self.fin_queued)
            .field("limited", &self.limited)
            .field("wscale", &self.wscale)
            .field("buf", &(self.buf.len(), self.buf.capacity()))
            .finish()
    }
}

impl SendSpace {
    pub(crate) fn new(storage: Storage, mss: u16, sent: SentQueue) -> Self {
        SendSpace {
            iss: SeqNum(0),
            iss_floor: None,
            una: SeqNum(0),
            nxt: SeqNum(0),
            max: SeqNum(0),
            wnd: 0,
            wl1: SeqNum(0),
            wl2: SeqNum(0),
            max_wnd: 0,
            sws_max_wnd: 0,
            wscale: 0,
            mss,
            syn_acked: false,
            acked_total: 0,
            buf_seq: SeqNum(0),
            buf: RingBuffer::with_storage(storage),
            fin_queued: false,
            sent,
            limited: false,
            pipe_high: 0,
            pipe_high_until: SeqNum(0),
            last_data_at: None,
        }
    }

    /// Return the initial send sequence number (ISS).
    pub(crate) fn iss(&self) -> SeqNum {
        self.iss
    }

    /// Return SND.UNA, the oldest unacknowledged sequence number.
    pub(crate) fn una(&self) -> SeqNum {
        self.una
    }

    /// Return the next sequence number to send.
    pub(crate) fn nxt(&self) -> SeqNum {
        self.nxt
    }

    /// Return SND.MAX, the highest sequence number sent plus one.
    pub(crate) fn max(&self) -> SeqNum {
        self.max
    }

    /// Return SND.WND, the peer's window, scaled, in bytes.
    pub(crate) fn wnd(&self) -> u32 {
        self.wnd
    }

    /// Return Max(SND.WND) of sender-side SWS avoidance (0 until a window without SYN came).
    pub(crate) fn sws_max_wnd(&self) -> u32 {
        self.sws_max_wnd
    }

    /// Return the sequence space acknowledged so far, SYN and FIN included.
    pub(crate) fn acked_total(&self) -> u64 {
        self.acked_total
    }

    /// Return the sequence number of the first byte held in the send buffer.
    pub(crate) fn buf_seq(&self) -> SeqNum {
        self.buf_seq
    }

    /// Return whether our SYN has been acknowledged.
    pub(crate) fn syn_acked(&self) -> bool {
        self.syn_acked
    }

    /// Our SYN has been acknowledged.
    pub(crate) fn syn_acknowledged(&mut self) {
        self.syn_acked = true;
    }

    /// Note that the window in use came with the segment at `wl1` that acknowledged `wl2`
    /// (SND.WL1, SND.WL2), as the ACK completing a SYN-cookie handshake does.
    pub(crate) fn window_from(&mut self, wl1: SeqNum, wl2: SeqNum) {
        self.wl1 = wl1;
        self.wl2 = wl2;
    }

    /// Keep the ISS of the next incarnation above `floor` (RFC 1122 4.2.2.13).
    pub(crate) fn set_iss_floor(&mut self, floor: SeqNum) {
        self.iss_floor = Some(floor);
    }

    /// Return the effective send MSS, the fixed options taken off.
    pub(crate) fn mss(&self) -> u16 {
        self.mss
    }

    /// Set the effective send MSS (negotiated, or following the path MTU).
    pub(crate) fn set_mss(&mut self, mss: u16) {
        self.mss = mss;
    }

    /// Return the shift applied to the peer's window field.
    pub(crate) fn wscale(&self) -> u8 {
        self.wscale
    }

    /// Take the peer's window scale `shift` (0: not negotiated); RFC 7323 2.3: a shift
    /// above 14 is used as 14.
    pub(crate) fn set_wscale(&mut self, shift: u8) {
        self.wscale = shift.min(14);
    }

    /// Return whether the user closed: a FIN follows the last byte of the buffer.
    pub(crate) fn fin_queued(&self) -> bool {
        self.fin_queued
    }

    /// The user closed: queue a FIN after the last byte of the buffer.
    pub(crate) fn queue_fin(&mut self) {
        self.fin_queued = true;
    }

    /// The connection is closed: no FIN is left to send.
    pub(crate) fn drop_fin(&mut self) {
        self.fin_queued = false;
    }

    /// Return whether the application offered more than the send buffer took since the
    /// last growth.
    pub(crate) fn limited(&self) -> bool {
        self.limited
    }

    /// The send buffer held the application back.
    pub(crate) fn set_limited(&mut self) {
        self.limited = true;
    }

    /// The send buffer grew: start watching again.
    pub(crate) fn clear_limited(&mut self) {
        self.limited = false;
    }

    /// Return the most bytes in flight since SND.UNA last passed
    /// [`pipe_high_until`](Self::pipe_high_until).
    pub(crate) fn pipe_high(&self) -> u32 {
        self.pipe_high
    }

    /// Return the end of the round trip `pipe_high` measures.
    pub(crate) fn pipe_high_until(&self) -> SeqNum {
        self.pipe_high_until
    }

    /// Raise the most in flight this round trip to `pipe`, if higher.
    pub(crate) fn raise_pipe_high(&mut self, pipe: u32) {
        self.pipe_high = self.pipe_high.max(pipe);
    }

    /// A round trip ended: measure the next one, up to SND.MAX, from `pipe` in flight now.
    pub(crate) fn restart_pipe_high(&mut self, pipe: u32) {
        self.pipe_high = pipe;
        self.pipe_high_until = self.max;
    }

    /// Return when data was last sent.
    pub(crate) fn last_data_at(&self) -> Option<Instant> {
        self.last_data_at
    }

    /// Data went out at `now` (or the idle restart counted from it).
    pub(crate) fn note_data_sent(&mut self, now: Instant) {
        self.last_data_at = Some(now);
    }

    /// Our SYN (or SYN-ACK) went out: it takes the ISS.
    pub(crate) fn syn_sent(&mut self) {
        self.nxt = self.iss + 1u32;
        self.max = self.nxt;
    }

    /// Send our SYN again, as a SYN-ACK: the peer's SYN came again, or crossed ours
    /// (simultaneous open).
    pub(crate) fn resend_syn(&mut self) {
        self.nxt = self.iss;
    }

    /// A retransmission timeout: send again from SND.UNA.
    pub(crate) fn rewind(&mut self) {
        self.nxt = self.una;
    }

    /// Data up to `end` went out for the first time: SND.MAX moves there.
    pub(crate) fn sent_new(&mut self, end: SeqNum) {
        self.max = end;
    }

    /// A segment went out: bring SND.NXT up to SND.MAX if it is below.
    pub(crate) fn resume_at_max(&mut self) {
        if self.nxt.before(self.max) {
            self.nxt = self.max;
        }
    }

    /// Start the space at `iss`, raised to the floor a previous incarnation left: the SYN
    /// takes `iss`, data starts after it.
    pub(crate) fn start(&mut self, iss: SeqNum) {
        self.iss = match self.iss_floor.take() {
            Some(floor) if !iss.after(floor) => floor,
            _ => iss,
        };
        self.una = self.iss;
        self.nxt = self.iss;
        self.max = self.iss;
        self.buf_seq = self.iss + 1u32;
    }

    /// Start the space of a connection whose SYN (ISS `iss`) is already acknowledged, as a
    /// SYN cookie's is.
    pub(crate) fn start_acknowledged(&mut self, iss: SeqNum) {
        self.iss = iss;
        self.una = iss + 1u32;
        self.nxt = self.una;
        self.max = self.una;
        self.buf_seq = self.una;
        self.syn_acked = true;
    }

    /// Take the window of the peer's SYN: unscaled (RFC 7323 2.2), and not a Max(SND.WND)
    /// for SWS avoidance (see `sws_max_wnd`); `ack` is SND.WL2, the ACK it carried or our ISS.
    pub(crate) fn take_syn_window(&mut self, seg: &Segment<'_>, ack: SeqNum) {
        self.wnd = seg.window as u32;
        self.max_wnd = self.wnd;
        self.sws_max_wnd = 0;
        self.wl1 = seg.seq;
        self.wl2 = ack;
    }

    /// Take the (scaled) window of `seg` unconditionally, as the ACK completing the
    /// handshake gives it (RFC 9293 3.10.7.4, SYN-RECEIVED).
    pub(crate) fn set_window(&mut self, seg: &Segment<'_>) {
        // A 16-bit field shifted by at most 14 (`set_wscale`): within `max_window` and 32
        // bits, so no cap to apply.
        debug_assert!(self.wscale <= 14);
        self.wnd = u32::from(seg.window) << self.wscale;
        self.max_wnd = self.max_wnd.max(self.wnd);
        self.sws_max_wnd = self.sws_max_wnd.max(self.wnd);
        self.wl1 = seg.seq;
        self.wl2 = seg.ack;
    }

    /// Take the window of `seg` if it is newer than the one held (RFC 9293 3.10.7.4, fifth:
    /// SND.UNA =< SEG.ACK, and SND.WL1 < SEG.SEQ, or equal and SND.WL2 =< SEG.ACK). Return
    /// whether it was taken.
    pub(crate) fn update_window(&mut self, seg: &Segment<'_>) -> bool {
        let newer = self.wl1.before(seg.seq) || (self.wl1 == seg.seq && self.wl2.before_eq(seg.ack));
        if seg.ack.after_eq(self.una) && newer {
            self.set_window(seg);
            return true;
        }
        false
    }

    /// Return whether `ack` is acceptable: SND.UNA - MAX.SND.WND =< SEG.ACK =< SND.NXT
    /// (RFC 5961 5.2, with SND.MAX for SND.NXT).
    pub(crate) fn ack_in_range(&self, ack: SeqNum) -> bool {
        let lowest = self.una - self.max_wnd.max(1);
        !ack.after(self.max) && !ack.before(lowest)
    }

    /// Return the bytes sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> u32 {
        self.max - self.una
    }

    /// Return the sequence number after the last byte queued.
    pub(crate) fn data_end(&self) -> SeqNum {
        self.buf_seq + self.buf.len()
    }

    /// Return the bytes queued and never sent.
    pub(crate) fn unsent(&self) -> u32 {
        let end = self.data_end();
        if self.max.before(end) { end - self.max } else { 0 }
    }

    /// Return the sequence number of our FIN, once the user has closed.
    pub(crate) fn fin_seq(&self) -> Option<SeqNum> {
        self.fin_queued.then(|| self.data_end())
    }

    /// Return whether our FIN has been sent and acknowledged.
    pub(crate) fn fin_acked(&self) -> bool {
        self.fin_seq().is_some_and(|f| self.una.after(f))
    }

    /// Return whether data or a FIN waits at SND.NXT.
    pub(crate) fn has_unsent(&self) -> bool {
        self.nxt.before(self.data_end()) || self.fin_seq().is_some_and(|f| self.nxt.before_eq(f))
    }

    /// Remove the data `ack` acknowledges from the buffer; return how many bytes left it.
    pub(crate) fn discard_acked(&mut self, ack: SeqNum) -> u32 {
        if !ack.after(self.buf_seq) {
            return 0;
        }
        let acked = (ack - self.buf_seq).min(self.buf.len() as u32);
        self.buf.discard(acked as usize);
        // Everything acknowledged: start over at the front of the storage (warm in cache).
        self.buf.rewind_if_empty();
        self.buf_seq += acked;
        acked
    }

    /// Move SND.UNA (and SND.NXT with it, where a timeout had rewound it) to `ack`.
    pub(crate) fn advance(&mut self, ack: SeqNum) {
        if ack.after(self.una) {
            self.acked_total += u64::from(ack - self.una);
        }
        self.una = ack;
        if self.nxt.before(ack) {
            self.nxt = ack;
        }
    }
}

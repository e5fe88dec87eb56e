//! The receive sequence space (RFC 9293 3.3.1, Figure 4): what has arrived in order, the
//! out-of-order ranges held for reassembly, the window we offer, and the acknowledgments
//! and SACK blocks we owe.
//!
//! Invariants: `buf` holds the in-order octets the application has not read, ending at
//! RCV.NXT, and past them the out-of-order octets `assembler` tracks by offset from
//! RCV.NXT; `adv`, the right edge advertised, never moves left (RFC 9293 3.8.6.2.2), so
//! RCV.WND = `adv - nxt` never shrinks except by data arriving.

use std::time::Duration;

use crate::buffer::{RingBuffer, Storage};
use crate::config::Config;
use crate::path::DEFAULT_MSS_V4;
use crate::rcv_rtt::RcvRtt;
use crate::reassembly::Assembler;
use crate::send_space::max_window;
use crate::seq::SeqNum;
use crate::time::Instant;
use crate::wire::{SackBlock, SackBlocks, TcpOptions};

/// The longest a delayed ACK waits, whatever [`Config::delayed_ack`] asks (RFC 9293
/// 3.8.6.3, RFC 5681 4.2: under 500 ms; 200 ms as Linux's `TCP_DELACK_MAX`).
pub(crate) const MAX_ACK_DELAY: Duration = Duration::from_millis(200);

/// How urgently an ACK is owed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AckDue {
    None,
    /// Owed, but may wait for the delayed-ACK timer or ride on data.
    Delayed,
    /// Send at the next `poll_transmit`.
    Now,
}

/// The window a SYN or SYN-ACK offers: ten of our full-sized segments (RFC 6928's initial
/// window, as Linux's `tcp_select_initial_window` with `TCP_DEFAULT_INIT_RCVWND`), within
/// the receive buffer and the unscaled field. A host that accepts many connections at once
/// has promised no more than their first flights before it can size their windows.
pub(crate) fn initial_recv_window(config: &Config) -> u32 {
    (10 * u32::from(config.mss)).min(config.recv_buffer as u32).min(65535)
}

/// The window scale we offer: the smallest shift (at most 14, RFC 7323 2.3) whose window
/// covers the largest receive buffer autotuning may grow to.
pub(crate) fn wscale_offer(config: &Config) -> u8 {
    let most = config.recv_buffer_max.max(config.recv_buffer) as u32;
    (0..14).find(|&shift| max_window(shift) >= most).unwrap_or(14)
}

/// The receive half of a connection.
///
/// Laid out in declaration order (`repr(C)`): what every segment and read touches first
/// (the buffer, then the sequence numbers, the window and its cap, which the host reads and
/// sets on every pass beside the buffers' capacities), then the counts every ACK asks (the
/// D-SACK queue's, the reassembly table's) each at the head of its part, and what only
/// out-of-order data and duplicates touch (the D-SACK blocks, the reassembly ranges, the
/// SACK blocks last reported) last, so that the part of a connection a segment touches
/// takes as few cache lines as it can (see `Connection`'s layout).
#[repr(C)]
pub(crate) struct RecvSpace {
    pub buf: RingBuffer,
    /// RCV.NXT: the next sequence number expected.
    nxt: SeqNum,
    /// Right edge of the window last advertised; never moves left (RFC 9293 3.8.6.2.2).
    adv: SeqNum,
    /// In-order bytes received since we last sent an ACK (RFC 9293 3.8.6.3).
    unacked_bytes: u32,
    /// The peer's full-sized segment, as measured: the largest payload it has sent, up to
    /// our MSS (Linux's `rcv_mss`). A peer with timestamps sends 1448 bytes under an MSS
    /// of 1460, one behind a tunnel less: "every second full-sized segment" counts these.
    mss: u32,
    /// Receive-buffer autotuning (dynamic right-sizing, as Linux's `tcp_rcv_space_adjust`):
    /// bytes the application read since `drs_since`, and the most it read in one round trip.
    drs_bytes: u32,
    drs_space: u32,
    /// The most window the host lets this connection offer (its share of the device's
    /// receive ring); `u32::MAX` without a limit.
    window_cap: u32,
    /// A FIN arrived ahead of missing data at this sequence number.
    fin_pending: Option<SeqNum>,
    /// Initial receive sequence number.
    irs: SeqNum,
    /// The MSS we advertise ([`Config::mss`]): what a full-sized segment of the peer's may
    /// hold, and the least worthwhile move of the window's right edge (SWS avoidance).
    our_mss: u16,
    fin_received: bool,
    /// How urgently an ACK is owed: only escalates (None, Delayed, Now) until one is sent.
    ack_due: AckDue,
    /// The shift applied to our window field.
    wscale: u8,
    /// The scale we offered in our SYN (used only if the peer offers one too).
    wscale_offer: u8,
    /// How long an ACK of in-order data may wait ([`Config::delayed_ack`], at most
    /// [`MAX_ACK_DELAY`]), in microseconds, worked out once: the receiver of every
    /// exchange's segment arms the delayed-ACK timer with it.
    ack_delay_us: Option<u64>,
    /// When the interval of receive-buffer autotuning began (see `drs_bytes`).
    drs_since: Option<Instant>,
    /// The receiver's round-trip estimate, the interval autotuning counts reads over.
    rtt: RcvRtt,
    /// Duplicates received, to report in the first SACK block of the next ACKs (D-SACK,
    /// RFC 2883 section 4).
    dsack: DsackQueue,
    assembler: Assembler,
    /// The SACK blocks (not D-SACK) of the last ACK, most recent first (RFC 2018 4).
    sack_reported: SackBlocks,
}

/// What [`RecvSpace::take_text`] made of a segment's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Text {
    /// Bytes that became readable (the segment's, and any a filled hole released).
    pub ready: u32,
    /// The segment was in order and left no hole: its ACK may be delayed.
    pub delayable: bool,
    /// The segment's length after trimming to the window.
    pub len: u32,
    /// A FIN is now in order: the peer's or one held behind a hole.
    pub fin: bool,
}

/// Out-of-order data beyond what the reassembly table can track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReassemblyFull;

/// Every field but the buffer's bytes (its length and capacity instead), for the tests
/// that compare two connections' states.
#[cfg(test)]
impl std::fmt::Debug for RecvSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvSpace")
            .field("nxt", &self.nxt)
            .field("adv", &self.adv)
            .field("unacked_bytes", &self.unacked_bytes)
            .field("mss", &self.mss)
            .field("drs_bytes", &self.drs_bytes)
            .field("drs_space", &self.drs_space)
            .field("window_cap", &self.window_cap)
            .field("fin_pending", &self.fin_pending)
            .field("irs", &self.irs)
            .field("our_mss", &self.our_mss)
            .field("fin_received", &self.fin_received)
            .field("ack_due", &self.ack_due)
            .field("wscale", &self.wscale)
            .field("wscale_offer", &self.wscale_offer)
            .field("drs_since", &self.drs_since)
            .field("rtt", &self.rtt)
            .field("dsack", &self.dsack)
            .field("assembler", &self.assembler)
            .field("sack_reported", &self.sack_reported)
            .field("buf", &(self.buf.len(), self.buf.capacity()))
            .finish()
    }
}

impl RecvSpace {
    /// Return the shift applied to our window field.
    pub(crate) fn wscale(&self) -> u8 {
        self.wscale
    }

    /// Return the shift our SYN offers (RFC 7323 2.2).
    pub(crate) fn wscale_offer(&self) -> u8 {
        self.wscale_offer
    }

    /// Scale our window field by the shift we offered if window scaling was `negotiated`
    /// (both SYNs carried the option, RFC 7323 2.2), else not at all.
    pub(crate) fn use_wscale(&mut self, negotiated: bool) {
        self.wscale = if negotiated { self.wscale_offer } else { 0 };
    }

    /// Report `left..right`, data we already had, in the next ACKs (D-SACK, RFC 2883 4.1).
    pub(crate) fn report_duplicate(&mut self, left: SeqNum, right: SeqNum) {
        self.dsack.push(left, right);
    }

    /// Count in-order `text` whose ACK may be delayed, and learn the peer's segment size
    /// from it (up to `our_mss`).
    pub(crate) fn note_in_order(&mut self, text: &Text) {
        self.unacked_bytes += text.ready;
        self.mss = self.mss.max(text.len.min(u32::from(self.our_mss)));
    }

    /// Return whether less than two of the peer's full-sized segments wait for an ACK (RFC
    /// 9293 3.8.6.3, RFC 5681 4.2: ACK at least every second one).
    /// Return how long an ACK of in-order data may wait, in microseconds (`None`: no
    /// delayed ACKs).
    #[inline]
    pub(crate) fn ack_delay_us(&self) -> Option<u64> {
        self.ack_delay_us
    }

    pub(crate) fn under_two_segments_unacked(&self) -> bool {
        self.unacked_bytes < 2 * self.mss
    }

    /// Return whether data beyond RCV.NXT is held out of order.
    pub(crate) fn holds_out_of_order(&self) -> bool {
        !self.assembler.is_empty()
    }

    /// Count `n` bytes the application read, for receive-buffer autotuning.
    pub(crate) fn count_read(&mut self, n: usize) {
        self.drs_bytes = self.drs_bytes.saturating_add(n as u32);
    }

    /// Cap the window we advertise at `bytes` (see `Connection::set_window_cap`).
    pub(crate) fn set_window_cap(&mut self, bytes: u32) {
        self.window_cap = bytes;
    }

    /// Return IRS, the peer's initial sequence number.
    pub(crate) fn irs(&self) -> SeqNum {
        self.irs
    }

    /// Return RCV.NXT, the next sequence number expected.
    pub(crate) fn nxt(&self) -> SeqNum {
        self.nxt
    }

    /// Return whether the peer's FIN has been received in order.
    pub(crate) fn fin_received(&self) -> bool {
        self.fin_received
    }

    /// Note the right edge a SYN-cookie SYN-ACK advertised: an unscaled window of
    /// `initial` bytes, within the free buffer.
    pub(crate) fn advertised_cookie_window(&mut self, initial: u32) {
        self.adv = self.nxt + initial.min(self.buf.free() as u32);
    }

    /// Return whether an ACK must go at the next `poll_transmit`.
    pub(crate) fn ack_now_due(&self) -> bool {
        self.ack_due == AckDue::Now
    }

    /// Return whether an ACK is owed, now or delayed.
    pub(crate) fn ack_owed(&self) -> bool {
        self.ack_due != AckDue::None
    }

    /// Owe an ACK at the next `poll_transmit`.
    pub(crate) fn ack_now(&mut self) {
        self.ack_due = AckDue::Now;
    }

    /// Owe an ACK that may wait for the delayed-ACK timer or ride on data (unless one is
    /// owed now already).
    pub(crate) fn ack_delayed(&mut self) {
        if self.ack_due < AckDue::Delayed {
            self.ack_due = AckDue::Delayed;
        }
    }

    /// The delayed-ACK timer fired: a delayed ACK is owed now.
    pub(crate) fn delayed_ack_expired(&mut self) {
        if self.ack_due == AckDue::Delayed {
            self.ack_due = AckDue::Now;
        }
    }

    /// Owe no ACK (the connection is closed).
    pub(crate) fn forget_ack(&mut self) {
        self.ack_due = AckDue::None;
    }

    /// Return a receive space on `storage` that offers `wscale_offer`, advertises `our_mss`
    /// and delays its ACKs of in-order data by `ack_delay` (at most [`MAX_ACK_DELAY`];
    /// `None`: no delayed ACKs).
    pub(crate) fn new(storage: Storage, wscale_offer: u8, our_mss: u16, ack_delay: Option<Duration>) -> Self {
        RecvSpace {
            // In whole microseconds (as `Instant + Duration` takes a delay), then capped:
            // the cap is a whole number of them, so this is the capped delay's.
            ack_delay_us: ack_delay.map(|delay| {
                (delay.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(delay.subsec_micros())))
                    .min(MAX_ACK_DELAY.as_micros() as u64)
            }),
            irs: SeqNum(0),
            nxt: SeqNum(0),
            adv: SeqNum(0),
            wscale: 0,
            wscale_offer,
            buf: RingBuffer::with_storage(storage),
            assembler: Assembler::new(),
            fin_pending: None,
            fin_received: false,
            dsack: DsackQueue::default(),
            sack_reported: SackBlocks::new(),
            ack_due: AckDue::None,
            unacked_bytes: 0,
            mss: u32::from(our_mss.min(DEFAULT_MSS_V4)),
            our_mss,
            drs_bytes: 0,
            drs_since: None,
            drs_space: 0,
            rtt: RcvRtt::default(),
            window_cap: u32::MAX,
        }
    }

    /// Start the space at the peer's SYN, sequence number `irs`.
    pub(crate) fn start(&mut self, irs: SeqNum) {
        self.irs = irs;
        self.nxt = irs + 1u32;
        self.adv = self.nxt;
    }

    /// Return the receive window offered now: from RCV.NXT to the right edge advertised
    /// (RCV.WND, RFC 9293 3.3.1).
    pub(crate) fn window(&self) -> u32 {
        if self.adv.after(self.nxt) { self.adv - self.nxt } else { 0 }
    }

    /// The four-case acceptability test of RFC 9293 3.10.7.4 (first), for a segment at
    /// `seq` of length `len` (SYN and FIN counted).
    pub(crate) fn acceptable(&self, seq: SeqNum, len: u32) -> bool {
        let wnd = self.window();
        let end = self.nxt + wnd;
        match (len, wnd) {
            (0, 0) => seq == self.nxt,
            (0, _) => seq.between(self.nxt, end),
            (_, 0) => false,
            (_, _) => seq.between(self.nxt, end) || (seq + (len - 1)).between(self.nxt, end),
        }
    }

    /// Return whether reading opened the window enough to tell the peer at once
    /// (receiver-side SWS avoidance, RFC 9293 3.8.6.2.2): the window it knows has fallen to
    /// half of what we could offer and the right edge would move by a worthwhile amount
    /// (the smaller of half the buffer and `our_mss`). Otherwise the next ACK carries it.
    pub(crate) fn read_opens_window(&self) -> bool {
        let possible = (self.buf.free() as u32).min(max_window(self.wscale));
        let advertised = self.window();
        let threshold = (self.buf.capacity() as u32 / 2).min(u32::from(self.our_mss));
        2 * advertised <= possible && possible - advertised >= threshold
    }

    /// Seventh step of RFC 9293 3.10.7.4: place the text of an acceptable segment (trimmed
    /// to the window) in the buffer, reassembling out-of-order pieces, and note the ACK it
    /// owes at once: for data out of order or filling a hole (RFC 5681 4.2, RFC 9293
    /// 3.8.6.3) and for a FIN ahead of a hole. Duplicates are noted as D-SACKs (RFC 2883
    /// 4.1) where `sack` is on.
    ///
    /// Inlined down to the segment of a request/response exchange or of a bulk transfer:
    /// data at RCV.NXT, within the window, without a FIN, with nothing held out of order
    /// and no FIN waiting behind a hole. The general path, out of line, would trim nothing,
    /// report no duplicate, take the in-order branch and find no FIN: this does only what
    /// that leaves (the test `in_order_text_is_taken_as_the_general_path_takes_it` holds
    /// it to the general path).
    #[inline]
    pub(crate) fn take_text(
        &mut self,
        seq: SeqNum,
        payload: &[u8],
        fin: bool,
        sack: bool,
    ) -> Result<Text, ReassemblyFull> {
        if seq == self.nxt
            && !fin
            && !payload.is_empty()
            && payload.len() <= self.window() as usize
            && self.assembler.is_empty()
            && self.fin_pending.is_none()
        {
            return Ok(self.take_in_order(payload));
        }
        self.take_any_text(seq, payload, fin, sack)
    }

    /// [`take_text`](Self::take_text) for a segment header prediction took
    /// (`Connection::predicted`): text at RCV.NXT, within the window, without a FIN, which
    /// is what `take_text`'s first test asks of the segment, asked there already; this asks
    /// only what the space holds (nothing out of order, no FIN waiting behind a hole).
    #[inline(always)]
    pub(crate) fn take_predicted_text(
        &mut self,
        seq: SeqNum,
        payload: &[u8],
        sack: bool,
    ) -> Result<Text, ReassemblyFull> {
        debug_assert!(seq == self.nxt && !payload.is_empty() && payload.len() <= self.window() as usize);
        if self.assembler.is_empty() && self.fin_pending.is_none() {
            return Ok(self.take_in_order(payload));
        }
        self.take_any_text(seq, payload, false, sack)
    }

    /// `take_text`'s in-order case: the text goes straight into the buffer.
    #[inline(always)]
    fn take_in_order(&mut self, payload: &[u8]) -> Text {
        self.buf.write_at(self.buf.len(), payload);
        self.buf.commit(payload.len());
        let ready = payload.len() as u32;
        self.nxt += ready;
        Text { ready, delayable: true, len: ready, fin: false }
    }

    /// [`take_text`](Self::take_text) for any segment's text.
    #[inline(never)]
    fn take_any_text(
        &mut self,
        mut seq: SeqNum,
        payload: &[u8],
        fin: bool,
        sack: bool,
    ) -> Result<Text, ReassemblyFull> {
        let mut data = payload;
        let mut fin = fin;
        // Trim what we already have, and report it as a D-SACK (RFC 2883 4.1).
        if seq.before(self.nxt) {
            let dup = (self.nxt - seq) as usize;
            if sack && dup > 0 && !data.is_empty() {
                self.dsack.push(seq, seq + dup.min(data.len()));
            }
            if dup > data.len() {
                // Only an old FIN remains.
                data = &[];
                fin = false;
            } else {
                data = &data[dup..];
            }
            seq = self.nxt;
        }
        // Trim what lies beyond the window; a FIN past the window is not yet accepted.
        let wnd = self.window() as usize;
        let offset = (seq - self.nxt) as usize;
        if offset + data.len() > wnd {
            data = &data[..wnd.saturating_sub(offset)];
            fin = false;
        }
        let mut text = Text { ready: 0, delayable: false, len: data.len() as u32, fin: false };
        // A duplicate of out-of-order data held already: a D-SACK too (RFC 2883 4.1.2).
        let (start, end) = (offset as u32, (offset + data.len()) as u32);
        if sack && !data.is_empty() && self.assembler.ranges().any(|(s, e)| s <= start && end <= e) {
            self.dsack.push(seq, seq + data.len());
        }
        if !data.is_empty() && offset == 0 && self.assembler.is_empty() {
            // In order, with no out-of-order data held (nearly every segment): straight into
            // the buffer, where the assembler's `add` and `pop_front` of this one range
            // would have put it.
            self.buf.write_at(self.buf.len(), data);
            self.buf.commit(data.len());
            text.ready = data.len() as u32;
            self.nxt += text.ready;
            text.delayable = true;
        } else if !data.is_empty() {
            if self.assembler.add(offset as u32, data.len() as u32).is_err() {
                self.ack_due = AckDue::Now;
                return Err(ReassemblyFull);
            }
            let at = self.buf.len() + offset;
            self.buf.write_at(at, data);
            text.ready = self.assembler.pop_front();
            if text.ready > 0 {
                self.buf.commit(text.ready as usize);
                self.nxt += text.ready;
            }
            if offset > 0 || !self.assembler.is_empty() || text.ready > text.len {
                // Out of order, a hole left, or a hole filled: the sender wants to know now.
                self.ack_due = AckDue::Now;
            } else {
                text.delayable = true;
            }
        }
        if fin {
            let fin_seq = seq + data.len();
            if fin_seq == self.nxt {
                text.fin = true;
                return Ok(text);
            }
            self.fin_pending = Some(fin_seq);
            self.ack_due = AckDue::Now;
        }
        // A FIN that arrived earlier, ahead of a hole now filled.
        if let Some(f) = self.fin_pending
            && f == self.nxt
        {
            self.fin_pending = None;
            text.fin = true;
        }
        Ok(text)
    }

    /// Read committed bytes into `buf` and consume them (see [`consume`](Self::consume));
    /// return how many.
    #[inline]
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = self.buf.peek(0, buf);
        self.consume(n)
    }

    /// Return the committed bytes at the front that lie contiguous in the ring, to read in
    /// place: all of them unless they wrap around the end of its storage.
    pub(crate) fn readable_front(&self) -> &[u8] {
        self.buf.as_slices().0
    }

    /// Consume `n` committed bytes from the front, or all of them if fewer; return how many.
    /// With everything read and no out-of-order data held, the ring starts over at the front
    /// of its storage.
    #[inline]
    pub(crate) fn consume(&mut self, n: usize) -> usize {
        let n = n.min(self.buf.len());
        self.buf.discard(n);
        if self.assembler.is_empty() {
            self.buf.rewind_if_empty();
        }
        n
    }

    /// Take the peer's in-order FIN (RFC 9293 3.10.7.4, eighth).
    pub(crate) fn take_fin(&mut self) {
        self.nxt += 1;
        self.fin_received = true;
        self.ack_due = AckDue::Now;
    }

    /// Receive-buffer autotuning (dynamic right-sizing, Fisk and Feng; Linux's
    /// `tcp_rcv_space_adjust`): count what the application reads per round trip, and when a
    /// round trip's reads are more than any before, let the buffer (and so the window) grow
    /// to twice that, up to `max`. A sender the window held back delivers a window per
    /// round trip, so with an application that keeps up the window doubles each round trip
    /// until the path, not the window, is the limit; an application that does not read
    /// grows nothing. Checked as data arrives (the reads carry no clock).
    ///
    /// The round trip is the receiver's own estimate ([`RcvRtt`]) once it has one, so it
    /// follows a path whose RTT grew after the handshake; until then the sender's SRTT.
    ///
    /// In microseconds, as the clock and the sender's SRTT (`srtt_us`) count: the time since
    /// the count began is a whole number of them, so it is below the round trip exactly
    /// when it is below the round trip rounded up to one ([`RcvRtt`] keeps nanoseconds).
    pub(crate) fn autotune(&mut self, now: Instant, srtt_us: Option<u64>, max: usize, growth_allowed: bool) {
        let since = *self.drs_since.get_or_insert(now);
        let rtt_us = match self.rtt.get() {
            Some(rtt) => ceil_micros(rtt),
            None => srtt_us.unwrap_or(100_000),
        }
        .max(100);
        if now.as_micros().saturating_sub(since.as_micros()) < rtt_us {
            return;
        }
        let copied = self.drs_bytes;
        self.drs_bytes = 0;
        self.drs_since = Some(now);
        if copied <= self.drs_space {
            return;
        }
        self.drs_space = copied;
        let want = (2 * copied as usize).min(max);
        if growth_allowed && want > self.buf.capacity() {
            self.buf.grow(want.next_power_of_two().min(max));
        }
    }

    /// In-order data arrived at `now`, `len` bytes of it in a segment echoing `tsecr`
    /// (measuring `echo`, see [`RcvRtt::on_data_by_timestamp`]): take the receiver's RTT
    /// samples it gives, by the window and by the timestamp echo.
    #[inline]
    pub(crate) fn measure_rtt(&mut self, now: Instant, len: u32, tsecr: Option<u32>, echo: Option<Duration>) {
        self.rtt.on_data_by_window(now, self.nxt, self.adv);
        if let Some(tsecr) = tsecr {
            self.rtt.on_data_by_timestamp(tsecr, echo, len, self.mss);
        }
    }

    /// Return the receiver's RTT estimate, if it has one.
    pub(crate) fn rtt(&self) -> Option<Duration> {
        self.rtt.get()
    }

    /// Return the window field of a SYN or SYN-ACK: never scaled (RFC 7323 2.2), and at
    /// most `initial` ([`initial_recv_window`]: what a peer's initial congestion window can
    /// send; the first ACK opens the rest).
    pub(crate) fn advertise_syn_window(&mut self, initial: u32) -> u16 {
        let free = (self.buf.free() as u32).min(initial).min(self.window_cap);
        if (self.nxt + free).after(self.adv) {
            self.adv = self.nxt + free;
        }
        free as u16
    }

    /// Return the window field to send, moving the right edge only by worthwhile amounts
    /// (receiver-side SWS avoidance, RFC 9293 3.8.6.2.2: the smaller of half the buffer and
    /// `our_mss`) and never to the left.
    ///
    /// With window scaling the field counts units of 2^shift bytes (RFC 7323 2.3), so the
    /// edge the peer computes, RCV.NXT + (field << shift), falls on a grid that moves with
    /// RCV.NXT. Rounding the window down would move that edge left by up to 2^shift - 1
    /// bytes whenever RCV.NXT moves by other than a multiple of the unit; the window is
    /// rounded up instead, as Linux and FreeBSD do ("avoid shrinking window with window
    /// scaling"), and RCV.ADV follows what was advertised. Each rounding may promise a few
    /// bytes more, a creep that a peer sending tiny segments can repeat at every ACK (RFC
    /// 7323 Appendix F; Linux's tcp_shrink_window): the receive buffer keeps a reserve for
    /// it, and only where the reserve is spent and the buffer could not hold the rounded
    /// edge is the window rounded down, retracting by less than one unit.
    #[inline(always)]
    pub(crate) fn advertise_window(&mut self) -> u16 {
        let capacity = self.buf.capacity() as u32;
        let unit = 1u32 << self.wscale;
        // What the buffer can still take, and the part of it that SWS avoidance may offer.
        let room = (self.buf.free() as u32).min(max_window(self.wscale));
        // A sixty-fourth of the buffer: hundreds of creeping ACKs even with 8-byte units.
        let reserve = if unit > 1 { (capacity / 64).max(unit - 1) } else { 0 };
        // The host's cap limits how far the edge moves on, never where it already is.
        let free = room.saturating_sub(reserve).min(self.window_cap);
        let edge = self.nxt + free;
        let threshold = (capacity / 2).min(u32::from(self.our_mss));
        if edge.after(self.adv) && (edge - self.adv >= threshold || room == capacity) {
            self.adv = edge;
        }
        let window = self.window();
        // A distance in sequence space, below 2^31: rounded up to the unit it stays below
        // 2^32, so the units shifted back are the rounded window, without an overflow check.
        let units = window.div_ceil(unit);
        let rounded = units << self.wscale;
        let field = if rounded <= room { units } else { room >> self.wscale };
        if rounded <= room {
            self.adv = self.nxt + rounded;
        } else if field * unit < window {
            log::debug!("receive buffer full to within a window unit: window retracted");
        }
        field.min(65535) as u16
    }

    /// Return whether an ACK carries SACK blocks now (out-of-order data held, or a
    /// duplicate to report).
    pub(crate) fn has_sack_blocks(&self) -> bool {
        !self.assembler.is_empty() || !self.dsack.is_empty()
    }

    /// Fill SACK blocks: the most recent first, then the others (RFC 2018 section 4); `ts`
    /// says whether the timestamps option shares the header.
    ///
    /// After the first, the blocks last reported come again, in their order, as they stand
    /// now (RFC 2018 section 4: "the SACK option SHOULD be filled out by repeating the most
    /// recently reported SACK blocks"), and only then the other ranges, lowest first. One
    /// ACK may follow many segments (the host reads frames in batches), and three blocks
    /// next to timestamps cannot name every range: repeating them gives each range several
    /// ACKs' chances to be seen, where always naming the lowest would leave the rest for
    /// the sender to resend although we hold them.
    ///
    /// For the tests: a segment's writer asks [`sack_blocks_due`](Self::sack_blocks_due)
    /// (inlined, every segment sent asks) and calls [`fill_sack_blocks`](Self::fill_sack_blocks),
    /// the walk, out of line, only when it says so.
    #[cfg(test)]
    pub(crate) fn sack_blocks(&mut self, options: &mut TcpOptions, ts: bool) {
        if self.sack_blocks_due() {
            self.fill_sack_blocks(options, ts);
        }
    }

    /// Return whether an ACK sent now carries SACK blocks, which
    /// [`fill_sack_blocks`](Self::fill_sack_blocks) then fills; with none, forget the
    /// blocks last reported, as [`sack_blocks`](Self::sack_blocks) does.
    #[inline]
    pub(crate) fn sack_blocks_due(&mut self) -> bool {
        // Nothing held out of order and no duplicate waiting, as on nearly every ACK: no
        // block to send, and none reported. Two counts, in the receive space's hot line,
        // rather than the walk below over the blocks last reported and the ranges.
        if self.assembler.is_empty() && self.dsack.is_empty() {
            self.forget_sack_reported();
            return false;
        }
        true
    }

    /// [`sack_blocks_due`](Self::sack_blocks_due) where the caller knows it finds no block to
    /// send ([`has_sack_blocks`](Self::has_sack_blocks) said so): forget the blocks last
    /// reported, without asking again.
    #[inline(always)]
    pub(crate) fn forget_sack_reported(&mut self) {
        if !self.sack_reported.is_empty() {
            self.sack_reported = SackBlocks::new();
        }
    }

    /// [`sack_blocks`](Self::sack_blocks) with out-of-order data held or a duplicate to
    /// report.
    #[inline(never)]
    pub(crate) fn fill_sack_blocks(&mut self, options: &mut TcpOptions, ts: bool) {
        // A duplicate received goes first, once (D-SACK, RFC 2883 section 4).
        let dsack = self.dsack.pop();
        if let Some((left, right)) = dsack {
            options.sack_blocks.push(SackBlock { left, right });
        }
        // What fits after it: three blocks next to timestamps, four alone (RFC 2018 3).
        let room = if ts { 3 } else { 4 } - options.sack_blocks.len();
        let base = self.nxt;
        let mut blocks = SackBlocks::new();
        let add = |blocks: &mut SackBlocks, (start, end): (u32, u32)| {
            let block = SackBlock { left: base + start, right: base + end };
            if blocks.len() < room && !blocks.as_slice().contains(&block) {
                blocks.push(block);
            }
        };
        // A duplicate of out-of-order data: the block that holds it comes next (RFC 2883
        // 4.1.2), so the sender can tell the D-SACK from an ordinary block.
        if let Some((left, _)) = dsack.filter(|&(left, _)| left.after_eq(base)) {
            let offset = left - base;
            if let Some(range) = self.assembler.ranges().find(|&(s, e)| s <= offset && offset < e) {
                add(&mut blocks, range);
            }
        }
        if let Some(recent) = self.assembler.recent() {
            add(&mut blocks, recent);
        }
        for reported in self.sack_reported.as_slice() {
            // The range that now holds the block's first byte (ranges only grow and merge
            // until RCV.NXT passes them).
            if reported.left.after_eq(base) {
                let offset = reported.left - base;
                if let Some(range) = self.assembler.ranges().find(|&(s, e)| s <= offset && offset < e) {
                    add(&mut blocks, range);
                }
            }
        }
        for range in self.assembler.ranges() {
            add(&mut blocks, range);
        }
        for &block in blocks.as_slice() {
            options.sack_blocks.push(block);
        }
        self.sack_reported = blocks;
    }

    /// An ACK went out: nothing is owed but the duplicates still to report, which each want
    /// an ACK of their own.
    pub(crate) fn ack_sent(&mut self) {
        self.ack_due = if self.dsack.is_empty() { AckDue::None } else { AckDue::Now };
        self.unacked_bytes = 0;
    }
}

/// Duplicates received and not yet reported: each goes first in an ACK of its own as a
/// D-SACK (RFC 2883 4.1: the first block, and only one per ACK), as Linux sends one
/// duplicate ACK per duplicate. The host takes in frames in batches, so several can arrive
/// before the next ACK; a sender that learns of each one widens its reordering window
/// (RFC 8985 6.2) and stops resending what it thought lost.
///
/// `len` first (`repr(C)`): every ACK asks whether the queue is empty, and the receive
/// space puts it right after its hot fields.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub(crate) struct DsackQueue {
    len: u8,
    blocks: [(SeqNum, SeqNum); 4],
}

impl DsackQueue {
    /// Note the duplicate `left..right`: joined to the last one where they touch, else
    /// queued; the oldest gives way when four wait.
    pub(crate) fn push(&mut self, left: SeqNum, right: SeqNum) {
        if let Some(last) = self.blocks[..self.len as usize].last_mut()
            && !left.after(last.1)
            && !last.0.after(right)
        {
            *last = (if left.before(last.0) { left } else { last.0 }, if right.after(last.1) { right } else { last.1 });
            return;
        }
        if self.len as usize == self.blocks.len() {
            self.blocks.rotate_left(1);
            self.len -= 1;
        }
        self.blocks[self.len as usize] = (left, right);
        self.len += 1;
    }

    /// Take the oldest duplicate not yet reported.
    pub(crate) fn pop(&mut self) -> Option<(SeqNum, SeqNum)> {
        if self.len == 0 {
            return None;
        }
        let first = self.blocks[0];
        self.blocks.rotate_left(1);
        self.len -= 1;
        Some(first)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Return `d` in whole microseconds, rounded up (saturating).
fn ceil_micros(d: Duration) -> u64 {
    d.as_secs().saturating_mul(1_000_000).saturating_add(u64::from(d.subsec_nanos().div_ceil(1000)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const IRS: SeqNum = SeqNum(1000);

    /// A receive space with a 4 KiB buffer, synchronized at `IRS`, its window offered.
    fn space() -> RecvSpace {
        let mut rcv = RecvSpace::new(Storage::new(4096), 0, 1460, None);
        rcv.start(IRS);
        assert_eq!(rcv.advertise_window(), 4096);
        rcv
    }

    /// The delay kept in microseconds is the configured one capped at `MAX_ACK_DELAY`, as
    /// the delayed-ACK timer's deadline took it (`now + delay.min(MAX_ACK_DELAY)`).
    #[test]
    fn the_ack_delay_in_microseconds_is_the_capped_delay() {
        assert_eq!(RecvSpace::new(Storage::new(0), 0, 1460, None).ack_delay_us(), None);
        let now = Instant::from_micros(1_234_567);
        for nanos in [
            0,
            1,
            999,
            1_000,
            1_999,
            40_000_000,
            199_999_999,
            200_000_000,
            200_000_001,
            200_001_000,
            10_000_000_000,
            u64::MAX,
        ] {
            let delay = Duration::from_nanos(nanos);
            let rcv = RecvSpace::new(Storage::new(0), 0, 1460, Some(delay));
            let us = rcv.ack_delay_us().expect("delayed ACKs configured");
            assert_eq!(
                Instant::from_micros(now.as_micros().saturating_add(us)),
                now + delay.min(MAX_ACK_DELAY),
                "{delay:?}"
            );
        }
        assert_eq!(RecvSpace::new(Storage::new(0), 0, 1460, Some(Duration::MAX)).ack_delay_us(), Some(200_000));
    }

    /// `take_text`'s path for in-order text does what the general path (`take_any_text`)
    /// does with the same segment: two spaces, one taking every segment through
    /// `take_text` and one through the general path alone, given the same random segments
    /// (in order, duplicates, out of order, past the window, with and without FIN) and
    /// reads, return the same and hold the same. And one case drawn by hand, which random
    /// segments seldom make: a FIN alone ahead of a hole that in-order data then fills.
    #[test]
    fn in_order_text_is_taken_as_the_general_path_takes_it() {
        use proptest::prelude::*;
        use std::sync::atomic::{AtomicUsize, Ordering};
        // How many segments went the fast way, over all cases: the test means something only
        // if many did.
        static FAST: AtomicUsize = AtomicUsize::new(0);
        let hand = [(100, 0, true, 0, true), (0, 100, false, 0, true)];
        assert_eq!(take_both_ways(&hand), 0, "data filling the hole before a FIN goes the general way");
        let offset = prop_oneof![8 => Just(0i64), 1 => -300i64..3000];
        // Some empty (a FIN alone, out of order, waits with nothing held), some FINs.
        let len = prop_oneof![1 => Just(0usize), 4 => 1usize..1500];
        let segment = (offset, len, proptest::bool::weighted(0.1), 0usize..3000, any::<bool>());
        proptest!(|(segments in proptest::collection::vec(segment, 1..60))| {
            FAST.fetch_add(take_both_ways(&segments), Ordering::Relaxed);
        });
        let fast = FAST.load(Ordering::Relaxed);
        assert!(fast > 1000, "the fast path was hardly taken: {fast} segments");
    }

    /// Give two spaces the same `segments` (offset from RCV.NXT, length, FIN, bytes read
    /// after it, SACK on), one through `take_text`, one through `take_any_text`; assert that
    /// they return and hold the same, and return how many would go `take_text`'s fast way.
    fn take_both_ways(segments: &[(i64, usize, bool, usize, bool)]) -> usize {
        let (mut fast, mut general) = (space(), space());
        let mut fast_way = 0;
        for &(offset, len, fin, read, sack) in segments {
            let seq = general.nxt + (offset as i32 as u32);
            // The bytes of a sequence number are the same in every segment that carries it.
            let payload: Vec<u8> = (0..len).map(|i| (seq.0.wrapping_add(i as u32) % 251) as u8).collect();
            fast_way += usize::from(
                seq == fast.nxt
                    && !fin
                    && !payload.is_empty()
                    && payload.len() <= fast.window() as usize
                    && fast.assembler.is_empty()
                    && fast.fin_pending.is_none(),
            );
            assert_eq!(fast.take_text(seq, &payload, fin, sack), general.take_any_text(seq, &payload, fin, sack));
            assert_eq!(fast.nxt, general.nxt);
            assert_eq!(fast.buf.len(), general.buf.len());
            assert_eq!(fast.fin_pending, general.fin_pending);
            assert_eq!(fast.ack_due, general.ack_due);
            assert_eq!(ranges_of(&fast), ranges_of(&general));
            assert_eq!(blocks(&mut fast), blocks(&mut general));
            let (mut x, mut y) = (vec![0u8; read], vec![0u8; read]);
            let (n, m) = (fast.read(&mut x), general.read(&mut y));
            assert_eq!(&x[..n], &y[..m]);
            assert_eq!(fast.advertise_window(), general.advertise_window());
        }
        fast_way
    }

    fn ranges_of(rcv: &RecvSpace) -> Vec<(u32, u32)> {
        rcv.assembler.ranges().collect()
    }

    /// `advertise_window` rounds the window up to the unit by a shift, where it multiplied
    /// with saturation and divided: the same rounded window and field for every window a
    /// sequence-space distance can be (below 2^31), every scale and every room.
    #[test]
    fn the_window_rounded_by_shifts_is_the_window_rounded_by_multiplying() {
        proptest::proptest!(|(window in 0u32..1 << 31, wscale in 0u8..=14, room in proptest::prelude::any::<u32>())| {
            let unit = 1u32 << wscale;
            let room = room.min(max_window(wscale));
            let rounded = window.div_ceil(unit).saturating_mul(unit);
            let field = if rounded <= room { rounded / unit } else { room / unit };
            let units = window.div_ceil(unit);
            let shifted = units << wscale;
            proptest::prop_assert_eq!(shifted, rounded);
            proptest::prop_assert_eq!(if shifted <= room { units } else { room >> wscale }, field);
        });
    }

    /// `autotune` compares whole microseconds with the round trip rounded up to one, where
    /// it compared `Duration`s: the same answer for every elapsed time and round trip.
    #[test]
    fn the_round_trip_in_microseconds_rounded_up_compares_as_the_duration() {
        proptest::proptest!(|(secs in 0u64..5, nanos in 0u32..1_000_000_000, elapsed_us in 0u64..6_000_000)| {
            let rtt = Duration::new(secs, nanos);
            let by_duration = Duration::from_micros(elapsed_us) < rtt.max(Duration::from_micros(100));
            let by_micros = elapsed_us < ceil_micros(rtt).max(100);
            proptest::prop_assert_eq!(by_duration, by_micros);
            // And near the edge, where rounding matters.
            let edge = ceil_micros(rtt);
            for e in edge.saturating_sub(1)..=edge + 1 {
                proptest::prop_assert_eq!(Duration::from_micros(e) < rtt, e < edge);
            }
        });
        assert_eq!(ceil_micros(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_micros(Duration::from_micros(7)), 7);
        assert_eq!(ceil_micros(Duration::MAX), u64::MAX);
    }

    /// Return the SACK blocks the next ACK carries, as (left, right) pairs.
    fn blocks(rcv: &mut RecvSpace) -> Vec<(u32, u32)> {
        let mut options = TcpOptions::NONE;
        rcv.sack_blocks(&mut options, false);
        options.sack_blocks.as_slice().iter().map(|b| (b.left.0, b.right.0)).collect()
    }

    // `sack_blocks` returns at once when nothing is held out of order and no duplicate
    // waits; each case below fails if that early return were taken on either alone.
    #[test]
    fn sack_blocks_report_out_of_order_data_duplicates_and_then_nothing() {
        let mut rcv = space();
        let next = IRS + 1u32;
        assert_eq!(blocks(&mut rcv), vec![]);
        // Out of order, no duplicate: a SACK block.
        rcv.take_text(next + 100u32, &[1; 10], false, true).unwrap();
        assert_eq!(blocks(&mut rcv), vec![(next.0 + 100, next.0 + 110)]);
        assert!(!rcv.sack_reported.is_empty());
        // The hole filled: nothing held, no block, and none left reported.
        rcv.take_text(next, &[2; 100], false, true).unwrap();
        assert!(!rcv.holds_out_of_order());
        assert_eq!(blocks(&mut rcv), vec![]);
        assert!(rcv.sack_reported.is_empty());
        // A duplicate, nothing out of order: a D-SACK block, once.
        rcv.take_text(next, &[2; 100], false, true).unwrap();
        assert_eq!(blocks(&mut rcv), vec![(next.0, next.0 + 100)]);
        assert_eq!(blocks(&mut rcv), vec![]);
    }
}

//! The segments in flight: what was sent, when, and what the peer has said of each, as the
//! scoreboard of SACK-based loss recovery (RFC 6675 section 3) and the transmit record RACK
//! reads (RFC 8985 section 5.2).
//!
//! The data itself stays in the send buffer; this keeps one small record per segment, in
//! sequence order, from SND.UNA to SND.MAX. A record is in one of three states:
//!
//! - in flight: sent (or resent) and not yet reported;
//! - SACKed: the peer holds it (RFC 2018), though SND.UNA has not passed it;
//! - lost: detected lost and not yet resent.
//!
//! The byte counts of the three are kept as the records change, so that RFC 6675's `pipe`
//! (what is in the network) costs nothing to read.

use std::collections::VecDeque;

use crate::seq::SeqNum;
use crate::time::Instant;
use crate::wire::SackBlock;

/// Where a sent segment stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mark {
    /// In the network (sent or resent, not reported).
    InFlight,
    /// Reported held by the peer in a SACK block.
    Sacked,
    /// Detected lost; to be resent.
    Lost,
}

/// One segment as sent: `start..end` of sequence space (a FIN included in `end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    pub start: SeqNum,
    pub end: SeqNum,
    /// When it was last (re)sent.
    pub sent_at: Instant,
    /// Whether it has been sent more than once (its ACK is then ambiguous, RFC 6298 3).
    pub retransmitted: bool,
    /// The sender had nothing more to send when it went out (RFC 7661's application-limited).
    pub app_limited: bool,
    pub mark: Mark,
}

impl Sent {
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// Return the octets of data it carries: its length but for the FIN, if it ends with
    /// `fin` (the FIN's sequence number, once queued).
    pub fn data_len(&self, fin: Option<SeqNum>) -> u32 {
        self.len() - u32::from(fin.is_some_and(|f| self.end == f + 1u32))
    }
}

/// What one ACK did to the records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delivery {
    /// Bytes newly acknowledged cumulatively or newly SACKed (RFC 6937's DeliveredData).
    pub delivered: u32,
    /// Bytes newly SACKed.
    pub sacked: u32,
    /// The latest send time among the newly delivered segments that were sent once (RACK's
    /// RTT and ordering come from these, RFC 8985 6.1), with that segment's end.
    pub newest: Option<(Instant, SeqNum)>,
    /// The same over every newly delivered segment, retransmitted ones too.
    pub newest_any: Option<(Instant, SeqNum)>,
    /// The latest send time among the segments the cumulative ACK newly covers that were
    /// not SACKed before, and whether any of those was sent more than once: Linux's
    /// `last_ackt` and `FLAG_RETRANS_DATA_ACKED` in `tcp_clean_rtx_queue`, from which the
    /// per-ACK RTT sample comes ([`Delivery::rtt_sample`]).
    pub cumulative_newest: Option<Instant>,
    /// A segment the cumulative ACK newly covers (not SACKed before) was retransmitted.
    pub cumulative_retransmitted: bool,
    /// A segment the cumulative ACK newly covers (not SACKed before) was sent only once
    /// (Linux's `FLAG_ORIG_SACK_ACKED` from `tcp_clean_rtx_queue`, for F-RTO).
    pub cumulative_original: bool,
    /// A newly delivered segment lay below one delivered before (RFC 8985 6.2: reordering).
    pub reordered: bool,
    /// Every newly delivered segment was sent while application-limited.
    pub app_limited: bool,
    /// A SACK block reported data below SND.UNA or inside another block: a D-SACK (RFC 2883).
    pub dsack: Option<SackBlock>,
    /// The newly delivered segments that had been resent: the span from the first's start
    /// to the last's end, and the earliest of their last send times (for telling a
    /// delivery of the original from one of the resend, RFC 8985 6.2 step 1).
    pub resent: Option<(SeqNum, SeqNum, Instant)>,
}

/// Fold the resent record `seg`, newly delivered, into `d.resent`.
fn note_resent(seg: &Sent, d: &mut Delivery) {
    d.resent = Some(match d.resent {
        None => (seg.start, seg.end, seg.sent_at),
        Some((start, end, at)) => (
            if seg.start.before(start) { seg.start } else { start },
            if seg.end.after(end) { seg.end } else { end },
            at.min(seg.sent_at),
        ),
    });
}

impl Delivery {
    /// Return the RTT sample of an ACK that arrived at `now`: the age of the newest segment
    /// its cumulative advance newly acknowledges, unless that advance covers a segment sent
    /// more than once (Karn's rule, RFC 6298 section 3; the ACK may answer either copy).
    /// One sample per ACK that advances SND.UNA, as Linux takes it (`tcp_clean_rtx_queue`'s
    /// `ca_rtt_us` from `last_ackt`, passed to `tcp_ack_update_rtt` and the congestion
    /// control's `pkts_acked`); RFC 6298 section 3 and RFC 9406 section 4.2 allow a sample
    /// per ACK. Segments SACKed before are not counted: they left the network earlier.
    pub fn rtt_sample(&self, now: Instant) -> Option<std::time::Duration> {
        if self.cumulative_retransmitted {
            return None;
        }
        self.cumulative_newest.map(|sent| now.saturating_duration_since(sent))
    }
}

/// The records of the segments in flight, in sequence order.
#[derive(Debug, Default)]
pub(crate) struct SentQueue {
    segs: VecDeque<Sent>,
    in_flight: u32,
    sacked: u32,
    lost: u32,
    /// The highest end of any segment delivered (RFC 8985's RACK.fack).
    fack: Option<SeqNum>,
}

impl SentQueue {
    /// Return an empty queue with room for `segments` records before it grows.
    pub fn with_capacity(segments: usize) -> Self {
        SentQueue { segs: VecDeque::with_capacity(segments), ..SentQueue::default() }
    }

    /// Return this queue emptied, as [`with_capacity`](Self::with_capacity) would, keeping
    /// its records' allocation (at most `segments` of them: a bulk sender's grown queue
    /// is not kept whole) for the next connection in its place.
    pub fn recycled(self, segments: usize) -> Self {
        let mut segs = self.segs;
        segs.clear();
        segs.shrink_to(segments);
        SentQueue { segs, ..SentQueue::default() }
    }

    /// Return RFC 6675's `pipe`: bytes in the network (in flight, resent lost ones included).
    pub fn pipe(&self) -> u32 {
        self.in_flight
    }

    /// Return the bytes the peer has SACKed above SND.UNA.
    pub fn sacked(&self) -> u32 {
        self.sacked
    }

    /// Return the bytes marked lost and not yet resent.
    pub fn lost(&self) -> u32 {
        self.lost
    }

    /// Return the records, oldest first.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &Sent> {
        self.segs.iter()
    }

    /// Return the last record (the highest sequence numbers).
    pub fn last(&self) -> Option<&Sent> {
        self.segs.back()
    }

    /// Record new data `start..end` sent at `now` (`start` is SND.MAX).
    #[inline(always)]
    pub fn push(&mut self, start: SeqNum, end: SeqNum, now: Instant, app_limited: bool) {
        debug_assert!(self.segs.back().is_none_or(|s| s.end == start), "new data starts at SND.MAX");
        self.in_flight += end - start;
        self.segs.push_back(Sent { start, end, sent_at: now, retransmitted: false, app_limited, mark: Mark::InFlight });
    }

    /// Return the first run of records marked lost, as `start..end`: the first lost record
    /// and the lost ones right behind it, until the run holds `max` bytes (the last record
    /// may take it past). What the next retransmission covers: small segments lost together
    /// go again as one, and after the MSS fell (a Packet Too Big) the pieces of large ones
    /// go as full segments of the new size.
    ///
    /// Inlined down to the count of lost records, asked before every segment sent: with
    /// none (no loss under way), the answer without a call.
    #[inline]
    pub fn first_lost_run(&self, max: u32) -> Option<(SeqNum, SeqNum)> {
        if self.lost == 0 {
            return None;
        }
        self.find_lost_run(max)
    }

    /// [`first_lost_run`](Self::first_lost_run) with records marked lost: the walk.
    #[inline(never)]
    fn find_lost_run(&self, max: u32) -> Option<(SeqNum, SeqNum)> {
        let i = self.segs.iter().position(|s| s.mark == Mark::Lost)?;
        let (start, mut end) = (self.segs[i].start, self.segs[i].end);
        for seg in self.segs.iter().skip(i + 1) {
            if end - start >= max || seg.mark != Mark::Lost || seg.start != end {
                break;
            }
            end = seg.end;
        }
        Some((start, end))
    }

    /// Record that `start..start+len` was resent at `now`: `start` begins a record, the
    /// records the resend covers become one (in flight, retransmitted), and one it ends
    /// inside is split first.
    pub fn resent(&mut self, start: SeqNum, len: u32, now: Instant) {
        let Some(i) = self.index_of(start) else { return };
        let end = start + len;
        let mut j = i;
        while j + 1 < self.segs.len() && self.segs[j].end.before(end) {
            j += 1;
        }
        if self.segs[j].end.after(end) {
            self.split(j, end);
        }
        let mut app_limited = true;
        for k in i..=j {
            let seg = self.segs[k];
            match seg.mark {
                Mark::InFlight => self.in_flight -= seg.len(),
                Mark::Sacked => self.sacked -= seg.len(),
                Mark::Lost => self.lost -= seg.len(),
            }
            app_limited &= seg.app_limited;
        }
        let merged_end = self.segs[j].end;
        self.segs.drain(i + 1..=j);
        let seg = &mut self.segs[i];
        seg.end = merged_end;
        seg.mark = Mark::InFlight;
        seg.sent_at = now;
        seg.retransmitted = true;
        seg.app_limited = app_limited;
        self.in_flight += seg.len();
    }

    /// Mark lost every record in flight that carries more than `mss` bytes of data (the FIN
    /// at `fin` not counted) and went out no earlier than `bounced`, the one a Packet Too Big
    /// named (all of them without it): after the path MTU fell, those were dropped. Linux's
    /// `tcp_simple_retransmit` marks every one too large; but the router drops in the order
    /// it receives, so one sent before the bounced one had passed it (or brings a message of
    /// its own), and resending it would resend a window's worth for nothing (RFC 1191 section
    /// 6.2: retransmit "only those packets that are known to be dropped"). Return the bytes
    /// newly marked.
    pub fn mark_larger_lost(&mut self, mss: u32, fin: Option<SeqNum>, bounced: Option<Sent>) -> u32 {
        let later = |s: &Sent| bounced.is_none_or(|b| s.start.after_eq(b.start) || s.sent_at > b.sent_at);
        let mut marked = 0;
        for i in 0..self.segs.len() {
            let seg = self.segs[i];
            if seg.mark == Mark::InFlight && seg.data_len(fin) > mss && later(&seg) {
                marked += seg.len();
                self.mark_lost_at(i);
            }
        }
        marked
    }

    /// Return the record holding sequence number `seq`.
    pub fn containing(&self, seq: SeqNum) -> Option<Sent> {
        let i = self.first_ending_after(seq)?;
        let seg = self.segs[i];
        seg.start.before_eq(seq).then_some(seg)
    }

    /// Mark the record at index `i` lost.
    pub fn mark_lost_at(&mut self, i: usize) {
        let seg = &mut self.segs[i];
        if seg.mark == Mark::InFlight {
            seg.mark = Mark::Lost;
            self.in_flight -= seg.len();
            self.lost += seg.len();
        }
    }

    /// Mark the first record lost (RFC 6582's partial ACK, three duplicate ACKs without SACK).
    pub fn mark_first_lost(&mut self) -> bool {
        match self.segs.front() {
            Some(s) if s.mark == Mark::InFlight => {
                self.mark_lost_at(0);
                true
            }
            _ => false,
        }
    }

    /// Mark every record not SACKed lost (a retransmission timeout, RFC 6675 section 5.1;
    /// RFC 8985 section 6.3); return the bytes newly marked.
    pub fn mark_all_lost(&mut self) -> u32 {
        let mut marked = 0;
        for i in 0..self.segs.len() {
            if self.segs[i].mark == Mark::InFlight {
                marked += self.segs[i].len();
                self.mark_lost_at(i);
            }
        }
        marked
    }

    /// Return every record marked lost and not resent since to the flight: a timeout proved
    /// spurious, so what it marked was not lost (Linux's `tcp_undo_cwnd_reduction` with
    /// `unmark_loss`, from `tcp_try_undo_loss`). Resent records stay as they are.
    pub fn unmark_lost(&mut self) {
        for seg in self.segs.iter_mut() {
            if seg.mark == Mark::Lost {
                seg.mark = Mark::InFlight;
                self.in_flight += seg.len();
                self.lost -= seg.len();
            }
        }
    }

    /// Return the number of records.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Return the record at index `i`.
    pub fn get(&self, i: usize) -> Sent {
        self.segs[i]
    }

    /// Take in a cumulative acknowledgment up to `ack` and the SACK blocks of the same
    /// segment (already checked to lie within SND.UNA..SND.MAX or below it, for D-SACK).
    ///
    /// Inlined into its one caller on the ACK path, which then builds the 112-byte
    /// [`Delivery`] in place instead of having it copied out on every ACK.
    #[inline]
    pub fn on_ack(&mut self, ack: SeqNum, blocks: &[SackBlock]) -> Delivery {
        let mut d = Delivery { app_limited: true, ..Delivery::default() };
        let mut any = false;
        // Cumulatively acknowledged records leave the queue.
        while let Some(front) = self.segs.front().copied() {
            if !ack.after(front.start) {
                break;
            }
            if ack.before(front.end) {
                // Part of it: the rest stays, as a record of its own.
                self.split(0, ack);
                continue;
            }
            self.segs.pop_front();
            let len = front.len();
            match front.mark {
                Mark::InFlight => self.in_flight -= len,
                Mark::Sacked => self.sacked -= len,
                Mark::Lost => self.lost -= len,
            }
            if front.mark != Mark::Sacked {
                d.delivered += len;
                self.note_delivered(&front, &mut d);
                any = true;
                d.cumulative_retransmitted |= front.retransmitted;
                d.cumulative_original |= !front.retransmitted;
                d.cumulative_newest = Some(d.cumulative_newest.map_or(front.sent_at, |t| t.max(front.sent_at)));
            }
        }
        // SACK blocks (RFC 2018 section 3, RFC 6675 section 4): a block below the
        // cumulative ACK, or the first inside the second, reports a duplicate (RFC 2883 4).
        for (k, block) in blocks.iter().enumerate() {
            let inside_second =
                k == 0 && blocks.get(1).is_some_and(|b| !block.left.before(b.left) && !block.right.after(b.right));
            if !block.right.after(ack) || inside_second {
                if k == 0 {
                    d.dsack = Some(*block);
                }
                continue;
            }
            let Some(mut i) = self.first_ending_after(block.left) else { continue };
            while i < self.segs.len() {
                let seg = self.segs[i];
                if !seg.start.before(block.right) {
                    break;
                }
                // Only whole records count: a block covers what the peer holds exactly.
                if !seg.start.before(block.left) && !seg.end.after(block.right) && seg.mark != Mark::Sacked {
                    let len = seg.len();
                    match seg.mark {
                        Mark::InFlight => self.in_flight -= len,
                        Mark::Lost => self.lost -= len,
                        Mark::Sacked => {}
                    }
                    self.sacked += len;
                    self.segs[i].mark = Mark::Sacked;
                    d.delivered += len;
                    d.sacked += len;
                    self.note_delivered(&seg, &mut d);
                    any = true;
                }
                i += 1;
            }
        }
        if !any {
            d.app_limited = false;
        }
        d
    }

    /// Take in a cumulative ACK of `ack` that acknowledges the queue's one record whole, a
    /// record sent once and still in flight (the ACK of a request/response exchange): remove
    /// it, and return it with whether it was delivered below RACK.fack (reordered). This is
    /// what [`on_ack`](Self::on_ack) does with no SACK blocks in that case, without building
    /// its [`Delivery`]: the caller knows what that would hold (the record's length, send
    /// time and end, sent once, and its application-limited flag). Return `None`, with
    /// nothing changed, in every other case.
    #[inline]
    pub fn take_sole(&mut self, ack: SeqNum) -> Option<(Sent, bool)> {
        let seg = *self.segs.front()?;
        if self.segs.len() != 1
            || seg.end != ack
            || !ack.after(seg.start)
            || seg.mark != Mark::InFlight
            || seg.retransmitted
        {
            return None;
        }
        self.segs.clear();
        self.in_flight -= seg.len();
        debug_assert_eq!((self.in_flight, self.sacked, self.lost), (0, 0, 0), "the counts of an empty queue");
        let reordered = self.fack.is_some_and(|fack| seg.end.before(fack));
        if self.fack.is_none_or(|fack| seg.end.after(fack)) {
            self.fack = Some(seg.end);
        }
        Some((seg, reordered))
    }

    /// Fold one newly delivered record into `d`, and into RACK's highest delivered end.
    fn note_delivered(&mut self, seg: &Sent, d: &mut Delivery) {
        if self.fack.is_some_and(|fack| seg.end.before(fack)) && !seg.retransmitted {
            d.reordered = true;
        }
        if self.fack.is_none_or(|fack| seg.end.after(fack)) {
            self.fack = Some(seg.end);
        }
        let newer = |cur: Option<(Instant, SeqNum)>| match cur {
            None => true,
            Some((at, end)) => seg.sent_at > at || (seg.sent_at == at && seg.end.after(end)),
        };
        if newer(d.newest_any) {
            d.newest_any = Some((seg.sent_at, seg.end));
        }
        if !seg.retransmitted && newer(d.newest) {
            d.newest = Some((seg.sent_at, seg.end));
        }
        d.app_limited &= seg.app_limited;
        if seg.retransmitted {
            note_resent(seg, d);
        }
    }

    /// Return the index of the record starting at `start`.
    fn index_of(&self, start: SeqNum) -> Option<usize> {
        let i = self.first_ending_after(start)?;
        (self.segs[i].start == start).then_some(i)
    }

    /// Return the index of the first record whose end lies after `seq`.
    fn first_ending_after(&self, seq: SeqNum) -> Option<usize> {
        let base = self.segs.front()?.start;
        let offset = seq - base;
        // Offsets from the first record's start are monotonic within the queue.
        let i = self.segs.partition_point(|s| (s.end - base) <= offset);
        (i < self.segs.len()).then_some(i)
    }

    /// Split the record at `i` at `at` (inside it) into two.
    fn split(&mut self, i: usize, at: SeqNum) {
        let seg = self.segs[i];
        debug_assert!(at.after(seg.start) && at.before(seg.end));
        self.segs[i].end = at;
        self.segs.insert(i + 1, Sent { start: at, ..seg });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// Ten 100-byte segments from 1000, sent 1 ms apart.
    fn queue() -> SentQueue {
        let mut q = SentQueue::default();
        for i in 0..10u32 {
            q.push(SeqNum(1000 + i * 100), SeqNum(1100 + i * 100), ms(u64::from(i)), false);
        }
        q
    }

    fn block(left: u32, right: u32) -> SackBlock {
        SackBlock { left: SeqNum(left), right: SeqNum(right) }
    }

    #[test]
    fn cumulative_acks_remove_records_and_split_partly_acked_ones() {
        let mut q = queue();
        assert_eq!(q.pipe(), 1000);
        let d = q.on_ack(SeqNum(1250), &[]);
        assert_eq!(d.delivered, 250);
        assert_eq!(q.pipe(), 750);
        assert_eq!(q.iter().next().unwrap().start, SeqNum(1250));
        assert_eq!(d.newest, Some((ms(2), SeqNum(1250))), "the part of the third record");
    }

    #[test]
    fn sack_blocks_mark_whole_records_and_keep_the_counts() {
        let mut q = queue();
        let d = q.on_ack(SeqNum(1000), &[block(1300, 1500), block(1700, 1750)]);
        assert_eq!((d.delivered, d.sacked), (200, 200), "a half-covered record is not SACKed");
        assert_eq!((q.pipe(), q.sacked()), (800, 200));
        assert!(!d.reordered);
        // The hole below is then acknowledged: nothing SACKed is delivered twice.
        let d = q.on_ack(SeqNum(1500), &[block(1700, 1800)]);
        assert_eq!(d.delivered, 300 + 100);
        assert_eq!((q.pipe(), q.sacked()), (400, 100));
        assert!(d.reordered, "1000..1300 arrived after 1300..1500 had");
    }

    #[test]
    fn lost_records_leave_the_pipe_until_resent() {
        let mut q = queue();
        q.on_ack(SeqNum(1000), &[block(1100, 2000)]);
        assert!(q.mark_first_lost());
        assert_eq!((q.pipe(), q.lost()), (0, 100));
        assert_eq!(q.first_lost_run(100), Some((SeqNum(1000), SeqNum(1100))));
        q.resent(SeqNum(1000), 60, ms(20));
        assert_eq!((q.pipe(), q.lost()), (60, 40), "split: the first 60 bytes resent");
        assert!(q.iter().next().unwrap().retransmitted);
        assert_eq!(q.first_lost_run(100), Some((SeqNum(1060), SeqNum(1100))));
    }

    #[test]
    fn a_resend_across_lost_records_merges_them_and_splits_the_last() {
        let mut q = queue();
        q.mark_all_lost();
        assert_eq!(q.first_lost_run(250), Some((SeqNum(1000), SeqNum(1300))), "three records reach 250");
        q.resent(SeqNum(1000), 250, ms(20));
        let recs: Vec<_> = q.iter().map(|s| (s.start.0, s.end.0, s.mark)).collect();
        assert_eq!(recs[..2], [(1000, 1250, Mark::InFlight), (1250, 1300, Mark::Lost)]);
        assert_eq!((q.pipe(), q.lost()), (250, 750));
        assert!(q.iter().next().unwrap().retransmitted);
        // A run stops at a record that is not lost.
        q.on_ack(SeqNum(1000), &[block(1400, 1500)]);
        assert_eq!(q.first_lost_run(1000), Some((SeqNum(1250), SeqNum(1400))));
    }

    #[test]
    fn records_larger_than_a_smaller_mss_are_marked_lost() {
        let mut q = queue();
        q.push(SeqNum(2000), SeqNum(2061), ms(10), false);
        q.on_ack(SeqNum(1000), &[block(1100, 1200)]);
        // 60 bytes and the FIN at 2060: no more than 60 bytes of data.
        // Sent before the one that bounced: not known lost.
        let bounced = q.containing(SeqNum(1750));
        assert_eq!(q.mark_larger_lost(60, Some(SeqNum(2060)), bounced), 3 * 100);
        assert_eq!(q.mark_larger_lost(60, Some(SeqNum(2060)), None), 6 * 100);
        assert_eq!((q.pipe(), q.lost(), q.sacked()), (61, 900, 100), "the SACKed one stays");
        assert_eq!(q.mark_larger_lost(60, Some(SeqNum(2060)), None), 0, "once");
        assert_eq!(q.containing(SeqNum(1150)).map(|s| s.start), Some(SeqNum(1100)));
        assert_eq!(q.containing(SeqNum(2061)), None);
    }

    #[test]
    fn a_timeout_marks_everything_not_sacked_lost() {
        let mut q = queue();
        q.on_ack(SeqNum(1000), &[block(1500, 1600)]);
        assert_eq!(q.mark_all_lost(), 900);
        assert_eq!((q.pipe(), q.lost(), q.sacked()), (0, 900, 100));
    }

    /// One 64-byte segment in flight, application-limited, as after a request's echo.
    fn exchange() -> SentQueue {
        let mut q = SentQueue::default();
        q.push(SeqNum(1000), SeqNum(1064), ms(3), true);
        q
    }

    #[test]
    fn the_sole_record_acknowledged_whole_is_taken_as_on_ack_takes_it() {
        let (mut fast, mut general) = (exchange(), exchange());
        let d = general.on_ack(SeqNum(1064), &[]);
        let (seg, reordered) = fast.take_sole(SeqNum(1064)).expect("the exchange's case");
        assert_eq!(format!("{fast:?}"), format!("{general:?}"), "the same queue after");
        // What `Connection::on_data_ack` and `Recovery::on_sole_ack` take the delivery to be.
        let expected = Delivery {
            delivered: seg.len(),
            newest: Some((seg.sent_at, seg.end)),
            newest_any: Some((seg.sent_at, seg.end)),
            cumulative_newest: Some(seg.sent_at),
            cumulative_original: true,
            reordered,
            app_limited: seg.app_limited,
            ..Delivery::default()
        };
        assert_eq!(d, expected);
        assert_eq!((seg.start, seg.end, seg.sent_at, seg.app_limited), (SeqNum(1000), SeqNum(1064), ms(3), true));
    }

    #[test]
    fn only_a_sole_record_sent_once_in_flight_and_acknowledged_whole_is_taken() {
        let mut two = exchange();
        two.push(SeqNum(1064), SeqNum(1128), ms(4), true);
        let mut lost = exchange();
        lost.mark_first_lost();
        let mut sacked = exchange();
        sacked.on_ack(SeqNum(1000), &[block(1000, 1064)]);
        let mut resent = exchange();
        resent.mark_first_lost();
        resent.resent(SeqNum(1000), 64, ms(9));
        let cases = [
            ("two records, both acknowledged", two, 1128),
            ("the record acknowledged in part", exchange(), 1032),
            ("the record marked lost", lost, 1064),
            ("the record SACKed before", sacked, 1064),
            ("the record resent", resent, 1064),
        ];
        for (name, mut q, ack) in cases {
            let before = format!("{q:?}");
            assert_eq!(q.take_sole(SeqNum(ack)), None, "{name}");
            assert_eq!(format!("{q:?}"), before, "{name}: nothing changed");
        }
    }

    #[test]
    fn duplicate_reports_are_d_sacks() {
        let mut q = queue();
        q.on_ack(SeqNum(1500), &[]);
        let d = q.on_ack(SeqNum(1500), &[block(1200, 1300)]);
        assert_eq!(d.dsack, Some(block(1200, 1300)), "below SND.UNA");
        let d = q.on_ack(SeqNum(1500), &[block(1700, 1800), block(1600, 1900)]);
        assert_eq!(d.dsack, Some(block(1700, 1800)), "inside the second block");
        assert_eq!(d.sacked, 300, "the second block still counts");
    }
}

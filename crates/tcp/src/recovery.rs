//! Loss detection and recovery: which segments are lost, when a recovery begins and ends,
//! how fast cwnd comes down meanwhile, and the probe that repairs a lost tail.
//!
//! - **RACK** (RFC 8985 section 6), where the peer SACKs: a segment is lost when one sent
//!   after it has been delivered and it is still missing a reordering window later
//!   (`RACK.rtt + RACK.reo_wnd` after it was sent). Time, not counts of duplicate ACKs,
//!   decides, so a retransmission that is lost again is found too, and a short flight needs
//!   no three duplicates.
//! - **Duplicate ACKs** (RFC 5681 section 3.2 with RFC 6582), where it does not: the third
//!   marks the first unacknowledged segment lost, and in the recovery each partial ACK marks
//!   the next. A resend acknowledged sooner than min_RTT shows the network reordered: the
//!   threshold then rises past the duplicates that came before the held-back segment, and
//!   the reduction is undone (Linux's `tp->reordering`). Each duplicate stands for a segment that left the network (RFC 6675's `pipe`
//!   without SACK, as Linux counts them), which is also limited transmit (RFC 3042).
//! - **PRR** (RFC 6937) during the recovery: cwnd follows `pipe + sndcnt`, so the reduction
//!   to ssthresh is spread over the round trip instead of stopping the sender.
//! - **TLP** (RFC 8985 section 7), where the peer SACKs: when nothing has been heard for
//!   about two round trips, one segment is sent (new data, or the last one again) so that a
//!   lost tail gets SACK feedback instead of waiting for the retransmission timeout.
//! - The **retransmission timeout** marks everything not SACKed lost (RFC 6675 section 5.1,
//!   RFC 8985 section 6.3); slow start then resends it in order.
//!
//! The connection applies each ACK to its [`SentQueue`](crate::sent::SentQueue) and then
//! calls [`Recovery::on_ack`]; transmissions report to [`Recovery::on_sent`].

use std::time::Duration;

use crate::congestion::CongestionControl;
use crate::controller::{AckInfo, Controller};
use crate::sent::{Delivery, Mark, SentQueue};
use crate::seq::SeqNum;
use crate::time::Instant;

/// Duplicate ACKs that start a recovery without SACK (RFC 5681 section 3.2).
const DUP_THRESH: u32 = 3;

/// The most resends of one reduction that D-SACKs are matched against (8 bytes each); a
/// reduction with more is not undone. Linux counts them without a bound, but it can
/// match a D-SACK against its retransmit queue, which our records leave once acknowledged.
const MAX_UNDO_RANGES: usize = 1024;

/// The highest the duplicate-ACK threshold rises for reordering (Linux's
/// `tcp_max_reordering`, 300 segments).
const MAX_REORDERING: u32 = 300;

/// Return `d` in whole microseconds (every RTT here is a whole number of them: the clock's
/// unit), saturating.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The worst-case delayed-ACK time a probe must outwait when one segment is in flight (RFC
/// 8985 section 7.2: WCDelAckT, 200 ms).
const WORST_DELAYED_ACK: Duration = Duration::from_millis(200);

/// Added to the probe timeout otherwise, as Linux does (TCP_TIMEOUT_MIN, 2 ms): on a path of
/// a tenth of a millisecond, two round trips are shorter than the host's own scheduling.
const PROBE_MARGIN: Duration = Duration::from_millis(2);

/// What the connection should do after an ACK or a timer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Arm the RACK reordering timer for this instant (a segment may be lost then).
    pub reorder_timer: Option<Instant>,
    /// A recovery began.
    pub entered_recovery: bool,
    /// D-SACKs showed the last reduction needless, and it was undone.
    pub undone: bool,
}

/// Loss-recovery state of one connection.
///
/// Laid out in declaration order (`repr(C)`): what only a loss, a recovery or an undo
/// touches first, what every ACK reads last, so that the part of a connection an ACK
/// touches takes as few cache lines as it can (see `Connection`'s layout).
#[derive(Clone, Debug, Default)]
#[repr(C)]
pub(crate) struct Recovery {
    /// The ranges resent since the last reduction (recovery or timeout) that no D-SACK has
    /// shown needless yet, one per resend; when D-SACKs account for all of them, the
    /// reduction is undone (Linux's `undo_retrans`, kept as ranges so that a D-SACK counts
    /// only for data we resent). At most [`MAX_UNDO_RANGES`]: past it, no undo.
    undo_ranges: Vec<(SeqNum, SeqNum)>,
    /// Segments resent over the connection's life, and segments D-SACKs reported: a
    /// D-SACK with more reported than ever resent is the network's duplicate, not ours
    /// (Linux's `tcp_dsack_seen`, `dsack_dups > total_retrans`).
    total_retrans: u64,
    dsack_dups: u64,
    /// The end of the round in which a D-SACK last raised `reo_wnd_mult`, and
    /// RACK.reo_wnd_persist, the recoveries left before the multiplier resets (RFC 8985
    /// 6.2 step 4).
    dsack_round: Option<SeqNum>,
    reo_wnd_persist: u32,
    /// PRR's counters (RFC 6937 section 3).
    prr_delivered: u32,
    prr_out: u32,
    recover_fs: u32,
    ssthresh: u32,
    /// Without SACK, the most duplicate ACKs that have come before a segment held back by
    /// the network, plus one: the duplicate-ACK threshold once reordering has been seen
    /// (Linux's `tp->reordering`); 0 until then, for [`DUP_THRESH`].
    reordering: u32,
    /// F-RTO's SND.MAX when the decision's step began (Linux's `high_seq`), and step 2b's
    /// hold, until the next ACK: send new data, not retransmissions (see `frto`).
    frto_high: SeqNum,
    /// A reduction that D-SACKs may still show needless.
    undo_possible: bool,
    frto_hold: bool,
    /// A reduction began whose first retransmission is still to go (see `eifel`).
    eifel_armed: bool,
    /// RACK.xmit_ts and RACK.end_seq: the most recently sent segment delivered.
    rack_xmit: Option<(Instant, SeqNum)>,
    /// RACK.rtt: the RTT of that segment.
    ///
    /// This and the two RTTs below in microseconds, as the clock gives them and the RTT
    /// estimator keeps them (every sample is a whole number of them): compared and kept on
    /// every ACK without `Duration`s, made one where a `Duration` is read.
    rack_rtt: Option<u64>,
    /// The smallest RTT seen (RACK's min_RTT).
    min_rtt: Option<u64>,
    /// The largest per-ACK RTT sample, and the count of them (for `Stats`: the base RTT
    /// plus the most queueing seen).
    max_rtt: Option<u64>,
    /// The connection's smoothed RTT at the last ACK, in microseconds (as the estimator
    /// keeps it): the reordering window's ceiling.
    srtt: Option<u64>,
    rtt_samples: u64,
    /// Eifel (RFC 3522), where timestamps are in use: the TSval of the first retransmission
    /// of the last reduction and the sequence number it resent (Linux's `retrans_stamp`),
    /// until the first ACK that covers that retransmission decides.
    eifel: Option<(u32, SeqNum)>,
    /// In a fast recovery, until SND.UNA reaches this (RecoveryPoint, RFC 6675).
    recovery_point: Option<SeqNum>,
    /// Walking cwnd down by PRR after an ECN echo, until SND.UNA reaches this (Linux's
    /// `TCP_CA_CWR` state and its `high_seq`).
    cwr_point: Option<SeqNum>,
    /// After a retransmission timeout, until SND.UNA reaches this: no fast recovery, the
    /// timeout already reduced the window.
    rto_point: Option<SeqNum>,
    /// After the path MTU fell (a Packet Too Big), until SND.UNA reaches this: the segments
    /// marked lost for it were not lost to congestion, so no recovery begins and no window
    /// comes down for them (Linux's `tcp_simple_retransmit`, TCP_CA_Loss without a
    /// reduction).
    mtu_point: Option<SeqNum>,
    /// The end of the last tail-loss probe, while it is unacknowledged, and whether it was
    /// a retransmission (RFC 8985 7.3: TLP.end_seq, TLP.is_retrans).
    tlp: Option<(SeqNum, bool)>,
    /// Duplicate ACKs in a row (without SACK).
    dup_acks: u32,
    /// RFC 8985 6.2 step 4: RACK.reo_wnd_mult (0 counts as 1), raised once per round trip
    /// with a D-SACK (the window was too small: a resend was needless).
    reo_wnd_mult: u32,
    /// Reordering has been seen on this connection (RFC 8985 6.2 step 4).
    reordering_seen: bool,
    /// F-RTO (RFC 5682) after the last timeout: still deciding whether it was spurious
    /// (Linux's `tp->frto`).
    frto: bool,
}

/// What the connection knows when it hands an ACK to [`Recovery::on_ack`].
pub(crate) struct AckContext {
    pub now: Instant,
    /// SND.UNA after the ACK, and SND.MAX.
    pub snd_una: SeqNum,
    pub snd_max: SeqNum,
    /// Bytes in flight before the ACK (SND.MAX - SND.UNA).
    pub flight_before: u32,
    /// The ACK moved SND.UNA.
    pub advanced: bool,
    /// It was a duplicate ACK by RFC 5681 section 2's definition.
    pub duplicate: bool,
    /// SACK is in use.
    pub sack: bool,
    /// The sender's full segment size.
    pub smss: u32,
    /// An RTT sample this ACK gave (RTTM or the timed segment).
    pub rtt: Option<Duration>,
    /// The smoothed RTT after it, in microseconds.
    pub srtt: Option<u64>,
    /// cwnd was what limited the sender over the last round trip (RFC 7661 4.3).
    pub cwnd_limited: bool,
    /// The ACK's TSecr, where timestamps are in use (Eifel, RFC 3522).
    pub tsecr: Option<u32>,
    /// Data never sent is waiting and the peer's window has room beyond SND.MAX (F-RTO's
    /// step 2b, RFC 5682).
    pub can_send_new: bool,
}

impl Recovery {
    /// Return whether a fast recovery is in progress.
    pub fn in_recovery(&self) -> bool {
        self.recovery_point.is_some()
    }

    /// Return the smallest RTT seen (RACK's min_RTT), the largest per-ACK sample, and the
    /// count of per-ACK samples, for [`Stats`](crate::Stats).
    pub fn rtt_range(&self) -> (Option<Duration>, Option<Duration>, u64) {
        (self.min_rtt.map(Duration::from_micros), self.max_rtt.map(Duration::from_micros), self.rtt_samples)
    }

    /// Return whether a reduction is under way: a fast recovery, or a timeout's (or a fall
    /// of the path MTU's) loss state.
    pub fn in_reduction(&self) -> bool {
        self.in_recovery() || self.in_loss_state()
    }

    /// Answer an ECN echo (RFC 3168 6.1.2) with `in_flight` bytes outstanding and `snd_max`
    /// sent: ssthresh as for a loss (the controller's `on_loss`), nothing resent, and cwnd
    /// walked down to ssthresh by PRR over the round trip that follows (RFC 6937 applies to
    /// any congestion signal; Linux's CWR state, `tcp_enter_cwr` and `tcp_cwnd_reduction`),
    /// rather than at once: the sender keeps sending, at ssthresh/in_flight of what is
    /// delivered, instead of falling silent until the flight drains below the new cwnd.
    /// The reduction ends when SND.UNA reaches `snd_max`, with cwnd = ssthresh. It is not a
    /// loss's, and no spurious-retransmission check may undo it (Linux's `tcp_enter_cwr`
    /// clears `undo_marker`): the D-SACK, Eifel and F-RTO undo of an earlier reduction
    /// is forgotten.
    ///
    /// The ACK that carried the echo already counted what it delivered; PRR starts from
    /// it, so cwnd comes down to what is in flight at once (and sndcnt grows from there).
    pub fn on_ecn_echo(
        &mut self,
        now: Instant,
        (in_flight, snd_max): (u32, SeqNum),
        sent: &SentQueue,
        smss: u32,
        cc: &mut CongestionControl,
    ) {
        self.ssthresh = cc.on_loss(now, in_flight);
        self.cwr_point = Some(snd_max);
        self.recover_fs = in_flight;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.forget_undo();
        self.eifel = None;
        self.eifel_armed = false;
        self.frto = false;
        self.frto_hold = false;
        self.prr(0, sent, smss, cc);
    }

    /// Return whether an ECN reduction is walking cwnd down (Linux's CWR state).
    pub fn in_cwr(&self) -> bool {
        self.cwr_point.is_some()
    }

    /// Return RFC 6675's `pipe`, with duplicate ACKs counted as segments that left the
    /// network where there is no SACK.
    ///
    /// Without duplicate ACKs (every ACK with SACK, and any without duplicates) the queue's
    /// count as it is: no multiplication and its overflow check on every segment sent.
    #[inline]
    pub fn pipe(&self, sent: &SentQueue, smss: u32) -> u32 {
        if self.dup_acks == 0 {
            return sent.pipe();
        }
        sent.pipe().saturating_sub(self.dup_acks.saturating_mul(smss))
    }

    /// Take in one ACK, already applied to `sent` as `d`: detect losses, begin, pace and end
    /// a recovery, and let the controller grow the window otherwise.
    ///
    /// Inlined into its one caller on the ACK path: the context and the delivery it reads
    /// are built there, and stay in its frame rather than being read back through pointers.
    #[inline]
    pub fn on_ack(
        &mut self,
        ctx: &AckContext,
        d: &Delivery,
        sent: &mut SentQueue,
        cc: &mut CongestionControl,
    ) -> Decision {
        let mut decision = Decision::default();
        // One RTT sample per ACK that advances SND.UNA, from the send time of the newest
        // segment it newly covers, none if it covers a retransmission (Karn); else the
        // timed segment's, or after a timeout the echo's (`Reliability::sample_rtt`). HyStart++
        // needs N_RTT_SAMPLE = 8 a round (RFC 9406 4.2), which one per flight never gave.
        let rtt = if ctx.advanced { d.rtt_sample(ctx.now).or(ctx.rtt) } else { ctx.rtt };
        if let Some(rtt) = rtt {
            self.note_rtt(micros(rtt));
        }
        self.srtt = ctx.srtt;
        // RFC 8985 6.2 step 1: a resend delivered counts for RACK unless the delivery may be
        // the original's; where the echo shows it is (older than the resend, RFC 3522), the
        // resend did not arrive first, whatever its RTT.
        let echo_predates_resend = self.eifel_says_delayed(ctx);
        self.rack_update(ctx.now, d, !echo_predates_resend);
        self.reordering_seen |= d.reordered;
        // A D-SACK says a segment arrived twice: if it was one of ours resent, the resend was
        // needless (the network reordered or delayed the original). When every resend of
        // the last reduction proves needless, undo it (RFC 2883 section 5, RFC 3708; Linux's
        // undo_retrans; RFC 8985 6.2 step 4 widens the reordering window on D-SACK). A
        // duplicate the network made is reported as a D-SACK too: it says nothing of our
        // resends, so it neither widens the window (`dsack_is_ours`) nor undoes anything
        // (`dsack_undoes`, which matches the block against the resent ranges themselves, so
        // a real spurious resend is still undone on a path that duplicates).
        if let Some(block) = d.dsack {
            if self.dsack_is_ours(block, ctx.smss) {
                self.reordering_seen = true;
                if self.dsack_round.is_none_or(|end| !ctx.snd_una.before(end)) {
                    self.reo_wnd_mult = self.reo_wnd_mult.max(1) + 1;
                    self.dsack_round = Some(ctx.snd_max);
                    self.reo_wnd_persist = 16;
                }
            }
            if self.dsack_undoes(block) {
                self.undo_possible = false;
                self.recovery_point = None;
                self.rto_point = None;
                cc.on_spurious(ctx.now);
                decision.undone = true;
            }
        }

        // Eifel (RFC 3522): the first ACK that covers the first retransmission of the
        // reduction echoes a timestamp older than that retransmission's, so it answers the
        // original: the retransmission was needless, and so was the reduction.
        decision.undone |= self.eifel_detect(ctx, sent, cc);
        decision.undone |= self.frto_on_ack(ctx, d, sent, cc);

        // Without SACK, no D-SACK says a resend was needless, but its timing can: an ACK
        // for it sooner than min_RTT after it was sent was the original's (RFC 8985 6.2
        // step 1's test; the timestamps of RFC 3522 and Linux's `tcp_packet_delayed` tell the
        // same). The network reordered: raise the threshold, and undo the reduction once
        // every resend proved needless (Linux's `tcp_try_undo_partial`).
        if !ctx.sack && self.resend_was_needless(ctx.now, d) {
            decision.undone |= self.on_reordering_without_sack(ctx.now, d, cc);
        }

        // Duplicate ACKs without SACK (RFC 5681 3.2, RFC 6582 3.2): count, and mark. Each
        // stands for a segment delivered in PRR's DeliveredData (RFC 6937 3), but it grows
        // no window: the segments limited transmit sends leave cwnd as it was (RFC 3042 2).
        let mut delivered = d.delivered;
        if !ctx.sack {
            if ctx.duplicate {
                self.dup_acks += 1;
                delivered += ctx.smss;
                if self.dup_acks == self.dup_thresh() && !self.in_recovery() && !self.in_loss_state() {
                    sent.mark_first_lost();
                }
            } else if ctx.advanced {
                self.dup_acks = 0;
                // A partial ACK: the next segment is lost too (RFC 6582 3.2 step 5).
                if self.recovery_point.is_some_and(|point| ctx.snd_una.before(point)) {
                    sent.mark_first_lost();
                }
            }
        } else {
            decision.reorder_timer = self.rack_detect(ctx.now, sent, ctx.smss);
        }

        // A tail-loss probe acknowledged (RFC 8985 7.4): a retransmitted probe that was not
        // reported as a duplicate repaired a loss, which the window must answer for.
        if let Some((end, retransmission)) = self.tlp
            && !ctx.snd_una.before(end)
        {
            self.tlp = None;
            let duplicate = d.dsack.is_some_and(|b| !b.right.before(end));
            if retransmission && !duplicate && !self.in_recovery() && !self.in_cwr() {
                cc.on_loss(ctx.now, ctx.flight_before);
                cc.on_recovery_end(ctx.now);
            }
        }

        // Begin a recovery on the first loss (RFC 6675 5 step 4, RFC 6937 on entry).
        decision.entered_recovery = self.begin_if_lost(ctx.now, ctx.snd_max, ctx.flight_before, sent, cc);
        // End it once the cumulative ACK passes the recovery point (RFC 6675, RFC 6582);
        // what this ACK delivered belongs to the recovery, not to growth.
        let mut ended = false;
        if let Some(point) = self.recovery_point
            && !ctx.snd_una.before(point)
        {
            self.recovery_point = None;
            self.dup_acks = 0;
            cc.on_recovery_end(ctx.now);
            ended = true;
            // RFC 8985 6.2 step 4: a widened window lasts 16 recoveries.
            if self.reo_wnd_persist > 0 {
                self.reo_wnd_persist -= 1;
                if self.reo_wnd_persist == 0 {
                    self.reo_wnd_mult = 1;
                }
            }
        }
        // An ECN reduction ends as a recovery does, with cwnd = ssthresh (Linux's
        // `tcp_end_cwnd_reduction`).
        if let Some(point) = self.cwr_point
            && !ctx.snd_una.before(point)
        {
            self.cwr_point = None;
            cc.on_recovery_end(ctx.now);
            ended = true;
        }
        if self.rto_point.is_some_and(|point| !ctx.snd_una.before(point)) {
            self.rto_point = None;
        }
        if self.mtu_point.is_some_and(|point| !ctx.snd_una.before(point)) {
            self.mtu_point = None;
        }

        if self.in_recovery() || self.in_cwr() {
            self.prr(delivered, sent, ctx.smss, cc);
        } else if d.delivered > 0 && !ended {
            cc.on_ack(&AckInfo {
                now: ctx.now,
                delivered: d.delivered,
                in_flight: ctx.flight_before,
                rtt,
                min_rtt: self.min_rtt.map(Duration::from_micros),
                app_limited: d.app_limited || !ctx.cwnd_limited,
            });
        }
        decision
    }

    /// Return whether nothing of a loss is under way: no recovery, ECN reduction, timeout's
    /// or fall of the path MTU's loss state, tail-loss probe outstanding, or Eifel check
    /// waiting for its ACK. An ACK that SACKs nothing and delivers a record sent once then
    /// touches none of them: [`on_sole_ack`](Self::on_sole_ack) may stand for
    /// [`on_ack`](Self::on_ack).
    #[inline]
    pub fn quiet(&self) -> bool {
        self.recovery_point.is_none()
            && self.cwr_point.is_none()
            && self.rto_point.is_none()
            && self.mtu_point.is_none()
            && self.tlp.is_none()
            && self.eifel.is_none()
    }

    /// Take in, while [`quiet`](Self::quiet), an ACK that acknowledged whole the one record
    /// in flight, `seg`, sent once, with no SACK blocks ([`SentQueue::take_sole`], which says
    /// whether it was `reordered`): what [`on_ack`](Self::on_ack) does for that delivery.
    /// Its RTT sample, RACK's newest delivered segment and the controller's growth; no
    /// D-SACK, Eifel, F-RTO or probe to look at, nothing left to find lost, and no recovery
    /// to begin or end. `srtt` is the connection's smoothed RTT after the ACK,
    /// `flight_before` what was in flight before it, `cwnd_limited` as in
    /// [`AckContext`].
    ///
    /// Inlined (forced) into both copies of the connection's ACK path, `process_ack`'s and
    /// header prediction's: left to the compiler, it goes out of line in both.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn on_sole_ack(
        &mut self,
        now: Instant,
        (seg, reordered): (&crate::sent::Sent, bool),
        srtt: Option<u64>,
        sack: bool,
        flight_before: u32,
        cwnd_limited: bool,
        cc: &mut CongestionControl,
    ) {
        // No assertion of `quiet` here: the tests call this in the states it refuses, to
        // show that the general path acts on each (the caller asks `quiet` first).
        // The cumulative ACK's sample (`Delivery::rtt_sample`), which is RACK's too: the
        // newest segment delivered is this one.
        let rtt = now.as_micros().saturating_sub(seg.sent_at.as_micros());
        self.note_rtt(rtt);
        self.srtt = srtt;
        self.rack_rtt = Some(rtt);
        self.advance_rack_xmit(seg.sent_at, seg.end);
        self.reordering_seen |= reordered;
        // F-RTO with no timeout to decide on (`frto_on_ack`), and the duplicate-ACK count
        // an advancing ACK ends without SACK.
        self.frto = false;
        self.frto_hold = false;
        if !sack {
            self.dup_acks = 0;
        }
        cc.on_ack_parts(now, seg.len(), flight_before, rtt, self.min_rtt, seg.app_limited || !cwnd_limited);
    }

    /// PRR (RFC 6937 section 3) for `delivered` bytes: DeliveredData, then sndcnt, and cwnd
    /// becomes `pipe + sndcnt`.
    fn prr(&mut self, delivered: u32, sent: &SentQueue, smss: u32, cc: &mut CongestionControl) {
        self.prr_delivered += delivered;
        let pipe = self.pipe(sent, smss);
        let sndcnt = if pipe > self.ssthresh {
            // Proportional: send as the recovery delivers, scaled to ssthresh.
            let target =
                (u64::from(self.prr_delivered) * u64::from(self.ssthresh)).div_ceil(u64::from(self.recover_fs.max(1)));
            (target as u32).saturating_sub(self.prr_out)
        } else {
            // PRR-SSRB: grow back to ssthresh, at most one segment beyond what was delivered.
            let limit = self.prr_delivered.saturating_sub(self.prr_out).max(delivered) + smss;
            (self.ssthresh - pipe).min(limit)
        };
        cc.set_cwnd(pipe + sndcnt);
    }

    /// Count `len` bytes sent from `seq` (new or resent), for PRR and the undo of a needless
    /// reduction.
    /// `tsval` is the timestamp the segment carries, where timestamps are in use.
    pub fn on_sent(&mut self, seq: SeqNum, len: u32, retransmission: bool, tsval: Option<u32>) {
        if self.in_recovery() || self.in_cwr() {
            self.prr_out += len;
        }
        if retransmission {
            self.total_retrans += 1;
            // The first retransmission of a reduction: Eifel's RetransmitTS (RFC 3522
            // section 3.2; Linux sets `retrans_stamp` in `tcp_retransmit_skb`).
            if std::mem::take(&mut self.eifel_armed) {
                self.eifel = tsval.map(|ts| (ts, seq));
            }
            if self.undo_possible {
                if self.undo_ranges.len() < MAX_UNDO_RANGES {
                    self.undo_ranges.push((seq, seq + len));
                } else {
                    self.forget_undo();
                }
            }
        }
    }

    /// Take in the D-SACK `block` and return whether it may be the report of one of our
    /// resends: false once D-SACKs have reported more segments than were ever resent, as
    /// Linux's `tcp_dsack_seen` decides ("Skip the DSACK if dup segs weren't retransmitted
    /// by sender"). A network that duplicates packets sends such D-SACKs.
    fn dsack_is_ours(&mut self, block: crate::wire::SackBlock, smss: u32) -> bool {
        let segments = (block.right - block.left).div_ceil(smss.max(1)).max(1);
        self.dsack_dups += u64::from(segments);
        self.dsack_dups <= self.total_retrans
    }

    /// Strike the resends of this reduction that the D-SACK `block` covers, and return
    /// whether that was the last of them: every resend proved needless, so the reduction
    /// may be undone (RFC 2883 section 5, RFC 3708: the retransmissions of a loss episode
    /// were spurious when each of them is D-SACKed; Linux undoes when `undo_retrans`
    /// reaches 0, `tcp_try_undo_dsack`).
    /// A D-SACK of data we did not resend in this reduction counts for nothing: the
    /// original arrived twice, a duplicate the network made (Linux counts only D-SACKs of
    /// segments marked `TCPCB_RETRANS`, or above `undo_marker` for ones already acked).
    fn dsack_undoes(&mut self, block: crate::wire::SackBlock) -> bool {
        if !self.undo_possible || self.undo_ranges.is_empty() {
            return false;
        }
        let before = self.undo_ranges.len();
        self.undo_ranges.retain(|&(start, end)| !(start.before(block.right) && block.left.before(end)));
        before != self.undo_ranges.len() && self.undo_ranges.is_empty()
    }

    /// Return the duplicate ACKs that mark a segment lost without SACK: three (RFC 5681
    /// 3.2), or more once reordering has been seen (Linux's `tp->reordering`, which
    /// `tcp_check_sack_reordering` raises; RFC 5681 3.2 allows a higher threshold "if there
    /// is evidence of reordering").
    fn dup_thresh(&self) -> u32 {
        self.reordering.max(DUP_THRESH)
    }

    /// Return whether the resent segments `d` delivered were acknowledged sooner than
    /// min_RTT after their resend: the delivery was of the originals (RFC 8985 6.2 step 1).
    fn resend_was_needless(&self, now: Instant, d: &Delivery) -> bool {
        let (Some((_, _, at)), Some(min_rtt)) = (d.resent, self.min_rtt) else { return false };
        now.as_micros().saturating_sub(at.as_micros()) < min_rtt
    }

    /// Without SACK, the originals of the resends `d` delivered arrived: the network held
    /// them back behind the segments whose duplicate ACKs are counted. Raise the threshold
    /// past that count (Linux's `tcp_check_sack_reordering`, capped at
    /// `tcp_max_reordering`), strike the resends from the reduction's, and undo it if none
    /// is left. Return whether it was undone.
    fn on_reordering_without_sack(&mut self, now: Instant, d: &Delivery, cc: &mut CongestionControl) -> bool {
        let Some((start, end, _)) = d.resent else { return false };
        self.reordering_seen = true;
        self.reordering = self.reordering.max((self.dup_acks + 1).min(MAX_REORDERING));
        let block = crate::wire::SackBlock { left: start, right: end };
        if !self.dsack_undoes(block) {
            return false;
        }
        self.undo_possible = false;
        self.recovery_point = None;
        self.rto_point = None;
        cc.on_spurious(now);
        true
    }

    /// Give up undoing the last reduction: its resends are no longer matched to D-SACKs.
    fn forget_undo(&mut self) {
        self.undo_possible = false;
        self.undo_ranges = Vec::new();
        self.eifel = None;
        self.eifel_armed = false;
    }

    /// Return whether the ACK `ctx` covers the first retransmission of the reduction and
    /// echoes a timestamp older than that retransmission's (RFC 3522 section 3.2, Linux's
    /// `tcp_packet_delayed`).
    fn eifel_says_delayed(&self, ctx: &AckContext) -> bool {
        let Some((stamp, seq)) = self.eifel else { return false };
        ctx.advanced && ctx.snd_una.after(seq) && ctx.tsecr.is_some_and(|ecr| crate::timestamps::older(ecr, stamp))
    }

    /// Undo a reduction found spurious (a timeout, or a fast recovery the echo disowned):
    /// the marks it left are returned, so the sender goes on with new data rather than
    /// resend what was not lost, or begin another recovery for it (RFC 4015 section 4;
    /// Linux's `tcp_try_undo_loss` and `tcp_try_undo_partial`, `tcp_undo_cwnd_reduction`
    /// with `unmark_loss`; a segment truly lost is found again by RACK or the duplicate
    /// ACKs), the window is restored, and no further undo of it follows.
    fn undo_spurious(&mut self, now: Instant, sent: &mut SentQueue, cc: &mut CongestionControl) {
        sent.unmark_lost();
        self.undo_possible = false;
        self.undo_ranges.clear();
        self.recovery_point = None;
        self.rto_point = None;
        self.dup_acks = 0;
        self.frto = false;
        self.frto_hold = false;
        self.eifel = None;
        cc.on_spurious(now);
    }

    /// F-RTO (RFC 5682 section 2, with the SACK variant's use of SACKs in step 3a, section
    /// 3; Linux's `tcp_process_loss`): after a timeout and its one retransmission, the
    /// first ACK that advances SND.UNA short of what was sent (step 2b) lets new data go
    /// instead of more retransmissions, if there is any and the peer's window takes it;
    /// otherwise, or on a duplicate ACK (step 2a), conventional recovery goes on. The next
    /// ACK that cumulatively acknowledges data sent only once shows the originals were
    /// delivered: the timeout was spurious, and it is undone (step 3b; Linux's
    /// `tcp_try_undo_loss(sk, true)` on `FLAG_ORIG_SACK_ACKED`, with the full restore Linux
    /// makes rather than RFC 5682's halving). A duplicate ACK, a SACK or an advance over
    /// resends only says the loss was real (step 3a). Decided once per timeout series;
    /// Linux also undoes on step 2's ACK when it covers originals, which we leave to step 3
    /// as RFC 5682 does. Return whether the timeout was undone.
    fn frto_on_ack(
        &mut self,
        ctx: &AckContext,
        d: &Delivery,
        sent: &mut SentQueue,
        cc: &mut CongestionControl,
    ) -> bool {
        self.frto_hold = false;
        let Some(point) = self.rto_point else {
            self.frto = false;
            return false;
        };
        if !self.frto || !self.undo_possible {
            self.frto = false;
            return false;
        }
        if ctx.snd_max.after(self.frto_high) {
            // Step 3: new data went after step 2b.
            if ctx.advanced && d.cumulative_original && !ctx.duplicate {
                self.undo_spurious(ctx.now, sent, cc);
                return true;
            }
            if ctx.advanced || ctx.duplicate || d.sacked > 0 {
                self.frto = false;
            }
        } else if ctx.advanced {
            // Step 2: the whole window acknowledged ends it (2a), as does nothing new to send.
            if !ctx.snd_una.before(point) || !ctx.can_send_new {
                self.frto = false;
            } else {
                self.frto_high = ctx.snd_max;
                self.frto_hold = true;
            }
        } else if ctx.duplicate || d.sacked > 0 {
            self.frto = false;
        }
        false
    }

    /// Return whether F-RTO's step 2b holds retransmissions back, for new data (RFC 5682).
    pub fn frto_holds(&self) -> bool {
        self.frto_hold
    }

    /// Eifel's detection (RFC 3522 section 3.2), decided once per reduction, on the first
    /// ACK that acknowledges its first retransmission: a TSecr older than the TSval that
    /// retransmission carried echoes the original, which therefore arrived, so the
    /// retransmission and the reduction were spurious (Linux's `tcp_packet_delayed`, from
    /// `tcp_try_undo_recovery`, `tcp_try_undo_partial` and `tcp_try_undo_loss`). Undo it
    /// then, at most once (the undo clears `undo_possible`, as Linux's `undo_marker`): what
    /// it marked lost and has not resent yet is in flight again, so the sender goes on with
    /// new data (RFC 4015 section 4, Linux's `unmark_loss`). The echo's
    /// RTT sample after a timeout already adapts the RTO and clears its backoff
    /// (`Reliability::sample_rtt`). Without SACK, the network reordered: the duplicate-ACK
    /// threshold rises past the duplicates seen (as `on_reordering_without_sack`).
    ///
    /// Our TSval ticks in milliseconds: a retransmission sent in the same millisecond as
    /// the original carries the same TSval, the echo is not older, and nothing is undone
    /// (RFC 3522 section 3.3 notes the limit of the clock's granularity).
    /// Return whether the reduction was undone.
    fn eifel_detect(&mut self, ctx: &AckContext, sent: &mut SentQueue, cc: &mut CongestionControl) -> bool {
        let Some((_, seq)) = self.eifel else { return false };
        if !ctx.advanced || !ctx.snd_una.after(seq) {
            return false;
        }
        let delayed = self.eifel_says_delayed(ctx);
        self.eifel = None;
        if !delayed || !self.undo_possible {
            return false;
        }
        if !ctx.sack && self.in_recovery() {
            self.reordering_seen = true;
            self.reordering = self.reordering.max((self.dup_acks + 1).min(MAX_REORDERING));
        }
        self.undo_spurious(ctx.now, sent, cc);
        true
    }

    /// The RACK reordering timer fired: look again at what may be lost by now, and begin a
    /// recovery if something is. Return the next deadline, and whether a recovery began.
    pub fn on_reorder_timeout(
        &mut self,
        now: Instant,
        snd_max: SeqNum,
        flight: u32,
        smss: u32,
        sent: &mut SentQueue,
        cc: &mut CongestionControl,
    ) -> (Option<Instant>, bool) {
        let next = self.rack_detect(now, sent, smss);
        let entered = self.begin_if_lost(now, snd_max, flight, sent, cc);
        if entered {
            // No ACK brings DeliveredData: count one segment, as Linux's
            // `tcp_rack_reo_timeout` does, so PRR-SSRB lets two segments go, not a
            // reduced window's worth at once.
            self.prr(smss, sent, smss, cc);
        }
        (next, entered)
    }

    /// Begin a recovery if something is marked lost and none (nor a timeout's) is under way
    /// (RFC 6675 5 step 4; RFC 6937's initialisation). Return whether one began.
    fn begin_if_lost(
        &mut self,
        now: Instant,
        snd_max: SeqNum,
        flight: u32,
        sent: &SentQueue,
        cc: &mut CongestionControl,
    ) -> bool {
        if sent.lost() == 0 || self.in_recovery() || self.in_loss_state() {
            return false;
        }
        if self.cwr_point.take().is_some() {
            // A loss during an ECN reduction: the reduction goes on as a recovery, with its
            // ssthresh and PRR counters, and no second cut for one round's congestion
            // (Linux's `tcp_enter_recovery` starts a new reduction only outside one). It
            // cannot be undone: it began with a mark, not a loss.
            self.recovery_point = Some(snd_max);
            self.tlp = None;
            return true;
        }
        self.ssthresh = cc.on_loss(now, flight);
        self.recovery_point = Some(snd_max);
        self.recover_fs = flight;
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.tlp = None;
        self.undo_possible = true;
        self.undo_ranges.clear();
        self.eifel = None;
        self.eifel_armed = true;
        true
    }

    /// The retransmission timer fired for data: everything not SACKed is lost (RFC 6675
    /// 5.1, RFC 8985 6.3), the controller takes the timeout, and the recovery, if any, ends.
    pub fn on_rto(
        &mut self,
        now: Instant,
        snd_max: SeqNum,
        flight: u32,
        sent: &mut SentQueue,
        cc: &mut CongestionControl,
    ) {
        sent.mark_all_lost();
        cc.on_rto(now, flight);
        // A series of timeouts is one reduction (RFC 5681 3.1): count its resends together.
        // F-RTO (RFC 5682) unless the timeout ends a fast recovery (Linux's `tcp_enter_loss`:
        // `new_recovery || icsk_retransmits`) or a fall of the path MTU is being repaired.
        self.frto = (!self.in_recovery() || self.rto_point.is_some()) && self.mtu_point.is_none();
        self.frto_high = snd_max;
        self.frto_hold = false;
        if self.rto_point.is_none() {
            self.undo_ranges.clear();
            self.eifel = None;
            self.eifel_armed = true;
        }
        self.undo_possible = true;
        self.recovery_point = None;
        self.cwr_point = None;
        self.rto_point = Some(snd_max);
        self.mtu_point = None;
        self.dup_acks = 0;
        self.tlp = None;
    }

    /// The path MTU fell and the segments in flight too large for it were marked lost, with
    /// `snd_max` sent: until SND.UNA reaches it, no recovery begins (their loss says nothing
    /// of congestion), no tail-loss probe goes out, and no earlier reduction is undone (these
    /// resends bring no D-SACK). A recovery already under way goes on.
    pub fn on_mtu_reduced(&mut self, snd_max: SeqNum) {
        self.mtu_point = Some(snd_max);
        self.tlp = None;
        self.forget_undo();
    }

    /// Return whether a timeout or a fall of the path MTU marked segments lost and SND.UNA
    /// has not passed what was sent then: no fast recovery may begin.
    fn in_loss_state(&self) -> bool {
        self.rto_point.is_some() || self.mtu_point.is_some()
    }

    /// Return when to send a tail-loss probe after a transmission at `now` (RFC 8985 7.2),
    /// or `None` when none may be sent: SACK is needed, no probe may be outstanding, and no
    /// recovery in progress. `srtt_us` is the smoothed RTT in microseconds, `rto_at` when
    /// the retransmission timer would fire. (In microseconds, not `Duration`s: this runs
    /// on every segment sent.) Inlined, forced: with `arm_loss_probe`'s copies the compiler
    /// took it out of line again.
    #[inline(always)]
    pub fn probe_deadline(
        &self,
        now: Instant,
        sack: bool,
        srtt_us: Option<u64>,
        flight: u32,
        smss: u32,
        rto_at: Option<Instant>,
    ) -> Option<Instant> {
        if !sack || flight == 0 || self.tlp.is_some() || self.in_recovery() || self.in_loss_state() {
            return None;
        }
        let allowance = if flight <= smss { WORST_DELAYED_ACK } else { PROBE_MARGIN };
        let pto_us = srtt_us.map_or(1_000_000, |s| s.saturating_mul(2)).saturating_add(allowance.as_micros() as u64);
        let at = Instant::from_micros(now.as_micros().saturating_add(pto_us));
        Some(rto_at.map_or(at, |rto| at.min(rto)))
    }

    /// Note a tail-loss probe sent up to `end` (a retransmission or new data).
    pub fn on_probe_sent(&mut self, end: SeqNum, retransmission: bool) {
        self.tlp = Some((end, retransmission));
    }

    /// Return whether a tail-loss probe is outstanding.
    pub fn probe_outstanding(&self) -> bool {
        self.tlp.is_some()
    }

    /// RFC 8985 6.2 step 2: RACK.xmit_ts, RACK.end_seq and RACK.rtt from the newest
    /// delivered segment. A retransmitted one counts only when its RTT sample is at least
    /// min_RTT, so the delivery cannot be of the original (RFC 8985 6.2 step 1). A segment
    /// sent once also gives min_RTT a sample, in the host clock's precision (RFC 8985's
    /// min_RTT is over every sample, not only the timed flights').
    /// `resends` is false when the ACK's echo shows that it answers originals, not resends.
    fn rack_update(&mut self, now: Instant, d: &Delivery, resends: bool) {
        let candidate = match (d.newest, d.newest_any) {
            (Some((at, end)), _) => {
                let rtt = now.as_micros().saturating_sub(at.as_micros());
                self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
                Some((at, end))
            }
            (None, Some((at, end))) if resends => {
                let rtt = now.as_micros().saturating_sub(at.as_micros());
                self.min_rtt.is_some_and(|m| rtt >= m).then_some((at, end))
            }
            _ => None,
        };
        let Some((at, end)) = candidate else { return };
        self.rack_rtt = Some(now.as_micros().saturating_sub(at.as_micros()));
        self.advance_rack_xmit(at, end);
    }

    /// Count an RTT sample (microseconds) in min_RTT, the largest RTT seen and the samples
    /// taken.
    #[inline]
    fn note_rtt(&mut self, rtt: u64) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        self.max_rtt = Some(self.max_rtt.map_or(rtt, |m| m.max(rtt)));
        self.rtt_samples += 1;
    }

    /// RFC 8985 6.2 step 2: RACK.xmit_ts and RACK.end follow the most recently sent segment
    /// delivered (the later end breaks a tie of send times).
    #[inline]
    fn advance_rack_xmit(&mut self, at: Instant, end: SeqNum) {
        let newer = match self.rack_xmit {
            None => true,
            Some((t, e)) => at > t || (at == t && end.after(e)),
        };
        if newer {
            self.rack_xmit = Some((at, end));
        }
    }

    /// RFC 8985 6.2 step 4: the reordering window, RACK.reo_wnd_mult x min_RTT / 4 up to
    /// SRTT, or 0 before any reordering was seen while a recovery is on or enough has been
    /// SACKed (as Linux's `tcp_rack_reo_wnd`), so that losses are found at once when
    /// reordering is unlikely.
    fn reo_wnd(&self, sent: &SentQueue, smss: u32) -> Duration {
        if !self.reordering_seen && (self.in_recovery() || sent.sacked() >= DUP_THRESH * smss) {
            return Duration::ZERO;
        }
        // A quarter of min_RTT in nanoseconds, as a `Duration` divides.
        let window = self.min_rtt.map_or(Duration::ZERO, |m| Duration::from_micros(m) / 4) * self.reo_wnd_mult.max(1);
        self.srtt.map_or(window, |srtt| window.min(Duration::from_micros(srtt)))
    }

    /// RFC 8985 6.2 step 5: mark lost every segment in flight that was sent before the
    /// newest delivered one and has been missing for RACK.rtt + reo_wnd; return when the
    /// next one would be, for the reordering timer.
    fn rack_detect(&mut self, now: Instant, sent: &mut SentQueue, smss: u32) -> Option<Instant> {
        if sent.len() == 0 {
            // All acknowledged (every ACK of a request/response exchange): nothing to mark.
            return None;
        }
        let ((xmit, xmit_end), rtt) = (self.rack_xmit?, self.rack_rtt.map(Duration::from_micros)?);
        let wait = rtt + self.reo_wnd(sent, smss);
        let mut next: Option<Instant> = None;
        for i in 0..sent.len() {
            let seg = sent.get(i);
            let sent_before = seg.sent_at < xmit || (seg.sent_at == xmit && seg.end.before(xmit_end));
            // Records are in sequence order, and a segment sent once went out after every
            // segment before it: from the first one sent once after RACK's, all later ones
            // were sent later still (resends of later data are later again). Without loss
            // this stops at the first record, so the scan costs nothing per ACK.
            if !sent_before && !seg.retransmitted {
                break;
            }
            if seg.mark != Mark::InFlight || !sent_before {
                continue;
            }
            let due = seg.sent_at + wait;
            if due <= now {
                sent.mark_lost_at(i);
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::Algorithm;
    use crate::wire::SackBlock;

    fn ack(now: Instant, snd_una: u32, snd_max: u32) -> AckContext {
        AckContext {
            now,
            snd_una: SeqNum(snd_una),
            snd_max: SeqNum(snd_max),
            flight_before: 0,
            advanced: true,
            duplicate: false,
            sack: true,
            smss: 1000,
            rtt: None,
            srtt: Some(10_000),
            cwnd_limited: true,
            tsecr: None,
            can_send_new: false,
        }
    }

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    /// The exchange's one record, 1064..1128 sent at 3 ms, in a queue of its own.
    fn exchange_record() -> SentQueue {
        let mut q = SentQueue::default();
        q.push(SeqNum(1064), SeqNum(1128), ms(3), false);
        q
    }

    /// Apply the ACK of 1128 at 5 ms to `r` both ways, the general (`on_ack`) and the
    /// exchange's (`on_sole_ack`), and return both states after it, recovery and controller.
    fn both_ways(r: &Recovery, sack: bool) -> ((String, Decision), String) {
        let ctx = AckContext { sack, flight_before: 64, ..ack(ms(5), 1128, 1128) };
        let (mut general, mut cc) = (r.clone(), CongestionControl::new(Algorithm::NewReno, 1000));
        let mut q = exchange_record();
        let d = q.on_ack(SeqNum(1128), &[]);
        let decision = general.on_ack(&ctx, &d, &mut q, &mut cc);
        let (mut fast, mut fast_cc) = (r.clone(), CongestionControl::new(Algorithm::NewReno, 1000));
        let mut q = exchange_record();
        let (seg, reordered) = q.take_sole(SeqNum(1128)).expect("the exchange's record");
        fast.on_sole_ack(ms(5), (&seg, reordered), ctx.srtt, sack, 64, ctx.cwnd_limited, &mut fast_cc);
        let general = (format!("{general:?} {cc:?}"), decision);
        (general, format!("{fast:?} {fast_cc:?}"))
    }

    #[test]
    fn the_ack_of_an_exchange_does_what_the_general_ack_does() {
        for sack in [true, false] {
            // History: an earlier exchange (min_RTT, RACK and the counts set) and duplicate
            // ACKs counted, which an advancing ACK ends without SACK.
            let mut r = Recovery::default();
            let mut cc = CongestionControl::new(Algorithm::NewReno, 1000);
            let mut q = SentQueue::default();
            q.push(SeqNum(1000), SeqNum(1064), ms(0), false);
            let d = q.on_ack(SeqNum(1064), &[]);
            r.on_ack(&AckContext { sack, flight_before: 64, ..ack(ms(2), 1064, 1064) }, &d, &mut q, &mut cc);
            r.dup_acks = u32::from(!sack);
            r.frto = true;
            assert!(r.quiet());
            for state in [Recovery::default(), r] {
                let ((general, decision), fast) = both_ways(&state, sack);
                assert_eq!(decision, Decision::default());
                assert_eq!(fast, general, "sack {sack}");
            }
        }
    }

    #[test]
    fn the_ack_of_an_exchange_takes_the_general_way_while_a_loss_is_under_way() {
        // Each state whose end or check this ACK (of 1128) reaches: the general path acts
        // on it, so the exchange's would be wrong there, and `quiet` must say no.
        let states = [
            ("a recovery", Recovery { recovery_point: Some(SeqNum(1128)), ..Recovery::default() }),
            ("an ECN reduction", Recovery { cwr_point: Some(SeqNum(1128)), ..Recovery::default() }),
            ("a timeout's loss state", Recovery { rto_point: Some(SeqNum(1128)), ..Recovery::default() }),
            ("a fall of the path MTU", Recovery { mtu_point: Some(SeqNum(1128)), ..Recovery::default() }),
            ("a tail-loss probe", Recovery { tlp: Some((SeqNum(1128), true)), ..Recovery::default() }),
            ("an Eifel check", Recovery { eifel: Some((7, SeqNum(1064))), ..Recovery::default() }),
        ];
        for (name, state) in states {
            assert!(!state.quiet(), "{name}");
            let ((general, _), fast) = both_ways(&state, true);
            assert_ne!(fast, general, "{name}: the general path acts on it");
        }
    }

    #[test]
    fn each_round_trip_with_a_dsack_widens_the_reordering_window_up_to_srtt() {
        // RFC 8985 6.2 step 4: reo_wnd = min(reo_wnd_mult * min_RTT / 4, SRTT), the
        // multiplier raised once per round trip in which a D-SACK arrives.
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        r.min_rtt = Some(4_000);
        r.reordering_seen = true;
        // D-SACKs count only while they report no more than was resent (Linux's
        // tcp_dsack_seen): resend as many segments as the test D-SACKs.
        for _ in 0..12 {
            r.on_sent(SeqNum(0), 1000, true, None);
        }
        let t = Instant::ZERO;
        r.on_ack(&ack(t, 1000, 5000), &Delivery::default(), &mut sent, &mut cc);
        assert_eq!(r.reo_wnd(&sent, 1000), Duration::from_millis(1), "min_RTT / 4");
        let dsack = Delivery { dsack: Some(SackBlock { left: SeqNum(0), right: SeqNum(1000) }), ..Delivery::default() };
        r.on_ack(&ack(t, 1000, 5000), &dsack, &mut sent, &mut cc);
        assert_eq!(r.reo_wnd(&sent, 1000), Duration::from_millis(2));
        // Another D-SACK in the same round trip (SND.UNA short of 5000): no change.
        r.on_ack(&ack(t, 3000, 6000), &dsack, &mut sent, &mut cc);
        assert_eq!(r.reo_wnd(&sent, 1000), Duration::from_millis(2));
        // The next round trip's D-SACKs: 3x, 4x ..., until SRTT (10 ms) caps it.
        let mut una = 5000;
        for expect in [3, 4, 5, 6, 7, 8, 9, 10, 10, 10] {
            r.on_ack(&ack(t, una, una + 4000), &dsack, &mut sent, &mut cc);
            assert_eq!(r.reo_wnd(&sent, 1000), Duration::from_millis(expect));
            una += 4000;
        }
    }

    #[test]
    fn the_rtt_range_keeps_the_smallest_and_largest_sample_and_counts_them() {
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        assert_eq!(r.rtt_range(), (None, None, 0));
        let ms = Duration::from_millis;
        let mut una = 1000;
        for rtt in [ms(10), ms(30), ms(20)] {
            let ctx = AckContext { rtt: Some(rtt), ..ack(Instant::ZERO, una, una + 4000) };
            r.on_ack(&ctx, &Delivery::default(), &mut sent, &mut cc);
            una += 1000;
        }
        // An ACK without a sample (Karn's rule) changes nothing.
        r.on_ack(&ack(Instant::ZERO, una, una + 4000), &Delivery::default(), &mut sent, &mut cc);
        assert_eq!(r.rtt_range(), (Some(ms(10)), Some(ms(30)), 3));
    }

    fn dsack(left: u32, right: u32) -> Delivery {
        Delivery { dsack: Some(SackBlock { left: SeqNum(left), right: SeqNum(right) }), ..Delivery::default() }
    }

    /// A timeout with 1000..5000 in flight, the first segment resent, and then all of it
    /// acknowledged; return the parts and ssthresh from before the timeout.
    fn after_a_timeout_and_one_resend() -> (Recovery, SentQueue, CongestionControl, u32) {
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        let t = Instant::ZERO;
        for k in 1..5 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), t, false);
        }
        let ssthresh_before = cc.ssthresh();
        r.on_rto(t, SeqNum(5000), 4000, &mut sent, &mut cc);
        assert_ne!(cc.ssthresh(), ssthresh_before, "the timeout reduced the window");
        r.on_sent(SeqNum(1000), 1000, true, None);
        // Everything arrives; the D-SACKs come after.
        sent.on_ack(SeqNum(5000), &[]);
        (r, sent, cc, ssthresh_before)
    }

    #[test]
    fn a_dsack_of_data_never_resent_undoes_nothing() {
        // The network duplicated a segment sent once, and the receiver reported it (RFC 2883
        // section 4 reports every duplicate): its D-SACK says nothing of our resend.
        let (mut r, mut sent, mut cc, before) = after_a_timeout_and_one_resend();
        let t = Instant::from_millis(30);
        let decision = r.on_ack(&ack(t, 5000, 5000), &dsack(3000, 4000), &mut sent, &mut cc);
        assert!(!decision.undone);
        assert_ne!(cc.ssthresh(), before);
        // Nor, where nothing was ever resent, does it widen the reordering window (Linux's
        // tcp_dsack_seen: more D-SACKed than resent).
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        r.on_ack(&ack(t, 5000, 5000), &dsack(4000, 5000), &mut sent, &mut cc);
        assert_eq!(r.reo_wnd_mult, 0, "no widening for the network's duplicates");
        assert!(!r.reordering_seen);
    }

    #[test]
    fn a_dsack_of_every_resend_undoes_the_reduction() {
        let (mut r, mut sent, mut cc, before) = after_a_timeout_and_one_resend();
        let t = Instant::from_millis(30);
        // A duplicate of other data first: nothing.
        assert!(!r.on_ack(&ack(t, 5000, 5000), &dsack(2000, 3000), &mut sent, &mut cc).undone);
        // Then the resend itself: undone (RFC 2883 section 5, Linux's tcp_try_undo_dsack).
        assert!(r.on_ack(&ack(t, 5000, 5000), &dsack(1000, 2000), &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), before);
    }

    /// An ECN reduction (RFC 3168 6.1.2) after a reduction that later proves needless is not
    /// undone with it: neither the D-SACK of the resend nor the Eifel echo restores the
    /// window from before both (Linux's `tcp_enter_cwr` clears `undo_marker`).
    #[test]
    fn an_ecn_reduction_is_not_undone_by_a_dsack_or_the_eifel_echo() {
        // D-SACK: the timeout's resend D-SACKed after an ECE reduced the window again.
        let (mut r, mut sent, mut cc, before) = after_a_timeout_and_one_resend();
        let t = Instant::from_millis(30);
        r.on_ack(&ack(t, 5000, 5000), &Delivery::default(), &mut sent, &mut cc);
        r.on_ecn_echo(t, (4000, SeqNum(5000)), &sent, 1000, &mut cc);
        let reduced = (cc.cwnd(), cc.ssthresh());
        assert_ne!(reduced.1, before);
        assert!(!r.on_ack(&ack(t, 5000, 5000), &dsack(1000, 2000), &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), reduced.1);
        // Eifel: a timeout, its resend, an ECE, then the ACK echoing the original's TSval.
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        for k in 1..5 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), Instant::ZERO, false);
        }
        let t = Instant::from_millis(200);
        r.on_rto(t, SeqNum(5000), 4000, &mut sent, &mut cc);
        sent.resent(SeqNum(1000), 1000, t);
        r.on_sent(SeqNum(1000), 1000, true, Some(200));
        r.on_ecn_echo(t, (4000, SeqNum(5000)), &sent, 1000, &mut cc);
        let reduced = cc.ssthresh();
        let d = sent.on_ack(SeqNum(3000), &[]);
        let ctx = AckContext { tsecr: Some(1), ..ack(Instant::from_millis(400), 3000, 5000) };
        assert!(!r.on_ack(&ctx, &d, &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), reduced);
    }

    /// An ECN echo walks cwnd down by PRR (RFC 6937; Linux's CWR state): each ACK lets out
    /// about ssthresh/flight of what it delivered, and the reduction ends with cwnd =
    /// ssthresh once SND.UNA reaches SND.MAX of the echo; a loss meanwhile turns it into a
    /// recovery without a second cut.
    #[test]
    fn an_ecn_reduction_is_walked_down_by_prr_and_a_loss_in_it_cuts_no_further() {
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        cc.set_cwnd(20_000);
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        for k in 0..20 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), Instant::ZERO, false);
        }
        let t = Instant::from_millis(20);
        r.on_ecn_echo(t, (20_000, SeqNum(20_000)), &sent, 1000, &mut cc);
        let ssthresh = cc.ssthresh();
        assert_eq!(ssthresh, 14_000, "CUBIC's beta of 0.7");
        assert!(r.in_cwr());
        // One segment delivered: PRR lets 0.7 of it out, so cwnd is pipe (19 segments) + 1.
        let d = sent.on_ack(SeqNum(1000), &[]);
        r.on_ack(&AckContext { flight_before: 20_000, ..ack(t, 1000, 20_000) }, &d, &mut sent, &mut cc);
        assert_eq!(cc.cwnd(), 19_000 + 700, "pipe plus PRR's share, not ssthresh at once");
        r.on_sent(SeqNum(20_000), 700, false, None);
        // A loss found meanwhile (three SACKed segments above the first): a recovery, with
        // the ECN reduction's ssthresh.
        sent.push(SeqNum(20_000), SeqNum(20_700), t, false);
        let blocks = [SackBlock { left: SeqNum(2000), right: SeqNum(5000) }];
        let d = sent.on_ack(SeqNum(1000), &blocks);
        let decision = r.on_ack(&AckContext { advanced: false, ..ack(t, 1000, 20_700) }, &d, &mut sent, &mut cc);
        assert!(decision.entered_recovery && r.in_recovery() && !r.in_cwr());
        assert_eq!(cc.ssthresh(), ssthresh, "no second cut for one round's congestion");
        // The reduction ends (here the recovery's) when everything is acknowledged: cwnd =
        // ssthresh.
        let d = sent.on_ack(SeqNum(20_700), &[]);
        r.on_ack(&ack(Instant::from_millis(40), 20_700, 20_700), &d, &mut sent, &mut cc);
        assert!(!r.in_recovery() && !r.in_cwr());
        assert_eq!((cc.cwnd(), cc.ssthresh()), (ssthresh, ssthresh));
    }

    #[test]
    fn a_reduction_with_two_resends_needs_both_dsacked() {
        let (mut r, mut sent, mut cc, before) = after_a_timeout_and_one_resend();
        r.on_sent(SeqNum(2000), 1000, true, None);
        let t = Instant::from_millis(30);
        assert!(!r.on_ack(&ack(t, 5000, 5000), &dsack(1000, 2000), &mut sent, &mut cc).undone);
        // The same D-SACK again (the network duplicated our resend): still one left.
        assert!(!r.on_ack(&ack(t, 5000, 5000), &dsack(1000, 2000), &mut sent, &mut cc).undone);
        assert!(r.on_ack(&ack(t, 5000, 5000), &dsack(2000, 3000), &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), before);
    }

    #[test]
    fn without_sack_a_resend_acked_within_min_rtt_raises_the_threshold_and_undoes() {
        // The ACK of the resend came 2 ms after it, on a path of 20 ms: the original was
        // delivered (RFC 8985 6.2 step 1), held back behind 17 segments' duplicate ACKs.
        let resent = Delivery {
            delivered: 1000,
            resent: Some((SeqNum(1000), SeqNum(2000), Instant::ZERO)),
            ..Delivery::default()
        };
        for (after, undone, thresh) in [(2, true, 18), (25, false, DUP_THRESH)] {
            let (mut r, mut sent, mut cc, before) = after_a_timeout_and_one_resend();
            r.min_rtt = Some(20_000);
            r.dup_acks = 17;
            let t = Instant::from_millis(after);
            let ctx = AckContext { sack: false, ..ack(t, 2000, 5000) };
            assert_eq!(r.on_ack(&ctx, &resent, &mut sent, &mut cc).undone, undone, "{after} ms");
            assert_eq!(r.dup_thresh(), thresh, "{after} ms");
            assert_eq!(cc.ssthresh() == before, undone, "{after} ms");
        }
    }

    /// A fast recovery without SACK on 1000..5000 (three duplicate ACKs), its first
    /// segment resent at 5 ms with TSval 105; min_RTT 20 ms.
    fn fast_retransmit_without_sack() -> (Recovery, SentQueue, CongestionControl, u32) {
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        for k in 1..5 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), Instant::ZERO, false);
        }
        r.min_rtt = Some(20_000);
        let before = cc.ssthresh();
        for _ in 0..3 {
            let ctx = AckContext {
                advanced: false,
                duplicate: true,
                sack: false,
                flight_before: 4000,
                ..ack(Instant::from_millis(4), 1000, 5000)
            };
            r.on_ack(&ctx, &Delivery::default(), &mut sent, &mut cc);
        }
        assert!(r.in_recovery());
        assert_ne!(cc.ssthresh(), before, "the recovery reduced the window");
        sent.resent(SeqNum(1000), 1000, Instant::from_millis(5));
        r.on_sent(SeqNum(1000), 1000, true, Some(105));
        (r, sent, cc, before)
    }

    #[test]
    fn eifel_undoes_a_fast_retransmit_whose_ack_echoes_the_original() {
        // The ACK comes 30 ms after the resend, later than min_RTT (the queue grew), so its
        // timing says nothing; the echo, 101, is older than the resend's 105, so it answers
        // the original (RFC 3522, Linux's tcp_packet_delayed). With the echo of the same
        // millisecond as the resend, nothing tells them apart, and nothing is undone.
        for (tsecr, undone) in [(Some(101), true), (Some(105), false), (None, false)] {
            let (mut r, mut sent, mut cc, before) = fast_retransmit_without_sack();
            let d = sent.on_ack(SeqNum(5000), &[]);
            let ctx = AckContext { sack: false, tsecr, ..ack(Instant::from_millis(35), 5000, 5000) };
            assert_eq!(r.on_ack(&ctx, &d, &mut sent, &mut cc).undone, undone, "{tsecr:?}");
            assert_eq!(cc.ssthresh() == before, undone, "{tsecr:?}");
            // Reordering was seen: the threshold rises past the duplicates.
            assert_eq!(r.dup_thresh(), if undone { 4 } else { DUP_THRESH }, "{tsecr:?}");
        }
    }

    #[test]
    fn eifel_undoes_a_spurious_timeout_once_and_returns_its_marks() {
        // A timeout at 200 ms with 1000..5000 in flight; the first segment resent with
        // TSval 200. The ACK of the first two segments echoes 1 (their originals): the
        // timeout was spurious, the reduction is undone, and what it marked lost and did not
        // resend is in flight again (RFC 4015 section 4; Linux's tcp_try_undo_loss).
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        for k in 1..5 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), Instant::ZERO, false);
        }
        let before = (cc.cwnd(), cc.ssthresh());
        let t = Instant::from_millis(200);
        r.on_rto(t, SeqNum(5000), 4000, &mut sent, &mut cc);
        sent.resent(SeqNum(1000), 1000, t);
        r.on_sent(SeqNum(1000), 1000, true, Some(200));
        assert_eq!(sent.lost(), 3000);
        let d = sent.on_ack(SeqNum(3000), &[]);
        let ctx = AckContext { tsecr: Some(1), ..ack(Instant::from_millis(400), 3000, 5000) };
        assert!(r.on_ack(&ctx, &d, &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), before.1);
        assert!(cc.cwnd() >= before.0, "cwnd restored (and grown by what the ACK delivered)");
        assert_eq!(sent.lost(), 0, "the timeout's marks are returned");
        assert!(!r.in_loss_state());
        // Once per reduction: the next ACK, with the same old echo, undoes nothing more.
        let d = sent.on_ack(SeqNum(4000), &[]);
        let ctx = AckContext { tsecr: Some(1), ..ack(Instant::from_millis(401), 4000, 5000) };
        assert!(!r.on_ack(&ctx, &d, &mut sent, &mut cc).undone);
    }

    /// A timeout at 200 ms with 1000..5000 in flight and the first segment resent, without
    /// timestamps; then the first ACK, of the resend, advances SND.UNA to 2000.
    fn frto_step_2(can_send_new: bool) -> (Recovery, SentQueue, CongestionControl, u32) {
        let (mut r, mut sent) = (Recovery::default(), SentQueue::default());
        let mut cc = CongestionControl::new(Algorithm::Cubic, 1000);
        for k in 1..5 {
            sent.push(SeqNum(k * 1000), SeqNum(k * 1000 + 1000), Instant::ZERO, false);
        }
        let before = cc.ssthresh();
        let t = Instant::from_millis(200);
        r.on_rto(t, SeqNum(5000), 4000, &mut sent, &mut cc);
        sent.resent(SeqNum(1000), 1000, t);
        r.on_sent(SeqNum(1000), 1000, true, None);
        let d = sent.on_ack(SeqNum(2000), &[]);
        let ctx = AckContext { can_send_new, ..ack(Instant::from_millis(300), 2000, 5000) };
        assert!(!r.on_ack(&ctx, &d, &mut sent, &mut cc).undone);
        (r, sent, cc, before)
    }

    #[test]
    fn frto_undoes_a_timeout_when_originals_are_acknowledged_after_new_data() {
        // Step 2b: new data instead of retransmissions; step 3b: the next ACK covers
        // 2000..3000, sent once: the originals arrived, the timeout was spurious.
        let (mut r, mut sent, mut cc, before) = frto_step_2(true);
        assert!(r.frto_holds(), "step 2b: new data goes first");
        sent.push(SeqNum(5000), SeqNum(6000), Instant::from_millis(300), false);
        r.on_sent(SeqNum(5000), 1000, false, None);
        let d = sent.on_ack(SeqNum(3000), &[]);
        assert!(r.on_ack(&ack(Instant::from_millis(301), 3000, 6000), &d, &mut sent, &mut cc).undone);
        assert_eq!(cc.ssthresh(), before);
        assert_eq!(sent.lost(), 0);
        assert!(!r.frto_holds());
    }

    #[test]
    fn frto_falls_back_without_new_data_or_on_a_duplicate() {
        // Nothing new to send (the application or the peer's window): conventional
        // recovery at once (Linux's tcp_process_loss clears tp->frto).
        let (mut r, mut sent, mut cc, before) = frto_step_2(false);
        assert!(!r.frto_holds());
        let d = sent.on_ack(SeqNum(3000), &[]);
        assert!(!r.on_ack(&ack(Instant::from_millis(301), 3000, 5000), &d, &mut sent, &mut cc).undone);
        assert_ne!(cc.ssthresh(), before);
        // New data went, and a duplicate ACK came: the loss was real (step 3a).
        let (mut r, mut sent, mut cc, before) = frto_step_2(true);
        sent.push(SeqNum(5000), SeqNum(6000), Instant::from_millis(300), false);
        let dup = AckContext { advanced: false, duplicate: true, ..ack(Instant::from_millis(301), 2000, 6000) };
        assert!(!r.on_ack(&dup, &Delivery::default(), &mut sent, &mut cc).undone);
        let d = sent.on_ack(SeqNum(3000), &[]);
        assert!(!r.on_ack(&ack(Instant::from_millis(302), 3000, 6000), &d, &mut sent, &mut cc).undone);
        assert_ne!(cc.ssthresh(), before);
    }
}

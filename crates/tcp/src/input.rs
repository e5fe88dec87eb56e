//! Segment arrival: RFC 9293 section 3.10.7, step by step, with RFC 5961's defences.

use std::net::{IpAddr, SocketAddr};

use crate::connection::{AckDue, Connection, Failure, PendingReset, max_window};
use crate::controller::Controller;
use crate::event::{Cause, Event};
use crate::options::SackBlock;
use crate::recovery::AckContext;
use crate::segment::{Flags, Segment};
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;

/// Why an arriving segment was dropped (each is counted in `Stats::segs_dropped` and logged).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The connection is CLOSED (RFC 9293 3.10.7.1); answered with RST unless it was one.
    Closed,
    /// Addressed to a port other than ours.
    WrongPort,
    /// A listening connection was fed without the source address.
    NoSourceAddress,
    /// LISTEN: RST, or neither SYN nor ACK (RFC 9293 3.10.7.2).
    ListenIgnored,
    /// LISTEN: an ACK, answered with RST (RFC 9293 3.10.7.2).
    ListenAck,
    /// SYN-SENT: the ACK does not acknowledge our SYN (RFC 9293 3.10.7.3).
    SynSentBadAck,
    /// SYN-SENT: neither SYN nor RST (RFC 9293 3.10.7.3).
    SynSentNoSyn,
    /// The sequence number fails the acceptability test (RFC 9293 3.10.7.4, first).
    OutOfWindow,
    /// An RST with an in-window but inexact sequence number: challenged (RFC 5961 3.2).
    RstNotExact,
    /// A SYN in a synchronized state: challenged (RFC 5961 4.2).
    SynInWindow,
    /// No ACK bit (RFC 9293 3.10.7.4, fifth).
    NoAck,
    /// The ACK is outside [SND.UNA - MAX.SND.WND, SND.NXT] (RFC 5961 5.2).
    AckOutOfRange,
    /// SYN-RECEIVED: the ACK does not acknowledge our SYN; answered with RST.
    SynReceivedBadAck,
    /// Out-of-order data beyond what the reassembly table can track.
    ReassemblyFull,
    /// New data for a connection the application let go of: answered with RST (RFC 9293
    /// 3.6.1).
    DataAfterRelease,
    /// An RST in TIME-WAIT, ignored as RFC 1337 asks ([`Config::rfc1337`](crate::Config::rfc1337)).
    TimeWaitReset,
    /// Timestamps are in use and the segment has none (RFC 7323 3.2).
    NoTimestamp,
    /// The timestamp is older than TS.Recent: an old duplicate (PAWS, RFC 7323 5.3); ACKed.
    Paws,
}

/// How long TS.Recent stays a reference without being renewed (RFC 7323 5.5: 24 days).
const PAWS_IDLE: std::time::Duration = std::time::Duration::from_secs(24 * 24 * 3600);

impl Connection {
    /// Process a segment that arrived for this connection (RFC 9293 3.10.7).
    ///
    /// For a listening connection, use [`handle_segment_from`](Connection::handle_segment_from).
    pub fn handle_segment(&mut self, now: Instant, seg: &Segment<'_>) {
        match self.remote {
            Some(remote) => self.handle_segment_from(now, remote.ip(), seg),
            None => self.drop_segment(seg, DropReason::NoSourceAddress),
        }
    }

    /// Process a segment that arrived from `src` (the IP source address).
    pub fn handle_segment_from(&mut self, now: Instant, src: IpAddr, seg: &Segment<'_>) {
        self.stats.segs_in += 1;
        self.last_drop = None;
        // TSecr is meaningful with ACK set (RFC 7323 3.2); used only once timestamps are on.
        self.seg_tsecr = seg.options.timestamps.filter(|_| seg.flags.ack()).map(|ts| ts.tsecr);
        log::trace!("{:?} {}: in {:?}", self.tuple(), self.state, seg);
        if seg.dst_port != self.local.port() {
            return self.drop_segment(seg, DropReason::WrongPort);
        }
        match self.state {
            State::Closed => self.on_closed(src, seg),
            State::Listen => self.on_listen(now, src, seg),
            State::SynSent => self.on_syn_sent(now, seg),
            _ => self.on_synchronized(now, seg),
        }
    }

    pub(crate) fn drop_segment(&mut self, seg: &Segment<'_>, reason: DropReason) {
        self.stats.segs_dropped += 1;
        self.last_drop = Some(reason);
        log::debug!(
            "drop {:?} on {} ({}): {:?}",
            reason,
            self.tuple().map_or_else(|| self.local.to_string(), |t| t.to_string()),
            self.state,
            seg
        );
    }

    /// Queue the reset RFC 9293 3.10.7.1 prescribes for `seg`, sent to `src`.
    fn reset_reply(&mut self, src: IpAddr, seg: &Segment<'_>) {
        if let Some(rst) = crate::closed::reset_for(seg) {
            self.pending_reset = Some(PendingReset {
                dst: SocketAddr::new(src, seg.src_port),
                src_port: seg.dst_port,
                seq: rst.seq,
                ack: rst.flags.ack().then_some(rst.ack),
            });
        }
    }

    /// RFC 9293 3.10.7.1: CLOSED.
    fn on_closed(&mut self, src: IpAddr, seg: &Segment<'_>) {
        self.reset_reply(src, seg);
        self.drop_segment(seg, DropReason::Closed);
    }

    /// RFC 9293 3.10.7.2: LISTEN.
    fn on_listen(&mut self, now: Instant, src: IpAddr, seg: &Segment<'_>) {
        // First: an incoming RST is ignored.
        if seg.flags.rst() {
            return self.drop_segment(seg, DropReason::ListenIgnored);
        }
        // Second: any ACK is bad here; <SEQ=SEG.ACK><CTL=RST>.
        if seg.flags.ack() {
            self.reset_reply(src, seg);
            return self.drop_segment(seg, DropReason::ListenAck);
        }
        // Fourth: other text or control without SYN is dropped.
        if !seg.flags.syn() {
            return self.drop_segment(seg, DropReason::ListenIgnored);
        }
        // Third: a SYN. Bind the remote socket, pick the ISS, answer SYN,ACK.
        // Data in the SYN is not kept: our SYN-ACK acknowledges only the SYN, so the
        // peer sends it again once established.
        self.remote = Some(SocketAddr::new(src, seg.src_port));
        self.irs = seg.seq;
        self.rcv_nxt = seg.seq + 1u32;
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.negotiate_options(now, seg);
        self.init_send_space(now);
        // The window field of a SYN is never scaled (RFC 7323 2.2). It counts for RFC 5961's
        // MAX.SND.WND, not for SWS avoidance's Max(SND.WND) (see `sws_max_wnd`).
        self.snd_wnd = seg.window as u32;
        self.max_snd_wnd = self.snd_wnd;
        self.sws_max_wnd = 0;
        self.snd_wl1 = seg.seq;
        self.snd_wl2 = self.iss;
        self.set_state(now, State::SynReceived, segment_cause(seg));
    }

    /// Take the peer's SYN options: MSS (RFC 9293 3.7.1), window scale (RFC 7323 2.2),
    /// SACK-permitted (RFC 2018), timestamps (RFC 7323 3.2).
    fn negotiate_options(&mut self, now: Instant, seg: &Segment<'_>) {
        let peer_mss = seg.options.mss.unwrap_or(match self.local.ip() {
            IpAddr::V4(_) => 536,
            IpAddr::V6(_) => 1220,
        });
        // Timestamps are in use when we offer them (or offered, in SYN-SENT) and the peer's
        // SYN carries them; TS.Recent starts at its TSval (RFC 7323 3.2, 4.3).
        match seg.options.timestamps {
            Some(ts) if self.config.timestamps => {
                self.ts_ok = true;
                self.ts_recent = ts.tsval;
                self.ts_recent_at = now;
            }
            _ => self.ts_ok = false,
        }
        // The MSS bounds data and options together (RFC 6691): a full segment carries the
        // timestamps and 12 bytes less data, as Linux's mss_cache.
        let mss = peer_mss.min(self.config.mss).max(64);
        self.smss = (mss - self.fixed_options_len() as u16).max(64);
        self.cc.set_mss(self.smss as u32);

        match seg.options.window_scale {
            Some(shift) if self.config.window_scaling => {
                // RFC 7323 2.3: a shift above 14 is used as 14.
                self.snd_wscale = shift.min(14);
                self.rcv_wscale = self.rcv_wscale_offer;
                self.wscale_ok = true;
            }
            _ => {
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
                self.wscale_ok = false;
            }
        }
        self.sack_enabled = self.config.sack && seg.options.sack_permitted;
    }

    /// RFC 9293 3.10.7.3: SYN-SENT.
    fn on_syn_sent(&mut self, now: Instant, seg: &Segment<'_>) {
        // First: the ACK must acknowledge our SYN: ISS < SEG.ACK =< SND.NXT.
        let ack_ok = seg.flags.ack() && seg.ack.after(self.iss) && seg.ack.before_eq(self.snd_max);
        if seg.flags.ack() && !ack_ok {
            if !seg.flags.rst() {
                self.pending_reset = Some(PendingReset {
                    dst: self.remote.expect("SYN-SENT has a remote"),
                    src_port: self.local.port(),
                    seq: seg.ack,
                    ack: None,
                });
            }
            return self.drop_segment(seg, DropReason::SynSentBadAck);
        }
        // Second: RST. Acceptable only with an acceptable ACK (RFC 5961 3.2 keeps this).
        if seg.flags.rst() {
            if ack_ok {
                log::debug!("{:?}: connection refused", self.tuple());
                return self.fail(now, Failure::Reset, segment_cause(seg));
            }
            return self.drop_segment(seg, DropReason::SynSentNoSyn);
        }
        // Fourth: SYN.
        if !seg.flags.syn() {
            return self.drop_segment(seg, DropReason::SynSentNoSyn);
        }
        self.irs = seg.seq;
        self.rcv_nxt = seg.seq + 1u32;
        self.rcv_adv = self.rcv_nxt;
        self.last_ack_sent = self.rcv_nxt;
        self.negotiate_options(now, seg);
        // Unscaled (RFC 7323 2.2); as in LISTEN, not a Max(SND.WND) for SWS avoidance.
        self.snd_wnd = seg.window as u32;
        self.max_snd_wnd = self.snd_wnd;
        self.sws_max_wnd = 0;
        self.snd_wl1 = seg.seq;
        self.snd_wl2 = seg.ack;
        if ack_ok {
            // Our SYN is acknowledged: ESTABLISHED, and ACK the peer's SYN.
            self.take_ack_of_syn(now, seg.ack);
            self.ack_due = AckDue::Now;
            self.set_state(now, State::Established, segment_cause(seg));
            if self.fin_queued {
                self.set_state(now, State::FinWait1, segment_cause(seg));
            }
        } else {
            // Simultaneous open (RFC 9293 Figure 8): SYN-RECEIVED, and send SYN,ACK by
            // retransmitting our SYN with the ACK bit now set.
            self.snd_nxt = self.iss;
            self.set_state(now, State::SynReceived, segment_cause(seg));
        }
    }

    /// Move SND.UNA to `ack`, taking an RTT sample if the timed segment is now acknowledged
    /// (the probe is cleared on any retransmission: Karn's rule, RFC 6298 section 3). One
    /// sample per timed flight, so that RFC 6298's gains keep their meaning (RFC 7323
    /// Appendix G).
    ///
    /// The sample is the timed segment's age by the host's clock (microseconds): our
    /// timestamps tick in milliseconds, too coarse for a LAN, where a millisecond clock
    /// reads every round trip as 0 and RACK's reordering window with it (Linux likewise
    /// prefers its own send times, `tcp_ack_update_rtt`). The timestamp echo (RTTM, RFC
    /// 7323 4.1) times what Karn's rule cannot: the ACK of a retransmission after a timeout,
    /// whose echo says which transmission it answers.
    fn advance_una(&mut self, now: Instant, ack: SeqNum) {
        let mut sample = None;
        if let Some((end, sent)) = self.rtt_probe
            && ack.after_eq(end)
        {
            sample = Some(now.saturating_duration_since(sent));
            self.rtt_probe = None;
        } else if self.rtt_probe.is_none() && self.rto_count > 0 && ack.after(self.snd_una) {
            // An echo from the future is not ours (or the clock wrapped); an age of 0 ms
            // says only "under a millisecond".
            let age = self.seg_tsecr.filter(|_| self.ts_ok).map(|ecr| self.ts_now(now).wrapping_sub(ecr));
            if let Some(ms @ 1..) = age.filter(|&ms| ms < 1 << 31) {
                sample = Some(std::time::Duration::from_millis(u64::from(ms)));
            }
        }
        if let Some(sample) = sample {
            self.rtt.sample(sample);
            self.last_rtt_sample = Some(sample);
        }
        self.snd_una = ack;
        if self.snd_nxt.before(ack) {
            self.snd_nxt = ack;
        }
    }

    /// SND.UNA moved past our SYN.
    fn take_ack_of_syn(&mut self, now: Instant, ack: SeqNum) {
        self.syn_acknowledged = true;
        self.last_ack_at = now;
        self.advance_una(now, ack);
        if self.rto_count > 0 {
            // RFC 6298 5.7: after a SYN timed out, data starts with an RTO of 3 s.
            self.rtt.syn_timed_out_fallback();
        }
        self.rto_count = 0;
        self.timers.stop(Timer::Retransmit);
        self.unacked_since = None;
    }

    /// RFC 9293 3.10.7.4: SYN-RECEIVED, ESTABLISHED, FIN-WAIT-1/2, CLOSE-WAIT, CLOSING,
    /// LAST-ACK and TIME-WAIT.
    fn on_synchronized(&mut self, now: Instant, seg: &Segment<'_>) {
        let mut seg = *seg;
        // A retransmitted SYN from the peer (our SYN-ACK was lost): send the SYN-ACK again.
        // A SYN-ACK in SYN-RECEIVED (simultaneous open, Figure 8 line 6): its SYN is old,
        // so only the ACK is new.
        if self.state == State::SynReceived && seg.flags.syn() && seg.seq == self.irs {
            if !seg.flags.ack() {
                self.snd_nxt = self.iss;
                return;
            }
            seg.flags = seg.flags.without(Flags::SYN);
            seg.seq += 1;
            // The window field of a SYN is never scaled (RFC 7323 2.2), but from here on the
            // segment reads as one without SYN, whose window is: express it in the scaled
            // unit (rounding down, never to a window of zero that was not one).
            if self.snd_wscale > 0 && seg.window > 0 {
                seg.window = (seg.window >> self.snd_wscale).max(1);
            }
        }
        // PAWS (RFC 7323 5.3, R1-R2), ahead of the acceptability test.
        if self.ts_ok && !seg.flags.rst() {
            let Some(ts) = seg.options.timestamps else {
                // RFC 7323 3.2: once negotiated, every non-RST segment carries TSopt; one
                // without it SHOULD be dropped silently.
                return self.drop_segment(&seg, DropReason::NoTimestamp);
            };
            // TS.Recent idle for 24 days is no longer a reference (RFC 7323 5.5).
            let fresh = now.saturating_duration_since(self.ts_recent_at) < PAWS_IDLE;
            if fresh && (ts.tsval.wrapping_sub(self.ts_recent) as i32) < 0 {
                // An old duplicate from a wrapped sequence space: acknowledge and drop.
                self.ack_due = AckDue::Now;
                return self.drop_segment(&seg, DropReason::Paws);
            }
        }
        if self.config.keepalive.is_some() {
            self.keepalive_sent = 0;
            self.arm_keepalive(now);
        }

        // First: check the sequence number.
        if !self.acceptable(&seg) {
            if seg.flags.rst() {
                return self.drop_segment(&seg, DropReason::OutOfWindow);
            }
            // RFC 9293: a zero window still takes valid ACKs (and the data is dropped).
            let zero_window_ack =
                self.receive_window() == 0 && seg.seq == self.rcv_nxt && seg.flags.ack() && !seg.flags.syn();
            if self.state == State::TimeWait && seg.flags.fin() {
                // A retransmitted FIN: acknowledge it and restart the 2 MSL wait.
                self.timers.set(Timer::TimeWait, now + self.config.msl * 2);
            }
            self.ack_due = AckDue::Now;
            // Data we already have: a duplicate, reported as a D-SACK (RFC 2883 4.1).
            if self.sack_enabled && !seg.payload.is_empty() && !(seg.seq + seg.payload.len()).after(self.rcv_nxt) {
                self.dsack.push(seg.seq, seg.seq + seg.payload.len());
            }
            if zero_window_ack {
                self.process_ack(now, &seg);
            }
            return self.drop_segment(&seg, DropReason::OutOfWindow);
        }

        // RFC 7323 4.3 (2), and R3 of 5.3: an acceptable segment that starts at or before
        // the last acknowledgment we sent updates TS.Recent, so we echo the timestamp of
        // the oldest segment our next ACK acknowledges.
        if self.ts_ok
            && let Some(ts) = seg.options.timestamps
            && !seg.seq.after(self.last_ack_sent)
            && (ts.tsval.wrapping_sub(self.ts_recent) as i32) >= 0
        {
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        }

        // Second: RST (RFC 5961 3.2: reset only on an exact match, challenge otherwise).
        if seg.flags.rst() {
            if seg.seq != self.rcv_nxt {
                self.challenge_ack(now);
                return self.drop_segment(&seg, DropReason::RstNotExact);
            }
            return self.on_reset(now, &seg);
        }

        // Fourth: SYN in a synchronized state: challenge ACK (RFC 5961 4.2, RFC 9293).
        if seg.flags.syn() {
            if self.state == State::SynReceived && self.passive {
                return self.return_to_listen(now, &seg);
            }
            self.challenge_ack(now);
            return self.drop_segment(&seg, DropReason::SynInWindow);
        }

        // Fifth: the ACK field.
        if !seg.flags.ack() {
            return self.drop_segment(&seg, DropReason::NoAck);
        }
        if self.state == State::SynReceived {
            if seg.ack.after(self.snd_una) && seg.ack.before_eq(self.snd_max) {
                self.take_ack_of_syn(now, seg.ack);
                // SND.WND, SND.WL1, SND.WL2 from this segment (RFC 9293 3.10.7.4).
                self.snd_wnd = (seg.window as u32) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.sws_max_wnd = self.sws_max_wnd.max(self.snd_wnd);
                self.snd_wl1 = seg.seq;
                self.snd_wl2 = seg.ack;
                self.set_state(now, State::Established, segment_cause(&seg));
                if self.fin_queued {
                    self.set_state(now, State::FinWait1, segment_cause(&seg));
                }
            } else {
                self.pending_reset = Some(PendingReset {
                    dst: self.remote.expect("SYN-RECEIVED has a remote"),
                    src_port: self.local.port(),
                    seq: seg.ack,
                    ack: None,
                });
                return self.drop_segment(&seg, DropReason::SynReceivedBadAck);
            }
        }
        if !self.process_ack(now, &seg) {
            return;
        }
        match self.state {
            State::FinWait1 if self.fin_acked() => {
                self.set_state(now, State::FinWait2, segment_cause(&seg));
            }
            State::Closing if self.fin_acked() => {
                self.set_state(now, State::TimeWait, segment_cause(&seg));
            }
            State::LastAck if self.fin_acked() => {
                self.emit(Event::Closed);
                return self.set_state(now, State::Closed, segment_cause(&seg));
            }
            State::TimeWait => {
                // Only a retransmitted FIN can arrive here (handled as out of window).
            }
            _ => {}
        }

        // Sixth: URG. Urgent data is delivered in line like any other (RFC 6093); the
        // pointer is ignored.

        // Seventh: segment text. New data for a connection the application let go of can
        // never be read: reset, so the peer learns it was lost (RFC 9293 3.6.1, RFC 1122
        // 4.2.2.13; Linux counts these as TCPAbortOnData).
        if self.released && (seg.seq + seg.payload.len()).after(self.rcv_nxt) && !seg.payload.is_empty() {
            log::debug!("{:?}: data after release: reset", self.tuple());
            self.stats.resets_for_lost_data += 1;
            self.abort(now);
            return self.drop_segment(&seg, DropReason::DataAfterRelease);
        }
        let mut fin = seg.flags.fin();
        if !seg.payload.is_empty() || fin {
            if self.state.can_receive() && !self.fin_received {
                fin = self.receive_text(now, &seg);
            } else {
                fin = false;
            }
        }

        // Eighth: FIN.
        if fin {
            self.on_fin(now, &seg);
        }
    }

    /// The four-case acceptability test of RFC 9293 3.10.7.4 (first).
    fn acceptable(&self, seg: &Segment<'_>) -> bool {
        let len = seg.seg_len();
        let wnd = self.receive_window();
        let end = self.rcv_nxt + wnd;
        match (len, wnd) {
            (0, 0) => seg.seq == self.rcv_nxt,
            (0, _) => seg.seq.between(self.rcv_nxt, end),
            (_, 0) => false,
            (_, _) => seg.seq.between(self.rcv_nxt, end) || (seg.seq + (len - 1)).between(self.rcv_nxt, end),
        }
    }

    /// An acceptable RST (RFC 9293 3.10.7.4, second).
    fn on_reset(&mut self, now: Instant, seg: &Segment<'_>) {
        match self.state {
            State::SynReceived if self.passive => self.return_to_listen(now, seg),
            // RFC 1337 section 3: an RST must not cut TIME-WAIT short, where so configured.
            State::TimeWait if self.config.rfc1337 => self.drop_segment(seg, DropReason::TimeWaitReset),
            State::Closing | State::LastAck | State::TimeWait => {
                self.emit(Event::Closed);
                self.set_state(now, State::Closed, segment_cause(seg));
            }
            _ => self.fail(now, Failure::Reset, segment_cause(seg)),
        }
    }

    /// SYN-RECEIVED from a passive open goes back to LISTEN (RFC 9293 3.10.7.4).
    fn return_to_listen(&mut self, now: Instant, seg: &Segment<'_>) {
        let buffers = self.take_buffers();
        let mut fresh = Connection::listen_with(&self.config, self.local, buffers);
        fresh.stats = self.stats;
        fresh.trace = std::mem::take(&mut self.trace);
        *self = fresh;
        self.stats.segs_dropped += 1;
        self.set_state(now, State::Listen, segment_cause(seg));
    }

    /// Process the ACK field (RFC 9293 3.10.7.4, fifth). Return `false` if the segment
    /// must be dropped.
    fn process_ack(&mut self, now: Instant, seg: &Segment<'_>) -> bool {
        // RFC 5961 5.2: acceptable if SND.UNA - MAX.SND.WND =< SEG.ACK =< SND.NXT.
        let lowest = self.snd_una - self.max_snd_wnd.max(1);
        if seg.ack.after(self.snd_max) || seg.ack.before(lowest) {
            self.challenge_ack(now);
            self.drop_segment(seg, DropReason::AckOutOfRange);
            return false;
        }
        // The peer is alive: its zero-window probes are answered (RFC 9293 3.8.6.1).
        self.probes_unanswered = 0;
        self.last_ack_at = now;
        let window = (seg.window as u32) << self.snd_wscale;
        let old_window = self.snd_wnd;
        let flight_before = self.snd_max - self.snd_una;
        let advanced = seg.ack.after(self.snd_una);
        // A duplicate ACK by RFC 5681 section 2's definition.
        let duplicate = !advanced
            && seg.ack == self.snd_una
            && self.snd_max != self.snd_una
            && seg.payload.is_empty()
            && !seg.flags.intersects(Flags::SYN | Flags::FIN)
            && window == old_window;
        let syn_was_acked = self.syn_acked();
        if advanced {
            self.on_new_ack(now, seg.ack);
        }
        if duplicate {
            self.stats.dup_acks += 1;
        }
        // The scoreboard and loss recovery (RFC 6675, RFC 8985, RFC 6937), for data: the
        // ACK of our SYN is the handshake's business.
        let blocks: &[SackBlock] = if self.sack_enabled { seg.options.sack_blocks.as_slice() } else { &[] };
        if syn_was_acked && (advanced || duplicate || !blocks.is_empty()) {
            self.on_data_ack(now, flight_before, advanced, duplicate, blocks);
        }
        // Window update (RFC 9293 3.10.7.4): SND.WL1 < SEG.SEQ, or equal and SND.WL2 =< SEG.ACK.
        if seg.ack.after_eq(self.snd_una)
            && (self.snd_wl1.before(seg.seq) || (self.snd_wl1 == seg.seq && self.snd_wl2.before_eq(seg.ack)))
        {
            self.snd_wnd = window.min(max_window(self.snd_wscale));
            self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
            self.sws_max_wnd = self.sws_max_wnd.max(self.snd_wnd);
            self.snd_wl1 = seg.seq;
            self.snd_wl2 = seg.ack;
            if self.snd_wnd > 0 {
                self.timers.stop(Timer::Persist);
                self.persist_backoff = 0;
                self.probe_due = false;
            } else {
                // The peer is alive and says it is full: not a reason to give up.
                self.rto_count = 0;
            }
        }
        true
    }

    /// Apply an ACK of data to the scoreboard and let loss recovery act on it.
    fn on_data_ack(&mut self, now: Instant, flight_before: u32, advanced: bool, duplicate: bool, blocks: &[SackBlock]) {
        let delivery = self.sent.on_ack(self.snd_una, blocks);
        // RFC 7661 4.3 (as Linux's tcp_is_cwnd_limited): cwnd grows only if it was the limit
        // this round trip, in flight up to it, or, in slow start, past half of it.
        let (cwnd, smss) = (self.cc.cwnd(), self.smss as u32);
        let cwnd_limited =
            self.pipe_high + smss >= cwnd || (cwnd < self.cc.ssthresh() && self.pipe_high.saturating_mul(2) > cwnd);
        if !self.snd_una.before(self.pipe_high_until) {
            self.pipe_high = self.recovery.pipe(&self.sent, smss);
            self.pipe_high_until = self.snd_max;
        }
        let ctx = AckContext {
            cwnd_limited,
            now,
            snd_una: self.snd_una,
            snd_max: self.snd_max,
            flight_before,
            advanced,
            duplicate,
            sack: self.sack_enabled,
            smss: self.smss as u32,
            rtt: self.last_rtt_sample.take(),
            srtt: self.rtt.srtt(),
        };
        let decision = self.recovery.on_ack(&ctx, &delivery, &mut self.sent, &mut self.cc);
        if decision.entered_recovery {
            self.stats.fast_retransmits += 1;
        }
        match decision.reorder_timer {
            Some(at) => self.timers.set(Timer::Reorder, at),
            None => self.timers.stop(Timer::Reorder),
        }
        // A tail-loss probe waits for two round trips of silence after the last progress
        // (RFC 8985 7.2).
        if advanced {
            self.arm_loss_probe(now);
            self.autotune_send();
        }
    }

    /// SND.UNA < SEG.ACK =< SND.NXT: new data acknowledged.
    fn on_new_ack(&mut self, now: Instant, ack: SeqNum) {
        // A buffer full up to this ACK held the application back (send-buffer autotuning).
        if self.send_buf.free() < self.smss as usize {
            self.send_limited = true;
        }
        // Remove acknowledged data from the send buffer; what is left may be the FIN.
        let data_acked = (ack - self.send_buf_seq).min(self.send_buf.len() as u32);
        if ack.after(self.send_buf_seq) {
            self.send_buf.discard(data_acked as usize);
            self.send_buf_seq += data_acked;
            if data_acked > 0 && self.state.can_send() && !self.fin_queued {
                self.emit(Event::Writable);
            }
        }
        self.advance_una(now, ack);
        self.rto_count = 0;
        // RFC 6298 5.2/5.3: stop the timer when all is acknowledged, else restart it.
        if self.snd_una == self.snd_max {
            self.timers.stop(Timer::Retransmit);
            self.timers.stop(Timer::LossProbe);
            self.timers.stop(Timer::Reorder);
            self.unacked_since = None;
        } else {
            self.timers.set(Timer::Retransmit, now + self.rtt.rto());
            self.unacked_since = Some(now);
        }
    }

    /// Seventh step: place the text of an acceptable segment (trimmed to the window) in the
    /// receive buffer, reassembling out-of-order pieces. Return whether a FIN at the end of
    /// the segment is now in order.
    fn receive_text(&mut self, now: Instant, seg: &Segment<'_>) -> bool {
        let mut seq = seg.seq;
        let mut data = seg.payload;
        let mut fin = seg.flags.fin();
        // Trim what we already have, and report it as a D-SACK (RFC 2883 4.1).
        if seq.before(self.rcv_nxt) {
            let dup = (self.rcv_nxt - seq) as usize;
            if self.sack_enabled && dup > 0 && !data.is_empty() {
                self.dsack.push(seq, seq + dup.min(data.len()));
            }
            if dup > data.len() {
                // Only an old FIN remains.
                data = &[];
                fin = false;
            } else {
                data = &data[dup..];
            }
            seq = self.rcv_nxt;
        }
        // Trim what lies beyond the window; a FIN past the window is not yet accepted.
        let wnd = self.receive_window() as usize;
        let offset = (seq - self.rcv_nxt) as usize;
        if offset + data.len() > wnd {
            data = &data[..wnd.saturating_sub(offset)];
            fin = false;
        }
        if !data.is_empty() {
            if self.assembler.add(offset as u32, data.len() as u32).is_err() {
                self.ack_due = AckDue::Now;
                self.drop_segment(seg, DropReason::ReassemblyFull);
                return false;
            }
            let at = self.recv_buf.len() + offset;
            self.recv_buf.write_at(at, data);
            let ready = self.assembler.pop_front();
            if ready > 0 {
                self.recv_buf.commit(ready as usize);
                self.rcv_nxt += ready;
                self.stats.bytes_in += ready as u64;
                self.emit(Event::Readable);
            }
            if offset > 0 || !self.assembler.is_empty() {
                // Out of order, or a hole remains: ACK at once so the sender sees a
                // duplicate ACK (RFC 5681 4.2; RFC 9293 3.8.6.3).
                self.ack_due = AckDue::Now;
            } else if ready > data.len() as u32 {
                // This segment filled a hole: ACK at once (RFC 5681 4.2).
                self.ack_due = AckDue::Now;
            } else {
                self.unacked_bytes += ready;
                self.rcv_mss = self.rcv_mss.max((data.len() as u32).min(u32::from(self.config.mss)));
                self.ack_in_order(now);
            }
            if ready > 0 {
                self.autotune_recv(now);
            }
        }
        if fin {
            let fin_seq = seq + data.len();
            if fin_seq == self.rcv_nxt {
                return true;
            }
            self.fin_pending = Some(fin_seq);
            self.ack_due = AckDue::Now;
        }
        // A FIN that arrived earlier, ahead of a hole now filled.
        if let Some(f) = self.fin_pending
            && f == self.rcv_nxt
        {
            self.fin_pending = None;
            return true;
        }
        false
    }

    /// Decide when to ACK in-order data: at least every second full-sized segment, else
    /// within the delayed-ACK timeout (RFC 9293 3.8.6.3, RFC 5681 4.2). Full-sized is the
    /// peer's segment size as measured ([`rcv_mss`](Connection::rcv_mss)), not our MSS:
    /// 1448-byte segments under timestamps are full-sized.
    fn ack_in_order(&mut self, now: Instant) {
        match self.config.delayed_ack {
            Some(delay) if self.unacked_bytes < 2 * self.rcv_mss => {
                if self.ack_due < AckDue::Delayed {
                    self.ack_due = AckDue::Delayed;
                }
                let delay = delay.min(std::time::Duration::from_millis(200));
                self.timers.set_if_idle(Timer::DelayedAck, now + delay);
            }
            _ => self.ack_due = AckDue::Now,
        }
    }

    /// Eighth step: the peer's FIN is in order (RFC 9293 3.10.7.4).
    fn on_fin(&mut self, now: Instant, seg: &Segment<'_>) {
        self.rcv_nxt += 1;
        self.fin_received = true;
        self.ack_due = AckDue::Now;
        self.emit(Event::PeerClosed);
        self.emit(Event::Readable);
        let cause = segment_cause(seg);
        match self.state {
            State::SynReceived | State::Established => self.set_state(now, State::CloseWait, cause),
            State::FinWait1 => {
                if self.fin_acked() {
                    self.set_state(now, State::TimeWait, cause);
                } else {
                    self.set_state(now, State::Closing, cause);
                }
            }
            State::FinWait2 => self.set_state(now, State::TimeWait, cause),
            _ => {}
        }
    }
}

pub(crate) fn segment_cause(seg: &Segment<'_>) -> Cause {
    Cause::Segment { flags: seg.flags, seq: seg.seq, ack: seg.ack, len: seg.payload.len() as u32 }
}

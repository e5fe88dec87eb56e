//! Segment arrival: RFC 9293 section 3.10.7, step by step, with RFC 5961's defences.
//!
//! Each step returns what it did ([`Outcome`]); a reply it calls for is queued for
//! `poll_transmit`.

use std::net::{IpAddr, SocketAddr};

use super::{Connection, Failure, PendingReset};
use crate::controller::Controller;
use crate::ecn::{Ecn, IpEcn};
use crate::event::{Cause, Event};
use crate::outcome::{DropReason, Outcome};
use crate::path::default_mss;
use crate::recovery::AckContext;
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;
use crate::wire::SackBlock;
use crate::wire::{Flags, Segment};

impl Connection {
    /// Process a segment that arrived for this connection (RFC 9293 3.10.7), and return
    /// what became of it.
    ///
    /// For a listening connection, use [`handle_segment_from`](Connection::handle_segment_from).
    pub fn handle_segment(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        match self.remote {
            Some(remote) => self.handle_segment_from(now, remote.ip(), seg),
            None => self.drop_segment(seg, DropReason::NoSourceAddress),
        }
    }

    /// [`handle_segment_from`](Connection::handle_segment_from) with the ECN field of the
    /// IP header the segment arrived in (RFC 3168 section 5): a segment marked
    /// [`IpEcn::Ce`] on an ECN connection makes our ACKs carry ECE until the peer's CWR
    /// (RFC 3168 6.1.3). The other calls take every segment as unmarked.
    ///
    /// Inlined into the host's receive path, which calls it for every segment.
    #[inline]
    pub fn handle_segment_ecn(&mut self, now: Instant, src: IpAddr, seg: &Segment<'_>, ecn: IpEcn) -> Outcome {
        self.ce_in = ecn == IpEcn::Ce;
        let outcome = self.handle_segment_from(now, src, seg);
        self.ce_in = false;
        outcome
    }

    /// Process a segment that arrived from `src` (the IP source address), and return what
    /// became of it.
    pub fn handle_segment_from(&mut self, now: Instant, src: IpAddr, seg: &Segment<'_>) -> Outcome {
        self.stats.segs_in += 1;
        // TSecr is meaningful with ACK set (RFC 7323 3.2); used only once timestamps are on.
        self.ts.set_seg_tsecr(seg.options.timestamps.filter(|_| seg.flags.ack()).map(|ts| ts.tsecr));
        log::trace!("{:?} {}: in {:?}", self.tuple(), self.state, seg);
        if seg.dst_port != self.local_port {
            return self.drop_segment(seg, DropReason::WrongPort);
        }
        match self.state {
            State::Closed => self.on_closed(src, seg),
            State::Listen => self.on_listen(now, src, seg),
            State::SynSent => self.on_syn_sent(now, seg),
            State::Established if self.predicted(seg) => self.on_predicted(now, seg),
            _ => self.on_synchronized(now, seg),
        }
    }

    /// Count and log a dropped segment.
    fn drop_segment(&mut self, seg: &Segment<'_>, reason: DropReason) -> Outcome {
        self.stats.segs_dropped += 1;
        log::debug!(
            "drop {:?} on {} ({}): {:?}",
            reason,
            self.tuple().map_or_else(|| self.local.to_string(), |t| t.to_string()),
            self.state,
            seg
        );
        Outcome::Dropped(reason)
    }

    /// Queue the reset RFC 9293 3.10.7.1 prescribes for `seg`, sent to `src`.
    fn reset_reply(&mut self, src: IpAddr, seg: &Segment<'_>) {
        if let Some(rst) = crate::closed::reset_for(seg) {
            self.pending_reset = Some(Box::new(PendingReset {
                dst: SocketAddr::new(src, seg.src_port),
                src_port: seg.dst_port,
                seq: rst.seq,
                ack: rst.flags.ack().then_some(rst.ack),
            }));
        }
    }

    /// Queue `<SEQ=SEG.ACK><CTL=RST>` for a segment whose ACK is bad (RFC 9293 3.10.7.3
    /// first, 3.10.7.4 fifth in SYN-RECEIVED).
    fn reset_bad_ack(&mut self, seg: &Segment<'_>) {
        if let Some(dst) = self.remote {
            self.pending_reset =
                Some(Box::new(PendingReset { dst, src_port: self.local.port(), seq: seg.ack, ack: None }));
        }
    }

    /// RFC 9293 3.10.7.1: CLOSED.
    fn on_closed(&mut self, src: IpAddr, seg: &Segment<'_>) -> Outcome {
        self.reset_reply(src, seg);
        self.drop_segment(seg, DropReason::Closed)
    }

    /// RFC 9293 3.10.7.2: LISTEN.
    fn on_listen(&mut self, now: Instant, src: IpAddr, seg: &Segment<'_>) -> Outcome {
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
        self.remote_port = seg.src_port;
        self.rcv.start(seg.seq);
        self.ts.ack_sent(self.rcv.nxt());
        self.negotiate_options(now, seg);
        // RFC 3168 6.1.1: an ECN-setup SYN (ECE and CWR) is answered with an ECN-setup
        // SYN-ACK unless ECN is off (Linux's `tcp_ecn_create_request`).
        self.ecn.ok = self.config.ecn != Ecn::Off && seg.flags.contains(Flags::ECE | Flags::CWR);
        self.stats.ecn = self.ecn.ok;
        self.init_send_space(now);
        // The window field of a SYN is never scaled (RFC 7323 2.2). It counts for RFC 5961's
        // MAX.SND.WND, not for SWS avoidance's Max(SND.WND) (see `sws_max_wnd`).
        let iss = self.snd.iss();
        self.snd.take_syn_window(seg, iss);
        self.set_state(now, State::SynReceived, Cause::of(seg));
        Outcome::Accepted
    }

    /// Take the peer's SYN options: MSS (RFC 9293 3.7.1), window scale (RFC 7323 2.2),
    /// SACK-permitted (RFC 2018), timestamps (RFC 7323 3.2).
    fn negotiate_options(&mut self, now: Instant, seg: &Segment<'_>) {
        let peer_mss = seg.options.mss.unwrap_or(default_mss(self.local.ip()));
        // Timestamps are in use when we offer them (or offered, in SYN-SENT) and the peer's
        // SYN carries them.
        self.ts.negotiate(seg.options.timestamps, self.config.timestamps, now);
        // The MSS bounds data and options together (RFC 6691): a full segment carries the
        // timestamps and 12 bytes less data, as Linux's mss_cache; and it fits the path MTU
        // (`path.rs`).
        self.snd.set_mss(self.path.negotiate(peer_mss, self.config.mss, self.ts.option_len()));
        self.rel.cc.set_mss(self.snd.mss() as u32);

        match seg.options.window_scale {
            Some(shift) if self.config.window_scaling => {
                // RFC 7323 2.3: a shift above 14 is used as 14.
                self.snd.set_wscale(shift);
                self.rcv.use_wscale(true);
                self.wscale_ok = true;
            }
            _ => {
                self.snd.set_wscale(0);
                self.rcv.use_wscale(false);
                self.wscale_ok = false;
            }
        }
        self.sack_enabled = self.config.sack && seg.options.sack_permitted;
    }

    /// RFC 9293 3.10.7.3: SYN-SENT.
    fn on_syn_sent(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        // First: the ACK must acknowledge our SYN: ISS < SEG.ACK =< SND.NXT.
        let ack_ok = seg.flags.ack() && seg.ack.after(self.snd.iss()) && seg.ack.before_eq(self.snd.max());
        if seg.flags.ack() && !ack_ok {
            if !seg.flags.rst() {
                self.reset_bad_ack(seg);
            }
            return self.drop_segment(seg, DropReason::SynSentBadAck);
        }
        // Second: RST. Acceptable only with an acceptable ACK (RFC 5961 3.2 keeps this).
        if seg.flags.rst() {
            if ack_ok {
                log::debug!("{:?}: connection refused", self.tuple());
                self.fail(now, Failure::Reset, Cause::of(seg));
                return Outcome::Reset;
            }
            return self.drop_segment(seg, DropReason::SynSentNoSyn);
        }
        // Fourth: SYN.
        if !seg.flags.syn() {
            return self.drop_segment(seg, DropReason::SynSentNoSyn);
        }
        self.rcv.start(seg.seq);
        self.ts.ack_sent(self.rcv.nxt());
        self.negotiate_options(now, seg);
        // Unscaled (RFC 7323 2.2); as in LISTEN, not a Max(SND.WND) for SWS avoidance.
        self.snd.take_syn_window(seg, seg.ack);
        // RFC 3168 6.1.1: ECN only from an ECN-setup SYN-ACK (ECE without CWR) to our
        // ECN-setup SYN (Linux's `tcp_ecn_rcv_synack`); never in a simultaneous open.
        self.ecn.ok = ack_ok && self.ecn.requested && seg.flags.contains(Flags::ECE) && !seg.flags.contains(Flags::CWR);
        self.stats.ecn = self.ecn.ok;
        if ack_ok {
            // Our SYN is acknowledged: ESTABLISHED, and ACK the peer's SYN.
            self.take_ack_of_syn(now, seg.ack);
            self.rcv.ack_now();
            self.set_state(now, State::Established, Cause::of(seg));
            if self.snd.fin_queued() {
                self.set_state(now, State::FinWait1, Cause::of(seg));
            }
        } else {
            // Simultaneous open (RFC 9293 Figure 8): SYN-RECEIVED, and send SYN,ACK by
            // retransmitting our SYN with the ACK bit now set.
            self.snd.resend_syn();
            self.set_state(now, State::SynReceived, Cause::of(seg));
        }
        Outcome::Accepted
    }

    /// Move SND.UNA to `ack`, taking an RTT sample where it ends a timed flight
    /// ([`Reliability::sample_rtt`](crate::reliability::Reliability::sample_rtt)).
    fn advance_una(&mut self, now: Instant, ack: SeqNum) {
        let echo = self.ts.echo_rtt(now);
        self.rel.sample_rtt(now, ack, self.snd.una(), echo);
        self.snd.advance(ack);
        self.delivery.on_ack(now, self.snd.acked_total(), self.rel.rtt.srtt_us());
    }

    /// SND.UNA moved past our SYN.
    fn take_ack_of_syn(&mut self, now: Instant, ack: SeqNum) {
        self.snd.syn_acknowledged();
        self.rel.note_ack(now);
        self.advance_una(now, ack);
        if self.rel.rto_count() > 0 {
            // RFC 6298 5.7: after a SYN timed out, data starts with an RTO of 3 s.
            self.rel.rtt.syn_timed_out_fallback();
        }
        self.rel.reset_rto_count();
        self.timers.stop(Timer::Retransmit);
        self.set_unacked_since(None);
    }

    /// RFC 9293 3.10.7.4: SYN-RECEIVED, ESTABLISHED, FIN-WAIT-1/2, CLOSE-WAIT, CLOSING,
    /// LAST-ACK and TIME-WAIT.
    fn on_synchronized(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        let mut seg = *seg;
        // A retransmitted SYN from the peer (our SYN-ACK was lost): send the SYN-ACK again.
        // A SYN-ACK in SYN-RECEIVED (simultaneous open, Figure 8 line 6): its SYN is old,
        // so only the ACK is new.
        if self.state == State::SynReceived && seg.flags.syn() && seg.seq == self.rcv.irs() {
            if !seg.flags.ack() {
                self.snd.resend_syn();
                return Outcome::Accepted;
            }
            seg.flags = seg.flags.without(Flags::SYN);
            seg.seq += 1;
            // The window field of a SYN is never scaled (RFC 7323 2.2), but from here on the
            // segment reads as one without SYN, whose window is: express it in the scaled
            // unit (rounding down, never to a window of zero that was not one).
            if self.snd.wscale() > 0 && seg.window > 0 {
                seg.window = (seg.window >> self.snd.wscale()).max(1);
            }
        }
        // PAWS (RFC 7323 5.3, R1-R2), ahead of the acceptability test.
        if self.ts.enabled() && !seg.flags.rst() {
            let Some(ts) = seg.options.timestamps else {
                // RFC 7323 3.2: once negotiated, every non-RST segment carries TSopt; one
                // without it SHOULD be dropped silently.
                return self.drop_segment(&seg, DropReason::NoTimestamp);
            };
            if self.ts.paws_rejects(now, ts.tsval) {
                // An old duplicate from a wrapped sequence space: acknowledge (rate-limited)
                // and drop.
                self.ack_unacceptable(now, &seg);
                return self.drop_segment(&seg, DropReason::Paws);
            }
        }

        // First: check the sequence number.
        if !self.rcv.acceptable(seg.seq, seg.seg_len()) {
            return self.on_unacceptable(now, &seg);
        }

        // RFC 7323 4.3 (2), and R3 of 5.3: TS.Recent follows the oldest segment our next
        // ACK acknowledges.
        if let Some(ts) = seg.options.timestamps {
            self.ts.update_recent(now, seg.seq, ts.tsval);
        }

        // Second: RST (RFC 5961 3.2: reset only on an exact match, challenge otherwise).
        if seg.flags.rst() {
            if seg.seq != self.rcv.nxt() {
                self.challenge_ack(now, &seg);
                return self.drop_segment(&seg, DropReason::RstNotExact);
            }
            return self.on_reset(now, &seg);
        }

        // Fourth: SYN in a synchronized state: challenge ACK (RFC 5961 4.2, RFC 9293).
        if seg.flags.syn() {
            if self.state == State::SynReceived && self.passive {
                return self.return_to_listen(now, &seg);
            }
            self.challenge_ack(now, &seg);
            return self.drop_segment(&seg, DropReason::SynInWindow);
        }

        // Fifth: the ACK field.
        if !seg.flags.ack() {
            return self.drop_segment(&seg, DropReason::NoAck);
        }
        if self.state == State::SynReceived {
            if !(seg.ack.after(self.snd.una()) && seg.ack.before_eq(self.snd.max())) {
                self.reset_bad_ack(&seg);
                return self.drop_segment(&seg, DropReason::SynReceivedBadAck);
            }
            self.take_ack_of_syn(now, seg.ack);
            // SND.WND, SND.WL1, SND.WL2 from this segment (RFC 9293 3.10.7.4).
            self.snd.set_window(&seg);
            self.set_state(now, State::Established, Cause::of(&seg));
            if self.snd.fin_queued() {
                self.set_state(now, State::FinWait1, Cause::of(&seg));
            }
        }
        if let Err(dropped) = self.process_ack(now, &seg) {
            return dropped;
        }
        if self.ecn.ok {
            self.ecn_receive(&seg);
        }
        // The peer is alive: keep-alive's idle clock starts again. Only here, after the
        // segment passed the acceptability test and its ACK was taken, as Linux's keep-alive
        // reads `rcv_tstamp` (set in tcp_ack) and `lrcvtime`: blind or out-of-window junk
        // must not keep a dead connection open.
        if self.config.keepalive.is_some() {
            self.rel.reset_keepalives();
            self.arm_keepalive(now);
        }
        match self.state {
            State::FinWait1 if self.snd.fin_acked() => {
                self.set_state(now, State::FinWait2, Cause::of(&seg));
            }
            State::Closing if self.snd.fin_acked() => {
                self.set_state(now, State::TimeWait, Cause::of(&seg));
            }
            State::LastAck if self.snd.fin_acked() => {
                self.emit(Event::Closed);
                self.set_state(now, State::Closed, Cause::of(&seg));
                return Outcome::Accepted;
            }
            // In TIME-WAIT only a retransmitted FIN can arrive (handled as out of window).
            _ => {}
        }

        // Sixth: URG. Urgent data is delivered in line like any other (RFC 6093); the
        // pointer is ignored.

        // Seventh: segment text. New data for a connection the application let go of can
        // never be read: reset, so the peer learns it was lost (RFC 9293 3.6.1, RFC 1122
        // 4.2.2.13; Linux counts these as TCPAbortOnData).
        if self.released && (seg.seq + seg.payload.len()).after(self.rcv.nxt()) && !seg.payload.is_empty() {
            log::debug!("{:?}: data after release: reset", self.tuple());
            self.stats.resets_for_lost_data += 1;
            self.abort(now);
            return self.drop_segment(&seg, DropReason::DataAfterRelease);
        }
        let mut fin = seg.flags.fin();
        if !seg.payload.is_empty() || fin {
            if !self.state.can_receive() || self.rcv.fin_received() {
                fin = false;
            } else {
                match self.receive_text(now, &seg) {
                    Ok(in_order) => fin = in_order,
                    Err(dropped) => return dropped,
                }
            }
        }

        // Eighth: FIN.
        if fin {
            self.on_fin(now, &seg);
        }
        Outcome::Accepted
    }

    /// Return whether `seg`, arrived in ESTABLISHED, is the segment header prediction expects (Van
    /// Jacobson's, as 4.4BSD's `tcp_input` and Linux's `tcp_rcv_established` with
    /// `pred_flags`), which [`on_predicted`](Self::on_predicted) takes without the general
    /// path's tests: ACK alone (PSH allowed; no SYN, FIN, RST, URG, ECE, CWR, NS), at RCV.NXT
    /// with its text within the window, timestamps that pass PAWS (RFC 7323 5.3, R1), no
    /// SACK blocks, no CE mark, a SEG.ACK in [SND.UNA, SND.MAX] that acknowledges new data
    /// or comes with text (not a duplicate ACK or a pure window update), on a connection
    /// the application has not released. Anything else goes the general way.
    ///
    /// Unlike BSD's prediction, the ACK of new data and in-order text may come together
    /// (as Linux's fast path takes them): the segment of a request/response exchange.
    #[inline]
    fn predicted(&self, seg: &Segment<'_>) -> bool {
        #[cfg(test)]
        if tests::general_only() {
            return false;
        }
        seg.flags.without(Flags::PSH) == Flags::ACK
            && seg.seq == self.rcv.nxt()
            && (seg.ack != self.snd.una() || !seg.payload.is_empty())
            && !seg.ack.before(self.snd.una())
            && !seg.ack.after(self.snd.max())
            && seg.payload.len() <= self.rcv.window() as usize
            && seg.options.sack_blocks.is_empty()
            && self.ts.passes_paws(seg.options.timestamps)
            && !self.ce_in
            && !self.released
            && self.snd.syn_acked()
    }

    /// Take a segment [`predicted`](Self::predicted) says is the expected one: what the
    /// general path (`on_synchronized`, `process_ack`) does for it, without its tests. The
    /// segment is acceptable (RFC 9293 3.10.7.4, first: at RCV.NXT, its text within the
    /// window), carries no RST, SYN or FIN, and its ACK is in range (RFC 5961 5.2) and not
    /// a duplicate (RFC 5681 2). The test `input::tests::takes_what_the_general_path_takes`
    /// holds it to the general path.
    ///
    /// Out of line: the ACK path inlined here as in `process_ack` would otherwise weigh on
    /// `handle_segment_from`'s frame for every segment.
    #[inline(never)]
    fn on_predicted(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        // RFC 7323 4.3 (2), and R3 of 5.3.
        if let Some(ts) = seg.options.timestamps {
            self.ts.update_recent(now, seg.seq, ts.tsval);
        }
        // Fifth: the ACK field (`process_ack`, for SND.UNA =< SEG.ACK =< SND.MAX).
        self.rel.reset_window_probes();
        self.path.clear_error();
        self.rel.note_ack(now);
        if seg.ack != self.snd.una() {
            let flight_before = self.snd.in_flight();
            self.on_new_ack(now, seg.ack);
            self.on_data_ack(now, flight_before, true, false, &[]);
        }
        self.take_window(seg);
        if self.config.keepalive.is_some() {
            self.rel.reset_keepalives();
            self.arm_keepalive(now);
        }
        // Seventh: segment text. ESTABLISHED can receive, and has taken no FIN (`on_fin`
        // leaves it), so the general path's test of both finds nothing.
        debug_assert!(self.state.can_receive() && !self.rcv.fin_received());
        if !seg.payload.is_empty() {
            match self.receive_text_inline::<true>(now, seg) {
                Ok(true) => self.on_fin(now, seg),
                Ok(false) => {}
                Err(dropped) => return dropped,
            }
        }
        Outcome::Accepted
    }

    /// A segment that fails the acceptability test (RFC 9293 3.10.7.4, first): dropped,
    /// and acknowledged unless it is a RST.
    fn on_unacceptable(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        if seg.flags.rst() {
            return self.drop_segment(seg, DropReason::OutOfWindow);
        }
        // RFC 9293: a zero window still takes valid ACKs (and the data is dropped).
        let zero_window_ack =
            self.rcv.window() == 0 && seg.seq == self.rcv.nxt() && seg.flags.ack() && !seg.flags.syn();
        if self.state == State::TimeWait && seg.flags.fin() {
            // A retransmitted FIN: acknowledge it and restart the 2 MSL wait.
            self.timers.set(Timer::TimeWait, now + self.config.msl * 2);
        }
        self.ack_unacceptable(now, seg);
        // Data we already have: a duplicate, reported as a D-SACK (RFC 2883 4.1).
        if self.sack_enabled && !seg.payload.is_empty() && !(seg.seq + seg.payload.len()).after(self.rcv.nxt()) {
            self.rcv.report_duplicate(seg.seq, seg.seq + seg.payload.len());
        }
        if zero_window_ack && let Err(dropped) = self.process_ack(now, seg) {
            return dropped;
        }
        self.drop_segment(seg, DropReason::OutOfWindow)
    }

    /// An acceptable RST (RFC 9293 3.10.7.4, second).
    fn on_reset(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        match self.state {
            State::SynReceived if self.passive => return self.return_to_listen(now, seg),
            // RFC 1337 section 3: an RST must not cut TIME-WAIT short, where so configured.
            State::TimeWait if self.config.rfc1337 => return self.drop_segment(seg, DropReason::TimeWaitReset),
            State::Closing | State::LastAck | State::TimeWait => {
                self.emit(Event::Closed);
                self.set_state(now, State::Closed, Cause::of(seg));
            }
            _ => self.fail(now, Failure::Reset, Cause::of(seg)),
        }
        Outcome::Reset
    }

    /// SYN-RECEIVED from a passive open goes back to LISTEN (RFC 9293 3.10.7.4).
    fn return_to_listen(&mut self, now: Instant, seg: &Segment<'_>) -> Outcome {
        let buffers = self.take_buffers();
        let mut fresh = Connection::listen_with(&self.config, self.local, buffers);
        fresh.stats = self.stats;
        fresh.trace = std::mem::take(&mut self.trace);
        *self = fresh;
        self.stats.segs_dropped += 1;
        self.set_state(now, State::Listen, Cause::of(seg));
        Outcome::Reset
    }

    /// Process the ACK field (RFC 9293 3.10.7.4, fifth); `Err` if the segment is dropped.
    fn process_ack(&mut self, now: Instant, seg: &Segment<'_>) -> Result<(), Outcome> {
        // RFC 5961 5.2: acceptable if SND.UNA - MAX.SND.WND =< SEG.ACK =< SND.NXT.
        if !self.snd.ack_in_range(seg.ack) {
            self.challenge_ack(now, seg);
            return Err(self.drop_segment(seg, DropReason::AckOutOfRange));
        }
        // The peer is alive: its zero-window probes are answered (RFC 9293 3.8.6.1), and an
        // ICMP soft error is history (Linux's tcp_ack clears sk_err_soft: "something
        // worked"), unless the ACK is an old one.
        self.rel.reset_window_probes();
        if !seg.ack.before(self.snd.una()) {
            self.path.clear_error();
        }
        self.rel.note_ack(now);
        let window = (seg.window as u32) << self.snd.wscale();
        let flight_before = self.snd.in_flight();
        let advanced = seg.ack.after(self.snd.una());
        // A duplicate ACK by RFC 5681 section 2's definition.
        let duplicate = !advanced
            && seg.ack == self.snd.una()
            && self.snd.max() != self.snd.una()
            && seg.payload.is_empty()
            && !seg.flags.intersects(Flags::SYN | Flags::FIN)
            && window == self.snd.wnd();
        let syn_was_acked = self.snd.syn_acked();
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
        if self.ecn.ok && syn_was_acked && seg.flags.contains(Flags::ECE) && !seg.flags.syn() {
            self.on_ecn_echo(now);
        }
        self.take_window(seg);
        Ok(())
    }

    /// Window update (RFC 9293 3.10.7.4, fifth), for an ACK at or after SND.UNA.
    #[inline]
    fn take_window(&mut self, seg: &Segment<'_>) {
        if self.snd.update_window(seg) {
            if self.snd.wnd() > 0 {
                self.timers.stop(Timer::Persist);
                self.rel.reset_persist_backoff();
                self.due.window_probe = false;
            } else {
                // The peer is alive and says it is full: not a reason to give up.
                self.rel.reset_rto_count();
            }
        }
    }

    /// Apply an ACK of data to the scoreboard and let loss recovery act on it.
    ///
    /// Inlined into its two callers, `process_ack` and header prediction's `on_predicted`,
    /// down to the ACK of an exchange (forced: with two callers it would go out of line,
    /// and the exchange's ACK with it); the general path is a function of its own.
    #[inline(always)]
    fn on_data_ack(&mut self, now: Instant, flight_before: u32, advanced: bool, duplicate: bool, blocks: &[SackBlock]) {
        // The ACK of a request/response exchange: the one segment in flight, sent once,
        // acknowledged whole, no SACK blocks, and no loss under way. It goes the general
        // way below with every check of a loss, a reduction, an undo and a probe finding
        // nothing to do; this does only what that leaves (`SentQueue::take_sole`,
        // `Recovery::on_sole_ack`, whose tests hold them to the general path).
        if advanced
            && blocks.is_empty()
            && self.rel.recovery.quiet()
            && let Some((seg, reordered)) = self.snd.sent.take_sole(self.snd.una())
        {
            let cwnd_limited = self.cwnd_limited_at_ack();
            // Taken, as the general path's context takes it; the record's own is the sample.
            self.rel.take_rtt_sample();
            let srtt = self.rel.rtt.srtt_us();
            let sack = self.sack_enabled;
            self.rel.recovery.on_sole_ack(
                now,
                (&seg, reordered),
                srtt,
                sack,
                flight_before,
                cwnd_limited,
                &mut self.rel.cc,
            );
            self.timers.stop(Timer::Reorder);
            self.arm_loss_probe(now);
            self.autotune_send();
            return;
        }
        self.on_general_data_ack(now, flight_before, advanced, duplicate, blocks);
    }

    /// [`on_data_ack`](Self::on_data_ack) for any ACK but the exchange's: the scoreboard's
    /// and loss recovery's general path (RFC 6675, RFC 8985, RFC 6937).
    #[inline(never)]
    fn on_general_data_ack(
        &mut self,
        now: Instant,
        flight_before: u32,
        advanced: bool,
        duplicate: bool,
        blocks: &[SackBlock],
    ) {
        let delivery = self.snd.sent.on_ack(self.snd.una(), blocks);
        let cwnd_limited = self.cwnd_limited_at_ack();
        let smss = self.snd.mss() as u32;
        let ctx = AckContext {
            cwnd_limited,
            now,
            snd_una: self.snd.una(),
            snd_max: self.snd.max(),
            flight_before,
            advanced,
            duplicate,
            sack: self.sack_enabled,
            smss,
            rtt: self.rel.take_rtt_sample(),
            srtt: self.rel.rtt.srtt_us(),
            tsecr: self.ts.seg_tsecr(),
            can_send_new: self.snd.unsent() > 0 && (self.snd.una() + self.snd.wnd()).after(self.snd.max()),
        };
        let decision = self.rel.recovery.on_ack(&ctx, &delivery, &mut self.snd.sent, &mut self.rel.cc);
        if decision.entered_recovery {
            self.stats.fast_retransmits += 1;
            // No tail-loss probe during a recovery: `probe_deadline` says none.
            self.arm_loss_probe(now);
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

    /// Return whether cwnd limited the sender over the last round trip, for an ACK already
    /// applied to the scoreboard, and start the next round's high-water mark of `pipe` once
    /// SND.UNA passed the last one's end.
    ///
    /// RFC 7661 4.3 (as Linux's tcp_is_cwnd_limited): cwnd grows only if it was the limit
    /// this round trip, in flight up to it, or, in slow start, past half of it.
    #[inline]
    fn cwnd_limited_at_ack(&mut self) -> bool {
        let (cwnd, smss) = (self.rel.cc.cwnd(), self.snd.mss() as u32);
        let cwnd_limited = self.snd.pipe_high() + smss >= cwnd
            || (cwnd < self.rel.cc.ssthresh() && self.snd.pipe_high().saturating_mul(2) > cwnd);
        if !self.snd.una().before(self.snd.pipe_high_until()) {
            let pipe = self.rel.recovery.pipe(&self.snd.sent, smss);
            self.snd.restart_pipe_high(pipe);
        }
        cwnd_limited
    }

    /// The receiver's half of RFC 3168 on an accepted segment: a CWR ends the echo of
    /// ECE (6.1.3; Linux's `tcp_ecn_accept_cwr`), and a CE mark starts it again, with an
    /// ACK at once (Linux's `__tcp_ecn_check_ce`, which enters quick-ACK mode).
    fn ecn_receive(&mut self, seg: &Segment<'_>) {
        if seg.flags.contains(Flags::CWR) {
            self.ecn.echo = false;
        }
        if self.ce_in {
            self.stats.ce_received += 1;
            self.ecn.echo = true;
            self.rcv.ack_now();
        }
    }

    /// The sender's half of RFC 3168 (6.1.2): an ACK with ECE reduces cwnd as a loss would,
    /// without a retransmission, at most once per window of data: not again until SND.UNA
    /// passes SND.MAX of the last reduction (Linux's `tcp_enter_cwr`, once per
    /// `high_seq`). A loss recovery or timeout under way already reduced: the echo is
    /// answered by CWR only (Linux's `tcp_init_cwnd_reduction` queues CWR on entering
    /// recovery too). Either way the next new data segment carries CWR.
    fn on_ecn_echo(&mut self, now: Instant) {
        if !self.ecn.may_reduce(self.snd.una()) {
            return;
        }
        self.ecn.cwr_point = Some(self.snd.max());
        self.ecn.queue_cwr = true;
        if self.rel.recovery.in_reduction() {
            return;
        }
        self.stats.ece_reductions += 1;
        let (flight, smss) = (self.snd.in_flight(), u32::from(self.snd.mss()));
        self.rel.recovery.on_ecn_echo(now, (flight, self.snd.max()), &self.snd.sent, smss, &mut self.rel.cc);
    }

    /// SND.UNA < SEG.ACK =< SND.NXT: new data acknowledged. Inlined into its two callers,
    /// `process_ack` and `on_predicted` (forced, as `on_data_ack`).
    #[inline(always)]
    fn on_new_ack(&mut self, now: Instant, ack: SeqNum) {
        // A buffer full up to this ACK held the application back (send-buffer autotuning).
        if self.snd.buf.free() < self.snd.mss() as usize {
            self.snd.set_limited();
        }
        // Remove acknowledged data from the send buffer; what is left may be the FIN.
        if self.snd.discard_acked(ack) > 0 && self.state.can_send() && !self.snd.fin_queued() {
            self.emit(Event::Writable);
        }
        self.advance_una(now, ack);
        self.rel.reset_rto_count();
        // RFC 6298 5.2/5.3: stop the timer when all is acknowledged, else restart it.
        if self.snd.una() == self.snd.max() {
            self.timers.stop(Timer::Retransmit);
            self.timers.stop(Timer::LossProbe);
            self.timers.stop(Timer::Reorder);
            self.set_unacked_since(None);
        } else {
            self.timers.set(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
            self.set_unacked_since(Some(now));
        }
    }

    /// Seventh step: take the text of an acceptable segment into the receive space
    /// ([`RecvSpace::take_text`](crate::recv_space::RecvSpace::take_text)). Return whether
    /// a FIN is now in order, or the outcome of a segment dropped.
    ///
    /// Out of line for the general path; header prediction inlines its own copy
    /// ([`receive_text_inline`](Self::receive_text_inline)).
    #[inline(never)]
    fn receive_text(&mut self, now: Instant, seg: &Segment<'_>) -> Result<bool, Outcome> {
        self.receive_text_inline::<false>(now, seg)
    }

    /// [`receive_text`](Self::receive_text), inlined into its callers; `PREDICTED` for a
    /// segment header prediction took (`predicted`), whose text is at RCV.NXT, within the
    /// window and without a FIN (`RecvSpace::take_predicted_text`).
    #[inline(always)]
    fn receive_text_inline<const PREDICTED: bool>(&mut self, now: Instant, seg: &Segment<'_>) -> Result<bool, Outcome> {
        let taken = if PREDICTED {
            self.rcv.take_predicted_text(seg.seq, seg.payload, self.sack_enabled)
        } else {
            self.rcv.take_text(seg.seq, seg.payload, seg.flags.fin(), self.sack_enabled)
        };
        let Ok(text) = taken else {
            return Err(self.drop_segment(seg, DropReason::ReassemblyFull));
        };
        if text.ready > 0 {
            self.stats.bytes_in += u64::from(text.ready);
            self.emit(Event::Readable);
        }
        if text.delayable {
            self.rcv.note_in_order(&text);
            self.ack_in_order(now);
        }
        if text.ready > 0 {
            // The receiver's RTT (Linux's tcp_rcv_rtt_measure and tcp_rcv_rtt_measure_ts),
            // which autotuning counts reads over.
            let tsecr = seg.options.timestamps.filter(|_| self.ts.enabled()).map(|ts| ts.tsecr);
            self.rcv.measure_rtt(now, seg.payload.len() as u32, tsecr, self.ts.echo_rtt(now));
            self.autotune_recv(now);
        }
        Ok(text.fin)
    }

    /// Decide when to ACK in-order data: at least every second full-sized segment, else
    /// within the delayed-ACK timeout (RFC 9293 3.8.6.3, RFC 5681 4.2). Full-sized is the
    /// peer's segment size as measured (the receive space's `mss`), not our MSS: 1448-byte
    /// segments under timestamps are full-sized.
    fn ack_in_order(&mut self, now: Instant) {
        // The delay is `Config::delayed_ack` capped at `MAX_ACK_DELAY`, in microseconds
        // (the receive space worked it out once).
        match self.rcv.ack_delay_us() {
            Some(delay_us) if self.rcv.under_two_segments_unacked() => {
                self.rcv.ack_delayed();
                self.timers
                    .set_if_idle(Timer::DelayedAck, Instant::from_micros(now.as_micros().saturating_add(delay_us)));
            }
            _ => self.rcv.ack_now(),
        }
    }

    /// Eighth step: the peer's FIN is in order (RFC 9293 3.10.7.4).
    fn on_fin(&mut self, now: Instant, seg: &Segment<'_>) {
        self.rcv.take_fin();
        self.emit(Event::PeerClosed);
        self.emit(Event::Readable);
        let cause = Cause::of(seg);
        match self.state {
            State::SynReceived | State::Established => self.set_state(now, State::CloseWait, cause),
            State::FinWait1 => {
                if self.snd.fin_acked() {
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

#[cfg(test)]
pub(super) mod tests;

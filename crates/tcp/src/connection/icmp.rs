//! What a connection does with an ICMP error about its segments, and the path MTU (RFC 792,
//! RFC 1122 4.2.3.9, RFC 4443, RFC 9293 3.9.2.2; RFC 1191, RFC 8201). The error values
//! ([`IcmpError`], [`IcmpOutcome`], [`IcmpIgnored`]) are in `icmp.rs` at the crate root.
//!
//! The host parses an ICMPv4 or ICMPv6 error, finds the connection by the 4-tuple of the TCP
//! header it quotes, maps type and code with [`IcmpError::from_icmpv4`] or
//! [`IcmpError::from_icmpv6`], and calls [`Connection::handle_icmp`] with the quoted
//! sequence number (then `poll_transmit` and `poll_event`, as after a segment). What the
//! connection does, in order:
//!
//! 1. **Validation** (RFC 5927 section 4.1; Linux's `tcp_v4_err`): an error counts only in a
//!    state with something sent outstanding (not CLOSED, LISTEN or TIME-WAIT), and only if
//!    the quoted sequence number is one of ours in flight, SND.UNA =< SEG.SEQ < SND.NXT: in
//!    SYN-SENT and SYN-RECEIVED, our ISS. A blind attacker must then guess the window, as
//!    for an RST (RFC 5961). Our SND.NXT here is SND.MAX, the highest sent (after a timeout
//!    SND.NXT goes back). Errors about pure ACKs (SEG.SEQ = SND.NXT) are ignored.
//! 2. **Packet Too Big** (IPv4 type 3 code 4, RFC 1191; ICMPv6 type 2, RFC 8201) in any of
//!    those states: the path MTU falls to what the message reports (see `path.rs` for
//!    old-style messages and the floors), never rises (RFC 1191 section 3), and the send
//!    MSS with it, never above the peer's MSS. Then, as Linux's `tcp_simple_retransmit`,
//!    the segments in flight larger than the new MSS are marked lost and resent at once,
//!    in segments of the new size, with cwnd and ssthresh untouched: the bounce was not
//!    congestion (RFC 1191 section 6.4: "should not change the congestion window"). Unlike
//!    Linux, only those sent no earlier than the one the message names: the router drops
//!    in order, so the ones before it had passed (or bring their own message; or RACK finds
//!    them), and resending them would resend a window for nothing (RFC 1191 section 6.2:
//!    retransmit "only those packets that are known to be dropped"). Until
//!    SND.UNA passes what had been sent, no recovery begins, so that those losses draw no
//!    reduction (Linux enters TCP_CA_Loss without one). A message that lowers nothing and
//!    finds no segment too large is ignored (RFC 1191 section 6.4: a burst of oversized
//!    segments brings one message each, and each must not resend the flight again).
//!    RFC 1191 suggests resending one segment until ACKs return; like Linux, we send what
//!    cwnd allows.
//! 3. **Other errors during the handshake** (SYN-SENT, SYN-RECEIVED): the connection is
//!    aborted, [`Event::Unreachable`](crate::Event::Unreachable), without a reset. For the
//!    hard errors (protocol and port unreachable) that is RFC 1122 4.2.3.9 and RFC 9293
//!    3.9.2.2; for the soft ones it is the widely deployed behaviour RFC 5461 section 4
//!    describes, Linux's since 2.0 (`tcp_v4_err`, `tcp_v6_err`: every error aborts a
//!    connection in SYN-SENT or SYN-RECV): a connect to an unreachable host fails at once
//!    instead of after the SYN retries, and an application with other addresses to try
//!    moves on.
//! 4. **Other errors in the synchronized states** are soft, hard ones included (RFC 9293
//!    3.9.2.2 MUST-56; RFC 5927 section 5.2 against blind resets by forged hard errors;
//!    Linux without IP_RECVERR): kept as the connection's [`error`](Connection::error),
//!    nothing else changes (no timer, no window). An acceptable ACK clears it (Linux's
//!    `tcp_ack` clears `sk_err_soft`: "something worked"). If the connection later times
//!    out, the application finds the error there after [`Event::TimedOut`]: the likelier
//!    reason than the timeout itself (Linux reports `sk_err_soft`, EHOSTUNREACH say, for
//!    ETIMEDOUT).
//!
//! The host may also apply a path MTU it learnt otherwise (from another connection to the
//! same destination, or an aged-out estimate going back up, RFC 1191 section 6.3) with
//! [`Connection::set_path_mtu`]; that changes the MSS for what is sent next and resends
//! nothing (RFC 1191 section 6.2: only what a Packet Too Big says was dropped).
//!
//! Not done: packetization-layer PMTUD (RFC 4821, RFC 8899), which finds a path that drops
//! large segments without saying so (an ICMP black hole) by probing; such a path shows only
//! as retransmission timeouts. Nor TCP-LD (RFC 6069), which undoes the RTO backoff on
//! unreachable errors. Source quench is ignored (RFC 6633), redirects are IP's business.
//!
//! [`Event::TimedOut`]: crate::Event::TimedOut

use super::{Connection, Failure};
use crate::controller::Controller;
use crate::event::Cause;
use crate::icmp::{IcmpError, IcmpIgnored, IcmpOutcome};
use crate::seq::SeqNum;
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;

impl Connection {
    /// Take an ICMP error about one of our segments, whose TCP header (quoted in the ICMP
    /// payload) carried `quoted_seq`, and return what it did (validation, Packet Too Big,
    /// aborts and soft errors, in that order; `connection/icmp.rs` has the details). Call
    /// `poll_transmit` and `poll_event` after it.
    pub fn handle_icmp(&mut self, now: Instant, quoted_seq: SeqNum, error: IcmpError) -> IcmpOutcome {
        let outcome = self.react_to_icmp(now, quoted_seq, error);
        match outcome {
            IcmpOutcome::Ignored(reason) => {
                self.stats.icmp_ignored += 1;
                log::debug!(
                    "ignore ICMP {error:?} (seq {quoted_seq}) on {} ({}): {reason:?}",
                    self.tuple().map_or_else(|| self.local.to_string(), |t| t.to_string()),
                    self.state
                );
            }
            IcmpOutcome::MtuLowered { mtu, mss } => {
                self.stats.mtu_reductions += 1;
                log::debug!("{:?}: path MTU {mtu}, send MSS {mss}", self.tuple());
            }
            IcmpOutcome::SoftError => {
                self.stats.icmp_soft_errors += 1;
                log::debug!("{:?} {}: soft error {error:?}", self.tuple(), self.state);
            }
            IcmpOutcome::Aborted => log::debug!("{:?}: handshake aborted on {error:?}", self.tuple()),
        }
        outcome
    }

    fn react_to_icmp(&mut self, now: Instant, quoted_seq: SeqNum, error: IcmpError) -> IcmpOutcome {
        if matches!(self.state, State::Closed | State::Listen | State::TimeWait) {
            return IcmpOutcome::Ignored(IcmpIgnored::NotOpen);
        }
        // RFC 5927 4.1: SND.UNA =< SEG.SEQ < SND.NXT (SND.MAX here).
        if !(self.snd.una().before_eq(quoted_seq) && quoted_seq.before(self.snd.max())) {
            return IcmpOutcome::Ignored(IcmpIgnored::OutOfWindow);
        }
        if let IcmpError::PacketTooBig { mtu } = error {
            return self.packet_too_big(quoted_seq, mtu);
        }
        self.path.set_error(error);
        if matches!(self.state, State::SynSent | State::SynReceived) {
            // RFC 1122 4.2.3.9 for hard errors, RFC 5461 for soft ones.
            self.fail(now, Failure::Unreachable, Cause::Icmp(error));
            return IcmpOutcome::Aborted;
        }
        IcmpOutcome::SoftError
    }

    /// A Packet Too Big about the segment at `quoted_seq`, reporting `reported` octets.
    fn packet_too_big(&mut self, quoted_seq: SeqNum, reported: u32) -> IcmpOutcome {
        let option_len = self.ts.option_len();
        let fin = self.snd.fin_seq();
        let bounced = self.snd.sent.containing(quoted_seq);
        let dropped = bounced.map(|s| self.path.datagram_len(s.data_len(fin), option_len));
        let mtu = match self.path.mtu_from_report(reported, dropped) {
            Ok(mtu) => mtu,
            Err(reason) => return IcmpOutcome::Ignored(reason),
        };
        let lowered = self.path.lower_mtu(mtu);
        if lowered {
            self.sync_mss();
        }
        // Linux's tcp_simple_retransmit: what no longer fits was dropped; resend it now, cut
        // to the new size, without a congestion response.
        let marked = self.snd.sent.mark_larger_lost(u32::from(self.snd.mss()), fin, bounced);
        if !lowered && marked == 0 {
            return IcmpOutcome::Ignored(IcmpIgnored::MtuNotLower);
        }
        if marked > 0 {
            self.rel.recovery.on_mtu_reduced(self.snd.max());
            self.timers.stop(Timer::LossProbe);
        }
        IcmpOutcome::MtuLowered { mtu: self.path.mtu(), mss: self.snd.mss() }
    }

    /// Apply a path MTU the host learnt for the destination (from another connection's
    /// Packet Too Big, or its estimate aging back up, RFC 1191 section 6.3): the send MSS
    /// follows, up or down, never above the peer's MSS, from the next segment on. Nothing
    /// is resent (RFC 1191 sections 6.2 and 6.3); a segment already sent too large brings
    /// its own Packet Too Big, and [`handle_icmp`](Connection::handle_icmp) resends it.
    ///
    /// Pass the `mtu` of an [`IcmpOutcome::MtuLowered`], which has the floors and RFC 1191's
    /// search for old-style messages applied; a raw report is held to the same floors (552
    /// for IPv4, Linux's `min_pmtu`; 1280 for IPv6), but a 0 is not searched. Before the
    /// handshake completes it applies once the peer's MSS is known.
    pub fn set_path_mtu(&mut self, now: Instant, mtu: u32) {
        self.path.set_mtu(mtu);
        self.sync_mss();
        log::trace!("{:?} at {now}: path MTU set to {}, send MSS {}", self.tuple(), self.path.mtu(), self.snd.mss());
    }

    /// Return the path MTU in use: what our own MSS implies until a Packet Too Big or
    /// [`set_path_mtu`](Connection::set_path_mtu) says otherwise.
    pub fn path_mtu(&self) -> u32 {
        self.path.mtu()
    }

    /// Return the ICMP error that aborted the handshake ([`Event::Unreachable`]), or else the
    /// latest soft error no acknowledgment has cleared since (RFC 1122 4.2.3.9: made
    /// available to the application). After [`Event::TimedOut`] it is the likelier reason
    /// than the timeout itself: Linux reports it (`sk_err_soft`) in place of ETIMEDOUT.
    ///
    /// [`Event::Unreachable`]: crate::Event::Unreachable
    /// [`Event::TimedOut`]: crate::Event::TimedOut
    pub fn error(&self) -> Option<IcmpError> {
        self.path.error()
    }

    /// Recompute the send MSS from the path MTU (Linux's `tcp_sync_mss`) once the peer's
    /// MSS is known, and tell the controller of a change: cwnd and ssthresh stay as they
    /// are in bytes, only the unit of growth changes.
    fn sync_mss(&mut self) {
        let Some(mss) = self.path.send_mss(self.ts.option_len()) else { return };
        if mss != self.snd.mss() {
            self.snd.set_mss(mss);
            self.rel.cc.on_mss_change(u32::from(mss));
        }
    }
}

//! Connection timers: a small table indexed by [`Timer`].
//!
//! Each timer is a deadline or nothing. The connection arms and disarms them as
//! it works; `poll_timeout` reports the earliest, and `handle_timeout` fires
//! every timer whose deadline has passed.

use crate::connection::{AckDue, Connection, Failure};
use crate::controller::Controller;
use crate::event::{Cause, Event};
use crate::state::State;
use crate::time::Instant;

/// The timers a connection runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Timer {
    /// Retransmission timeout (RFC 6298).
    Retransmit,
    /// Persist (zero-window probe) timer (RFC 9293 3.8.6.1): the RTO, backed off.
    Persist,
    /// Override timeout of sender-side SWS avoidance (RFC 9293 3.8.6.2.1): the window is open
    /// but too small to use; after [`Config::sws_override`](crate::Config::sws_override), send
    /// what fits.
    ///
    /// A timer of its own rather than a mode of [`Timer::Persist`] (RFC 1122 4.2.3.4 allows
    /// either): the two differ in every respect but the condition that arms them (data
    /// waiting, nothing in flight). Persist waits the RTO with exponential backoff and, when
    /// it fires, probes a closed window; the override waits a short fixed time and sends
    /// data into an open one. At most one of them is armed.
    SwsOverride,
    /// Delayed ACK (RFC 9293 3.8.6.3).
    DelayedAck,
    /// RACK's reordering window ran out for a segment (RFC 8985 6.2 step 5).
    Reorder,
    /// Tail-loss probe timeout (RFC 8985 7.2).
    LossProbe,
    /// FIN-WAIT-2 of a released connection ([`Config::fin_wait2_timeout`](crate::Config::fin_wait2_timeout)).
    FinWait2,
    /// Keep-alive (RFC 9293 3.8.4).
    KeepAlive,
    /// TIME-WAIT 2*MSL (RFC 9293 3.4.2).
    TimeWait,
}

impl Timer {
    /// Every timer, in the order they fire when due at the same instant.
    pub const ALL: [Timer; 9] = [
        Timer::TimeWait,
        Timer::FinWait2,
        // A probe capped at the RTO's expiry is sent instead of the RTO (RFC 8985 7.2).
        Timer::LossProbe,
        Timer::Retransmit,
        Timer::Reorder,
        Timer::Persist,
        Timer::SwsOverride,
        Timer::KeepAlive,
        Timer::DelayedAck,
    ];

    const fn index(self) -> usize {
        match self {
            Timer::Retransmit => 0,
            Timer::Persist => 1,
            Timer::DelayedAck => 2,
            Timer::KeepAlive => 3,
            Timer::TimeWait => 4,
            Timer::SwsOverride => 5,
            Timer::FinWait2 => 6,
            Timer::Reorder => 7,
            Timer::LossProbe => 8,
        }
    }
}

/// Deadlines of the timers, one slot each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerTable {
    deadlines: [Option<Instant>; Timer::ALL.len()],
}

impl TimerTable {
    /// Arm `timer` to fire at `at`, replacing any earlier deadline.
    #[inline]
    pub fn set(&mut self, timer: Timer, at: Instant) {
        self.deadlines[timer.index()] = Some(at);
    }

    /// Arm `timer` unless it is already armed.
    #[inline]
    pub fn set_if_idle(&mut self, timer: Timer, at: Instant) {
        let slot = &mut self.deadlines[timer.index()];
        if slot.is_none() {
            *slot = Some(at);
        }
    }

    /// Disarm `timer`.
    #[inline]
    pub fn stop(&mut self, timer: Timer) {
        self.deadlines[timer.index()] = None;
    }

    /// Disarm every timer.
    pub fn stop_all(&mut self) {
        self.deadlines = [None; Timer::ALL.len()];
    }

    /// Return the deadline of `timer`.
    #[inline]
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer.index()]
    }

    /// Return whether `timer` is armed.
    #[inline]
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.get(timer).is_some()
    }

    /// Return the earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }

    /// Disarm and return `timer` if it is due at `now`.
    pub fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        let slot = &mut self.deadlines[timer.index()];
        match *slot {
            Some(at) if at <= now => {
                *slot = None;
                true
            }
            _ => false,
        }
    }
}

impl Connection {
    /// Return when [`handle_timeout`](Connection::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Fire the timers due at `now`; then call `poll_transmit` and `poll_event`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for timer in Timer::ALL {
            if self.timers.expire(timer, now) {
                log::trace!("{:?} {}: {:?} timer fired", self.tuple(), self.state, timer);
                match timer {
                    Timer::TimeWait => self.on_time_wait_expiry(now),
                    Timer::Retransmit => self.on_retransmit_timeout(now),
                    Timer::Persist => self.on_persist_timeout(now),
                    Timer::Reorder => self.on_reorder_timeout(now),
                    Timer::LossProbe => {
                        // The probe restarts the retransmission timer (RFC 8985 7.3).
                        self.tlp_due = true;
                        if self.timers.is_armed(Timer::Retransmit) {
                            self.timers.set(Timer::Retransmit, now + self.rtt.rto());
                        }
                    }
                    Timer::FinWait2 => self.on_fin_wait2_timeout(now),
                    Timer::SwsOverride => self.sws_override_due = true,
                    Timer::DelayedAck => {
                        if self.ack_due == AckDue::Delayed {
                            self.ack_due = AckDue::Now;
                        }
                    }
                    Timer::KeepAlive => self.on_keepalive_timeout(now),
                }
            }
        }
    }

    /// TIME-WAIT over: delete the TCB (RFC 9293 3.10.8).
    fn on_time_wait_expiry(&mut self, now: Instant) {
        if self.state == State::TimeWait {
            self.emit(Event::Closed);
            self.set_state(now, State::Closed, Cause::Timer(Timer::TimeWait));
        }
    }

    /// RACK's reordering timer: segments that were waiting out the reordering window may be
    /// lost by now (RFC 8985 6.2 step 5).
    fn on_reorder_timeout(&mut self, now: Instant) {
        let flight = self.snd_max - self.snd_una;
        let (next, entered) =
            self.recovery.on_reorder_timeout(now, self.snd_max, flight, self.smss as u32, &mut self.sent, &mut self.cc);
        if entered {
            self.stats.fast_retransmits += 1;
        }
        if let Some(at) = next {
            self.timers.set(Timer::Reorder, at);
        }
    }

    /// Persist timeout: probe the shut window again (RFC 9293 3.8.6.1), unless the peer has
    /// stopped answering.
    ///
    /// RFC 9293 keeps probing a zero window for as long as the receiver keeps answering: a
    /// slow reader is not a dead one. A receiver that answers nothing is: the probes count
    /// as retransmissions, so the connection is aborted after
    /// [`Config::max_retransmissions`](crate::Config::max_retransmissions) unanswered probes or
    /// when nothing has been acknowledged for the user timeout (RFC 9293 3.8.3 R2, RFC 5482),
    /// as Linux's `tcp_probe_timer` does with `tcp_retries2` and `TCP_USER_TIMEOUT`. Any
    /// acceptable ACK, a zero-window one included, starts the count again.
    fn on_persist_timeout(&mut self, now: Instant) {
        let user_timeout =
            self.config.user_timeout.is_some_and(|limit| now.saturating_duration_since(self.last_ack_at) >= limit);
        if self.probes_unanswered >= self.config.max_retransmissions || user_timeout {
            log::debug!("{:?}: giving up after {} unanswered window probes", self.tuple(), self.probes_unanswered);
            return self.fail(now, Failure::TimedOut, Cause::Timer(Timer::Persist));
        }
        self.probes_unanswered += 1;
        self.probe_due = true;
        self.persist_backoff = self.persist_backoff.saturating_add(1);
    }

    /// FIN-WAIT-2 of a released connection lasted [`Config::fin_wait2_timeout`]: the peer
    /// will not close, and nobody is left to wait for it. Remove the connection without a
    /// word to the peer (as Linux; a peer that comes back gets RST from CLOSED).
    ///
    /// [`Config::fin_wait2_timeout`]: crate::Config::fin_wait2_timeout
    fn on_fin_wait2_timeout(&mut self, now: Instant) {
        if self.state == State::FinWait2 && self.released {
            log::debug!("{:?}: FIN-WAIT-2 timed out", self.tuple());
            self.emit(Event::Closed);
            self.set_state(now, State::Closed, Cause::Timer(Timer::FinWait2));
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6; RFC 5681 3.1 for the windows; RFC 9293
    /// 3.8.3 for giving up).
    fn on_retransmit_timeout(&mut self, now: Instant) {
        if self.snd_una == self.snd_max {
            return;
        }
        self.stats.timeouts += 1;
        let cause = Cause::Timer(Timer::Retransmit);
        let limit = if self.syn_acked() { self.config.max_retransmissions } else { self.config.syn_retries };
        let user_timeout = match (self.config.user_timeout, self.unacked_since) {
            (Some(limit), Some(since)) => now.saturating_duration_since(since) >= limit,
            _ => false,
        };
        if self.rto_count >= limit || user_timeout {
            log::debug!("{:?}: giving up after {} retransmissions", self.tuple(), self.rto_count);
            return self.fail(now, Failure::TimedOut, cause);
        }
        self.rto_count += 1;
        if self.syn_acked() {
            // Everything not SACKed is lost; slow start resends it in order.
            let flight = self.snd_max - self.snd_una;
            self.recovery.on_rto(now, self.snd_max, flight, &mut self.sent, &mut self.cc);
            self.timers.stop(Timer::Reorder);
            self.timers.stop(Timer::LossProbe);
        } else {
            // RFC 5681 3.1: a lost SYN or SYN-ACK leaves a one-segment initial window; send
            // it again.
            self.cc.on_syn_timeout();
            self.snd_nxt = self.snd_una;
        }
        self.rtt.backoff();
        self.rtt_probe = None;
        self.timers.set(Timer::Retransmit, now + self.rtt.rto());
    }

    /// Keep-alive: probe an idle connection, give up after the configured probes
    /// (RFC 9293 3.8.4).
    fn on_keepalive_timeout(&mut self, now: Instant) {
        let Some(ka) = self.config.keepalive else { return };
        if !matches!(self.state, State::Established | State::CloseWait) {
            return;
        }
        if self.snd_una != self.snd_max {
            // Not idle: the retransmission timer watches the peer.
            self.arm_keepalive(now);
            return;
        }
        if self.keepalive_sent >= ka.probes {
            return self.fail(now, Failure::TimedOut, Cause::Timer(Timer::KeepAlive));
        }
        self.keepalive_sent += 1;
        self.keepalive_due = true;
        self.timers.set(Timer::KeepAlive, now + ka.interval);
    }

    /// Restart the keep-alive timer after activity.
    pub(crate) fn arm_keepalive(&mut self, now: Instant) {
        if let Some(ka) = self.config.keepalive
            && matches!(self.state, State::SynReceived | State::Established | State::CloseWait)
        {
            self.timers.set(Timer::KeepAlive, now + ka.idle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_deadline_wins_and_expiry_disarms() {
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Retransmit, Instant::from_millis(300));
        t.set(Timer::DelayedAck, Instant::from_millis(40));
        t.set_if_idle(Timer::DelayedAck, Instant::from_millis(10));
        assert_eq!(t.next(), Some(Instant::from_millis(40)));
        assert!(!t.expire(Timer::Retransmit, Instant::from_millis(100)));
        assert!(t.expire(Timer::DelayedAck, Instant::from_millis(100)));
        assert!(!t.is_armed(Timer::DelayedAck));
        assert_eq!(t.next(), Some(Instant::from_millis(300)));
        t.stop_all();
        assert_eq!(t.next(), None);
    }
}

//! A connection's timers: the table of deadlines ([`TimerTable`], indexed by [`Timer`]),
//! and the one place that dispatches their expiry ([`Connection::handle_timeout`]): what
//! each timer does when it fires (RFC 6298, RFC 8985, RFC 9293 3.8.3, 3.8.4, 3.8.6 and
//! 3.10.8).
//!
//! Each timer is a deadline or nothing. The connection arms and disarms them as it works;
//! `poll_timeout` reports the earliest, and `handle_timeout` fires every timer whose
//! deadline has passed, in the order of [`Timer::ALL`].

use super::{Connection, Failure};
use crate::controller::Controller;
use crate::event::{Cause, Event};
use crate::state::State;
use crate::time::Instant;
use crate::timer::Timer;

/// Deadlines of the timers, one slot each: microseconds since the epoch, [`UNARMED`] for a
/// timer that is not armed.
///
/// Plain integers rather than `Option<Instant>`: [`next`](TimerTable::next) is then a
/// minimum over eleven words with no branch on armed or not (about a third of the
/// instructions of the `Option`s' `flatten().min()`), and the table is half the size.
///
/// `floor` is a deadline no armed timer comes before: arming lowers it to the new deadline,
/// disarming leaves it (a timer stopped or fired only raises the minimum), and a minimum
/// taken in full raises it to the minimum found. The host asks after every pass over the
/// connection whether a deadline comes before the one it has scheduled
/// ([`next_before`](TimerTable::next_before)); in an exchange the answer is no, and the
/// floor says so in one comparison instead of the minimum's eleven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct TimerTable {
    deadlines: [u64; Timer::ALL.len()],
    floor: u64,
}

/// The slot value of a timer that is not armed. A deadline this late (an `Instant` that
/// saturated, 584,000 years after the epoch) is kept one microsecond earlier, so that it
/// still counts as armed.
const UNARMED: u64 = u64::MAX;

impl Default for TimerTable {
    fn default() -> Self {
        TimerTable { deadlines: [UNARMED; Timer::ALL.len()], floor: UNARMED }
    }
}

/// Return the slot value of a deadline at `at`.
#[inline]
fn armed(at: Instant) -> u64 {
    at.as_micros().min(UNARMED - 1)
}

impl TimerTable {
    /// Arm `timer` to fire at `at`, replacing any earlier deadline.
    #[inline]
    pub fn set(&mut self, timer: Timer, at: Instant) {
        let at = armed(at);
        self.deadlines[slot(timer)] = at;
        self.floor = self.floor.min(at);
    }

    /// Arm `timer` unless it is already armed.
    #[inline]
    pub fn set_if_idle(&mut self, timer: Timer, at: Instant) {
        let slot = &mut self.deadlines[slot(timer)];
        if *slot == UNARMED {
            *slot = armed(at);
            self.floor = self.floor.min(*slot);
        }
    }

    /// Disarm `timer`.
    #[inline]
    pub fn stop(&mut self, timer: Timer) {
        self.deadlines[slot(timer)] = UNARMED;
    }

    /// Disarm every timer.
    pub fn stop_all(&mut self) {
        self.deadlines = [UNARMED; Timer::ALL.len()];
    }

    /// Return the deadline of `timer`.
    #[inline]
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        let at = self.deadlines[slot(timer)];
        (at != UNARMED).then_some(Instant::from_micros(at))
    }

    /// Return whether `timer` is armed.
    #[inline]
    pub fn is_armed(&self, timer: Timer) -> bool {
        self.deadlines[slot(timer)] != UNARMED
    }

    /// Return the earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        let at = self.earliest();
        (at != UNARMED).then_some(Instant::from_micros(at))
    }

    /// Return the earliest deadline if it comes before `than` (any, for `None`), taking the
    /// minimum only when the floor does not already rule that out.
    #[inline]
    pub fn next_before(&mut self, than: Option<Instant>) -> Option<Instant> {
        let than = than.map_or(UNARMED, |t| t.as_micros());
        if self.floor >= than {
            return None;
        }
        self.next_before_slow(than)
    }

    /// [`next_before`](Self::next_before) past the floor: the minimum in full, kept as the
    /// new floor.
    #[inline(never)]
    fn next_before_slow(&mut self, than: u64) -> Option<Instant> {
        let at = self.earliest();
        self.floor = at;
        (at < than).then_some(Instant::from_micros(at))
    }

    /// Return the earliest slot value, [`UNARMED`] when none is armed.
    #[inline]
    fn earliest(&self) -> u64 {
        self.deadlines.iter().fold(UNARMED, |earliest, &at| earliest.min(at))
    }

    /// Disarm and return `timer` if it is due at `now`.
    pub fn expire(&mut self, timer: Timer, now: Instant) -> bool {
        let slot = &mut self.deadlines[slot(timer)];
        if *slot != UNARMED && *slot <= now.as_micros() {
            *slot = UNARMED;
            return true;
        }
        false
    }
}

/// What the timers that fired asked for, done at the next `poll_transmit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Due {
    /// A tail-loss probe (RFC 8985 7.3).
    pub loss_probe: bool,
    /// A zero-window probe (RFC 9293 3.8.6.1).
    pub window_probe: bool,
    /// The SWS override timeout passed: send what the window holds (RFC 9293 3.8.6.2.1).
    pub sws_override: bool,
    /// A keep-alive probe (RFC 9293 3.8.4).
    pub keepalive: bool,
}

/// Return the slot of `timer` in the table.
const fn slot(timer: Timer) -> usize {
    match timer {
        Timer::Retransmit => 0,
        Timer::Persist => 1,
        Timer::DelayedAck => 2,
        Timer::KeepAlive => 3,
        Timer::TimeWait => 4,
        Timer::SwsOverride => 5,
        Timer::FinWait2 => 6,
        Timer::Reorder => 7,
        Timer::LossProbe => 8,
        Timer::Pacing => 9,
        Timer::UserTimeout => 10,
    }
}

impl Connection {
    /// Return when [`handle_timeout`](Connection::handle_timeout) should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Return [`poll_timeout`](Connection::poll_timeout) if it comes before `than` (any
    /// deadline, for `None`): for a host that has a wake-up scheduled at `than` and needs an
    /// earlier one only. Usually one comparison: the connection remembers a time no timer
    /// comes before, lowered when a timer is armed and raised when this finds the minimum.
    #[inline]
    pub fn poll_timeout_before(&mut self, than: Option<Instant>) -> Option<Instant> {
        self.timers.next_before(than)
    }

    /// Return the timer that fires next and when (the first in [`Timer::ALL`]'s order of
    /// those due at the same instant), as `ss -o` shows a kernel socket's.
    pub fn next_timer(&self) -> Option<(Timer, Instant)> {
        Timer::ALL.into_iter().filter_map(|t| self.timers.get(t).map(|at| (t, at))).min_by_key(|&(_, at)| at)
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
                        self.due.loss_probe = true;
                        if self.timers.is_armed(Timer::Retransmit) {
                            self.timers.set(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
                        }
                    }
                    Timer::FinWait2 => self.on_fin_wait2_timeout(now),
                    Timer::UserTimeout => self.on_user_timeout(now),
                    Timer::SwsOverride => self.due.sws_override = true,
                    Timer::DelayedAck => {
                        self.rcv.delayed_ack_expired();
                    }
                    Timer::KeepAlive => self.on_keepalive_timeout(now),
                    // Nothing to do but let `poll_transmit` send what the pacer held back.
                    Timer::Pacing => {}
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
        let flight = self.snd.in_flight();
        let (next, entered) = self.rel.recovery.on_reorder_timeout(
            now,
            self.snd.max(),
            flight,
            self.snd.mss() as u32,
            &mut self.snd.sent,
            &mut self.rel.cc,
        );
        if entered {
            self.stats.fast_retransmits += 1;
            // No tail-loss probe during a recovery: `probe_deadline` says none.
            self.arm_loss_probe(now);
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
        let user_timeout = self
            .config
            .user_timeout
            .is_some_and(|limit| now.saturating_duration_since(self.rel.last_ack_at()) >= limit);
        if self.rel.probes_unanswered() >= self.config.max_retransmissions || user_timeout {
            log::debug!(
                "{:?}: giving up after {} unanswered window probes",
                self.tuple(),
                self.rel.probes_unanswered()
            );
            return self.fail(now, Failure::TimedOut, Cause::Timer(Timer::Persist));
        }
        self.rel.count_window_probe();
        self.due.window_probe = true;
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

    /// Data has waited for an acknowledgment for the user timeout: abort (RFC 9293 3.8.3 R2,
    /// RFC 5482).
    fn on_user_timeout(&mut self, now: Instant) {
        if self.state.is_synchronized() && self.rel.unacked_since().is_some() {
            log::debug!("{:?}: user timeout: nothing acknowledged for {:?}", self.tuple(), self.config.user_timeout);
            self.fail(now, Failure::TimedOut, Cause::Timer(Timer::UserTimeout));
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6; RFC 5681 3.1 for the windows; RFC 9293
    /// 3.8.3 for giving up).
    fn on_retransmit_timeout(&mut self, now: Instant) {
        if self.snd.una() == self.snd.max() {
            return;
        }
        self.stats.timeouts += 1;
        let cause = Cause::Timer(Timer::Retransmit);
        let limit = if self.snd.syn_acked() { self.config.max_retransmissions } else { self.config.syn_retries };
        if self.rel.exhausted(now, limit, self.config.user_timeout) {
            log::debug!("{:?}: giving up after {} retransmissions", self.tuple(), self.rel.rto_count());
            return self.fail(now, Failure::TimedOut, cause);
        }
        self.rel.count_rto();
        if self.snd.syn_acked() {
            // Everything not SACKed is lost; slow start resends it in order.
            let flight = self.snd.in_flight();
            self.rel.recovery.on_rto(now, self.snd.max(), flight, &mut self.snd.sent, &mut self.rel.cc);
            self.timers.stop(Timer::Reorder);
            self.timers.stop(Timer::LossProbe);
            // The peer's window shut with data in flight: what the timeout marked lost
            // cannot go, so ask for the window (RFC 9293 3.8.6.1), once per timeout, the
            // probes backing off and counting against the limit like retransmissions.
            if self.snd.wnd() == 0 {
                self.due.window_probe = true;
            }
        } else {
            // RFC 5681 3.1: a lost SYN or SYN-ACK leaves a one-segment initial window; send
            // it again.
            self.rel.cc.on_syn_timeout();
            self.snd.rewind();
        }
        self.rel.rtt.backoff();
        self.rel.stop_timing();
        self.timers.set(Timer::Retransmit, self.rel.rtt.rto_deadline(now));
    }

    /// Keep-alive: probe an idle connection, give up after the configured probes
    /// (RFC 9293 3.8.4).
    fn on_keepalive_timeout(&mut self, now: Instant) {
        let Some(ka) = self.config.keepalive else { return };
        if !matches!(self.state, State::Established | State::CloseWait) {
            return;
        }
        if self.snd.una() != self.snd.max() {
            // Not idle: the retransmission timer watches the peer.
            self.arm_keepalive(now);
            return;
        }
        if self.rel.keepalives_sent() >= ka.probes {
            return self.fail(now, Failure::TimedOut, Cause::Timer(Timer::KeepAlive));
        }
        self.rel.count_keepalive();
        self.due.keepalive = true;
        self.timers.set(Timer::KeepAlive, now + ka.interval);
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

    #[test]
    fn next_before_is_the_earliest_deadline_before_the_bound() {
        // Random arms, stops, expiries and questions; `next_before` against `next`.
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(31);
        let mut t = TimerTable::default();
        for _ in 0..20_000 {
            let timer = Timer::ALL[rng.random_range(0..Timer::ALL.len())];
            let at = Instant::from_micros(rng.random_range(0..1_000));
            match rng.random_range(0..5) {
                0 => t.set(timer, at),
                1 => t.set_if_idle(timer, at),
                2 => t.stop(timer),
                3 => {
                    t.expire(timer, at);
                }
                _ if rng.random_range(0..50) == 0 => t.stop_all(),
                _ => {}
            }
            let than = (rng.random_range(0..8) != 0).then(|| Instant::from_micros(rng.random_range(0..1_100)));
            let want = t.next().filter(|&n| than.is_none_or(|than| n < than));
            assert_eq!(t.next_before(than), want, "before {than:?} in {t:?}");
        }
    }

    #[test]
    fn a_deadline_at_the_end_of_time_stays_armed() {
        // `Instant + Duration` saturates: a deadline can be the last instant, which must not
        // read as the unarmed slot value.
        let end = Instant::from_micros(u64::MAX);
        let mut t = TimerTable::default();
        assert!(!t.expire(Timer::Retransmit, end), "an unarmed timer never fires");
        t.set(Timer::UserTimeout, end);
        assert!(t.is_armed(Timer::UserTimeout));
        assert_eq!(t.get(Timer::UserTimeout), Some(Instant::from_micros(u64::MAX - 1)));
        assert_eq!(t.next(), Some(Instant::from_micros(u64::MAX - 1)));
        t.set(Timer::Persist, Instant::ZERO);
        assert_eq!(t.next(), Some(Instant::ZERO), "the earliest wins from any slot");
        assert!(t.expire(Timer::Persist, Instant::ZERO));
        assert!(t.expire(Timer::UserTimeout, end));
        assert_eq!(t.next(), None);
    }
}

//! Connection timers: a small table indexed by [`Timer`].
//!
//! Each timer is a deadline or nothing. The connection arms and disarms them as
//! it works; `poll_timeout` reports the earliest, and `handle_timeout` fires
//! every timer whose deadline has passed.

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
    /// Data unacknowledged for [`Config::user_timeout`](crate::Config::user_timeout) (RFC
    /// 9293 3.8.3 R2, RFC 5482).
    UserTimeout,
    /// The pacer lets the next data segment out ([`Config::pacing`](crate::Config::pacing)).
    Pacing,
    /// TIME-WAIT 2*MSL (RFC 9293 3.4.2).
    TimeWait,
}

impl Timer {
    /// Every timer, in the order they fire when due at the same instant.
    pub const ALL: [Timer; 11] = [
        Timer::TimeWait,
        Timer::FinWait2,
        Timer::UserTimeout,
        // A probe capped at the RTO's expiry is sent instead of the RTO (RFC 8985 7.2).
        Timer::LossProbe,
        Timer::Retransmit,
        Timer::Reorder,
        Timer::Persist,
        Timer::SwsOverride,
        Timer::KeepAlive,
        Timer::Pacing,
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
            Timer::Pacing => 9,
            Timer::UserTimeout => 10,
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

/// What the timers that fired asked for, done at the next `poll_transmit`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Due {
    /// A tail-loss probe (RFC 8985 7.3).
    pub loss_probe: bool,
    /// A zero-window probe (RFC 9293 3.8.6.1).
    pub window_probe: bool,
    /// The SWS override timeout passed: send what the window holds (RFC 9293 3.8.6.2.1).
    pub sws_override: bool,
    /// A keep-alive probe (RFC 9293 3.8.4).
    pub keepalive: bool,
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

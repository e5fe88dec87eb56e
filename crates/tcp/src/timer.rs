//! The names of a connection's timers, as values: [`Timer`], and the order they fire in.
//!
//! Their table of deadlines and what each does when it fires live in one place,
//! `connection/timeouts.rs` (behind [`Connection::poll_timeout`] and
//! [`Connection::handle_timeout`]). This file imports nothing of the connection, so
//! [`Cause::Timer`](crate::Cause::Timer) can name a timer without a circle.
//!
//! [`Connection::poll_timeout`]: crate::Connection::poll_timeout
//! [`Connection::handle_timeout`]: crate::Connection::handle_timeout

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
}

//! The eleven connection states of RFC 9293 section 3.3.2.

use core::fmt;

/// A connection state (RFC 9293 section 3.3.2, Figure 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection: the fictional state before creation and after deletion.
    Closed,
    /// Waiting for a connection request from any remote TCP.
    Listen,
    /// Sent a SYN, waiting for a matching SYN (and ACK).
    SynSent,
    /// Received and sent a SYN, waiting for the ACK of ours.
    SynReceived,
    /// Open: data flows both ways.
    Established,
    /// Sent our FIN (user closed), waiting for its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's FIN.
    FinWait2,
    /// The peer sent FIN; waiting for our user to close.
    CloseWait,
    /// Both sent FIN at once (simultaneous close); waiting for the ACK of ours.
    Closing,
    /// The peer closed first, then we did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; waiting 2*MSL so stray segments die out.
    TimeWait,
}

impl State {
    /// Return the name RFC 9293 uses, such as `SYN-RECEIVED`.
    pub const fn name(self) -> &'static str {
        match self {
            State::Closed => "CLOSED",
            State::Listen => "LISTEN",
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::CloseWait => "CLOSE-WAIT",
            State::Closing => "CLOSING",
            State::LastAck => "LAST-ACK",
            State::TimeWait => "TIME-WAIT",
        }
    }

    /// Return whether the state is synchronized (RFC 9293 3.5.2: ESTABLISHED and later).
    pub const fn is_synchronized(self) -> bool {
        !matches!(self, State::Closed | State::Listen | State::SynSent | State::SynReceived)
    }

    /// Return whether our side may still send data (our FIN is not queued).
    pub const fn can_send(self) -> bool {
        matches!(self, State::SynSent | State::SynReceived | State::Established | State::CloseWait)
    }

    /// Return whether the peer may still send data (its FIN has not arrived).
    pub const fn can_receive(self) -> bool {
        matches!(self, State::SynSent | State::SynReceived | State::Established | State::FinWait1 | State::FinWait2)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

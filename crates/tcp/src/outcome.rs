//! What became of a segment handed to a connection: [`Connection::handle_segment`]'s
//! answer.
//!
//! [`Connection::handle_segment`]: crate::Connection::handle_segment

/// What processing an arriving segment did (RFC 9293 3.10.7's dispositions). A reply it
/// calls for (an ACK, a challenge ACK, a reset) is queued for `poll_transmit` either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Taken: its acknowledgment, window, text or control bits were processed.
    Accepted,
    /// It reset the connection, or refused our SYN (RFC 9293 3.10.7.3, 3.10.7.4 second).
    Reset,
    /// Dropped, for this reason (counted in `Stats::segs_dropped` and logged).
    Dropped(DropReason),
}

impl Outcome {
    /// Return the reason the segment was dropped, if it was.
    pub fn drop_reason(self) -> Option<DropReason> {
        match self {
            Outcome::Dropped(reason) => Some(reason),
            _ => None,
        }
    }
}

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

//! Explicit Congestion Notification (RFC 3168): the negotiation, the receiver's echo of
//! Congestion Experienced, and the sender's once-a-window reduction.
//!
//! The connection asks this part what to put in the ECN bits of the TCP header (ECE, CWR)
//! and whether a segment may go ECN-capable (ECT in the IP header, which the host writes);
//! the reduction itself is the congestion controller's loss path (`Recovery::on_ecn_echo`).

use crate::seq::SeqNum;

/// Whether a connection uses ECN (RFC 3168), as Linux's `net.ipv4.tcp_ecn`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Ecn {
    /// Never: a SYN that asks is answered with a plain SYN-ACK (`tcp_ecn=0`).
    Off,
    /// Accept ECN when the peer's SYN asks for it, but do not ask (`tcp_ecn=2`, Linux's
    /// default).
    #[default]
    Accept,
    /// Ask for ECN in our SYN, and accept it when asked (`tcp_ecn=1`).
    Request,
}

/// The ECN field of the IP header a segment arrived in (RFC 3168 section 5): the two low
/// bits of the IPv4 TOS byte or the IPv6 Traffic Class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IpEcn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct,
    /// ECT(1) (01).
    Ect1,
    /// ECT(0) (10), what we send.
    Ect0,
    /// Congestion Experienced (11): a router marked the packet instead of dropping it.
    Ce,
}

impl IpEcn {
    /// Return the field in the two low bits of `tos` (the IPv4 TOS byte or the IPv6 Traffic
    /// Class).
    pub fn from_tos(tos: u8) -> IpEcn {
        match tos & 0b11 {
            0b00 => IpEcn::NotEct,
            0b01 => IpEcn::Ect1,
            0b10 => IpEcn::Ect0,
            _ => IpEcn::Ce,
        }
    }

    /// Return the two-bit codepoint.
    pub fn bits(self) -> u8 {
        match self {
            IpEcn::NotEct => 0b00,
            IpEcn::Ect1 => 0b01,
            IpEcn::Ect0 => 0b10,
            IpEcn::Ce => 0b11,
        }
    }
}

/// One connection's ECN state (Linux's `tp->ecn_flags`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EcnState {
    /// ECN was negotiated (`TCP_ECN_OK`).
    pub ok: bool,
    /// Our SYN was an ECN-setup SYN (RFC 3168 6.1.1).
    pub requested: bool,
    /// The receiver saw CE and echoes ECE on every ACK until a CWR arrives (RFC 3168 6.1.3;
    /// `TCP_ECN_DEMAND_CWR`).
    pub echo: bool,
    /// The sender reduced cwnd and sets CWR on the next new data segment (RFC 3168 6.1.2;
    /// `TCP_ECN_QUEUE_CWR`).
    pub queue_cwr: bool,
    /// SND.MAX at the last response to ECE: no further reduction until SND.UNA passes it
    /// (RFC 3168 6.1.2: at most once per window of data).
    pub cwr_point: Option<SeqNum>,
}

impl EcnState {
    /// Return whether an ECE arriving with SND.UNA at `una` may reduce cwnd: none yet, or
    /// SND.UNA beyond the SND.MAX of the last reduction. Strictly beyond, as Linux holds its
    /// CWR state until "something *above* high_seq is ACKed for CWR bit to reach receiver"
    /// (`tcp_fastretrans_alert`): the ACK of exactly the old window still carries the ECE
    /// that the reduction answered, since the CWR rides on data sent after it.
    pub fn may_reduce(&self, una: SeqNum) -> bool {
        self.cwr_point.is_none_or(|p| una.after(p))
    }
}
